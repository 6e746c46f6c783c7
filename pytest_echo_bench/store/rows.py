"""A results file's rows as read: the fields a row may have (``FIELDS``), one typed ``ReadRow``
read from a checked record by ``read_row``, and the msgspec views the fast readers decode rows
into, each derived from ``FIELDS`` by ``view``.

A row written by any writer of ours or of the harness this project grew from reads here: the
fields an older writer left out are None (``passed`` False, ``status`` its verdict by
``files.row_status``'s rule). A field of the wrong kind is unknown, never a crash or a wrong
figure: text that is not a string is None, a figure or count that ``store.checks`` refuses is
None and named in ``ReadRow.unknown`` (the report counts such rows). Adding a row field is one
line in ``FIELDS`` (the type our writer writes, with ``records.Row``) and one in ``ReadRow``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from pytest_echo_bench.store.checks import FIGURE_MAX, count, figure, grade
from pytest_echo_bench.store.files import STATUSES, UNJUDGED, legacy_status, row_status
from pytest_echo_bench.store.keyscan import RowT, ScanRow
from pytest_echo_bench.store.records import row_key


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _flag(value: object) -> bool:
    return value is True  # anything but ``true`` is not (a 1, a "yes")


def _figure(value: object) -> float | None:
    """``checks.figure``, the type our writer writes taken first: a million rows are read so."""
    if type(value) is float:
        return value if 0.0 <= value <= FIGURE_MAX else None  # type: ignore[operator]
    return None if value is None else figure(value)


def _count(value: object) -> int | None:
    """``checks.count``, with the type our writer writes taken first."""
    if type(value) is int:
        return value if 0 <= value <= FIGURE_MAX else None  # type: ignore[operator]
    return None if value is None else count(value)


def _usage(value: object) -> dict[str, int] | None:
    """Token counts by name (a null count left out); None unless an object of counts."""
    if not isinstance(value, dict):
        return None
    counts = {}
    for name, tokens in value.items():
        if tokens is None:
            continue
        counted = _count(tokens)
        if counted is None:
            return None
        counts[name] = counted
    return counts


def _object(value: object) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def _records(value: object) -> list[dict[str, Any]] | None:
    """A row's judgments: the objects of a list (what each holds is ``scoring.judgment``'s to
    read); None unless a list."""
    if not isinstance(value, list):
        return None
    return [each for each in value if isinstance(each, dict)]


# The fields of a row beyond its key (``keyscan.ScanRow``): name -> (the type our writer writes,
# how ``read_row`` reads a decoded value of it). A fast view declares each as ``type | None``.
FIELDS: dict[str, tuple[Any, Callable[[object], Any]]] = {
    "passed": (bool, _flag), "status": (str, _text), "detail": (str, _text), "output": (str, _text),
    "answer": (str, _text), "target": (str, _text), "subtask": (str, _text),
    "served_model": (str, _text), "served_fingerprint": (str, _text), "item_sha256": (str, _text),
    "batch_id": (str, _text),
    "started_at": (str, _text), "finished_at": (str, _text), "worker": (str, _text),
    "run_id": (str, _text),
    # when ``echo-bench judge`` graded the row (a copy keeps it): its judging apart from its call
    "judged_at": (str, _text),
    # Figures: a float or an int as written, read by ``store.checks``'s rules (1.5 sub-calls stay).
    "wall_seconds": (float, _figure), "sub_calls": (float, _figure), "cost_usd": (float, _figure),
    "cost_units": (float, _figure), "charged_usd": (float, _figure),
    "judge_cost_usd": (float, _figure),
    "attempts": (int, _count), "retries": (int, _count), "cache_hits": (int, _count),
    "usage": (dict[str, int], _usage), "extra": (dict[str, Any], _object),
    "score": (float, grade), "judgments": (list[dict[str, Any]], _records),
}
FIGURES = tuple(n for n, (_, read) in FIELDS.items() if read in (_figure, _count))


def view(name: str, *names: str, loose: bool = False,
         base: type[ScanRow] = ScanRow) -> type[ScanRow]:
    """A msgspec Struct of a row's key (``base``'s fields) and the ``FIELDS`` named, each None when
    absent: what a fast reader decodes each line into, the rest of the line validated, never built.

    Typed as our writer writes them by default (faster to decode; a line with another type sends
    its chunk to the full parser, ``keyscan``); ``loose`` takes any JSON value as it is, for a
    reader that shows odd values rather than refuse them (the page).
    """
    fields = [(n, Any if loose else FIELDS[n][0] | None, None) for n in names]
    return msgspec.defstruct(name, fields, bases=(base,), module=__name__, gc=False)


class StatusRow(view("_Status", "passed", "status", "detail"), gc=False):  # type: ignore[misc]
    """A row's key and the fields its verdict is read from (``files.row_status``'s rule)."""

    def verdict(self) -> str:
        status = self.status
        if isinstance(status, str) and status in STATUSES:
            return status
        return legacy_status(self.passed, self.detail)


def fields_of(row_type: type[RowT], record: Mapping[str, Any], loose: bool = False) -> RowT:
    """A record the full parser read (``store.reader.parse_line``) as the view ``row_type``: its
    key by ``records.row_key``'s rules, each other field read by its ``FIELDS`` rule (or as it
    is when ``loose``)."""
    benchmark, task_id, arm, epoch = row_key(record, "")
    get = record.get
    readers = _READERS.get(row_type) or _readers(row_type)
    values = [get(n) for n, _ in readers] if loose else [read(get(n)) for n, read in readers]
    return row_type(task_id, arm, benchmark or None, epoch, False, *values)


_READERS: dict[type[ScanRow], tuple[tuple[str, Callable[[object], Any]], ...]] = {}


def _readers(row_type: type[ScanRow]) -> tuple[tuple[str, Callable[[object], Any]], ...]:
    """The fields a view adds to the key, each with its ``FIELDS`` rule (kept: read many times)."""
    names = row_type.__struct_fields__[len(ScanRow.__struct_fields__):]
    found = _READERS[row_type] = tuple((n, FIELDS[n][1]) for n in names)
    return found


def all_cached(hits: int | None, calls: float | None) -> bool:
    """Whether the response cache answered every call of a row (``cache_hits`` of ``sub_calls``,
    1 if unsaid): such a row sent nothing, so it spent nothing, whatever its ``cost_usd`` (the
    list price)."""
    return hits is not None and hits > 0 and hits >= (calls or 1)


class ReadRow(msgspec.Struct, frozen=True, gc=False):
    """One row as every full reader takes it (report, regrade, export, estimate, spend).

    Its fields after ``status`` are in the order of ``_TEXTS``, ``FIGURES``, then the objects:
    ``read_row`` builds it positionally (a million rows are read so; a Struct is built in C).
    """

    benchmark: str  # the meta line's when the row names none
    task_id: str
    arm: str
    epoch: int  # 1..K of a spec with ``epochs: K``
    passed: bool  # ``passed: true``, unless unjudged (no grade); anything else is not
    # the verdict: correct | wrong | unparseable | error | unjudged (``files.row_status``)
    status: str
    detail: str | None = None
    output: str | None = None
    answer: str | None = None
    target: str | None = None  # None: an older six-field row, which recorded none
    subtask: str | None = None
    served_model: str | None = None  # what the provider said served the arm's call
    served_fingerprint: str | None = None  # its ``system_fingerprint``, where it gives one
    item_sha256: str | None = None  # a digest of the dataset item asked
    batch_id: str | None = None  # the provider's batch that answered it (None: a live call)
    started_at: str | None = None
    finished_at: str | None = None
    worker: str | None = None
    run_id: str | None = None
    judged_at: str | None = None  # when a judging pass graded it (``results.judge``)
    wall_seconds: float | None = None
    sub_calls: float | None = None
    cost_usd: float | None = None
    cost_units: float | None = None
    charged_usd: float | None = None
    judge_cost_usd: float | None = None  # what its judges cost, apart from ``cost_usd``
    attempts: int | None = None
    retries: int | None = None
    cache_hits: int | None = None
    usage: dict[str, int] | None = None  # token counts by name; None unless every one is a count
    extra: dict[str, Any] = msgspec.field(default_factory=dict)
    unknown: tuple[str, ...] = ()  # figures it has that ``store.checks`` refuses (NaN, a string)
    score: float | None = None  # a judged row's grade (a finite number), on its scorer's scale
    # what its judges did: each an object (``scoring.judgment.Judgment.from_json`` reads one)
    judgments: tuple[dict[str, Any], ...] = ()

    def cached(self) -> bool:
        return all_cached(self.cache_hits, self.sub_calls)


_TEXTS = tuple(n for n, (_, read) in FIELDS.items() if read is _text and n != "status")
_FIGURES = tuple((n, FIELDS[n][1]) for n in FIGURES)


def read_row(record: Mapping[str, Any], default_benchmark: str) -> ReadRow:
    """The row ``record`` (a line ``store.reader`` checked: its key fields are sound) as a
    ``ReadRow``, read by ``FIELDS``'s rules; ``default_benchmark`` is the meta line's."""
    benchmark, task_id, arm, epoch = row_key(record, default_benchmark)
    get = record.get
    unknown: list[str] = []
    figures = []
    for name, read in _FIGURES:
        value = get(name)
        number = read(value)
        if number is None and value is not None:
            unknown.append(name)
        figures.append(number)
    value = get("usage")
    usage = _usage(value)
    if usage is None and value is not None:
        unknown.append("usage")
    extra = get("extra")
    status = row_status(record)
    # an unjudged row has no grade: a ``passed: true`` beside it is not a pass (a pass rate that
    # leaves the row out of its denominator would count it in its numerator)
    passed = get("passed") is True and status != UNJUDGED
    judged = _judged(get("score"), get("judgments"), unknown)
    return ReadRow(benchmark, task_id, arm, epoch, passed, status,
                   *[text if isinstance(text := get(n), str) else None for n in _TEXTS], *figures,
                   usage, extra if isinstance(extra, dict) else {}, tuple(unknown), *judged)


def _judged(score: object, judgments: object,
            unknown: list[str]) -> tuple[float | None, tuple[dict[str, Any], ...]]:
    """A row's grade and judgments (most rows have neither: nothing read), each refused one named
    in ``unknown``."""
    if score is None and judgments is None:
        return None, ()
    found, records = grade(score), _records(judgments)
    if found is None and score is not None:
        unknown.append("score")
    if records is None and judgments is not None:
        unknown.append("judgments")
    return found, tuple(records or ())
