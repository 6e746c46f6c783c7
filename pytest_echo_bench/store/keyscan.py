"""The fast read of a results file: a few fields of every row, decoded by msgspec chunk by chunk.

Resume reads every recorded key on the controller (and on every worker, up to the controller's
offset), and the end-of-run table counts every row at the start and at the end of a run.
``json.loads`` of each line costs about 6 s for a million rows because it builds every field of
every row. msgspec decodes each line straight into a small Struct of the fields a reader needs,
still validating the rest of the line as JSON, several times faster.

A chunk of lines takes the fast path only when it is pure ASCII (our writer's lines always are;
msgspec and Python disagree on some invalid UTF-8) and msgspec reads every line of it into the
Struct, none of them a meta line. Anything else (NaN, an epoch of 0, a blank line, a second
meta line, garbage) sends that chunk to the full parser line by line, which keeps ``json.loads``'s
semantics and refuses garbage with its line number, so a reader sees exactly what
``store.read_records`` would give (tests/store/test_fastpaths.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Generic, TypeVar

import msgspec

from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.store.metalines import NO_HEAD, check_later_meta
from pytest_echo_bench.store.paths import open_results

CHUNK = 1 << 20  # bytes read at a time: amortises the per-chunk work, small enough to stay in cache

# (line, line number, strict) -> record
Parse = Callable[[bytes, int, bool], "dict[str, Any] | None"]


class ScanRow(msgspec.Struct, gc=False):
    """The fields every reader needs: a row's key, and whether the line is a meta line instead.

    A reader adds the fields it uses (``store.rows.view``); the others are validated, never built.
    """

    task_id: str
    arm: str
    benchmark: str | None = None
    # Absent when the spec has no epochs (K = 1): epoch 1. An epoch under 1 is not a row's key
    # (``store.checks``): it fails here and the full parser refuses it.
    epoch: Annotated[int, msgspec.Meta(ge=1)] | None = None
    meta: bool = msgspec.field(default=False, name="_meta")


RowT = TypeVar("RowT", bound=ScanRow)
Batch = tuple["list[RowT]", "list[dict[str, Any]]"]  # rows read fast, rows the full parser read


class RowScan(Generic[RowT]):
    """The meta line and, batch by batch, the rows of a results file (its first ``upto`` bytes).

    ``parse`` is the full parser: it returns the record, None for a line to skip, or raises for
    garbage (strict everywhere but on a last line without a newline, which may be torn).
    ``meta`` is set once the first batch has been read. ``start`` is where to begin (the byte
    offset of a line, and its line number): a reader that has already read the file up to there.
    Once done, ``end`` is that of the line after the last whole (newline-terminated) line.
    While a batch is read, ``lines`` holds the lines it was read from, the first at ``end``: a
    reader that keeps where each row is (merge) takes their lengths.

    A meta line of another sweep after line 1 raises a StoreError naming it, whatever ``parse``
    skips (``store.metalines``): the rows after it are not the sweep's. The rows before it are
    yielded first, and ``end`` is left at its start, so a best-effort reader (the end-of-run
    table, a live page) that goes on counts exactly the rows before it, once. A scan that starts
    after line 1 checks it against ``head`` (line 1's meta line as read before,
    ``metalines.NO_HEAD`` if line 1 is a row), and not at all without one.
    """

    def __init__(self, path: Path, row_type: type[RowT], parse: Parse, upto: int | None = None,
                 start: tuple[int, int] = (0, 1), head: Mapping[str, Any] | None = None) -> None:
        self.path, self.parse, self.upto, self.end = path, parse, upto, start
        self.decode = msgspec.json.Decoder(row_type).decode
        self.meta: dict[str, Any] | None = None
        self.lines: list[bytes] = []
        self.head = NO_HEAD if start[1] == 1 else head
        # another sweep's meta line: its number, the refusal
        self.refused: tuple[int, StoreError] | None = None

    def batches(self) -> Iterator[Batch[RowT]]:
        self.refused = None  # a scan kept between reads finds that line again, where it stopped
        with open_results(self.path) as f:
            base, lineno = self.end  # where the next whole line begins
            f.seek(base)
            # The pieces of the line after the last newline, joined once that line ends: joining
            # them on every read made a 400 MB line cost 100 s (quadratic in its length).
            pending: list[bytes] = []
            left = None if self.upto is None else self.upto - base
            while left is None or left > 0:
                buf = f.read(CHUNK if left is None else min(CHUNK, left))
                if not buf:
                    break
                left = None if left is None else left - len(buf)
                cut = buf.rfind(b"\n")
                if cut < 0:
                    pending.append(buf)
                    continue
                data = b"".join([*pending, buf[:cut]]) if pending else buf[:cut]
                pending = [buf[cut + 1:]] if cut + 1 < len(buf) else []
                lines = self.lines = data.split(b"\n")  # whole lines, each ending in a newline
                yield self._lines(lines, lineno, data.isascii())
                # the rows before it were yielded: stop at that line, for good
                if self.refused is not None:
                    self.end = (
                        base + sum(len(line) + 1 for line in lines[: self.refused[0] - lineno]),
                        self.refused[0],
                    )
                    raise self.refused[1]
                lineno += len(lines)
                base += len(data) + 1
                self.end = (base, lineno)
            tail = b"".join(pending)
            if tail.strip():  # the last line without a newline: a whole row counts, a torn one not
                self.lines = [tail]
                yield self._slow([tail], lineno, strict=False)
                if self.refused is not None:
                    raise self.refused[1]

    def _lines(self, lines: list[bytes], first: int, ascii: bool) -> Batch[RowT]:
        if first == 1:  # the meta line, or a first row in a file without one
            head = self._slow(lines[:1], 1)
            fast, slow = self._lines(lines[1:], 2, ascii) if len(lines) > 1 else ([], [])
            return fast, head[1] + slow
        if not ascii:  # Python's own UTF-8 decoding decides what such a line holds
            return self._slow(lines, first)
        try:
            rows = list(map(self.decode, lines))
        except (msgspec.DecodeError, RecursionError):
            return self._slow(lines, first)
        # a meta line after the first is not a row: the full parser checks it
        if any([r.meta for r in rows]):
            return self._slow(lines, first)
        return rows, []

    def _slow(self, lines: list[bytes], first: int, strict: bool = True) -> Batch[RowT]:
        rows: list[dict[str, Any]] = []
        for n, raw in enumerate(lines, first):
            if not raw.strip():
                continue
            record = self.parse(raw, n, strict)
            if record is None:
                continue
            if n == 1:
                self.head = record if record.get("_meta") else NO_HEAD
            # only line 1 is the meta line; a later one is an end line or a copy
            if record.get("_meta"):
                self.meta = record if n == 1 else self.meta
                try:
                    if self.head is not None:
                        check_later_meta(self.head, record, self.path, n)
                except StoreError as exc:
                    # raised once the rows before it are yielded (``batches``)
                    self.refused = (n, exc)
                    break
            else:
                rows.append(record)
        return [], rows
