"""The rules a results file's lines must meet before any reader uses them.

A results file is data from anywhere (a colleague's run, a download, a file edited by hand), so
every reader (resume, report, merge, regrade, the page, the end-of-run table) takes its lines
through these rules, one per kind of field:

- **Key fields** say which item a row is: ``task_id`` and ``arm`` are strings, ``benchmark`` a
  string (absent, null or "": the meta line's), ``epoch`` an integer >= 1 (absent or null: 1).
  A row that breaks one is refused, naming the file and line (a strict reader) or skipped (the
  page and the end-of-run table, which must never break a run): a key read any other way would
  let a row stand for another item, or for none.
- **The meta line** (line 1, ``"_meta": true``) says what produced the file and which fingerprint
  its rows answer to: every field it has must have its type (``META_FIELDS``), else the file is
  refused the same way. A ``_meta`` that is neither true nor false is not a line we wrote. What an
  older writer put there (the harness this project grew from: ``arms`` as a list of names beside
  ``subtasks``, ``n_per_subtask`` and ``start``) is read as today's line (``current_meta``) before
  the check, in this one place: refused are wrong types, never a shape we or our parent wrote.
- **Text** may hold any code point, a lone surrogate (``"\\ud800"``) included: a dataset's ids
  can, and the row keeps them exactly; whatever shows text escapes it (``store.safe_text.shown``).
- **Figures** (wall seconds, sub-calls, tokens, cost, retries) are facts about a call, not what a
  row is: a value that is not a finite number in [0, ``FIGURE_MAX``] is unknown (``figure`` gives
  None), and the report counts the rows that had one. A NaN, a negative or an absurd figure never
  reaches a sum.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pytest_echo_bench.store.safe_text import shown

# Above any real figure (a trillion tokens, dollars or seconds in one row) and far enough below
# the float limit that the sums of millions of rows stay finite.
FIGURE_MAX = 1e12


def figure(value: object) -> float | None:
    """A figure of a row as a float, or None (unknown) unless it is a
    finite number in [0, FIGURE_MAX]."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int) and not 0 <= value <= FIGURE_MAX:  # float(10**400) would overflow
        return None
    number = float(value)
    return number if 0.0 <= number <= FIGURE_MAX else None  # NaN fails both comparisons


def grade(value: object) -> float | None:
    """A judge's grade as a float, or None unless a finite number within +-FIGURE_MAX (a scale is
    the user's: it may be negative). The one rule for a row's ``score`` and a judgment's grade."""
    if type(value) is float:  # what our writer writes, taken first: a million rows are read so
        return value if -FIGURE_MAX <= value <= FIGURE_MAX else None  # NaN fails both
    if type(value) is int and -FIGURE_MAX <= value <= FIGURE_MAX:
        return float(value)
    return None


def count(value: object) -> int | None:
    """A count of a row (tokens, retries): an integer figure, or None (unknown)."""
    number = figure(value)
    return int(number) if number is not None and number == int(number) else None


def row_problem(record: Mapping[str, Any]) -> str | None:
    """What is wrong with the key fields of a row, or None when they are sound."""
    for name in ("task_id", "arm"):
        problem = _text_problem(name, record.get(name))
        if problem:
            return problem
    benchmark = record.get("benchmark")
    if benchmark is not None:
        problem = _text_problem("benchmark", benchmark)
        if problem:
            return problem
    epoch = record.get("epoch")
    if epoch is not None and not _positive_int(epoch):
        return f"epoch must be an integer of 1 or more, got {_shown_value(epoch)}"
    return None


def meta_problem(meta: Mapping[str, Any]) -> str | None:
    """What is wrong with a meta line, or None: each field it has must have its type."""
    for name, check in META_FIELDS.items():
        if name in meta and not check(meta[name]):
            return (
                f"meta line field {name!r} must be {META_TYPES[name]}, got "
                f"{_shown_value(meta[name])}"
            )
    benchmarks = meta.get("benchmarks") or {}
    for name, info in benchmarks.items():
        for key, check in BENCHMARK_FIELDS.items():
            if key in info and not check(info[key]):
                return (
                    f"meta line benchmarks[{shown(repr(name))}] field {key!r} must be "
                    f"{BENCHMARK_TYPES[key]}, "
                    f"got {_shown_value(info[key])}"
                )
    return None


# The benchmark of the parent harness's sweeps that recorded ``subtasks``: BIG-Bench Hard was the
# one it split so (its rows' task ids are ``bbh/<subtask>/<n>``, as ``results.read`` reads them).
PARENT_SUBTASKED = "bbh"


