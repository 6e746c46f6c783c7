"""What a merge keeps of the rows it drops: their calls and what those cost, in the merged meta
line (``results.spent``), so that the merged file reports the spend of its parts.

A merge keeps each key's newest row; a retried error's first row was paid for all the same. The
rows dropped now are read again (a few: the rows a resume replaced), and the records of earlier
merges are carried on; a record whose calls the kept row of its key names too (a file merged with
itself, or with one of its parts) is left out, as is a second record of the same calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

from pytest_echo_bench.budget.spend import ArmSpend
from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.results import spent
from pytest_echo_bench.results.merge_scan import Place, Scan
from pytest_echo_bench.results.read import calls_of, replaced_of
from pytest_echo_bench.results.spent import Replaced
from pytest_echo_bench.store.reader import parse_line
from pytest_echo_bench.store.records import Key, Meta
from pytest_echo_bench.store.rows import ReadRow, read_row


def with_replaced(meta: Meta, paths: Sequence[Path], scans: Sequence[Scan],
                  kept: dict[Key, Place]) -> Meta:
    """The merged meta line with what the rows it drops spent: those its files' meta lines
    recorded (earlier merges), then those each file's scan dropped, in file order."""
    rows: list[Replaced] = []
    sums: dict[tuple[str, str], ArmSpend] = {}
    for path, scan in zip(paths, scans, strict=True):
        listed, unlisted = spent.recorded(scan[0], f"{path}:1")
        rows += listed
        for arm, of_arm in unlisted.items():
            sums.setdefault(arm, ArmSpend()).merge(of_arm)
    with ExitStack() as stack:
        lines = _Lines(paths, stack)
        rows += _dropped(lines, [d for scan in scans for d in scan[5]], kept)
        rows = _uncovered(rows, lines, kept)
    extra = {k: v for k, v in meta.extra.items() if k != spent.FIELD}
    if rows or sums:
        extra[spent.FIELD] = spent.record(rows, sums)
    return replace(meta, extra=extra)


def _dropped(lines: _Lines, dropped: Sequence[tuple[Key, Place]],
             kept: dict[Key, Place]) -> list[Replaced]:
    """What each dropped row spent, but for a copy of its key's kept row (byte for byte: a file
    merged with itself, or with a merge of it) that names its call, which the kept row names: only
    the rows a resume replaced are read whole."""
    found = []
    for key, place in dropped:
        raw = lines.raw(place)
        if raw != lines.raw(kept[key]) or not _names_call(raw):
            found.append(replaced_of(lines.row(key, raw, place)))
    return found


class _Call(msgspec.Struct):
    """What names a row's call (``spent.call_of``), decoded alone: the rest is skipped."""

    run_id: Any = None
    started_at: Any = None
    finished_at: Any = None


def _names_call(raw: bytes) -> bool:
    """Whether the row of ``raw`` names its call: a copy of one that does not is counted again."""
    try:
        call = msgspec.json.decode(raw, type=_Call)
    except msgspec.DecodeError:  # not an object: read whole, which says
        return False
    return all(isinstance(v, str) for v in (call.run_id, call.started_at, call.finished_at))


def _uncovered(rows: list[Replaced], lines: _Lines, kept: dict[Key, Place]) -> list[Replaced]:
    """``rows`` without those whose calls the kept row of their key names, or an earlier record
    names the same (a row naming no call is kept: it is counted as it comes)."""
    named: dict[Key, set[str]] = {}
    found: list[Replaced] = []
    for row in rows:
        ids = row.ids()
        if ids:
            known = named.get(row.key)
            if known is None:
                place = kept[row.key]
                known = named[row.key] = calls_of(lines.row(row.key, lines.raw(place), place))
            if ids <= known:
                continue
            known.update(ids)
        found.append(row)
    return found


class _Lines:
    """The merged files' lines, read by their place (each file opened once)."""

    def __init__(self, paths: Sequence[Path], stack: ExitStack) -> None:
        self.paths, self.stack = paths, stack
        self.files: dict[int, BinaryIO] = {}

    def raw(self, place: Place) -> bytes:
        index, offset = place[0], place[1]
        f = self.files.get(index)
        if f is None:
            f = self.files[index] = self.stack.enter_context(open(self.paths[index], "rb"))
        f.seek(offset)
        return f.readline().rstrip(b"\n")

    def row(self, key: Key, raw: bytes, place: Place) -> ReadRow:
        """The row of ``raw``, read whole (its benchmark is its key's, as the scan found it)."""
        path = self.paths[place[0]]
        try:
            record = parse_line(raw, path, 0, True)
        except StoreError:
            record = None
        if record is None or record.get("_meta"):
            raise StoreError(f"{path}: changed while it was merged (no row at byte {place[1]})")
        return read_row(record, key[0])
