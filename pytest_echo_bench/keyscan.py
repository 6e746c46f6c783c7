"""The fast read of a results file: a few fields of every row, decoded by msgspec chunk by chunk.

Resume reads every recorded key on the controller (and on every worker, up to the controller's
offset), and the end-of-run table counts every row at the start and at the end of a run.
``json.loads`` of each line costs about 6 s for a million rows because it builds every field of
every row. msgspec decodes each line straight into a small Struct of the fields a reader needs,
still validating the rest of the line as JSON, several times faster.

A chunk of lines takes the fast path only when it is pure ASCII (our writer's lines always are;
msgspec and Python disagree on some invalid UTF-8), holds no ``"_meta"`` field and msgspec reads
every line of it into the Struct. Anything else (a number for an id, NaN, a blank line, a second
meta line, garbage) sends that chunk to the full parser line by line, which keeps ``json.loads``'s
semantics and refuses garbage with its line number, so a reader sees exactly what
``store.read_records`` would give (tests/test_fastpaths.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Generic, TypeVar

import msgspec

CHUNK = 1 << 22  # bytes read at a time: large enough to amortise, small enough to stay in cache

Parse = Callable[[bytes, int, bool], "dict[str, Any] | None"]  # (line, line number, strict) -> record
RowT = TypeVar("RowT", bound=msgspec.Struct)
Batch = tuple["list[RowT]", "list[dict[str, Any]]"]  # rows read fast, rows the full parser read


class RowScan(Generic[RowT]):
    """The meta line and, batch by batch, the rows of a results file (its first ``upto`` bytes).

    ``parse`` is the full parser: it returns the record, None for a line to skip, or raises for
    garbage (strict everywhere but on a last line without a newline, which may be torn).
    ``meta`` is set once the first batch has been read. ``start`` is where to begin (the byte
    offset of a line, and its line number): a reader that has already read the file up to there.
    Once done, ``end`` is that of the line after the last whole (newline-terminated) line.
    """

    def __init__(self, path: Path, row_type: type[RowT], parse: Parse, upto: int | None = None,
                 start: tuple[int, int] = (0, 1)) -> None:
        self.path, self.parse, self.upto, self.end = path, parse, upto, start
        self.decode = msgspec.json.Decoder(row_type).decode
        self.meta: dict[str, Any] | None = None

    def batches(self) -> Iterator[Batch[RowT]]:
        with open(self.path, "rb") as f:
            base, lineno = self.end  # where ``data`` (the carried partial line, then the read) begins
            f.seek(base)
            carry, left = b"", None if self.upto is None else self.upto - base
            while left is None or left > 0:
                buf = f.read(CHUNK if left is None else min(CHUNK, left))
                if not buf:
                    break
                left = None if left is None else left - len(buf)
                data = carry + buf if carry else buf
                end = data.rfind(b"\n")
                if end < 0:
                    carry = data
                    continue
                carry = data[end + 1 :]
                yield self._lines(data[:end], lineno)
                lineno += data.count(b"\n", 0, end) + 1
                base += end + 1
                self.end = (base, lineno)
            if carry.strip():  # the last line without a newline: a whole row counts, a torn one not
                yield self._slow([carry], lineno, strict=False)

    def _lines(self, chunk: bytes, first: int) -> Batch[RowT]:
        lines = chunk.split(b"\n")
        if first == 1:  # the meta line, or a first row in a file without one
            head = self._slow(lines[:1], 1)
            fast, slow = self._lines(chunk[len(lines[0]) + 1 :], 2) if len(lines) > 1 else ([], [])
            return fast, head[1] + slow
        if chunk.isascii() and b'"_meta"' not in chunk:
            try:
                return list(map(self.decode, lines)), []
            except (msgspec.DecodeError, RecursionError):
                pass
        return self._slow(lines, first)

    def _slow(self, lines: list[bytes], first: int, strict: bool = True) -> Batch[RowT]:
        rows: list[dict[str, Any]] = []
        for n, raw in enumerate(lines, first):
            if not raw.strip():
                continue
            record = self.parse(raw, n, strict)
            if record is None:
                continue
            if record.get("_meta"):  # only line 1 is the meta line; another is skipped, not a row
                self.meta = record if n == 1 else self.meta
            else:
                rows.append(record)
        return [], rows
