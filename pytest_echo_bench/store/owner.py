"""Ownership of a results file: one run at a time appends to it.

The run's controller holds an exclusive ``flock`` on ``RUN.jsonl.owner`` from before it reads or
repairs the file until the run ends; its workers write under it, they never compete for it. A
second run (or resume) of the same file is refused at once, naming the owner. The kernel drops
the lock of a process that dies, however it dies, so a stale owner never blocks: a resume after
a SIGKILL just works.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.store.files import owner_path

try:
    import fcntl
except ImportError:  # not POSIX: no ownership check (the append lock still keeps rows whole)
    fcntl = None  # type: ignore[assignment]


class OwnedError(StoreError):
    """The results file belongs to another run that is still going."""


class Ownership:
    """The controller's hold on a results file; ``release`` (or the process ending) gives it up."""

    def __init__(self, results: str | Path) -> None:
        self.path = owner_path(results)
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the file, or raise OwnedError naming the run that has it."""
        if fcntl is None or self._fd is not None:
            return
        for _ in range(10):  # the owner may remove the file between our open and our lock: retry
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError:
                # A directory nobody can write to: no other run can append here either, and this
                # run's first append reports the cause as a store error (a resumable stop).
                return
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise OwnedError(self._refusal()) from None
            if os.fstat(fd).st_nlink:  # still the file at the path, not one its owner just removed
                self._fd = fd
                self._describe()
                return
            os.close(fd)
        raise OwnedError(f"cannot take {self.path}: it keeps being replaced")

    def _describe(self) -> None:
        """Who owns the file, for the refusal a second run prints (best effort)."""
        assert self._fd is not None
        me = {"pid": os.getpid(), "host": socket.gethostname(), "argv": sys.argv,
              "since": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")}
        data = (json.dumps(me) + "\n").encode("utf-8", "replace")
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, data, 0)
        except OSError:
            pass  # a full disk: the lock still holds, only the description is missing

    def _refusal(self) -> str:
        owner = _read_owner(self.path)
        who = (f"pid {owner.get('pid')} on {owner.get('host')} since {owner.get('since')}"
               if owner else "another process")
        results = str(self.path)[: -len(".owner")]
        return (f"{results} is in use by another run ({who}); two runs on one file would record items twice. "
                "Wait for it to finish or stop it, then resume with: pytest --bench-resume " + results)

    def release(self) -> None:
        """Remove the owner file, then let go of the lock; idempotent."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)  # before unlocking: a waiter then sees a removed file
        os.close(fd)

    def close(self) -> None:
        """The plugin-manager name of release: unconfigure closes what configure registered."""
        self.release()


def _read_owner(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