def current_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    """A meta line in today's shape: an older writer's fields read as what they meant, the rest as
    they are (a line that is current already comes back equal).

    - ``arms`` as a list of names (the parent harness): ``{benchmark: names}``, the benchmark its
      rows default to, so each row's (benchmark, arm) is one the line names;
    - no ``benchmark`` beside ``subtasks`` (its BBH sweeps): ``bbh``;
    - ``start`` and no ``created_at``: ``start`` is when the run started.

    Values of the wrong type are left as they are, for ``meta_problem`` to refuse naming them.
    """
    line = dict(meta)
    if "benchmark" not in line and _texts(line.get("subtasks")):
        line["benchmark"] = PARENT_SUBTASKED
    if _texts(line.get("arms")):
        benchmark = line.get("benchmark")
        line["arms"] = {benchmark if _text(benchmark) else "": list(line["arms"])}
    if "created_at" not in line and _text(line.get("start")):
        line["created_at"] = line["start"]
    return line


def _text_problem(name: str, value: object) -> str | None:
    return None if isinstance(value, str) else f"{name} must be a string, got {_shown_value(value)}"


def _shown_value(value: object) -> str:
    return f"{type(value).__name__} {shown(repr(value)[:60])}"


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _bool(value: object) -> bool:
    return isinstance(value, bool)


def _text(value: object) -> bool:
    return isinstance(value, str)


def _texts(value: object) -> bool:
    return isinstance(value, list) and all(map(_text, value))


def _text_map(value: object) -> bool:
    return isinstance(value, dict) and all(_text(k) and _text(v) for k, v in value.items())


def _arms(value: object) -> bool:
    return isinstance(value, dict) and all(_text(k) and _texts(v) for k, v in value.items())


def _benchmarks(value: object) -> bool:
    return isinstance(value, dict) and all(
        _text(k) and isinstance(v, dict) for k, v in value.items()
    )


def _selection(value: object) -> bool:
    if not isinstance(value, dict):
        return False
    return _texts(value.get("args", [])) and all(
        _text(value.get(k, "")) for k in ("keyword", "markexpr", "shard")
    )


def _order(value: object) -> bool:
    if not isinstance(value, dict) or value.get("order", "file") not in ("random", "file"):
        return False
    # The one scheme plugin.order knows: an order read back under another
    # would not be the one recorded.
    return ("seed" not in value or _count(value["seed"])) and value.get(
        "scheme", "stratified-subtask"
    ) == "stratified-subtask"


def _decide(value: object) -> bool:
    if not isinstance(value, dict):
        return False
    pairs = value.get("pairs", [])
    numbers = all(isinstance(value.get(k, 0), int | float) and not isinstance(value.get(k, 0), bool)
                  for k in ("alpha", "margin"))
    # Types only: a plan of the right types that cannot be used (alpha, margin out of range, a pair
    # of one arm, an arm the meta line does not hold) is left out of the report saying why
    # (``analysis.decide.monitor.monitor_of``), not refused.
    return numbers and isinstance(pairs, list) and all(_texts(p) and len(p) == 3 for p in pairs)


# Field -> (its check, what it must be). The fields of ``records.Meta``, those merge and regrade
# add, and those of the parent harness's lines (read as today's by ``current_meta``).
_META: dict[str, tuple[Callable[[object], bool], str]] = {
    "benchmark": (_text, "a string"),
    "benchmarks": (_benchmarks, "an object of objects"),
    "spec_files": (_texts, "a list of strings"),
    "fingerprint": (_text, "a string"),
    "arms": (
        _arms,
        "an object of lists of strings (or, as the parent harness wrote it, a list of strings)",
    ),
    "selection": (
        _selection,
        "an object (args: list of strings; keyword, markexpr, shard: strings)",
    ),
    "run_id": (_text, "a string"),
    "plugin_version": (_text, "a string"),
    "created_at": (_text, "a string"),
    "fsync": (_text, "a string"),
    "rootdir": (_text, "a string"),
    "schema": (_positive_int, "an integer of 1 or more"),
    "merged_from": (_texts, "a list of strings"),
    "regraded_from": (_text, "a string"),
    "shard_scheme": (_positive_int, "an integer of 1 or more"),
    "shards": (_texts, "a list of strings"),
    "complete": (_bool, "true or false"),
    "missing_shards": (_texts, "a list of strings"),
    "order": (
        _order,
        "an object (order: random or file; seed: an integer of 0 or more; scheme: "
        "stratified-subtask)",
    ),
    "decide": (_decide, "an object (pairs: lists of benchmark, a, b; alpha, margin: numbers)"),
    # The parent harness's BBH sweeps: which subtasks, how many items of each, when it started.
    "subtasks": (_texts, "a list of strings"),
    "n_per_subtask": (_count, "an integer of 0 or more"),
    "start": (_text, "a string"),
}
META_FIELDS = {name: check for name, (check, _) in _META.items()}
META_TYPES = {name: what for name, (_, what) in _META.items()}
_BENCHMARK: dict[str, tuple[Callable[[object], bool], str]] = {
    "spec": (_text, "a string"),
    "fingerprint": (_text, "a string"),
    "parts": (_text_map, "an object of strings"),
    "items": (_count, "an integer of 0 or more"),
    "epochs": (_positive_int, "an integer of 1 or more"),
}
BENCHMARK_FIELDS = {name: check for name, (check, _) in _BENCHMARK.items()}
BENCHMARK_TYPES = {name: what for name, (_, what) in _BENCHMARK.items()}
