"""Ownership of a results file: one run at a time appends to it.

The run's controller holds two exclusive ``flock`` locks from before it reads or repairs the file
until the run ends: one on ``RUN.jsonl.owner`` (which also says who the owner is) and one on the
results file itself. The second is the one that cannot be lost: deleting the side files (the usual
reaction to "in use by another run") once let a resume start beside a live run and record 218 keys
twice; ``rm`` of a side file cannot drop a lock on the results file's inode, so that resume is now
refused. The owner creates the results file to lock it (a new sweep's file exists from its first
moment) and removes it again if the run ends with it still empty. Its workers write under these
locks, they never compete for them; each append checks the path still names the file the owner
locked (``ResultsWriter``). The kernel drops the locks of a process that dies, however it dies, so a
stale owner never blocks: a resume after a SIGKILL just works.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.store.files import owner_path

try:
    import fcntl
except ImportError:  # not POSIX: no ownership check (the append lock still keeps rows whole)
    fcntl = None  # type: ignore[assignment]

# Opening never blocks (a FIFO put where the results file was) and never takes a terminal.
_OPEN = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)


class OwnedError(StoreError):
    """The results file belongs to another run that is still going."""


class Ownership:
    """The controller's hold on a results file; ``release`` (or the process ending) gives it up."""

    def __init__(self, results: str | Path, rewrite: str = "") -> None:
        self.results = Path(results)
        # a command that writes the file whole (``held``): named in the refusal
        self.rewrite = rewrite
        self.path = owner_path(results)
        self._fd: int | None = None  # the lock on the owner file
        self._file: int | None = None  # the lock on the results file
        # this run created the results file (removed at the end if still empty)
        self._created = False

    @property
    def identity(self) -> list[int] | None:
        """(device, inode) of the results file this run locked; workers append only to that file."""
        if self._file is None:
            return None
        st = os.fstat(self._file)
        return [st.st_dev, st.st_ino]

    def acquire(self) -> None:
        """Take the file, or raise OwnedError naming the run that has it."""
        if fcntl is None or self._fd is not None:
            return
        if not self._lock_owner_file():
            return
        try:
            self._lock_results()
        except BaseException:
            # the side file this attempt created is removed: the live owner is unaffected
            self.release()
            raise
        self._describe()

    def _lock_owner_file(self) -> bool:
        """Lock ``RUN.jsonl.owner``; False when the directory cannot hold
        it (nothing can append there)."""
        for _ in range(10):  # the owner may remove the file between our open and our lock: retry
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
            except OSError:
                # A directory nobody can write to: no other run can append here either, and this
                # run's first append reports the cause as a store error (a resumable stop).
                return False
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise OwnedError(self._refusal()) from None
            if os.fstat(fd).st_nlink:  # still the file at the path, not one its owner just removed
                self._fd = fd
                return True
            os.close(fd)
        raise OwnedError(f"cannot take {self.path}: it keeps being replaced")

    def _lock_results(self) -> None:
        """Lock the results file's inode, creating the file when it is new."""
        for _ in range(10):
            fd, created = _open_results(self.results)
            if fd is None:
                return  # unreadable or uncreatable: the run's first append reports why
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise OwnedError(self._refusal(holder)) from None
            if _same_file(fd, self.results):
                self._file, self._created = fd, created
                return
            os.close(fd)  # replaced between our open and our lock: lock the file now at the path
        raise OwnedError(f"cannot take {self.results}: it keeps being replaced")

    def _describe(self) -> None:
        """Who owns the file, for the refusal a second run prints (best effort)."""
        if self._fd is None:
            return
        me = {"pid": os.getpid(), "host": socket.gethostname(), "argv": sys.argv,
              "since": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")}
        data = (json.dumps(me) + "\n").encode("utf-8", "replace")
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, data, 0)
        except OSError:
            pass  # a full disk: the lock still holds, only the description is missing

    def _refusal(self, holder: int | None = None) -> str:
        owner = _read_owner(self.path) if holder is None else {}
        if owner:
            who = f"pid {owner.get('pid')} on {owner.get('host')} since {owner.get('since')}"
        elif holder is not None:
            who = (
                f"pid {holder}, which holds the lock on the results file itself; "
                f"{self.path.name} was removed"
            )
        else:
            who = "another process"
        results = str(self.results)
        if self.rewrite:
            return (
                f"{results} is in use by a run ({who}): written whole now, it would lose the "
                "rows that run "
                f"appends meanwhile. Wait for it to finish or stop it, then {self.rewrite} "
                "again, or write to "
                "another file"
            )
        return (
            f"{results} is in use by another run ({who}); two runs on one file would record "
            "items twice. "
            "Wait for it to finish or stop it, then resume with: pytest --bench-resume " + results
        )

    def release(self) -> None:
        """Remove the owner file (and a results file this run created and left
        empty), then unlock; idempotent."""
        fd, self._fd = self._fd, None
        file, self._file = self._file, None
        if file is not None:
            with contextlib.suppress(OSError):
                if self._created and os.fstat(file).st_size == 0 and _same_file(file, self.results):
                    self.results.unlink()  # a run that recorded nothing leaves no file behind
            os.close(file)
        if fd is None:
            return
        with contextlib.suppress(OSError):
            # never another run's owner file, put there after ours was removed
            if _same_file(fd, self.path):
                self.path.unlink()  # before unlocking: a waiter then sees a removed file
        os.close(fd)

    def close(self) -> None:
        """The plugin-manager name of release: unconfigure closes what configure registered."""
        self.release()


@contextlib.contextmanager
def held(results: Path, command: str) -> Iterator[None]:
    """Own ``results`` while ``command`` (``echo-bench merge``, ``regrade``) writes it whole:
    refused with OwnedError while a run owns it, and no run can start on it meanwhile.

    ``merge RUN -o RUN`` beside the live run of RUN read its rows, then moved the merged file into
    place over the rows the run had appended since (3 rows lost). Held, an output that is one of
    the inputs is safe: nothing appends to it between the read and the move.
    """
    ownership = Ownership(results, rewrite=f"run {command}")
    ownership.acquire()
    try:
        yield
    finally:
        ownership.release()


def _open_results(path: Path) -> tuple[int | None, bool]:
    """A descriptor on the results file to lock, and whether this call created it."""
    try:
        return os.open(
            path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644
        ), True
    except FileExistsError:
        pass
    except OSError:
        return None, False
    try:
        fd = os.open(path, _OPEN)
    except OSError:
        return None, False
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)  # the options refuse such a path; never lock (or later unlink) a device
        return None, False
    return fd, False


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd`` (not removed, not replaced)."""
    try:
        here, there = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino) and here.st_nlink > 0


def _holder(fd: int) -> int | None:
    """The pid holding a flock on ``fd``'s file, from /proc/locks (Linux; None elsewhere)."""
    st = os.fstat(fd)
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as locks:
            for line in locks:
                fields = line.split()
                if (
                    len(fields) > 5
                    and fields[1] == "FLOCK"
                    and fields[5] == want
                    and fields[4].isdigit()
                ):
                    return int(fields[4])
    except OSError:
        pass
    return None


def _read_owner(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
