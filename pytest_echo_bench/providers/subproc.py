"""One model-CLI process, run to its end and no further: output capped,
time bounded, its group killed.

A call ends when the process exits, not when its pipes close: a CLI that leaves a helper holding
stdout (``sh -c 'sleep 300 & echo answer'``) made every call wait for the timeout. After the exit
the pipes get ``grace_s`` to drain, then the whole process group is killed and what was read is
the output. A CLI that closes stdout early but keeps running is still running until it exits.

Output beyond the cap is read and counted, never kept, so a CLI printing 200 MB neither blocks on
a full pipe nor fills our memory. stdout keeps its head (the answer starts there), stderr its tail
(a CLI's error message comes last, after any traceback).

The leader's exit is observed without reaping it (``waitid(WNOWAIT)``): while it is an unreaped
zombie its pid cannot be reused, so killing its process group afterwards cannot hit a stranger.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

_CHUNK = 1 << 16
_TICK_S = 0.05  # how often the exit is checked where no pidfd tells us (kernels before 5.3)
_REAP_S = 5.0  # a SIGKILLed process is gone at once; bounded anyway
# One wait at most: a spec's timeout_s may be 1e300 or .inf, which
# epoll cannot take (OverflowError).
_MAX_WAIT_S = 60.0


@dataclass(frozen=True)
class Limits:
    timeout_s: float
    stdout_bytes: int
    stderr_bytes: int
    grace_s: float = 0.5  # after the exit, for the pipes to drain


@dataclass
class Captured:
    """What was kept of one pipe, and how many bytes were read and dropped beyond the cap."""

    data: bytes
    dropped: int = 0


@dataclass
class Finished:
    returncode: int  # negative: killed by that signal
    stdout: Captured
    stderr: Captured
    timed_out: bool


class _Keep:
    """A capped buffer keeping the first (head) or the last (tail) ``cap`` bytes."""

    def __init__(self, cap: int, tail: bool) -> None:
        self.cap, self.tail = cap, tail
        self.buf = bytearray()
        self.seen = 0

    def add(self, chunk: bytes) -> None:
        self.seen += len(chunk)
        if not self.tail:
            room = self.cap - len(self.buf)
            if room > 0:
                self.buf += chunk[:room]
            return
        self.buf += chunk
        if len(self.buf) > 2 * self.cap:  # trimmed in batches: O(1) amortised per byte
            del self.buf[:-self.cap]

    def captured(self) -> Captured:
        data = bytes(self.buf[-self.cap:] if self.tail else self.buf)
        if self.seen > len(data):  # cut here, not by the CLI: no character is cut in half by us
            data = data[_utf8_start(data):] if self.tail else data[:_utf8_end(data)]
        return Captured(data, self.seen - len(data))


def _utf8_end(data: bytes) -> int:
    """Where ``data`` ends without a UTF-8 character cut in half (a cut one is dropped whole)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # the lead byte (or ASCII) of the last character
            need = (
                2
                if byte & 0xE0 == 0xC0
                else 3
                if byte & 0xF0 == 0xE0
                else 4
                if byte & 0xF8 == 0xF0
                else 1
            )
            return len(data) - back if need > back else len(data)
    return len(data)


def _utf8_start(data: bytes) -> int:
    """Where ``data`` starts after the continuation bytes of a character cut in half."""
    skip = 0
    while skip < min(3, len(data)) and data[skip] & 0xC0 == 0x80:
        skip += 1
    return skip


