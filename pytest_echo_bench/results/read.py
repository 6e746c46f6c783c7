"""Reading results files for reports: each row normalised to an ``Item``, streamed line by line."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_echo_bench.budget.spend import ArmSpend
from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.results.conflicts import Conflict, recorded
from pytest_echo_bench.results.ending import one
from pytest_echo_bench.shards.coverage import Part, ended, own_shard, part_of
from pytest_echo_bench.store.checks import count, figure
from pytest_echo_bench.store.files import row_status
from pytest_echo_bench.store.metalines import NO_HEAD, check_later_meta
from pytest_echo_bench.store.paths import open_results
from pytest_echo_bench.store.reader import parse_line
from pytest_echo_bench.store.records import Key, Meta, row_key

# The disagreement list shows answers, not whole outputs: keep a short prefix of each.
ANSWER_CHARS = 160


@dataclass(frozen=True, slots=True)
class Item:
    """One graded row, normalised so that older six-field rows read like current ones."""

    benchmark: str
    task_id: str
    arm: str
    passed: bool
    status: str
    subtask: str | None
    wall_seconds: float | None
    sub_calls: float | None
    escalated: bool | None  # None when the row does not say
    usage: tuple[int, int] | None  # (prompt_tokens, completion_tokens)
    cost_usd: float | None
    cost_units: float | None = None
    answer: str | None = None  # the parsed answer, else the start of the output
    epoch: int = 1  # 1..K of a spec with ``epochs: K``
    # a reduced item's score in [0, 1] (``analysis.epochs``); None: ``passed`` says it
    score: float | None = None


@dataclass
class Results:
    """Rows of one or more results files, each key once: its newest row (the files are read in the
    order given, each from its first line to its last)."""

    rows: list[Item] = field(default_factory=list)
    metas: list[Meta] = field(default_factory=list)
    # which shards of its sweep each file holds (``shards.coverage``)
    parts: list[Part] = field(default_factory=list)
    duplicates: int = 0
    conflicts: list[Conflict] = field(default_factory=list)
    unlisted_conflicts: int = 0  # conflicts a merged meta line counted beyond the keys it lists
    # rows with a figure (time, tokens, cost) that is not a finite number >= 0
    unknown_figures: int = 0
    # rows a scorer graded by a seeded random guess (mmlu_pro's random_guess_seed)
    random_guesses: int = 0
    # the files, in the order read (the decide replay reads them again)
    paths: list[Path] = field(default_factory=list)
    # per file: (path, run id, created_at) of its meta line
    sources: list[tuple[str, str, str]] = field(default_factory=list)
    # (benchmark, arm) -> what its rows spent: every row, a replaced one too (``budget.spend``)
    spend: dict[tuple[str, str], ArmSpend] = field(default_factory=dict)


def _call(key: Key, record: dict[str, Any]) -> tuple[Key, str, str, str] | None:
    """What names the call a row records: its key, run and times, which a regraded or merged copy
    keeps (None: a row without them, counted as it comes)."""
    run, started, finished = (record.get(f) for f in ("run_id", "started_at", "finished_at"))
    if not (isinstance(run, str) and isinstance(started, str) and isinstance(finished, str)):
        return None
    return key, run, started, finished


def load_results(paths: Sequence[Path]) -> Results:
    """Combine results files in order; a repeated key counts once (its newest row), and
    is noted if its verdict changed."""
    results = Results()
    # a replaced row keeps its key's place: the order of first appearance
    seen: dict[Key, Item] = {}
    # each call's spend once: a regrade or merge copies its row
    calls: set[tuple[Key, str, str, str] | None] = set()
    for path in paths:
        results.paths.append(path)
        default = ""
        # a shard file's keys, each once: how it ended depends on how many it holds
        own: set[Key] | None = None
        for lineno, record in _records(path):
            if record.get("_meta"):
                # a later one is an end line or a copy of this one (store.metalines)
                if lineno == 1:
                    meta = Meta.from_json(record, f"{path}:{lineno}")
                    results.metas.append(meta)
                    # what a merge found, its rows no longer show
                    listed, unlisted = recorded(meta, f"{path}:{lineno}")
                    results.conflicts += listed
                    results.unlisted_conflicts += unlisted
                    results.parts.append(part_of(path, meta))
                    own = set() if own_shard(results.parts[-1]) else None
                    default = meta.benchmark
                    results.sources.append((str(path), meta.run_id, meta.created_at))
                continue
            unknown: list[str] = []
            item = _item(record, default, unknown)
            key = _add(results, seen, item)
            if own is not None:
                own.add(key)
            call = _call(key, record)
            # None (a row that does not name its call) is never added: always counted
            if call not in calls:
                results.spend.setdefault((item.benchmark, item.arm), ArmSpend()).add(record)
                if call is not None:
                    calls.add(call)
            if unknown:  # counted, and the report says how many rows had a figure it could not use
                results.unknown_figures += 1
            extra = record.get("extra")
            # a figure that is partly luck says so
            if isinstance(extra, dict) and extra.get("random_guess") is True:
                results.random_guesses += 1
        if own is not None:
            results.parts[-1] = ended(results.parts[-1], one(path).stop_text, len(own))
    results.rows = list(seen.values())
    return results


def _records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """The records of ``path`` one line at a time, with ``store.reader``'s rules.

    As ``store.reader.iter_records`` reads them, without the raw line and offset it gives with
    each, which a report does not keep. A last line without a newline counts when it is a whole
    row and is skipped when torn; any other bad line is refused.
    """
    head = NO_HEAD
    try:
        with open_results(path) as f:
            for lineno, raw in enumerate(f, 1):
                last = not raw.endswith(b"\n")
                if not raw.strip():
                    continue
                record = parse_line(raw.rstrip(b"\n"), path, lineno, not last)
                if record is not None and record.get("_meta"):  # another sweep's header is refused
                    head = record if lineno == 1 else head
                    check_later_meta(head, record, path, lineno)
                if record is not None:
                    yield lineno, record
    # a line refused: its own message, naming it (a StoreError is an OSError too)
    except StoreError:
        raise
    except OSError as exc:
        raise StoreError(f"cannot read results file {path}: {exc.strerror or exc}") from exc


def _add(results: Results, seen: dict[Key, Item], item: Item) -> Key:
    key = (item.benchmark, item.task_id, item.arm, item.epoch)
    older = seen.get(key)
    seen[key] = item
    if older is None:
        return key
    results.duplicates += 1
    if older.passed != item.passed and older.status != "error":
        results.conflicts.append(Conflict(key, older.passed, item.passed))
    return key


def _item(record: dict[str, Any], default_benchmark: str, unknown: list[str] | None = None) -> Item:
    """The row as an ``Item``; the name of each figure it has that ``store.checks.figure`` refuses
    (NaN, negative, a string) is appended to ``unknown``, and the figure is unknown (None)."""
    benchmark, task_id, arm, epoch = row_key(record, default_benchmark)
    bad = [] if unknown is None else unknown
    extra = record.get("extra")
    escalated = extra.get("escalated") if isinstance(extra, dict) else None
    subtask = _subtask(record, task_id)
    # A million rows repeat a few benchmark, arm, status and subtask names: share one string each.
    return Item(
        sys.intern(benchmark),
        task_id,
        sys.intern(arm),
        record.get("passed") is True,
        sys.intern(row_status(record)),
        None if subtask is None else sys.intern(subtask),
        _number(record, "wall_seconds", bad),
        _number(record, "sub_calls", bad),
        None if escalated is None else escalated is True,
        _usage(record.get("usage"), bad),
        _number(record, "cost_usd", bad),
        _number(record, "cost_units", bad),
        _answer(record),
        epoch,
    )


def _subtask(record: dict[str, Any], task_id: str) -> str | None:
    subtask = record.get("subtask")
    if isinstance(subtask, str) and subtask:
        return subtask
    parts = task_id.split("/")
    return parts[1] if len(parts) == 3 and parts[0] == "bbh" else None


def _answer(record: dict[str, Any]) -> str | None:
    for key in ("answer", "output"):
        value = record.get(key)
        if isinstance(value, str) and value:
            return value[:ANSWER_CHARS]
    return None


def _number(record: dict[str, Any], name: str, bad: list[str]) -> float | None:
    value = record.get(name)
    number = figure(value)
    if number is None and value is not None:
        bad.append(name)
    return number


def _usage(value: Any, bad: list[str]) -> tuple[int, int] | None:
    """(prompt, completion) tokens; unknown (None) unless both are counts (a missing one is 0)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        bad.append("usage")
        return None
    tokens = [value.get(name, 0) for name in ("prompt_tokens", "completion_tokens")]
    counted = [0 if t is None else count(t) for t in tokens]
    if counted[0] is None or counted[1] is None:
        bad.append("usage")
        return None
    return (counted[0], counted[1])
