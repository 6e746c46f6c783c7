"""``echo-bench estimate``: the items a run would select (``-k``, ``--bench-shard``) and their
calls and cost (``budget.estimate``; its scorer's judges', apart, ``budget.judge_estimate``), with
what the cache and earlier results files show, as text or JSON."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_echo_bench.budget.estimate import (
    CHARS_PER_TOKEN,
    ArmEstimate,
    Call,
    Plans,
    Seen,
    arm_paths,
    estimate_arm,
    finite,
    own_prompts,
    wall_seconds,
)
from pytest_echo_bench.budget.judge_estimate import JudgeEstimate
from pytest_echo_bench.budget.money import usd
from pytest_echo_bench.cli.args import Command, input_file, say, whole
from pytest_echo_bench.cli.estimate_judges import judge_json, judge_lines, spec_judges
from pytest_echo_bench.cli.keyword import Matcher, item_keywords, parse_keyword
from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.datasets.prompts import Prompter, prompter
from pytest_echo_bench.datasets.registry import load_benchmark
from pytest_echo_bench.engine.check import check_spec
from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.providers import provider_info
from pytest_echo_bench.shards.env import resolve_shard
from pytest_echo_bench.shards.partition import shard_of
from pytest_echo_bench.spec.load import Spec
from pytest_echo_bench.store.cache import cache_key, peek
from pytest_echo_bench.store.files import RESULTS_DIR
from pytest_echo_bench.store.files import default_cache as run_cache
from pytest_echo_bench.store.reader import iter_records
from pytest_echo_bench.store.records import row_key
from pytest_echo_bench.store.rows import fields_of, view
from pytest_echo_bench.store.safe_text import escape_id

Item = tuple[Example, str, int]  # (example, arm, epoch)


def shard_arg(text: str) -> tuple[int, int]:
    """An argparse type: ``K/N`` with 1 <= K <= N, or ``auto`` from this process's
    environment (a Slurm array task's or an Indexed Job pod's), resolved exactly as
    the run's ``--bench-shard`` is."""
    try:
        parsed = resolve_shard(text, os.environ)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    assert parsed is not None  # argparse calls a type only with a value
    return parsed


def item_name(task: str, arm: str, epoch: int, epochs: int) -> str:
    """The node name ``plugin.collect.item_name`` gives (pytest is not imported
    here; a test holds them equal)."""
    return f"{task}[{arm}]" if epochs <= 1 else f"{task}[{arm}-e{epoch}]"


def mark_names(arm: str, subtask: str | None) -> tuple[str, ...]:
    """The marks' names an item gets in ``plugin.collect.item_marks``."""
    def safe(value: str) -> str:
        return "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in value)
    marks = (f"arm_{safe(arm)}", "bench_arm")
    return (*marks, f"subtask_{safe(subtask)}", "bench_subtask") if subtask else marks


def select(spec: Spec, examples: list[Example], rootdir: Path, keyword: Matcher,
           shard: tuple[int, int] | None) -> list[Item]:
    """The items ``pytest SPEC -k EXPR --bench-shard K/N`` runs, in collection order."""
    path = spec.path.resolve()
    try:
        folders: tuple[str, ...] = path.parent.relative_to(rootdir.resolve()).parts
    except ValueError:
        folders = path.parent.parts[1:]
    chosen: list[Item] = []
    for ex in examples:
        name = escape_id(ex.id)
        for arm in spec.arms:
            marks = mark_names(arm, ex.subtask)
            for epoch in range(1, spec.epochs + 1):
                if shard and shard_of((spec.benchmark, ex.id, arm, epoch), shard[1]) != shard[0]:
                    continue
                if keyword(
                    item_keywords(
                        item_name(name, arm, epoch, spec.epochs), path.name, folders, marks
                    )
                ):
                    chosen.append((ex, arm, epoch))
    return chosen


