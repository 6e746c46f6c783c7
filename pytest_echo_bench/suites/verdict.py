"""A HumanEval verdict across a process boundary: the tests in a trusted process,
the completion in the sandbox.

``run_check`` starts two processes joined only by a pair of pipes carrying the strict codec:

- the sandbox (``sandbox.spawn``): the prompt and the completion, never the tests nor the
  canonical solution, with every isolation layer the machine allows;
- the judge (``check_side``): a child of ours outside the sandbox that runs the task's ``check``
  on a proxy ``candidate`` and writes the verdict on a third pipe only it holds.

There is no secret to steal and no harness to patch in the completion's process: whatever it does
there changes only the bytes it sends, which the judge decodes as hostile data. One deadline
covers the whole check; the judge is killed at it (a hanging check too), then every process of
the sandbox run, whatever happened.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest_echo_bench
from pytest_echo_bench.suites import sandbox
from pytest_echo_bench.suites.check_side import BOOT
from pytest_echo_bench.suites.sandbox import Limits

REPORT_MAX = 64 * 1024
GRACE_S = 1.0  # the judge's own deadline comes first; this is for writing its verdict
_PACKAGE_ROOT = str(Path(pytest_echo_bench.__file__).resolve().parents[1])


@dataclass(frozen=True)
class Task:
    """What the judge needs: the dataset's prompt (its helpers), tests and entry point."""

    prompt: str
    test: str
    entry_point: str


@dataclass(frozen=True)
class CheckResult:
    """How the check ended, and what the sandbox run showed."""

    status: str  # passed | wrong | error (the sandbox or the judge could not start)
    reason: str  # check | timeout | call-timeout | ended | refused | protocol | load-error | ...
    detail: str
    seconds: float
    isolation: dict[str, Any] = field(default_factory=dict)
    where: str | None = None  # the line of the tests that failed
    raised: str | None = None  # the completion's own exception, "Type: text"
    returncode: int | None = None  # the sandbox's, when it ended by itself before the kill
    memory_killed: bool = False
    output_full: bool = False
    output: str = ""

    @property
    def signal(self) -> str | None:
        return sandbox.SandboxResult("failed", self.returncode, "", 0.0).signal


def run_check(solution: str, task: Task, limits: Limits) -> CheckResult:
    """The verdict on ``solution`` (the prompt and the completion);
    never raises for anything it does."""
    start = time.monotonic()
    deadline = start + limits.timeout_s
    with sandbox.prepared(limits) as run, tempfile.TemporaryFile() as out:
        request_r, request_w = os.pipe()
        reply_r, reply_w = os.pipe()
        result_r, result_w = os.pipe()
        try:
            box = sandbox.spawn(run, solution, task.entry_point, (request_r, reply_w), out)
            _close(request_r, reply_w)  # the sandbox's ends
            request_r = reply_w = -1
            fds, request_w, reply_r, result_w = (request_w, reply_r, result_w), -1, -1, -1
            report, returncode = _judge(box, run, task, deadline, fds, result_r)  # it closes fds
        finally:
            _close(request_r, request_w, reply_r, reply_w, result_r, result_w)
        full = out.seek(0, os.SEEK_END) >= limits.file_size_mb << 20
        text, _ = sandbox.read_output(out)
        started = report.get("started") if isinstance(report.get("started"), dict) else None
        return CheckResult(
            str(report.get("status", "error")),
            str(report.get("reason", "")),
            str(report.get("detail", "")),
            time.monotonic() - start,
            sandbox.describe(run, started),
            _text(report.get("where")),
            _text(report.get("raised")),
            returncode,
            run.groups.memory_killed(),
            full,
            text,
        )


def _judge(
    box: subprocess.Popen[bytes] | None,
    run: sandbox.SandboxRun,
    task: Task,
    deadline: float,
    fds: tuple[int, int, int],
    result_r: int,
) -> tuple[dict[str, Any], int | None]:
    """Run the judge to its verdict or the deadline; kill it, then the sandbox run.
    (report, sandbox's own status)."""
    judge, timed_out = None, False
    try:
        try:
            judge = _spawn_judge(task, run.limits, deadline, fds) if box is not None else None
        finally:
            _close(*fds)  # the judge's ends: from here only the two children hold the channel
        if judge is not None:
            try:
                judge.wait(timeout=max(0.0, deadline + GRACE_S - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
    finally:
        if judge is not None:
            _kill_judge(judge)
        # it ended by itself (a crash, an exit)
        returncode = box.poll() if box is not None else None
        if box is not None:
            sandbox.kill(box, run)
    if box is None:
        return {"status": "error", "reason": "spawn", "detail": "sandbox did not start"}, None
    if judge is None:
        return {
            "status": "error",
            "reason": "judge",
            "detail": "the judge process did not start",
        }, returncode
    if timed_out:
        return {
            "status": "wrong",
            "reason": "timeout",
            "detail": f"timed out after {run.limits.timeout_s:g}s",
        }, returncode
    return _read_report(result_r, judge.returncode), returncode


def _spawn_judge(
    task: Task, limits: Limits, deadline: float, fds: tuple[int, int, int]
) -> subprocess.Popen[bytes] | None:
    cfg = {
        "prompt": task.prompt,
        "test": task.test,
        "entry_point": task.entry_point,
        "deadline": deadline,
        "timeout": limits.timeout_s,
        "call_timeout": limits.call_timeout_s or limits.timeout_s,
        # The check's own work on hostile (plain) values is bounded too.
        "limits": {
            "RLIMIT_AS": max(limits.memory_mb, 512) << 20,
            "RLIMIT_CPU": int(limits.timeout_s) + 2,
        },
    }
    in_fd = sandbox.input_fd(json.dumps(cfg).encode())
    # -S: the tests need only the standard library, and site's import hooks (an editable install's
    # finder) cost the judge more than the rest of its start.
    argv = [sys.executable, "-I", "-S", "-c", BOOT, _PACKAGE_ROOT, str(in_fd), *map(str, fds)]
    try:
        return subprocess.Popen(
            argv,
            cwd="/",
            env=sandbox.environment("/"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            pass_fds=(in_fd, *fds),
        )
    except OSError:
        return None
    finally:
        os.close(in_fd)


def _kill_judge(judge: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(judge.pid, signal.SIGKILL)
    judge.wait()


def _read_report(fd: int, returncode: int | None) -> dict[str, Any]:
    """The judge's verdict, as it wrote it before it exited."""
    os.set_blocking(fd, False)  # the judge is dead: nothing more will come
    data = b""
    with contextlib.suppress(BlockingIOError):
        while len(data) <= REPORT_MAX and (chunk := os.read(fd, REPORT_MAX)):
            data += chunk
    try:
        report = json.loads(data) if data else None
    except ValueError:
        report = None
    if not isinstance(report, dict):
        return {
            "status": "error",
            "reason": "judge",
            "detail": f"the judge ended without a verdict (status {returncode})",
        }
    return report


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _close(*fds: int) -> None:
    for fd in fds:
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