def run(
    argv: Sequence[str], *, cwd: Path, env: dict[str, str], stdin: bytes | None, limits: Limits
) -> Finished:
    """Run ``argv`` to its exit (or ``limits.timeout_s``); raises
    OSError only if it cannot start."""
    # A new session makes the CLI the leader of its own process group: everything it starts
    # (unless that escapes with setsid) is killed with it.
    proc = subprocess.Popen(argv, cwd=cwd, env=env, start_new_session=True,
                            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = _Keep(limits.stdout_bytes, tail=False), _Keep(limits.stderr_bytes, tail=True)
    try:
        timed_out = _pump(proc, stdin, out, err, limits)
    finally:
        # helpers left behind, a timeout or an interrupt: nothing outlives the call
        _kill_group(proc.pid)
        _close(proc)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(_REAP_S)
    return Finished(proc.returncode if proc.returncode is not None else -signal.SIGKILL,
                    out.captured(), err.captured(), timed_out)


def _pump(
    proc: subprocess.Popen[bytes], stdin: bytes | None, out: _Keep, err: _Keep, limits: Limits
) -> bool:
    """Move bytes until the process has exited and its pipes are drained (or
    the grace ends); True on timeout."""
    with selectors.DefaultSelector() as sel, _exit_fd(proc.pid) as exit_fd:
        _register(sel, proc, out, err, exit_fd)
        pending = _start_writing(sel, proc, memoryview(stdin or b""))
        # the timeout; after the exit, the grace
        ends, exited = time.monotonic() + limits.timeout_s, False
        while True:
            now = time.monotonic()
            if not exited and _exited(proc.pid):
                # Exited is finished, even a moment before the timeout: the grace may outlast it.
                ends, exited = now + limits.grace_s, True
                if exit_fd is not None:
                    sel.unregister(exit_fd)
            if exited and (now >= ends or not _reading(sel, proc)):
                return False
            if now >= ends:
                return True
            tick = ends - now if exited or exit_fd is not None else min(ends - now, _TICK_S)
            pending = _serve(sel, proc, pending, min(tick, _MAX_WAIT_S))


def _register(sel: selectors.BaseSelector, proc: subprocess.Popen[bytes], out: _Keep, err: _Keep,
              exit_fd: int | None) -> None:
    """Wait on both output pipes, and on the process's exit where the machine can say it."""
    assert proc.stdout is not None and proc.stderr is not None
    sel.register(proc.stdout.fileno(), selectors.EVENT_READ, out)
    sel.register(proc.stderr.fileno(), selectors.EVENT_READ, err)
    if exit_fd is not None:
        sel.register(exit_fd, selectors.EVENT_READ, None)


def _serve(sel: selectors.BaseSelector, proc: subprocess.Popen[bytes], pending: memoryview,
           wait_s: float) -> memoryview:
    """One wait of at most ``wait_s``: read what the pipes hold, write what stdin takes. Returns
    what is left to write."""
    for key, _ in sel.select(wait_s):
        if isinstance(key.data, _Keep):
            _read(sel, key.fd, key.data)
        elif key.data == "stdin":
            pending = _write(sel, proc, pending)
    return pending


@contextlib.contextmanager
def _exit_fd(pid: int) -> Iterator[int | None]:
    """A descriptor that becomes readable when ``pid`` exits (Linux
    5.3+), else None: then we poll."""
    try:
        fd: int | None = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    try:
        yield fd
    finally:
        if fd is not None:
            os.close(fd)


def _start_writing(
    sel: selectors.BaseSelector, proc: subprocess.Popen[bytes], pending: memoryview
) -> memoryview:
    if proc.stdin is None:  # /dev/null
        return pending
    os.set_blocking(proc.stdin.fileno(), False)  # a write takes what the pipe holds, never waits
    if not pending:
        proc.stdin.close()  # EOF at once: a CLI that reads stdin to its end must not wait for more
        return pending
    sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE, "stdin")
    return pending


def _write(
    sel: selectors.BaseSelector, proc: subprocess.Popen[bytes], pending: memoryview
) -> memoryview:
    assert proc.stdin is not None
    try:
        pending = pending[os.write(proc.stdin.fileno(), pending[:_CHUNK]):]
    except BlockingIOError:
        return pending
    except OSError:  # EPIPE: it stopped reading (or exited); what it did not read it does not want
        pending = pending[:0]
    if not pending:
        sel.unregister(proc.stdin.fileno())
        proc.stdin.close()
    return pending


def _read(sel: selectors.BaseSelector, fd: int, keep: _Keep) -> None:
    try:
        chunk = os.read(fd, _CHUNK)
    except OSError:
        chunk = b""
    if chunk:
        keep.add(chunk)
    else:
        sel.unregister(fd)  # EOF: every writer closed it


def _reading(sel: selectors.BaseSelector, proc: subprocess.Popen[bytes]) -> bool:
    """Whether stdout or stderr is still open at the other end."""
    fds = {key.fd for key in sel.get_map().values()}
    assert proc.stdout is not None and proc.stderr is not None
    return proc.stdout.fileno() in fds or proc.stderr.fileno() in fds


def _exited(pid: int) -> bool:
    """Whether the process has exited, leaving it unreaped (its pid,
    and so its group id, stays ours)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True  # reaped already (not by us): it has exited


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is already gone


def _close(proc: subprocess.Popen[bytes]) -> None:
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
