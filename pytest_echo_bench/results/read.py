"""Reading results files for reports: each row normalised to an ``Item``, streamed line by line."""

from __future__ import annotations

import gc
import sys
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from pytest_echo_bench.budget.spend import ArmSpend
from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.results import spent
from pytest_echo_bench.results.conflicts import Conflict, recorded
from pytest_echo_bench.results.ending import one
from pytest_echo_bench.results.spent import Calls, Replaced, arm_call, call_of, ids_of, judging_of
from pytest_echo_bench.scoring.judgment import ORDERS, grade_of
from pytest_echo_bench.shards.coverage import Part, ended, own_shard, part_of
from pytest_echo_bench.spec.pricing import CLASS_KEYS
from pytest_echo_bench.store.columns import JudgmentView, ReportRow
from pytest_echo_bench.store.files import STATUSES, UNGRADED, UNJUDGED
from pytest_echo_bench.store.keyscan import RowScan
from pytest_echo_bench.store.metalines import NO_HEAD, check_later_meta
from pytest_echo_bench.store.paths import open_results
from pytest_echo_bench.store.reader import parse_line
from pytest_echo_bench.store.records import Key, Meta, scan_epoch
from pytest_echo_bench.store.rows import ReadRow, read_row

T = TypeVar("T")
# The disagreement list shows answers, not whole outputs: keep a short prefix of each.
ANSWER_CHARS = 160
# The figures an ``Item`` holds: a row with one ``store.checks`` refuses is counted as such.
SHOWN = frozenset({"wall_seconds", "sub_calls", "cost_usd", "cost_units", "usage"})

# One judgment as the report reads it: (judge, model, grade, label, order). A million judged rows
# repeat a few judges, models and grades: each distinct one (and each row's tuple of them) is
# held once, shared between rows.
Judged = tuple[str, str | None, float | None, str | None, str | None]


class Item(msgspec.Struct, frozen=True, gc=False):
    """One graded row, normalised so that older six-field rows read like current ones.

    A Struct, built in C: a report holds one per key, a million of them."""

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
    grade: float | None = None  # a judged row's ``score``: its grade on its scorer's scale
    judged: tuple[Judged, ...] = ()  # what its judges did (``report.judged`` reads them)
    # what ``echo-bench compare`` checks: the dataset item's digest and the model that served
    item_sha256: str | None = None
    served_model: str | None = None
    # (cache_read, cache_write, reasoning) tokens, when the row's usage keeps any class apart
    classes: tuple[int, int, int] | None = None
    # the calls the row records (``_call``): a regraded or merged copy of a row names the same
    # ones; a row ``echo-bench judge`` judged again names the same arm call, and a new judging
    call: str | None = None


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


def _call(row: ReadRow | ReportRow) -> str | None:
    """What names the calls a row records, beside its key (``spent.call_of``): its run and times,
    which a regraded or merged copy keeps, and when a judging pass judged it."""
    return call_of(row.run_id, row.started_at, row.finished_at, row.judged_at)


def load_results(paths: Sequence[Path], fast: bool = True, spend: bool = True) -> Results:
    """Combine results files in order; a repeated key counts once (its newest row), and
    is noted if its verdict changed.

    ``fast`` reads the report's columns only (``store.columns.ReportRow``), chunk by chunk; without
    it every line is parsed whole (``store.reader.parse_line``), the reference the fast path is
    tested against: both give equal ``Results``. Without ``spend`` (a reader that shows no spend:
    compare, trend) no call is named and ``Results.spend`` stays empty: a million rows' calls are
    a second and 110 MB."""
    with paused_gc():
        return _load(paths, fast, spend)


@contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection while a report builds a million objects that hold no cycle:
    each collection would walk every one of them again, a tenth of the time for nothing."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _load(paths: Sequence[Path], fast: bool, spend: bool) -> Results:
    results = Results()
    # a replaced row keeps its key's place: the order of first appearance
    seen: dict[Key, Item] = {}
    shared: dict[object, object] = {}  # judgments and grades held once (``_judged``)
    calls = Calls(results.spend, seen)
    for path in paths:
        results.paths.append(path)
        file = _File(path, results, calls if spend else None)
        for rows in (_scanned if fast else _parsed)(path, file):
            for row, item in zip(rows, _items(rows, file, shared), strict=True):
                key, older = _add(results, seen, item)
                if file.own is not None:
                    file.own.add(key)
                _count(results, calls.new(key, older, item) if spend else None, item, row)
        if file.own is not None:
            results.parts[-1] = ended(results.parts[-1], one(path).stop_text, len(file.own))
    results.rows = list(seen.values())
    return results


def by_arm(rows: Sequence[Item]) -> dict[tuple[str, str], list[Item]]:
    """``rows`` by (benchmark, arm), each group in their order."""
    grouped: dict[tuple[str, str], list[Item]] = defaultdict(list)
    for item, arm in zip(rows, map(_ARM, rows), strict=True):
        grouped[arm].append(item)
    return grouped


_ARM = attrgetter("benchmark", "arm")


class _File:
    """What a file's meta line tells its rows: the benchmark of a row that names none, and
    whether the file is a shard, whose keys are counted (how it ended depends on how many)."""

    def __init__(self, path: Path, results: Results, spend: Calls | None) -> None:
        self.path, self.results = path, results
        self.spend = spend  # each row's call is named (its spend counted once), unless None
        self.calls = spend is not None
        self.default = ""
        self.own: set[Key] | None = None

    def meta(self, record: dict[str, Any]) -> None:
        """Line 1's meta line: the file's sweep, the conflicts a merge recorded, its shard."""
        results, where = self.results, f"{self.path}:1"
        meta = Meta.from_json(record, where)
        results.metas.append(meta)
        # what a merge found, its rows no longer show
        listed, unlisted = recorded(meta, where)
        results.conflicts += listed
        results.unlisted_conflicts += unlisted
        results.parts.append(part_of(self.path, meta))
        self.own = set() if own_shard(results.parts[-1]) else None
        self.default = meta.benchmark
        # what the rows a merge dropped spent, counted before this file's rows (``spent``)
        dropped, sums = spent.recorded(meta, where)
        if self.spend is not None:
            self.spend.replaced(dropped, sums)
        results.sources.append((str(self.path), meta.run_id, meta.created_at))


def _parsed(path: Path, file: _File) -> Iterator[list[ReadRow]]:
    """Every row of ``path`` parsed whole, in file order, one at a time (the reference reader)."""
    for lineno, record in _records(path):
        if record.get("_meta"):
            # a later one is an end line or a copy of this one (store.metalines)
            if lineno == 1:
                file.meta(record)
            continue
        yield [read_row(record, file.default)]


def _scanned(path: Path, file: _File) -> Iterator[list[ReadRow] | list[ReportRow]]:
    """The rows of ``path`` in file order, a chunk at a time: the report's columns of each
    (``ReportRow``), or the whole row of a line in a chunk the fast path cannot take, by the same
    rules as ``_parsed``."""
    def parse(raw: bytes, lineno: int, strict: bool) -> dict[str, Any] | None:
        return parse_line(raw, path, lineno, strict)

    scan, told = RowScan(path, ReportRow, parse), False
    try:
        for fast, slow in scan.batches():
            if not told and scan.meta is not None:  # line 1's: set by the first batch
                file.meta(scan.meta)
                told = True
            # slow rows first: in a batch with both they are line 1 (``keyscan._lines``)
            if slow:
                yield [read_row(record, file.default) for record in slow]
            if fast:
                yield fast
    except StoreError:  # a line refused: its own message, naming it
        raise
    except OSError as exc:
        raise StoreError(f"cannot read results file {path}: {exc.strerror or exc}") from exc


