"""Shards: a stable partition of items by a hash of (benchmark, task_id), so a shard holds every
arm and epoch of its items; ``auto`` takes K/N from a Slurm job
array or a Kubernetes Indexed Job."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from pytest_echo_bench.cli.estimate import select
from pytest_echo_bench.cli.keyword import parse_keyword
from pytest_echo_bench.datasets.example import Loaded
from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.shards.coverage import SCHEME, part_of
from pytest_echo_bench.shards.env import auto_shard as resolve_auto
from pytest_echo_bench.shards.env import k_of_n, resolve_shard
from pytest_echo_bench.shards.partition import shard_of
from pytest_echo_bench.shards.parts import ITEMS
from pytest_echo_bench.store.records import Meta


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based, as CI matrices count
    total: int

    def __str__(self) -> str:
        return f"{self.index}/{self.total}"

    def owns(self, key: tuple[str, str, str, int]) -> bool:
        # the hash lives in store/: the estimate uses it too
        return shard_of(key, self.total) == self.index


def parse_shard(text: str | None, environ: Mapping[str, str] | None = None) -> Shard | None:
    """``"K/N"`` with 1 <= K <= N, or ``"auto"`` (from ``environ``); None when unset;
    UsageError otherwise, an empty value included (``shards.env`` resolves it, as
    ``echo-bench estimate`` does)."""
    try:
        parsed = resolve_shard(text, os.environ if environ is None else environ)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    return None if parsed is None else Shard(*parsed)


def auto_shard(environ: Mapping[str, str]) -> Shard:
    """K/N from a Slurm array task or an Indexed Job's pod
    (``shards.env.auto_shard``); UsageError otherwise."""
    try:
        return Shard(*resolve_auto(environ))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def refuse_partial_gate(shard: str | None, gates: int, allowed: bool) -> None:
    """A gate judges the whole sweep: with a shard (given, or the one a resumed file records) it is
    refused before anything runs, unless the user says this shard alone is what to judge."""
    if shard and gates and not allowed:
        raise pytest.UsageError(
            f"--bench-gate with --bench-shard {shard}: a shard holds part of the sweep, and a "
            "gate judges the whole; gate the merged shards (echo-bench report MERGED.jsonl --gate "
            "RULE), or pass --bench-allow-partial to gate this shard alone"
        )


def resumed_shard(meta: Meta | None, given: Shard | None, path: str) -> str | None:
    """The shard a resume runs: the one the file records; a different one given is
    refused, and so is a shard file written with the old per-arm assignment
    (resuming it would mix two partitions)."""
    try:
        part = part_of(path, meta)
    except StoreError as exc:
        raise pytest.UsageError(f"--bench-resume: {exc}") from exc
    if part.whole:  # a complete merge resumes as the whole sweep it is
        part = replace(part, total=0, got=frozenset())
    recorded = str(Shard(min(part.got), part.total)) if len(part.got) == 1 else None
    if part.total and len(part.got) != 1:
        raise pytest.UsageError(
            f"--bench-resume {path}: a merge of shards {', '.join(map(str, sorted(part.got)))} "
            f"of {part.total}; resume each shard's own file (or run the missing ones), then "
            "merge again"
        )
    if recorded and part.scheme > SCHEME:
        raise pytest.UsageError(
            f"--bench-resume {path}: shard {recorded} was written by a newer version "
            f"(shard_scheme {part.scheme}; "
            f"this one knows {SCHEME}), which may assign items to shards another way; resume "
            "it with that version, "
            "or run this shard again into a new file (--bench-out NEW.jsonl)"
        )
    if recorded and part.scheme != SCHEME:
        raise pytest.UsageError(
            f"--bench-resume {path}: shard {recorded} was written by an earlier version, "
            "which assigned each "
            "(task, arm) to a shard on its own; this version keeps an item's arms and epochs "
            "in one shard, so "
            "resuming would mix the two assignments. Finish it with the version that wrote "
            "it, or run this shard "
            "again into a new file (--bench-out NEW.jsonl) and merge the new files"
        )
    if given is not None and str(given) != recorded:
        raise pytest.UsageError(
            f"--bench-resume {path}: the file holds "
            f"{'shard ' + recorded if recorded else 'no shard'}"
            f", but --bench-shard gives {given}; resume it with its own shard, or run {given} "
            "into a new file"
        )
    return recorded


def shard_fields(
    shard: str | None,
    loaded: Sequence[Loaded],
    args: Sequence[str],
    keyword: str | None,
    markexpr: str | None,
    rootdir: Path,
) -> dict[str, Any]:
    """What a shard's meta line records of it: the assignment scheme (a resume refuses
    another) and the items its selection holds (``shard_items``: a merge says a shard is
    whole only when it has them all); the count is left out where only pytest's collection
    could make it (``-m``, a node id)."""
    parsed = k_of_n(shard) if shard else None
    if parsed is None:
        return {}
    count = selected_items(parsed, loaded, args, keyword, markexpr, rootdir)
    return {"shard_scheme": SCHEME, **({ITEMS: count} if count is not None else {})}


def selected_items(
    shard: tuple[int, int],
    loaded: Sequence[Loaded],
    args: Sequence[str],
    keyword: str | None,
    markexpr: str | None,
    rootdir: Path,
) -> int | None:
    """The items ``shard`` selects of the specs ``loaded``, as the run's deselection and
    ``echo-bench estimate`` select them; None where pytest alone can tell (a mark
    expression, a node id in the args)."""
    if markexpr or any("::" in arg for arg in args):
        return None
    # every arm and epoch of each task the shard owns: no item's names to build
    if not (keyword or "").strip():
        return sum(len(spec.arms) * spec.epochs for spec, examples in loaded for ex in examples
                   if shard_of((spec.benchmark, ex.id, "", 1), shard[1]) == shard[0])
    try:
        matcher = parse_keyword(keyword)
    except ValueError:
        return None  # pytest refuses the expression itself, in its own words
    return sum(len(select(spec, examples, rootdir, matcher, shard)) for spec, examples in loaded)


def refuse_empty_shards(shard: str | None, loaded: Sequence[Loaded]) -> None:
    """More shards than the specs have items leaves shards that can hold nothing (a Slurm array or
    an Indexed Job far larger than the sweep, ``SLURM_ARRAY_TASK_COUNT`` set by mistake): refused
    before anything is written, so the same command, corrected, runs as new."""
    parsed = k_of_n(shard) if shard else None
    items = sum(len(examples) for _, examples in loaded)
    if parsed is None or not loaded or parsed[1] <= items:
        return
    raise pytest.UsageError(
        f"--bench-shard {shard}: {parsed[1]} shards, but the specs have {items} item(s) (a "
        "shard holds whole items, "
        f"every arm and epoch of each): at least {parsed[1] - items} shard(s) would hold "
        "nothing. Split the sweep "
        f"into at most {items} shards (e.g. --array=0-{items - 1}, or completions: {items} and "
        f"ECHO_BENCH_SHARD_COUNT={items})"
    )
