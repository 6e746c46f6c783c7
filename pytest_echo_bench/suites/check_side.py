"""The trusted side of a HumanEval verdict: the task's ``check`` run on a proxy of the completion.

This runs in a child process of ours, outside the sandbox (``suites/verdict.py`` starts it as
``python -I -S -c BOOT <root> <in_fd> <request_fd> <reply_fd> <result_fd>``). The dataset's prompt
is executed here, so the helpers a prompt defines beside the entry point (``encode_cyclic``,
``poly``) are the dataset's, then the task's tests, whose ``check`` is given a ``Candidate``:
calling it sends the arguments to the sandbox and receives the return value as plain data.

Everything read from the sandbox is hostile data: it is decoded by the strict codec, frames are
bounded, and every wait has a deadline. A reply that is not a well-formed return, a value that is
not plain data, a timeout, or the sandbox ending is fatal: it is remembered, so that a check that
catches every exception still cannot pass. The verdict is one JSON line on ``result_fd``.
"""

from __future__ import annotations

import builtins
import json
import os
import resource
import select
import sys
import time
import traceback
from typing import Any

from pytest_echo_bench.suites.codec import CodecError, decode, encode, frame, frame_length

TESTS_FILE = "<the task's tests>"
BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); del sys.argv[1]\n"
        "from pytest_echo_bench.suites.check_side import main; main(sys.argv[1:])\n")


class Fatal(BaseException):  # noqa: N818 - not an error of the check's: the call could not happen
    """The candidate could not answer (timeout, the sandbox ended, not
    plain data): the item is wrong."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


class CandidateError(Exception):
    """An exception of the completion's that has no builtin of the same name here."""


class Channel:
    """The two pipes to the sandbox, every read and write bounded by the deadlines."""

    def __init__(
        self, request_fd: int, reply_fd: int, deadline: float, call_timeout: float, timeout: float
    ) -> None:
        self.request_fd, self.reply_fd = request_fd, reply_fd
        self.deadline, self.call_timeout, self.timeout = deadline, call_timeout, timeout
        os.set_blocking(request_fd, False)  # a sandbox that stops reading must not hang us

    def receive(self, what: str) -> Any:
        """The next message, or Fatal: a timeout, the sandbox
        ending, bytes that are not a message."""
        until = min(self.deadline, time.monotonic() + self.call_timeout)
        head = self._read(4, until, what)
        try:
            return decode(self._read(frame_length(head), until, what))
        except CodecError as exc:
            raise Fatal("protocol", f"the sandbox sent a malformed reply ({exc})") from None

    def send(self, message: Any, what: str) -> None:
        data = memoryview(frame(encode(message)))
        until = min(self.deadline, time.monotonic() + self.call_timeout)
        while data:
            self._wait(self.request_fd, select.POLLOUT, until, what)
            try:
                data = data[os.write(self.request_fd, data):]
            except BlockingIOError:
                continue
            except OSError:  # EPIPE: the sandbox closed its end
                raise Fatal("ended", f"the sandbox process ended {what}") from None

    def _read(self, n: int, until: float, what: str) -> bytes:
        data = b""
        while len(data) < n:
            self._wait(self.reply_fd, select.POLLIN, until, what)
            chunk = os.read(self.reply_fd, min(n - len(data), 1 << 20))
            if not chunk:
                raise Fatal("ended", f"the sandbox process ended {what}")
            data += chunk
        return data

    def _wait(self, fd: int, event: int, until: float, what: str) -> None:
        poller = select.poll()
        poller.register(fd, event)
        left = until - time.monotonic()
        if left <= 0 or not poller.poll(left * 1000):
            if until >= self.deadline:
                raise Fatal("timeout", f"timed out after {self.timeout:g}s")
            raise Fatal("call-timeout", f"a call timed out after {self.call_timeout:g}s ({what})")


class Candidate:
    """What ``check`` calls: the completion's function, across the process boundary."""

    def __init__(self, channel: Channel, name: str) -> None:
        self.channel, self.name = channel, name
        self.fatal: Fatal | None = None
        self.calls = 0
        # the completion's own exception, "Type: text", if it raised one
        self.raised: str | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.fatal is not None:
            raise self.fatal
        self.calls += 1
        try:
            return self._call(args, kwargs)
        except Fatal as exc:
            self.fatal = exc
            raise

    def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        what = f"in call {self.calls} of {self.name}()"
        try:
            self.channel.send(("call", args, kwargs), what)
        except CodecError as exc:
            raise Fatal(
                "arguments", f"the task's tests passed a value that cannot cross: {exc}"
            ) from None
        reply = self.channel.receive(what)
        kind = reply[0] if type(reply) is tuple and reply else None
        if kind == "return" and len(reply) == 2:
            return reply[1]
        if kind == "raise" and len(reply) == 3 and type(reply[1]) is str and type(reply[2]) is str:
            self.raised = f"{reply[1]}: {reply[2]}" if reply[2] else reply[1]
            raise _rebuilt(reply[1], reply[2])
        raise _ended(self.name, kind, reply)


