"""``echo-bench run``: keep a sweep going unattended through provider usage windows.

It runs the pytest command; when the run stops with status 2 *because of exhaustion* (or items
left incomplete by transient errors), as its stop marker says, it waits the backoff and resumes
the same results file, until the sweep completes or the retries are used. Any other stop
(Ctrl-C, a usage error, a crash, a failed gate) ends supervision with that status.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from pytest_echo_bench.store.files import read_json, stop_path, summary_path

RESUMABLE = {"exhausted", "incomplete"}


def results_path(command: Sequence[str]) -> tuple[list[str], Path]:
    """The command with a ``--bench-out`` (added when missing) and the results file it names."""
    argv = list(command)
    for i, arg in enumerate(argv):
        for flag in ("--bench-out", "--bench-resume"):
            if arg == flag and i + 1 < len(argv):
                return argv, Path(argv[i + 1])
            if arg.startswith(flag + "="):
                return argv, Path(arg.split("=", 1)[1])
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = Path("bench_results") / f"{stamp}_supervised.jsonl"
    return argv + ["--bench-out", str(path)], path


def resume_command(command: Sequence[str], path: Path) -> list[str]:
    """The same command, resuming ``path`` instead of starting it."""
    argv: list[str] = []
    skip = False
    for i, arg in enumerate(command):
        if skip:
            skip = False
            continue
        if arg in ("--bench-out", "--bench-resume"):
            skip = i + 1 < len(command)
            continue
        if arg.startswith(("--bench-out=", "--bench-resume=")):
            continue
        argv.append(arg)
    return argv + ["--bench-resume", str(path)]


def supervise(
    command: Sequence[str],
    max_retries: int,
    backoff_s: float,
    log: Callable[[str], None],
    run: Callable[[list[str]], int] = lambda argv: subprocess.call(argv),
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Run ``command`` until the sweep completes; return the sweep's final exit status."""
    argv, path = results_path(command)
    attempt = 0
    while True:  # every pass returns, or resumes once more: at most max_retries resumes
        attempt += 1
        remaining = read_json(summary_path(path)).get("remaining")
        left = f"{remaining} items remaining" if attempt > 1 and remaining is not None else "starting"
        log(f"echo-bench run: attempt {attempt} at {_now()} ({left}): {' '.join(argv)}")
        status = run(argv)
        marker = read_json(stop_path(path)) if status == 2 else {}
        reason = str(marker.get("reason", ""))
        if status == 0:
            log(f"echo-bench run: sweep complete after {attempt} attempt(s): {path}")
            return 0
        if reason not in RESUMABLE:
            why = f"stopped ({reason}: {marker.get('message', '')})" if reason else f"exited with status {status}"
            log(f"echo-bench run: the run {why}; not resuming (only exhaustion and incomplete items are)")
            return status
        if attempt > max_retries:
            log(f"echo-bench run: {reason} again and all {max_retries} retries used; resume later with: "
                f"{' '.join(resume_command(command, path))}")
            return status
        log(f"echo-bench run: {reason}: {marker.get('message', '')}; waiting {backoff_s:g}s before resuming")
        sleep(backoff_s)
        argv = resume_command(argv, path)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
