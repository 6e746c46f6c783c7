"""The batch journal beside the results file (``RUN.jsonl.batches``): what the run submitted to a
provider's batch API, so that no request is sent twice, whatever stops the run.

One JSON object a line, appended under the results file's append lock (``ResultsWriter.holding``:
only while the path names the file this run owns), flushed and fsynced before the call it
announces is made:

    submit    {"op", "local", "benchmark", "arm", "tag", "at", "ids"}: before a batch is sent
              (``local``: the journal's own name for it; ``at``: epoch seconds; ``ids``: its
              requests' custom ids)
    accepted  {"op", "local", "batch_id"}: the provider accepted it
    found     {"op", "local", "batch_ids"}: a submission whose outcome was unknown, looked up with
              the provider (``BatchAPI.find``); no id: it was never made
    done      {"op", "local", "ids"}: these requests are settled (their rows appended, or sent again
              in a later batch); ``ids`` null: all of them

A batch with requests not yet done is open: a resume waits for it and reads its results instead of
sending those requests again. A last line cut short by a crash is ignored (and cut before the next
append); any other line that is not one of these is refused, naming the file and line.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.store.files import (
    batch_states_path,
    batches_path,
    encode_line,
    write_atomic,
)

MAX_STATES_BYTES = 1 << 22  # what a process last saw of its open batches: a few hundred
MAX_JOURNAL_BYTES = 1 << 30  # 10 million requests' ids; a bigger file is not ours
_FIX = ("restore the journal, or move it aside to forget those batches (their requests are then "
        "sent again, and may be billed twice)")


@dataclass
class Submission:
    """One batch as the journal tells it."""

    local: str
    benchmark: str
    arm: str
    tag: str
    at: float
    ids: tuple[str, ...]
    batch_ids: list[str] | None = None  # None: the provider's answer to the submit is unknown
    done: set[str] = field(default_factory=set)
    all_done: bool = False

    @property
    def open_ids(self) -> frozenset[str]:
        """Its requests not settled yet."""
        return frozenset() if self.all_done else frozenset(self.ids) - self.done


@dataclass
class JournalState:
    """Every submission of the journal, by its local name, in the order submitted."""

    submissions: dict[str, Submission] = field(default_factory=dict)

    def open(self) -> list[Submission]:
        return [s for s in self.submissions.values() if s.open_ids]

    def holding(self) -> dict[str, Submission]:
        """custom id -> the open submission that holds it."""
        return {cid: s for s in self.open() for cid in s.open_ids}


def read_journal(results: str | Path) -> JournalState:
    """The journal of ``results`` (empty when there is none)."""
    path = batches_path(results)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_JOURNAL_BYTES + 1)
    except FileNotFoundError:
        return JournalState()
    except OSError as exc:
        raise StoreError(f"cannot read batch journal {path}: {exc.strerror or exc}") from exc
    if len(data) > MAX_JOURNAL_BYTES:
        raise StoreError(f"{path}: over {MAX_JOURNAL_BYTES} bytes: not a batch journal; {_FIX}")
    state = JournalState()
    lines = data.split(b"\n")
    if lines and lines[-1]:
        lines.pop()  # cut short by a crash: its call was never made (it is written first)
    for number, line in enumerate(lines, 1):
        if line:
            _apply(state, _parse(line, path, number), path, number)
    return state


def _parse(line: bytes, path: Path, number: int) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        record = None
    if not isinstance(record, dict):
        raise StoreError(f"{path}:{number}: not a JSON object of the batch journal; {_FIX}")
    return record


def _apply(state: JournalState, record: Mapping[str, Any], path: Path, number: int) -> None:
    op = record.get("op")
    if op == "submit":
        sub = Submission(_text(record, "local", path, number), _text(record, "benchmark", path,
                         number), _text(record, "arm", path, number),
                         _text(record, "tag", path, number), _time(record, path, number),
                         tuple(_ids(record, path, number) or ()))
        state.submissions[sub.local] = sub
        return
    known = state.submissions.get(_text(record, "local", path, number))
    if known is None:
        raise StoreError(f"{path}:{number}: {op!r} of a batch the journal never submitted; {_FIX}")
    if op == "accepted":
        known.batch_ids = [_text(record, "batch_id", path, number)]
    elif op == "found":
        known.batch_ids = _ids(record, path, number, "batch_ids") or []
    elif op == "done":
        ids = _ids(record, path, number, nullable=True)
        known.all_done = known.all_done or ids is None
        known.done.update(ids or ())
    else:
        raise StoreError(f"{path}:{number}: unknown op {op!r}; known: submit, accepted, found, "
                         f"done; {_FIX}")


def _text(record: Mapping[str, Any], name: str, path: Path, number: int) -> str:
    value = record.get(name)
    if not isinstance(value, str) or not value or len(value) > 256:
        raise StoreError(f"{path}:{number}: {name} must be a non-empty string; {_FIX}")
    return value


def _time(record: Mapping[str, Any], path: Path, number: int) -> float:
    value = record.get("at")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e11:
        raise StoreError(f"{path}:{number}: at must be a time in epoch seconds; {_FIX}")
    return float(value)


def _ids(record: Mapping[str, Any], path: Path, number: int, name: str = "ids",
         nullable: bool = False) -> list[str] | None:
    value = record.get(name)
    if value is None and nullable:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) and 0 < len(v) <= 256
                                               for v in value):
        raise StoreError(f"{path}:{number}: {name} must be a list of ids; {_FIX}")
    return value


class Journal:
    """This process's appends to the journal; ``hold`` is the run's ownership around each one
    (``ResultsWriter.holding``)."""

    def __init__(self, results: str | Path,
                 hold: Callable[[], contextlib.AbstractContextManager[None]] | None = None
                 ) -> None:
        self.path = batches_path(results)
        self._hold = hold

    def submit(self, local: str, benchmark: str, arm: str, tag: str, at: float,
               ids: Sequence[str]) -> None:
        self._append({"op": "submit", "local": local, "benchmark": benchmark, "arm": arm,
                      "tag": tag, "at": round(at, 3), "ids": list(ids)})

    def accepted(self, local: str, batch_id: str) -> None:
        self._append({"op": "accepted", "local": local, "batch_id": batch_id})

    def found(self, local: str, batch_ids: Sequence[str]) -> None:
        self._append({"op": "found", "local": local, "batch_ids": list(batch_ids)})

    def done(self, local: str, ids: Sequence[str] | None) -> None:
        self._append({"op": "done", "local": local, "ids": None if ids is None else list(ids)})

    def _append(self, record: Mapping[str, Any]) -> None:
        line = encode_line(record)
        with self._owned():
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            except OSError as exc:
                raise StoreError(f"cannot open batch journal {self.path}: "
                                 f"{exc.strerror or exc}") from exc
            try:
                _cut_torn(fd)
                if os.write(fd, line) != len(line):
                    raise StoreError(f"batch journal {self.path}: a short write (disk full?)")
                os.fsync(fd)  # durable before the call it announces is made
            except OSError as exc:
                raise StoreError(f"cannot write batch journal {self.path}: "
                                 f"{exc.strerror or exc}") from exc
            finally:
                os.close(fd)

    @contextlib.contextmanager
    def _owned(self) -> Iterator[None]:
        if self._hold is None:
            yield
            return
        with self._hold():
            yield


def _cut_torn(fd: int) -> None:
    """A line a crash cut short is dropped before the next append (it would run into it)."""
    end = size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    while end > 0:  # bounded: a chunk further back each time
        start = max(0, end - (1 << 20))
        newline = os.pread(fd, end - start, start).rfind(b"\n")
        if newline >= 0:
            os.ftruncate(fd, start + newline + 1)
            return
        end = start
    os.ftruncate(fd, 0)


@dataclass(frozen=True)
class BatchState:
    """What a process last saw of one open batch (for the progress line, page and summary)."""

    batch_id: str
    benchmark: str
    arm: str
    state: str  # providers.batch.STATES
    done: int
    total: int
    since: float  # when it was submitted (epoch seconds)

    def line(self, now: float) -> str:
        """``batch_1 (demo/gpt): in progress 120/1000, ETA 3m10s``."""
        word = self.state.replace("_", " ")
        counted = f" {self.done}/{self.total}" if self.state == "in_progress" else ""
        eta = ""
        elapsed = now - self.since
        if 0 < self.done < self.total and elapsed > 0:
            left = int((self.total - self.done) * elapsed / self.done)
            eta = f", ETA {left // 3600}h{left % 3600 // 60:02d}m" if left >= 3600 else (
                f", ETA {left // 60}m{left % 60:02d}s")
        return f"{self.batch_id} ({self.benchmark}/{self.arm}): {word}{counted}{eta}"


def write_states(results: str | Path, worker: str, states: Sequence[BatchState]) -> None:
    """Replace what process ``worker`` saw of its open batches (none: all collected)."""
    data = json.dumps([_as_json(s) for s in states], ensure_ascii=True).encode("ascii")
    write_atomic(batch_states_path(results, worker), data)


def _as_json(state: BatchState) -> dict[str, Any]:
    return {"batch_id": state.batch_id, "benchmark": state.benchmark, "arm": state.arm,
            "state": state.state, "done": state.done, "total": state.total, "since": state.since}


def read_states(results: str | Path) -> list[BatchState]:
    """What every process of the run last saw of its open batches. A display's input: a file that
    is not what ``write_states`` writes is skipped, never an error."""
    found: list[BatchState] = []
    prefix = batch_states_path(Path(results).name, "").name[: -len(".json")]
    try:
        names = sorted(n for n in os.listdir(Path(results).parent)
                       if n.startswith(prefix) and n.endswith(".json"))[:1024]
    except OSError:
        return found
    for path in (Path(results).parent / n for n in names):
        try:
            with open(path, "rb") as f:
                records = json.loads(f.read(MAX_STATES_BYTES))
            found += [_state(r) for r in records]
        except (OSError, ValueError, TypeError, KeyError, RecursionError):
            continue
    return found


def _state(r: Mapping[str, Any]) -> BatchState:
    state = BatchState(str(r["batch_id"]), str(r["benchmark"]), str(r["arm"]), str(r["state"]),
                       int(r["done"]), int(r["total"]), float(r["since"]))
    if not 0 <= state.done <= state.total or state.since != state.since:
        raise ValueError("not a batch's state")
    return state