def seen_in_results(files: Iterable[Path], benchmarks: Iterable[str]) -> dict[str, Seen]:
    """Per benchmark: completion tokens a call (rows of one call) and seconds an item (rows the
    cache did not answer). Each file is read once, a line at a time, whatever the benchmarks."""
    seen = {name: Seen() for name in benchmarks}
    for path in files:
        default = ""
        for record in iter_records(path):  # strict: a line that is not a row is refused, naming it
            if record.data.get("_meta"):
                default = str(record.data.get("benchmark") or "") if record.lineno == 1 else default
                continue
            row = fields_of(SeenRow, record.data, loose=True)
            into = seen.get(row.benchmark or default)
            if into is not None:
                _note_row(into, row)
    return seen


def check_results(files: Iterable[Path], benchmarks: set[str]) -> None:
    """Each ``--results`` file must be a results file (read strictly: a line that is not a row is a
    StoreError naming it) of a benchmark being estimated: one of
    another teaches nothing, silently."""
    for path in files:
        held: set[str] = set()
        default = ""
        # A line at a time: a million rows are not held to name a few benchmarks.
        for record in iter_records(path):
            data = record.data
            if data.get("_meta"):
                if record.lineno == 1:
                    default = str(data.get("benchmark") or "")
                    names = data.get("benchmarks")
                    held.update(map(str, names) if isinstance(names, dict) else ())
                continue
            held.add(row_key(data, default)[0])
        held.discard("")
        if held and not held & benchmarks:
            raise StoreError(
                f"{path}: a results file of benchmark {', '.join(sorted(held))}, not of "
                f"{', '.join(sorted(benchmarks))}: nothing in it applies to this estimate"
            )


class SeenRow(view("_Seen", "usage", "wall_seconds", "sub_calls", "cache_hits", "judgments",
                   loose=True), gc=False):  # type: ignore[misc]
    """What an earlier run's row teaches the estimate: a call's tokens, an item's seconds, and
    its judges' replies' tokens."""


def _note_row(seen: Seen, row: SeenRow) -> None:
    usage, wall = row.usage, row.wall_seconds
    tokens = _completion(usage)
    if tokens is not None and row.sub_calls in (0, 1):  # the tokens of one call
        seen.add_completion(row.arm, tokens)
    for judgment in row.judgments if isinstance(row.judgments, list) else ():
        # a judge's name is never an arm's: its replies' lengths are kept beside the arms'
        judge = judgment.get("judge") if isinstance(judgment, dict) else None
        tokens = _completion(judgment.get("usage")) if isinstance(judge, str) else None
        if tokens is not None:
            seen.add_completion(str(judge), tokens)
    # A cached row's seconds are not a call's.
    if type(wall) in (int, float) and 0 <= wall < float("inf") and not row.cache_hits:
        seen.add_seconds(row.arm, float(wall))


def _completion(usage: object) -> int | None:
    """The completion tokens a call's usage reports, when it is a count."""
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return tokens if type(tokens) is int and tokens >= 0 else None


def cache_check(
    spec: Spec,
    items: list[Item],
    path: Path | None,
    seen: Seen,
    prompters: Mapping[str, Prompter] | None = None,
) -> Callable[[Call, Example, int], bool] | None:
    """Whether the response cache answers a call: every key of the items' calls looked up once;
    the usage of what it holds joins ``seen``."""
    if path is None or not path.is_file():  # no cache: nothing to look up (and nothing is created)
        return None
    from pytest_echo_bench.engine.fingerprint import cache_descriptor

    descriptors: dict[str, dict[str, Any]] = {}

    def key(call: Call, example: Example, epoch: int) -> str | None:
        if call.prompt is None or not provider_info(spec.arms[call.arm].provider).cacheable:
            return None
        if call.arm not in descriptors:
            descriptors[call.arm] = cache_descriptor(spec, call.arm)
        return cache_key(descriptors[call.arm], call.prompt, call.sample, epoch)

    wanted: dict[str, str] = {}  # cache key -> the arm it would answer
    plans: Plans = {}
    for example, arm, epoch in items:
        for call in arm_paths(
            spec, arm, example.input, example.input, plans, own_prompts(prompters, example)
        ).worst:
            k = key(call, example, epoch)
            if k is not None:
                wanted[k] = call.arm
    held = peek(path, list(wanted))
    for k, usage in held.items():
        tokens = (usage or {}).get("completion_tokens")
        if tokens is not None:
            seen.add_completion(wanted[k], tokens)
    return lambda call, example, epoch: key(call, example, epoch) in held