def _items(rows: list[ReadRow] | list[ReportRow], file: _File,
           shared: dict[object, object]) -> list[Item]:
    """The items of a chunk's rows, in their order. A chunk read fast has its items made arm by
    arm: each arm's items then lie together in memory, and the figures, which read an arm's items
    a column at a time, read them in order (items scattered among every arm's cost a cache miss
    each: a million rows' figures took a quarter longer)."""
    if type(rows[0]) is ReadRow:
        return [_item(row, shared, file.calls) for row in rows]  # type: ignore[arg-type]
    made: list[Item] = [None] * len(rows)  # type: ignore[list-item]
    arms = list(map(_ROW_ARM, rows))
    for at in sorted(range(len(rows)), key=arms.__getitem__):
        made[at] = _fast_item(rows[at], file, shared)  # type: ignore[arg-type]
    return made


_ROW_ARM = attrgetter("arm")


def _fast_item(row: ReportRow, file: _File, shared: dict[object, object]) -> Item:
    """``_item`` of the row ``read_row`` would read from the same line (``store.columns``: a line
    decoded into ``ReportRow`` has no value that ``read_row`` would read otherwise)."""
    status = row.status
    if status not in STATUSES:
        status = row.verdict()
    flags = row.flags
    escalated = None if flags is None else flags.escalated
    subtask = row.subtask or _bbh_subtask(row.task_id)
    text = row.answer or row.text()
    judged = _judged(row, shared) if row.score is not None or row.judged is not None else (None, ())
    # names shared as ``_item`` shares them
    return Item(sys.intern(row.benchmark or file.default), sys.intern(row.task_id),
                sys.intern(row.arm),
                row.passed is True and status != UNJUDGED, sys.intern(status),
                None if subtask is None else sys.intern(subtask),
                row.wall_seconds, row.sub_calls, None if escalated is None else escalated is True,
                _shared(row.tokens(), shared), row.cost_usd, row.cost_units,
                text[:ANSWER_CHARS] if text else None, scan_epoch(row.epoch), None, *judged,
                _shared(row.item_sha256, shared),
                None if row.served_model is None else sys.intern(row.served_model),
                _shared(row.classes(), shared),
                call_of(row.run_id, row.started_at, row.finished_at, row.judged_at)
                if file.calls else None)


def _count(results: Results, new: tuple[bool, bool] | None, item: Item,
           row: ReadRow | ReportRow) -> None:
    """What the report counts of every row, a replaced one too: its spend (``new``: whether its
    call and its judging are ones not counted yet; None: a read that counts no spend), and
    whether it had a figure it could not use or a verdict that is partly luck."""
    if new is not None:
        arm = (item.benchmark, item.arm)
        spend = results.spend.get(arm)
        if spend is None:  # not ``setdefault``: an ArmSpend made for every row costs a second
            spend = results.spend[arm] = ArmSpend()
        spend.add(row, *new)  # type: ignore[arg-type]
    if type(row) is ReadRow:
        # the report says how many rows had one (a ``ReportRow`` has none: ``store.columns``)
        if row.unknown and not SHOWN.isdisjoint(row.unknown):
            results.unknown_figures += 1
        guessed = row.extra.get("random_guess")
    else:
        guessed = None if row.flags is None else row.flags.random_guess  # type: ignore[union-attr]
    if guessed is True:  # a figure that is partly luck says so
        results.random_guesses += 1


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


def _add(results: Results, seen: dict[Key, Item], item: Item) -> tuple[Key, Item | None]:
    """The item's key, and the row of that key it replaces (None: the key's first row)."""
    key = (item.benchmark, item.task_id, item.arm, item.epoch)
    older = seen.get(key)
    seen[key] = item
    if older is None:
        return key, None
    results.duplicates += 1
    # a retried error or unjudged row (no grade) is expected to change
    if older.passed != item.passed and older.status not in UNGRADED:
        results.conflicts.append(Conflict(key, older.passed, item.passed))
    return key, older


