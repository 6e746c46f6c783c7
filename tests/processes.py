"""Real pytest processes, as a user starts them: started in a session of their own (so a signal
can reach the whole group), finished with a bound, and waited on by polling what they write."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]


def start(cwd: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*PYTEST, *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str]:
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        raise
    return proc.returncode, output


def run(cwd: Path, *args: str) -> tuple[int, str]:
    return finish(start(cwd, *args))


def wait_for(check: Callable[[], bool], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.02)


def rows_in(path: Path) -> int:
    return max(0, path.read_bytes().count(b"\n") - 1) if path.exists() else 0  # less the meta line


def stop(proc: subprocess.Popen[Any], grace: float = 10) -> None:
    """End a server or daemon started by a test: SIGTERM, then SIGKILL if it
    has not exited in ``grace`` s."""
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=grace)


def open_descriptors() -> list[str]:
    """What this process's open descriptors point at (paths,
    ``socket:[inode]``, ...); Linux's ``/proc``."""
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue  # the listing's own descriptor, closed by now
    return targets