@dataclass
class Options:
    keyword: str | None = None
    shard: tuple[int, int] | None = None
    results: tuple[Path, ...] = ()
    cache: Path | None = None
    rootdir: Path = Path(".")
    concurrency: int = 8
    workers: int = 1


def estimate(spec_files: list[Path], opts: Options) -> dict[str, Any]:
    """The estimate as plain JSON data (the ``--format json`` output)."""
    matcher = parse_keyword(opts.keyword)
    # One spec named twice is collected once by pytest (as one path); and each is
    # checked as collection checks it (scorer, providers' options), so what the
    # run refuses is refused here too.
    unique: dict[Path, Path] = {}
    for path in spec_files:
        unique.setdefault(path.resolve(), path)
    loaded = [load_benchmark(p) for p in unique.values()]
    for spec, _ in loaded:
        check_spec(spec)
    check_results(opts.results, {spec.benchmark for spec, _ in loaded})
    several = len({spec.benchmark for spec, _ in loaded}) > 1
    arms: dict[str, dict[str, Any]] = {}
    judges: dict[str, dict[str, Any]] = {}
    benchmarks: dict[str, dict[str, Any]] = {}
    every: list[ArmEstimate] = []
    every_judge: list[JudgeEstimate] = []
    seconds: float | None = 0.0
    seen_by = seen_in_results(opts.results, [spec.benchmark for spec, _ in loaded])
    for spec, examples in loaded:
        ests, judged = _estimate_spec(spec, examples, opts, matcher, seen_by[spec.benchmark])
        wall = wall_seconds(ests, spec, opts.concurrency, opts.workers)
        seconds = None if seconds is None or wall is None else seconds + wall
        prefix = f"{spec.benchmark}/" if several else ""
        arms.update((prefix + est.arm, arm_json(est)) for est in ests)
        judges.update((prefix + judge.judge, judge_json(judge)) for judge in judged)
        benchmarks[spec.benchmark] = {
            **totals(ests, judged),
            "seconds": finite(wall),
            "arms": list(spec.arms),
        }
        every += ests
        every_judge += judged
    return {**totals(every, every_judge), "seconds": finite(seconds), "arms": arms,
            "judges": judges, "benchmarks": benchmarks,
            "shard": f"{opts.shard[0]}/{opts.shard[1]}" if opts.shard else None,
            "prompt_tokens": f"ceil(characters / {CHARS_PER_TOKEN})"}


def _estimate_spec(spec: Spec, examples: list[Example], opts: Options, matcher: Matcher,
                   base: Seen) -> tuple[list[ArmEstimate], list[JudgeEstimate]]:
    """Each arm's estimate for the items of ``spec`` the options select, with what ``base`` saw,
    and each judge's its scorer asks."""
    items = select(spec, examples, opts.rootdir, matcher, opts.shard)
    # A copy: the cache's replies join this spec's only.
    seen = Seen(dict(base.completion), dict(base.seconds))
    prompters = {arm: made for arm in spec.arms
                 if (made := prompter(spec, arm, examples)) is not None}
    check = cache_check(spec, items, opts.cache, seen, prompters)
    ests = [estimate_arm(spec, arm, [(ex, ep) for ex, a, ep in items if a == arm], seen, check,
                         prompters) for arm in spec.arms]
    return ests, spec_judges(spec, items, opts.cache, seen, prompters)


Costs = tuple["float | None", "float | None"]  # USD (low, high), None: unknown