def _item(row: ReadRow, shared: dict[object, object], calls: bool = True) -> Item:
    """The row as an ``Item``: a figure ``store.checks`` refuses (NaN, a string) is None."""
    escalated = row.extra.get("escalated")
    subtask = _subtask(row)
    usage = row.usage
    # A million rows repeat a few benchmark, arm, status and subtask names, and each task id once
    # per arm: share one string each.
    tokens = classes = None
    if usage is not None:
        tokens = (usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0))
        if not usage.keys().isdisjoint(CLASS_KEYS):
            read, write, reasoning = (usage.get(key, 0) for key in CLASS_KEYS)
            classes = (read, write, reasoning)
    return Item(sys.intern(row.benchmark), sys.intern(row.task_id), sys.intern(row.arm), row.passed,
                sys.intern(row.status), None if subtask is None else sys.intern(subtask),
                row.wall_seconds, row.sub_calls, None if escalated is None else escalated is True,
                _shared(tokens, shared), row.cost_usd, row.cost_units, _answer(row), row.epoch,
                None,
                *_judged(row, shared), _shared(row.item_sha256, shared),
                None if row.served_model is None else sys.intern(row.served_model),
                _shared(classes, shared), _call(row) if calls else None)


def _shared(value: T | None, shared: dict[object, object]) -> T | None:
    """A value held once however many items have it: an item's digest (one for every arm and
    epoch of the item), a (prompt, completion) token count."""
    return None if value is None else shared.setdefault(value, value)  # type: ignore[return-value]


def _judged(row: ReadRow | ReportRow,
            shared: dict[object, object]) -> tuple[float | None, tuple[Judged, ...]]:
    """The row's grade and judgments as the report keeps them, each distinct value held once."""
    if row.score is None and not row.judgments:
        return None, ()
    found = []
    for record in row.judgments:
        one = judged_of(record)
        if one is not None:
            found.append(shared.setdefault(one, one))
    kept = tuple(found)
    return shared.setdefault(row.score, row.score), shared.setdefault(kept, kept)  # type: ignore


def judged_of(record: object) -> Judged | None:
    """The fields a report reads of one judgment record (a dict, or its ``JudgmentView``), by
    ``Judgment.from_json``'s rules (None: not a judgment); read here directly, a million rows'
    records being twice as many."""
    if isinstance(record, JudgmentView):
        judge, model, label, order = record.judge, record.model, record.label, record.order
        digest, grade = record.prompt_sha256, record.grade
    elif isinstance(record, dict):
        judge, model, label, order = (record.get(k) for k in ("judge", "model", "label", "order"))
        digest, grade = record.get("prompt_sha256"), record.get("grade")
    else:
        return None
    if not isinstance(judge, str) or not isinstance(digest, str):
        return None
    return (judge, model if isinstance(model, str) else None, grade_of(grade),
            label.lower() if isinstance(label, str) else None,
            order if order in ORDERS else None)


def _subtask(row: ReadRow) -> str | None:
    return row.subtask or _bbh_subtask(row.task_id)


def _bbh_subtask(task_id: str) -> str | None:
    """The subtask of an older BBH row, named in its task id (``bbh/<subtask>/<n>``)."""
    parts = task_id.split("/")
    return parts[1] if len(parts) == 3 and parts[0] == "bbh" else None


def _answer(row: ReadRow) -> str | None:
    text = row.answer or row.output
    return text[:ANSWER_CHARS] if text else None


def replaced_of(row: ReadRow) -> Replaced:
    """What a row a merge drops spent, with the calls it names (``spent.Replaced``): a cached
    call cost nothing."""
    item = _item(row, {})
    call = item.call
    judged = bool(row.judgments)
    return Replaced((item.benchmark, item.task_id, item.arm, item.epoch),
                    None if call is None else arm_call(call),
                    judging_of(call, item.judged) if judged and call is not None else None,
                    0.0 if row.cached() else row.cost_usd, judged, row.judge_cost_usd)


def calls_of(row: ReadRow) -> set[str]:
    """The calls a row names, its judging's too (none when it names none)."""
    return ids_of(_item(row, {}))
