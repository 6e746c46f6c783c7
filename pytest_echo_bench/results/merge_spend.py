"""What a merge keeps of the rows it drops: their calls and what those cost, in the merged meta
line (``results.spent``), so that the merged file reports the spend of its parts.

A merge keeps each key's newest row; a retried error's first row was paid for all the same. The
rows dropped now are read again (a few: the rows a resume replaced), and the records of earlier
merges are carried on; a record whose calls the kept row of its key names too (a file merged with
itself, or with one of its parts) is left out, as is a second record of the same calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any, BinaryIO

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
    rows += [replaced_of(row) for row in _rows(paths, [d for scan in scans for d in scan[5]])]
    rows = _uncovered(rows, paths, kept)
    extra = {k: v for k, v in meta.extra.items() if k != spent.FIELD}
    if rows or sums:
        extra[spent.FIELD] = spent.record(rows, sums)
    return replace(meta, extra=extra)


def _uncovered(rows: list[Replaced], paths: Sequence[Path],
               kept: dict[Key, Place]) -> list[Replaced]:
    """``rows`` without those whose calls the kept row of their key names, or an earlier record
    names the same (a row naming no call is kept: it is counted as it comes)."""
    keys = {row.key for row in rows if row.call is not None}
    named = dict(zip(keys, map(calls_of, _rows(paths, [(k, kept[k]) for k in keys])),
                     strict=True))
    found: list[Replaced] = []
    for row in rows:
        ids = row.ids()
        if ids and ids <= named[row.key]:
            continue
        named.setdefault(row.key, set()).update(ids)
        found.append(row)
    return found


def _rows(paths: Sequence[Path], places: Iterable[tuple[Key, Place]]) -> Iterable[ReadRow]:
    """The row at each place, read whole (its benchmark is its key's, as the scan found it)."""
    with ExitStack() as stack:
        files: dict[int, BinaryIO] = {}
        for key, (index, offset, _, _) in places:
            f = files.get(index)
            if f is None:
                f = files[index] = stack.enter_context(open(paths[index], "rb"))
            f.seek(offset)
            yield read_row(_parsed(f.readline(), paths[index], offset), key[0])


def _parsed(raw: bytes, path: Path, offset: int) -> dict[str, Any]:
    try:
        record = parse_line(raw.rstrip(b"\n"), path, 0, True)
    except StoreError:
        record = None
    if record is None or record.get("_meta"):
        raise StoreError(f"{path}: changed while it was merged (no row at byte {offset})")
    return record