def totals(ests: list[ArmEstimate], judges: list[JudgeEstimate] | None = None) -> dict[str, Any]:
    """The items, the calls at most and the cost of the arms' and judges' calls, and each apart."""
    arms = _sums((e.cost_low, e.cost_high) for e in ests if e.calls_max)
    judged = _sums((j.cost_low, j.cost_high) for j in judges or () if j.calls)
    known = all(e.calls_known for e in ests if e.items)
    calls = sum(e.calls_max for e in ests) if known else None
    judge_calls = sum(j.calls for j in judges or ())
    return {
        "items": sum(e.items for e in ests),
        "calls_max": None if calls is None else calls + judge_calls,
        "cost_usd": _usd_range(_sums((arms, judged))),
        # every arm that can batch its calls at its batch price, the others (and judges) live
        "batch_cost_usd": _usd_range(_sums((_batch_total(ests), judged))),
        "split": {"arms": {"calls_max": calls, "cost_usd": _usd_range(arms)},
                  "judges": {"calls": judge_calls, "cost_usd": _usd_range(judged)}},
    }


def _batch_total(ests: list[ArmEstimate]) -> Costs:
    return _sums(_batched(e) for e in ests if e.calls_max)


def _batched(est: ArmEstimate) -> Costs:
    """The arm's cost with its calls sent in batches (as it is when it cannot batch them)."""
    factor = 1.0 - (est.batch_discount or 0.0)
    return tuple(None if c is None else c * factor  # type: ignore[return-value]
                 for c in (est.cost_low, est.cost_high))


def _sums(costs: Iterable[Costs]) -> Costs:
    """The sum of each side (an arm that sends nothing costs nothing, priced or not: left out)."""
    low: float | None = 0.0
    high: float | None = 0.0
    for one_low, one_high in costs:
        low = None if low is None or one_low is None else low + one_low
        high = None if high is None or one_high is None else high + one_high
    return low, high


def _usd_range(costs: Costs) -> dict[str, float | None]:
    return {"low": finite(costs[0]), "high": finite(costs[1])}


def arm_json(est: ArmEstimate) -> dict[str, Any]:
    unknown = est.calls_max and not est.priced
    return {
        "items": est.items,
        "calls_min": est.calls_min,
        "calls_max": est.calls_max if est.calls_known else None,
        "cached_calls": est.cached,
        "prompt_tokens": est.prompt_tokens,
        "completion_tokens": {"low": round(est.completion_low), "high": est.completion_high},
        "cost_usd": {
            "low": None if unknown else finite(est.cost_low),
            "high": None if unknown else finite(est.cost_high),
        },
        "priced": est.priced,
        "calls_known": est.calls_known,
        # at the batch price: present only for an arm whose provider has a batch API
        **({} if est.batch_discount is None else {"batch_cost_usd": {
            "low": None if unknown else finite(_batched(est)[0]),
            "high": None if unknown else finite(_batched(est)[1])}}),
        "seconds_per_item": finite(est.seconds_per_item),
    }


def default_cache(rootdir: Path, text: str | None) -> Path | None:
    """``--cache``: a path, ``off``, or (unset) the run's default file under the rootdir."""
    if text == "off":
        return None
    return Path(text) if text else run_cache(rootdir / RESULTS_DIR, create=False)


def text_lines(data: dict[str, Any]) -> list[str]:
    """The estimate for a terminal: one line per arm, then the totals."""
    lines = [
        f"{'arm':<24} {'items':>7} {'calls':>13} {'cached':>7} {'cost low':>10} "
        f"{'cost high':>10} {'s/item':>8}"
    ]
    for label, arm in data["arms"].items():
        # a Python arm: its code decides its calls
        most = "?" if arm["calls_max"] is None else arm["calls_max"]
        calls = f"{arm['calls_min']}-{most}" if arm["calls_min"] != most else str(most)
        lines.append(f"{label:<24} {arm['items']:>7} {calls:>13} {arm['cached_calls']:>7} "
                     f"{_usd(arm['cost_usd']['low']):>10} {_usd(arm['cost_usd']['high']):>10} "
                     f"{_num(arm['seconds_per_item']):>8}")
    lines += judge_lines(data.get("judges", {}), _usd)
    cost = data["cost_usd"]
    shard = f" (shard {data['shard']})" if data["shard"] else ""
    most = "an unknown number of" if data["calls_max"] is None else data["calls_max"]
    lines.append(
        f"total{shard}: {data['items']} items, at most {most} calls, "
        f"cost {_range(cost['low'], cost['high'])}, wall time {_duration(data['seconds'])}"
    )
    batch = data.get("batch_cost_usd")
    if batch and batch != cost and any("batch_cost_usd" in a for a in data["arms"].values()):
        lines.append(f"sent in batches (batch: true, --bench-batch): cost "
                     f"{_range(batch['low'], batch['high'])} against {_range(**cost)} live")
    if data.get("judges"):
        arms, judges = data["split"]["arms"], data["split"]["judges"]
        most = "an unknown number of" if arms["calls_max"] is None else arms["calls_max"]
        lines.append(
            f"arms: at most {most} calls, cost {_range(**arms['cost_usd'])}; "
            f"judges: {judges['calls']} calls, cost {_range(**judges['cost_usd'])}"
        )
    lines.append(
        f"prompt tokens estimated as {data['prompt_tokens']}; low: replies as long as seen "
        "so far (else 0), "
        "high: every reply at max_tokens and every routing arm escalating; unknown: an arm without "
        "prices or without max_tokens; ?: a Python arm (its code decides which arms it calls)"
    )
    return lines


