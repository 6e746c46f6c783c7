"""Runs of one sweep over time, for ``echo-bench trend``: results files (or a directory of them)
grouped into runs by their meta line's run id, ordered by its ``created_at``.

Each run is read with the one reader of results files (``results.read.load_results``), its files
merged as ``echo-bench report`` merges them (the newest row of a key wins). Two runs are paired as
``echo-bench compare`` pairs them (``results.across.pair_runs``).
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pytest_echo_bench.results.read import Item, Results, load_results
from pytest_echo_bench.shards.coverage import coverage
from pytest_echo_bench.shards.parts import held_by_shard
from pytest_echo_bench.store.files import UNJUDGED
from pytest_echo_bench.store.reader import iter_records
from pytest_echo_bench.store.records import Meta

# What a directory holds that is a results file: the writer's side files (RUN.jsonl.lock, .torn,
# .stop.json, .summary.json) end otherwise and are not read.
RESULTS_GLOB = "*.jsonl"
# (benchmark, arm) -> (benchmark, task_id, epoch) -> passed
Verdicts = dict[tuple[str, str], dict[tuple[str, str, int], bool]]


@dataclass(frozen=True)
class Run:
    """One run: its id, when it started (the meta line's ``created_at``), its files, its rows
    as read (the pairing with the next run needs each item's digest and verdict), and each arm's
    verdicts."""

    run_id: str
    created_at: str
    started: datetime
    files: tuple[Path, ...]
    sweep: Results
    verdicts: Verdicts
    # benchmark -> arms, as the meta lines list them, then as the rows show them
    arms: dict[str, list[str]]
    # which shards are missing or unfinished (``shards.coverage``); None: the whole sweep
    partial: str | None = None


def results_files(paths: Sequence[Path]) -> list[Path]:
    """Each file given, and every ``*.jsonl`` under each directory given (sorted, at any depth:
    an artifact download puts each shard in a folder of its own); ValueError naming a directory
    that holds none."""
    found: list[Path] = []
    for path in paths:
        if not path.is_dir():
            found.append(path)
            continue
        inside = sorted(p for p in path.rglob(RESULTS_GLOB) if p.is_file())
        if not inside:
            raise ValueError(f"{path}: no results file ({RESULTS_GLOB}) in this directory")
        found += inside
    return found


def read_runs(paths: Sequence[Path]) -> list[Run]:
    """The runs the files and directories hold, oldest first (ties by run id): the files of one
    run id make one run, read together. A file without a meta line, or whose meta line gives no
    date, is refused naming it: a run's place in time is its meta line's ``created_at``."""
    groups: dict[str, list[tuple[Path, Meta]]] = defaultdict(list)
    for path in dict.fromkeys(results_files(paths)):
        meta = _meta(path)
        # a file whose meta line names no run is a run of its own
        groups[meta.run_id or f"file:{path}"].append((path, meta))
    runs = [_run(run_id, members) for run_id, members in groups.items()]
    return sorted(runs, key=lambda r: (r.started, r.run_id))


def _meta(path: Path) -> Meta:
    """The file's meta line, read alone (the rows are read once its run is known)."""
    with contextlib.closing(iter_records(path)) as records:
        first = next(records, None)
    if first is None or first.lineno != 1 or not first.data.get("_meta"):
        raise ValueError(f"{path}: no meta line (an empty file, or rows only): trend orders "
                         "runs by the date their meta line records")
    return Meta.from_json(first.data, f"{path}:1")


def _run(run_id: str, members: list[tuple[Path, Meta]]) -> Run:
    dated = [(_started(path, meta.created_at), meta.created_at) for path, meta in members]
    started, created = min(dated)  # a run whose files began apart began with its first
    files = tuple(path for path, _ in members)
    results = load_results(list(files), spend=False)  # trend shows no spend
    return Run(run_id.removeprefix("file:"), created, started, files, results,
               verdicts(results.rows), _arm_order(results), _partial(results))


def _partial(results: Results) -> str | None:
    """What the run lacks of its sweep, as the report says it: a shard of a CI matrix or a Slurm
    array has a run id of its own, so its file alone is a run of some shards only."""
    totals = {part.total for part in results.parts if part.total}
    held = held_by_shard(((i.benchmark, i.task_id) for i in results.rows), totals)
    cover = coverage(results.parts, held)
    return None if cover.complete else cover.describe()


def _arm_order(results: Results) -> dict[str, list[str]]:
    """Benchmarks and arms in the order the meta lines list them, then as the rows show them."""
    listed = [(b, a) for meta in results.metas for b, arms in meta.arms.items() for a in arms]
    order: dict[str, list[str]] = {}
    for bench, arm in listed + [(i.benchmark, i.arm) for i in results.rows]:
        if arm not in order.setdefault(bench, []):
            order[bench].append(arm)
    return order


def _started(path: Path, text: str) -> datetime:
    """The meta line's ``created_at`` as a time in UTC (a date without a zone read as UTC, as the
    writer writes them); ValueError naming the file when it is missing or not a date."""
    if not text:
        raise ValueError(f"{path}:1: the meta line has no created_at: trend cannot place this run "
                         "in time (give files written by a sweep, or add the date)")
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{path}:1: created_at {text!r} is not an ISO 8601 date") from None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def verdicts(rows: Iterable[Item]) -> Verdicts:
    """Each arm's graded items and whether each passed (an unjudged row has no verdict)."""
    found: Verdicts = defaultdict(dict)
    for item in rows:
        if item.status != UNJUDGED:
            found[(item.benchmark, item.arm)][(item.benchmark, item.task_id, item.epoch)] = (
                item.passed)
    return found

