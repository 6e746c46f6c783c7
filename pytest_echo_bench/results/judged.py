"""The output of a judging pass: a results file of its own, whose meta line says what it was judged
from (``judged_from``) and with which judges (``judge_fingerprint``), and whose rows are the
source rows with their new verdicts.

A pass run again on the same output judges only what the output does not hold yet: the keys it
holds are skipped (those left unjudged, or whose scorer failed, only with ``retry``), unless the
source row of a key changed since it was judged (a resumed sweep recorded a new one): that key is
judged again, and its newest row wins for every reader. An output judged with another judge
spec, or from other source runs, is refused: a rubric change is a new judging pass, into a new
file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.results.judge_source import JUDGE_FINGERPRINT, JUDGED_FROM, JudgeError
from pytest_echo_bench.scoring.verdict import ERROR, UNJUDGED
from pytest_echo_bench.store.files import row_status
from pytest_echo_bench.store.reader import parse_line, read_records
from pytest_echo_bench.store.records import Key, row_key
from pytest_echo_bench.store.rows import read_row
from pytest_echo_bench.store.writer import repair

IDENTITY = ("run_id", "started_at", "finished_at")  # with the output: a source row's identity
Identity = tuple[str | int, ...]
MAX_META = 1 << 26  # bytes of a first line read to check it: far above any meta line


@dataclass
class Held:
    """What the output already holds: the keys to skip, the keys judged without a grade (judged
    again only when asked), what its judge calls cost, and whether an earlier pass wrote it."""

    done: set[Key] = field(default_factory=set)
    again: set[Key] = field(default_factory=set)
    spent: float = 0.0
    resumed: bool = False
    # key -> what identifies the source row its newest row was judged (or carried) from
    source: dict[Key, Identity] = field(default_factory=dict)

    def changed(self, key: Key, data: dict[str, Any]) -> bool:
        """Whether the output holds ``key`` from another source row than ``data`` (the sweep was
        resumed since, e.g. with ``--bench-retry-errors``): that key is judged again."""
        was = self.source.get(key)
        return was is not None and was != identity(data)


def read_output(out: Path, meta: dict[str, Any], retry: bool) -> Held:
    """What ``out`` holds, checked against this pass's meta line ``meta``; an empty or missing
    output holds nothing."""
    held = Held()
    if not out.exists() or out.stat().st_size == 0:
        return held
    # Checked before the repair: a file that is refused (notes given as -o by mistake) is left
    # whole, its last line not cut off into OUT.torn.
    _check_meta(out, _first_line(out), meta)
    held.resumed = True
    repair(out)  # a pass killed mid-append left a torn line: cut it, as a sweep's resume does
    _, records = read_records(out)
    default = str(meta.get("benchmark", ""))
    newest: dict[Key, dict[str, Any]] = {}
    for record in records:
        newest[row_key(record.data, default)] = record.data
        cost = read_row(record.data, default).judge_cost_usd
        held.spent += cost or 0.0  # every judge call paid for, a row judged again included
    for key, data in newest.items():
        held.source[key] = identity(data)
        if _judged_again(data) and retry:
            continue
        (held.again if _judged_again(data) else held.done).add(key)
    return held


def identity(data: dict[str, Any]) -> Identity:
    """What tells one source row of a key from another: the run and the times that recorded it,
    and its output (a judged row keeps them as its source row had them; an old writer's row with
    no times is told by its output). The output is kept as its hash: both sides are hashed in
    this process, and a million outputs are not held twice."""
    return (*(str(data.get(name)) for name in IDENTITY), hash(str(data.get("output"))))


def _judged_again(data: dict[str, Any]) -> bool:
    """A row a retry judges again: no grade (unjudged), or its scorer failed on a stored output."""
    status = row_status(data)
    return status == UNJUDGED or (status == ERROR and bool(data.get("output")))


def _first_line(out: Path) -> dict[str, Any] | None:
    """The meta line of ``out``, read without changing it (None: its first line is not one)."""
    try:
        with out.open("rb") as f:
            raw = f.readline(MAX_META)  # a big file with no newline given as -o is not read whole
    except OSError as exc:
        raise StoreError(f"cannot read {out}: {exc.strerror or exc}") from exc
    record = parse_line(raw.rstrip(b"\n"), out, 1, strict=False)
    return record if record is not None and record.get("_meta") is True else None


def _check_meta(out: Path, line: dict[str, Any] | None, meta: dict[str, Any]) -> None:
    if line is None or JUDGED_FROM not in line:
        raise JudgeError(f"{out} is not the output of a judging pass (its meta line records no "
                         f"{JUDGED_FROM}); it is left as it is: give a new -o")
    old, new = line.get(JUDGE_FINGERPRINT), meta.get(JUDGE_FINGERPRINT)
    if old != new:
        raise JudgeError(
            f"{out} was judged with another scorer or judges ({JUDGE_FINGERPRINT} {old} there, "
            f"{new} now): a rubric or judge change is a new judging pass; give a new -o (the "
            "response cache still answers the judge calls that did not change)")
    if _runs(line) != _runs(meta):
        raise JudgeError(
            f"{out} was judged from other source runs ({_shown_runs(line)} there, "
            f"{_shown_runs(meta)} now); give a new -o for these files")


def _runs(meta: dict[str, Any]) -> list[tuple[str, str]]:
    found = meta.get(JUDGED_FROM)
    items = found if isinstance(found, list) else []
    return sorted((str(f.get("run_id")), str(f.get("fingerprint")))
                  for f in items if isinstance(f, dict))


def _shown_runs(meta: dict[str, Any]) -> str:
    return ", ".join(f"run {run} ({fingerprint})" for run, fingerprint in _runs(meta)) or "none"
