"""A server started once per pytest session and shared by all its xdist workers.

The LiteLLM proxy takes 8-40 s and a whole core to start; started per worker, ``pytest -n 2``
paid for it twice. Here the first process of the session that needs the server starts it, under
a file lock in the session's directory (the controller's basetemp: the parent of every worker's),
and writes its state there: its pid, what its users need (an address, a log), and who uses it.
The others find it there and join. Each user leaves on its way out; the last one (users that died
without leaving do not count) stops the server, whichever process started it.

``made_once`` is the same for files: what the first process makes (under the lock), the others
read, as Inspect's eval logs that take a run of Inspect to write.

Processes are named by pid *and* start time (``/proc/PID/stat``), so a reused pid is never taken
for the server or for a live user. Linux only, as the suite already is.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock
from processes import stop

STOP_GRACE_S = 10.0  # SIGTERM, then SIGKILL: as processes.stop does for a child


@dataclass(frozen=True)
class Started:
    """What a ``start`` function returns: the running, ready server and
    what its users need to reach it."""

    proc: subprocess.Popen[bytes]
    info: dict[str, Any]


# servers this process started: it must reap them itself
_children: dict[int, subprocess.Popen[bytes]] = {}


def session_dir(config: pytest.Config, factory: pytest.TempPathFactory) -> Path:
    """The directory every process of this session shares: a worker's basetemp
    is ``<controller's>/popen-gwN``.

    A worker is told by its ``workerinput``, not by ``PYTEST_XDIST_WORKER``: a pytest a test of a
    worker starts inherits that variable, and would take its own parent for the session's."""
    base = factory.getbasetemp()
    return base.parent if hasattr(config, "workerinput") else base


def identity(pid: int) -> list[int] | None:
    """``[pid, start time]`` of a live process; None once it is gone (a
    zombie is gone: it serves nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat.rsplit(")", 1)[1].split()  # the name, in parentheses, may hold spaces
    return None if fields[0] in ("Z", "X") else [pid, int(fields[19])]


def alive(ident: list[int]) -> bool:
    return identity(ident[0]) == ident


@contextlib.contextmanager
def shared(
    directory: Path, name: str, start: Callable[[Path], Started], timeout_s: float
) -> Iterator[dict[str, Any]]:
    """The info of the session's server ``name``, started by
    ``start(workdir)`` if no live one is recorded."""
    # waits out another user's start
    lock = FileLock(str(directory / f"{name}.lock"), timeout=timeout_s)
    with lock:
        state = _join(directory, name, start)
    try:
        yield state["info"]
    finally:
        with lock:
            _leave(directory / f"{name}.json")


def made_once(directory: Path, name: str, make: Callable[[Path], None], timeout_s: float) -> Path:
    """``directory/name``, made by ``make(path)`` in the first process of the
    session that asks, under the lock."""
    path, done = directory / name, directory / f"{name}.done"
    with FileLock(str(directory / f"{name}.lock"), timeout=timeout_s):
        if not done.exists():  # else another process made it whole: ``done`` is written last
            shutil.rmtree(path, ignore_errors=True)  # what a make that failed left
            path.mkdir()
            make(path)
            done.touch()
    return path


def _join(directory: Path, name: str, start: Callable[[Path], Started]) -> dict[str, Any]:
    path = directory / f"{name}.json"
    state = _read(path)
    if state is None or not alive(state["server"]):
        work = directory / name
        work.mkdir(exist_ok=True)
        started = start(work)
        _children[started.proc.pid] = started.proc
        server = identity(started.proc.pid)
        if server is None:
            stop(started.proc)
            pytest.fail(f"the shared server {name!r} exited as soon as it was ready", pytrace=False)
        state = {"server": server, "info": started.info, "users": []}
    me = identity(os.getpid())
    assert me is not None
    state["users"] = [u for u in state["users"] if alive(u)] + [me]
    _write(path, state)
    return state


def _leave(path: Path) -> None:
    state = _read(path)
    if state is None:
        return
    me = identity(os.getpid())
    state["users"] = [u for u in state["users"] if u != me and alive(u)]
    if state["users"]:
        _write(path, state)
        return
    _stop(state["server"])
    path.unlink()


def _stop(server: list[int]) -> None:
    """Stop the server: through its ``Popen`` if this process started it,
    else by pid (it was re-parented)."""
    child = _children.pop(server[0], None)
    if child is not None:
        stop(child, grace=STOP_GRACE_S)
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not alive(server):
            return
        os.kill(server[0], sig)
        deadline = time.monotonic() + STOP_GRACE_S
        while alive(server) and time.monotonic() < deadline:
            time.sleep(0.05)


def _read(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    state: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return state


def _write(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state), encoding="utf-8")
    tmp.replace(path)  # a reader under the lock sees the old state or the new, never half
