"""The run options a sweep records in its meta line, and what a resume takes back from them.

A resume is the run it resumes: a new sweep writes the options that change what is called or
recorded (``options``: the response cache, the calls in flight, the budget, when judges grade;
``order``: the item order and seed) and a resume runs with them unless its own command line gives
another value, which it then names. The order is the one a resume never overrides (it would
reorder what is left): it names the flags it ignores. A file written before the record resumes as
it always did.
"""

from __future__ import annotations

import math
import os
from dataclasses import replace
from typing import Any

import pytest

from pytest_echo_bench.plugin.options import JUDGE_WHEN, MAX_USD, BenchOptions
from pytest_echo_bench.plugin.order import DEFAULT_SEED, order_meta
from pytest_echo_bench.store.meta import FILE, RANDOM, OrderRecord, RunOptions
from pytest_echo_bench.store.records import Meta

# name in the meta line (and BenchOptions field) -> (the option's dest, its flag)
OPTIONS = {"cache": ("bench_cache", "--bench-cache"),
           "concurrency": ("bench_concurrency", "--bench-concurrency"),
           "budget_usd": ("bench_budget_usd", "--bench-budget-usd"),
           "judge": ("bench_judge", "--bench-judge")}
# What a resume of a file without a record runs with when its command line
# says nothing (options.resolve).
DEFAULTS: dict[str, Any] = {"cache": "", "concurrency": 8, "budget_usd": None, "judge": "now"}
OFF, DEFAULT_CACHE = "off", "default"


def record(opts: BenchOptions) -> RunOptions:
    """The meta line's ``options`` for a new sweep: the cache as "off",
    "default" or an absolute path."""
    return RunOptions(_cache_text(opts.cache), opts.concurrency, opts.budget_usd, opts.judge)


def recorded(meta: Meta | None, where: str) -> RunOptions | None:
    """The options a meta line records, checked (None for a file written before the record); a value
    no run could have written is a usage error naming the file: a results file is data."""
    try:
        found = meta.run_options() if meta is not None else None
        problem = _problem(found) if found is not None else None
    except ValueError as exc:
        problem = str(exc)
    if problem is not None:
        raise pytest.UsageError(
            f"--bench-resume {where}: the meta line's options {problem}; "
            'give them on the command line and fix or remove the meta line\'s "options"'
        )
    return found


def resumed(config: pytest.Config, opts: BenchOptions,
            options: RunOptions | None) -> tuple[BenchOptions, list[str]]:
    """The options a resume runs with: each recorded one, unless the command line gives it; a note
    for each recorded value the command line overrides."""
    taken: dict[str, Any] = {}
    notes: list[str] = []
    for name in options.given if options is not None else ():
        dest, flag = OPTIONS[name]
        value = getattr(options, name)
        if config.getoption(dest) is None:
            taken[name] = _cache_value(value) if name == "cache" else value
        elif not _same(name, getattr(opts, name), value):
            notes.append(f"echo-bench: {flag} {_said(name, getattr(opts, name))} overrides the "
                         f"{_said(name, value)} this sweep's meta line records")
    return replace(opts, **taken), notes


def resume_flags(config: pytest.Config, opts: BenchOptions,
                 options: RunOptions | None) -> list[str]:
    """The flags a printed resume command needs to run as this run did: each option whose value a
    plain resume would not take by itself (from the record, else the default; a resume that judged
    as it went would call the judges a ``later`` run deferred), and ``--bench-retry-errors`` when
    this run was given it. The budget is the controller's to print (a budget stop suggests
    another)."""
    flags: list[str] = []
    for name in ("cache", "concurrency", "judge"):
        value, default = getattr(opts, name), _cache_text("") if name == "cache" else DEFAULTS[name]
        taken = getattr(options, name) if options is not None and name in options.given else default
        if not _same(name, value, taken):
            flags += [OPTIONS[name][1], _said(name, value)]
    return flags + (["--bench-retry-errors"] if config.getoption("bench_retry_errors") else [])


def run_order(opts: BenchOptions, found: Meta | None) -> tuple[OrderRecord, list[str]]:
    """The meta line's ``order`` for this run, and a note when a resume overrides what was asked."""
    if found is None:
        return order_meta(
            opts.order or RANDOM, DEFAULT_SEED if opts.seed is None else opts.seed
        ), []
    # Files written before the order existed ran in file order: a resume keeps that too.
    kept = found.order or OrderRecord(FILE)
    seed = (DEFAULT_SEED if kept.seed is None else kept.seed) if opts.seed is None else opts.seed
    asked = order_meta(opts.order or kept.order or FILE, seed)
    if (opts.order is not None or opts.seed is not None) and asked != kept:
        given = " and ".join(
            f
            for f, v in (("--bench-order", opts.order), ("--bench-seed", opts.seed))
            if v is not None
        )
        return kept, [
            f"echo-bench: {given} ignored: the sweep keeps the order its meta line records "
            f"({_order_said(kept)}), not {_order_said(asked)}: a resume never reorders what is left"
        ]
    return kept, []


def _order_said(order: OrderRecord) -> str:
    return "file order" if order.order == FILE else f"random, seed {order.seed}"


def _cache_text(cache: str | None) -> str:
    return OFF if cache is None else DEFAULT_CACHE if cache == "" else os.path.abspath(cache)


def _cache_value(text: str) -> str | None:
    return None if text == OFF else "" if text == DEFAULT_CACHE else text


def _same(name: str, given: Any, value: Any) -> bool:
    return _cache_text(given) == value if name == "cache" else given == value


def _said(name: str, value: Any) -> str:
    """A value as the command line gives it (a cache as "off" or its absolute path)."""
    if name == "cache":
        said = isinstance(value, str) and (value in (OFF, DEFAULT_CACHE) or os.path.isabs(value))
        return value if said else _cache_text(value)
    if name == "budget_usd":
        return "no budget" if value is None else f"{value:g}"
    return str(value)


def _problem(found: RunOptions) -> str | None:
    """What is wrong with a meta line's ``options``, or None (what it leaves out is not wrong)."""
    cache = found.cache if "cache" in found.given else OFF
    concurrency = found.concurrency if "concurrency" in found.given else 8
    usd = found.budget_usd
    if not isinstance(cache, str) or not (cache in (OFF, DEFAULT_CACHE) or os.path.isabs(cache)):
        return f"give cache {cache!r}, not \"off\", \"default\" or an absolute path"
    if type(concurrency) is not int or not 1 <= concurrency <= 1024:
        return f"give concurrency {concurrency!r}, not a whole number from 1 to 1024"
    if usd is not None and (
        type(usd) not in (int, float) or not math.isfinite(usd) or not 0 < usd < MAX_USD
    ):
        return f"give budget_usd {usd!r}, not an amount of US dollars above 0"
    if "judge" in found.given and found.judge not in JUDGE_WHEN:
        return f"give judge {found.judge!r}, not \"now\" or \"later\""
    return None