def _ended(name: str, kind: str | None, reply: Any) -> Fatal:
    """A reply that is neither a return nor a raise: the completion can answer no more calls."""
    if kind == "refused" and len(reply) == 2 and type(reply[1]) is str:
        return Fatal("refused", f"{name}() returned a value that is not plain data ({reply[1]})")
    if kind == "exit" and len(reply) == 3 and type(reply[1]) is str:
        return Fatal("ended", f"{name}() raised {reply[1]}: the program ended")
    return Fatal("protocol", f"the sandbox sent a reply that is not an answer ({_kind(reply)})")


def _rebuilt(name: str, text: str) -> Exception:
    """The completion's exception as the check would have seen it: a
    builtin of that name, with its text."""
    cls = getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            return cls(text)
        except Exception:  # UnicodeDecodeError and kin take other arguments
            pass
    return CandidateError(f"{name}: {text}")


def _kind(value: Any) -> str:
    return type(value).__name__ + (
        f" {value[0]!r}" if type(value) is tuple and value and type(value[0]) is str else ""
    )


def verdict(cfg: dict[str, Any], channel: Channel) -> dict[str, Any]:
    """Wait for the sandbox, run the check, and say what happened (plain JSON)."""
    try:
        ready = channel.receive("before it was ready")
    except Fatal as exc:
        return {
            "status": "error",
            "reason": exc.reason,
            "detail": f"sandbox did not start: {exc.detail}",
        }
    started = (
        ready[1]
        if type(ready) is tuple
        and len(ready) == 2
        and ready[0] == "ready"
        and type(ready[1]) is dict
        else None
    )
    if started is None:
        return {
            "status": "error",
            "reason": "protocol",
            "detail": "sandbox did not start: no ready message",
        }
    result = _load_and_check(cfg, channel)
    return {
        **result,
        "started": {k: v for k, v in started.items() if type(k) is str and type(v) in (int, str)},
    }


def _load_and_check(cfg: dict[str, Any], channel: Channel) -> dict[str, Any]:
    try:
        loaded = channel.receive("while the completion was loading")
    except Fatal as exc:
        return {"status": "wrong", "reason": exc.reason, "detail": exc.detail}
    if (
        type(loaded) is tuple
        and len(loaded) == 3
        and loaded[0] == "load-error"
        and all(type(x) is str for x in loaded[1:])
    ):
        text = f"{loaded[1]}: {loaded[2]}" if loaded[2] else loaded[1]
        return {
            "status": "wrong",
            "reason": "load-error",
            "detail": f"{text} (loading the completion)",
            "raised": text,
        }
    if loaded != ("loaded",):
        return {
            "status": "wrong",
            "reason": "protocol",
            "detail": f"the sandbox sent {_kind(loaded)} instead of loading",
        }
    candidate = Candidate(channel, cfg["entry_point"])
    return _check(cfg, candidate)


def _check(cfg: dict[str, Any], candidate: Candidate) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "__check__"}
    test_source = cfg["test"]
    try:
        # the dataset's helpers, not the completion's
        exec(compile(cfg["prompt"], "<the task's prompt>", "exec"), namespace)
        namespace[cfg["entry_point"]] = candidate
        exec(compile(test_source, TESTS_FILE, "exec"), namespace)
        namespace["check"](candidate)
    except BaseException as exc:  # noqa: BLE001 - every way the check ends is a verdict
        if candidate.fatal is not None:
            return _fatal(candidate.fatal)
        error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return {
            "status": "wrong",
            "reason": "check",
            "detail": error[:500],
            "where": _where(exc, test_source),
            "raised": candidate.raised,
        }
    if candidate.fatal is not None:  # the check caught it; the item is still wrong
        return _fatal(candidate.fatal)
    return {"status": "passed", "calls": candidate.calls}


def _fatal(fatal: Fatal) -> dict[str, Any]:
    # Arguments that cannot cross are the dataset's doing, not the completion's: no verdict on it.
    return {
        "status": "error" if fatal.reason == "arguments" else "wrong",
        "reason": fatal.reason,
        "detail": fatal.detail,
    }


def _where(exc: BaseException, source: str) -> str | None:
    """The innermost line of the task's tests in the traceback (``assert candidate(...)``)."""
    lines = source.splitlines()
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == TESTS_FILE]
    if not frames or frames[-1].lineno is None or not 0 < frames[-1].lineno <= len(lines):
        return None
    return lines[frames[-1].lineno - 1].strip()[:200] or None


def main(argv: list[str]) -> None:
    """The trusted process: settings from ``in_fd``, the verdict on ``result_fd``."""
    in_fd, request_fd, reply_fd, result_fd = map(int, argv)
    with os.fdopen(in_fd, "rb") as f:
        cfg = json.loads(f.read())
    # the tests on hostile values must not take the machine
    for name, value in cfg["limits"].items():
        resource.setrlimit(getattr(resource, name), (value, value))
    sys.setrecursionlimit(2000)
    channel = Channel(request_fd, reply_fd, cfg["deadline"], cfg["call_timeout"], cfg["timeout"])
    result = verdict(cfg, channel)
    os.write(result_fd, json.dumps(result).encode())
    os._exit(0)  # nothing of the check's (a thread, an atexit) runs after the verdict
