"""Writing the results file: locked appends, torn-tail repair, and whole-file writes.

Every process appends through ``ResultsWriter``: under the lock on ``PATH.lock`` it first checks
that the file ends in a newline (a process killed mid-write leaves a torn line) unless the file
is still exactly as its own last append left it, cuts a torn tail off into ``PATH.torn`` so it is
never merged with the next row, then writes the whole line with one ``write`` call. ``fsync`` is
``always`` (after every row: survives power loss), ``end`` (once when the process finishes: the
default; a killed process loses nothing already written, the OS keeps it) or ``never``.

Every append also checks that the path still names the file this writer has open, and that it is
the file the run's owner locked (``identity``, handed over by the controller): a results file
removed or replaced under a live run (``rm``, ``mv``, an editor's save) stops the run with a store
error rather than sending its rows into a deleted inode or into another run's new file.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from filelock import FileLock

from pytest_echo_bench.errors import AbortedError, StoreError
from pytest_echo_bench.store.files import encode_line, lock_path, torn_path, write_atomic
from pytest_echo_bench.store.reader import parse_line
from pytest_echo_bench.store.records import Meta

try:
    import fcntl
except ImportError:  # not POSIX: filelock's own lock on every append
    fcntl = None  # type: ignore[assignment]

def lock_for(path: Path) -> FileLock:
    return FileLock(str(lock_path(path)))


class AppendLock:
    """The writer's hold on ``PATH.lock``: the ``flock`` that filelock
    takes, on a descriptor kept open.

    ``FileLock`` opens, locks, unlocks and closes the file on every acquire (about 0.2 ms, as much
    as pytest spends on a whole trivial test); a sweep appends once per item. Both lock the same
    file, so they exclude each other (resume's ``repair`` uses ``FileLock``).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None
        self._threads = threading.Lock()  # flock does not exclude threads sharing one descriptor
        self._closed = False

    def __enter__(self) -> None:
        self._threads.acquire()
        try:
            if self._closed:  # a late caller must not reopen (and leak) the lock file
                raise AbortedError("the run ended while this call was in flight; not recorded")
            while True:
                if self._fd is None:
                    self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
                fcntl.flock(self._fd, fcntl.LOCK_EX)
                if os.fstat(self._fd).st_nlink:
                    return
                # The lock file was removed while we waited (the controller removes it at the end
                # of a run): a lock on the orphan excludes no one, so lock the file now at the path.
                os.close(self._fd)
                self._fd = None
        except BaseException:
            self._threads.release()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            if self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._threads.release()

    def close(self) -> None:
        with self._threads:
            self._closed = True
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


class ReplacedError(StoreError):
    """The results file was removed or replaced while this run was appending to it."""


class ResultsWriter:
    """Appends rows; the first append to a new or empty file writes the meta line before it.

    ``identity`` is the (device, inode) of the file the run's owner locked: this writer appends to
    that file only, whatever the path names by the time it first opens it.
    """

    def __init__(self, path: Path, fsync: str = "end", meta: dict[str, Any] | None = None,
                 identity: Sequence[int] | None = None) -> None:
        self.path = path
        self._identity = tuple(identity) if identity else None
        self.fsync = fsync
        self._meta = encode_line(meta) if meta else b""
        self._lock: AbstractContextManager[Any] = (
            AppendLock(str(lock_path(path))) if fcntl else lock_for(path)
        )
        self._closed = False
        self._state = threading.Lock()  # append vs close, between this process's threads
        self._fd: int | None = None
        self._end: int | None = None  # the file's size right after our last append

    def _open(self) -> int:
        if self._fd is None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            except OSError as exc:
                raise StoreError(
                    f"cannot open results file {self.path}: {exc.strerror or exc}"
                ) from exc
            st = os.fstat(fd)
            if self._identity is not None and (st.st_dev, st.st_ino) != self._identity:
                os.close(fd)  # another file at the path: the owner's was removed or replaced
                raise self._replaced("replaced")
            self._identity, self._fd = (st.st_dev, st.st_ino), fd
        return self._fd

    def _check_same(self, here: os.stat_result) -> None:
        """The path still names our file: a stat per append (about 1 us) for never appending into
        a removed file (rows lost, the run reporting success) or beside another run's rows."""
        try:
            there = os.stat(self.path)
        except FileNotFoundError:
            raise self._replaced("removed") from None
        except OSError as exc:
            raise StoreError(
                f"cannot check results file {self.path}: {exc.strerror or exc}"
            ) from exc
        if (there.st_dev, there.st_ino) != (here.st_dev, here.st_ino):
            raise self._replaced("replaced")

    def _replaced(self, how: str) -> ReplacedError:
        return ReplacedError(
            f"{self.path} was {how} while this run was appending to it; this run stops "
            "rather than lose "
            "its rows in a removed file or append them beside another run's"
        )

    def start(self) -> None:
        """Write the meta line now if the file is new or empty: the
        file exists from the run's start."""
        with self._state, self._locked():
            if self._closed:
                raise AbortedError("the run ended before it started")
            fd = self._open()
            here = os.fstat(fd)
            self._check_same(here)
            if self._meta and here.st_size == 0:
                self._end = self._write(fd, self._meta, 0)

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """The append lock held, the path still naming this run's file: what is written under it
        (the batch journal) is written under the run's ownership, never beside another run's."""
        with self._state, self._locked():
            if self._closed:
                raise AbortedError("the run has ended; nothing more is written for it")
            self._check_same(os.fstat(self._open()))
            yield

    def append(self, line: bytes) -> None:
        """Append one complete line; raise StoreError (file intact) if the disk refuses it."""
        # ``_state`` orders appends against close(): the append lock already serialises this
        # process's appends, so it costs no concurrency.
        with self._state, self._locked():
            if self._closed:  # a call landing after the run ended: the file must not be reopened
                raise AbortedError("the run ended while this call was in flight; not recorded")
            fd = self._open()
            here = os.fstat(fd)
            self._check_same(here)
            size = here.st_size
            if self._end is not None and size < self._end:
                # Appends only grow the file and a repair only cuts a torn line after our newline:
                # a file shorter than our last row was truncated or replaced under the run.
                raise StoreError(
                    f"{self.path} shrank from {self._end} to {size} bytes while this run was "
                    "appending to it (truncated or replaced?); stopping so no row is lost"
                )
            if size != self._end:
                # Someone else appended (or cut a torn tail) since our last row, or this
                # is our first: their last line may be torn. When the size is still ours,
                # the file ends with our own newline: appends only grow it, and a repair
                # only cuts what follows a newline.
                repair_torn_tail(fd, self.path)
                size = os.fstat(fd).st_size
            self._end = None  # unknown until this append has succeeded
            if self._meta and size == 0:
                size = self._write(fd, self._meta, size)
            size = self._write(fd, line, size)
            if self.fsync == "always":
                os.fsync(fd)
            self._end = size

    def _write(self, fd: int, line: bytes, size: int) -> int:
        """Write ``line`` at the end (``size`` bytes), in one call unless the
        disk is filling; the new size."""
        error: OSError | None = None
        written = 0
        try:
            # A short write is how a filling disk first shows: write the rest (we hold the lock),
            # so the line completes or the next write names the cause ("No space left on device").
            while written < len(line) and (n := os.write(fd, line[written:])) > 0:
                written += n
        except OSError as exc:
            error = exc
        if written != len(line):
            os.ftruncate(fd, size)  # never leave half a row behind (e.g. disk full)
            reason = error.strerror if error else f"short write ({written} of {len(line)} bytes)"
            raise StoreError(
                f"cannot append to {self.path}: {reason}; rows written so far are intact"
            )
        return size + written

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The append lock; failing to create its file is failing to open the results file."""
        try:
            self._lock.__enter__()
        except AbortedError:
            raise
        except OSError as exc:
            raise StoreError(
                f"cannot open results file {self.path}: {exc.strerror or exc}"
            ) from exc
        try:
            yield
        finally:
            self._lock.__exit__(None, None, None)

    def close(self) -> None:
        """Close for good; an append in flight in another thread finishes
        first, a later one is refused."""
        with self._state:
            self._shut()
        if isinstance(self._lock, AppendLock):
            self._lock.close()

    def _shut(self) -> None:
        self._closed = True
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                if self.fsync != "never":
                    os.fsync(fd)
            finally:
                os.close(fd)


def repair_torn_tail(fd: int, path: Path) -> int:
    """If the file does not end in a newline, move the torn tail to PATH.torn; return bytes cut."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return 0
    start = _last_newline(fd, size) + 1
    torn = os.pread(fd, size - start, start)
    if parse_line(torn, path, 0, strict=False) is not None:
        # A whole row killed just before its newline: keep it. The newline goes at the end by
        # offset, as resume's repair opens the file without O_APPEND.
        os.pwrite(fd, b"\n", size)
        return 0
    with open(torn_path(path), "ab") as keep:  # kept for inspection, never merged into a row
        keep.write(torn + b"\n")
    os.ftruncate(fd, start)
    return size - start


def _last_newline(fd: int, size: int) -> int:
    pos, chunk = size, 1 << 16
    while pos > 0:
        begin = max(0, pos - chunk)
        found = os.pread(fd, pos - begin, begin).rfind(b"\n")
        if found >= 0:
            return begin + found
        pos = begin
    return -1


def repair(path: Path) -> int:
    """Repair a torn tail under the lock (used by resume before anyone appends)."""
    try:
        with lock_for(path):
            fd = os.open(path, os.O_RDWR)
            try:
                return repair_torn_tail(fd, path)
            finally:
                os.close(fd)
    except OSError as exc:  # e.g. a read-only directory: the lock file cannot be created
        if isinstance(exc, StoreError):
            raise
        raise StoreError(
            f"cannot open {exc.filename or path} for appending: {exc.strerror or exc}"
        ) from exc


def write_whole(out: Path, meta: Meta | None, lines: Iterable[bytes]) -> None:
    """Write a complete results file atomically (merge, regrade): it appears whole or not at all.
    The lines are written as they come: a merge of a million rows reads each from its file then."""
    try:
        write_atomic(
            out,
            itertools.chain([encode_line(meta.to_json()) if meta is not None else b""], lines),
            durable=True,
        )
    # a line could not be read again (its file changed): that message, nothing written
    except StoreError:
        raise
    except OSError as exc:
        raise StoreError(f"cannot write {out}: {exc.strerror}") from exc