def _usd(value: float | None) -> str:
    if value is None:
        return "unknown"
    return f"${value:,.2f}" if value >= 100 else f"${usd(value)}"


def _range(low: float | None, high: float | None) -> str:
    return "unknown" if low is None and high is None else f"{_usd(low)} to {_usd(high)}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown (no latency seen for an arm: give --results of an earlier run)"
    if seconds < 10:  # a short sweep: its seconds, not "0 s"
        return f"{seconds:.2g} s"
    return f"{seconds:,.0f} s" if seconds < 3600 else f"{seconds / 3600:,.1f} h"


def arguments(e: argparse.ArgumentParser) -> None:
    """``echo-bench estimate``'s arguments: the specs, and the run's
    options that change its items."""
    e.add_argument("specs", nargs="+", type=Path, help="Spec file(s)")
    e.add_argument(
        "-k", dest="keyword", metavar="EXPR", help="Only the items pytest's -k EXPR selects"
    )
    e.add_argument("--bench-shard", metavar="K/N|auto", type=shard_arg,
                   help="Only shard K of N, or auto from a Slurm array's or an Indexed Job's "
                        "environment (as the run's --bench-shard)")
    e.add_argument("--format", choices=("text", "json"), default="text")
    e.add_argument("--results", type=input_file, nargs="+", default=[],
                   help="Earlier results file(s): replies' lengths and latencies seen")
    e.add_argument("--cache", metavar="PATH|off",
                   help="The response cache to read (default: the run's, bench_results/cache/"
                        "cache.sqlite under --rootdir, or an earlier bench_results/cache.sqlite if "
                        "there is one); cached replies are not sent")
    e.add_argument("--rootdir", type=Path, default=Path("."),
                   help="The run's rootdir (default: the current directory)")
    e.add_argument("--concurrency", type=whole(1, 1024), default=8,
                   help="--bench-concurrency of the run (default 8)")
    e.add_argument("-n", "--workers", type=whole(1, 1024), default=1,
                   help="xdist processes of the run, as its -n N (default 1)")


def handle(args: argparse.Namespace) -> int:
    """Print the estimate; a ``-k`` or shard selecting nothing is status 5, as the run's."""
    import json

    opts = Options(
        args.keyword,
        args.bench_shard,
        tuple(args.results),
        default_cache(args.rootdir, args.cache),
        args.rootdir,
        args.concurrency,
        args.workers,
    )
    data = estimate(args.specs, opts)
    if not data["items"] and (args.keyword or args.bench_shard):  # which arms there are, exit 5
        from pytest_echo_bench.cli.empty_selection import NOTHING_SELECTED, estimate_note

        say(estimate_note(args.specs, args.keyword, args.bench_shard), err=True)
        return NOTHING_SELECTED
    say(json.dumps(data, indent=2) if args.format == "json" else "\n".join(text_lines(data)))
    return 0


COMMAND = Command("estimate", "Calls, cost and wall time of a sweep before anything is sent",
                  arguments, handle)
