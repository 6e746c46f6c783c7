"""``echo-bench run``: keep a sweep going unattended through provider usage windows.

It runs the pytest command; when the run stops with status 2 for what time fixes, as its stop
marker says (exhaustion, items left incomplete by transient errors, a lost worker), it waits and
resumes the same results file, until the sweep completes or the retries are used. After
exhaustion it waits until the provider's reset time when the provider said one, else the backoff.
What needs a person (an arm that cannot work as configured, our machine's own failure, the
results file) ends supervision at once with the message and the command to run after fixing it;
so does any other stop (a usage error, a crash, a failed gate).

Ctrl-C, SIGTERM (a CI timeout, ``kill``) or SIGHUP (the terminal closed) end supervision: the run
gets one SIGINT, which pytest takes as Ctrl-C (it writes its stop marker, its summary and the
resume line), and has ``grace_s`` to stop before SIGTERM and then SIGKILL. During a backoff
supervision ends at once.
"""

from __future__ import annotations

import contextlib
import math
import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

from pytest_echo_bench.errors import EchoBenchError
from pytest_echo_bench.spec.parse import parse_yaml, read_spec
from pytest_echo_bench.store.files import (
    DECIDED,
    NEEDS_FIXING,
    read_json,
    results_dir,
    stop_path,
    summary_path,
)
from pytest_echo_bench.store.safe_text import shown

RESUMABLE = {"exhausted", "incomplete", "worker-lost"}
# A provider's usage window needs the backoff; a lost xdist worker (killed, out of memory) does not.
NO_WAIT = {"worker-lost"}
# Writing the stop marker, the summary and the end table takes a serial run well under a second,
# but xdist workers first finish the provider calls they have in flight, which may each take many
# seconds against a slow model; 30 s covers those and still fits a CI job's cancel window.
GRACE_S = 30.0
# After SIGTERM only a process that ignores it is left, so a short wait is enough before SIGKILL.
KILL_AFTER_S = 5.0
# A reset time further away than this is taken for a misreading (usage windows are hours, a week
# at most): the fixed backoff applies instead.
MAX_RESET_WAIT_S = 8 * 24 * 3600.0
RESET_MARGIN_S = 30.0  # past the reset time: our clock and the provider's may differ a little
# How often the wait and the backoff look for signals received: short enough to seem immediate.
TICK_S = 0.1
# SIGHUP is handled only when not ignored, so that ``nohup echo-bench run ...`` keeps running.
HANDLED = (signal.SIGINT, signal.SIGTERM)

Log = Callable[[str], None]


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
    path = (
        results_dir(Path(), create=False)
        / f"{stamp}_{'+'.join(benchmarks(argv))[:80] or 'supervised'}.jsonl"
    )
    return argv + ["--bench-out", str(path)], path


def benchmarks(command: Sequence[str]) -> list[str]:
    """The benchmarks of the spec files (or the directories of them) a command names, sorted, as a
    plain run names its file after them: each spec's ``benchmark:``, else its file's stem."""
    found: set[str] = set()
    for arg in command:
        where = Path(arg.split("::", 1)[0])
        specs = sorted(where.glob("*.y*ml")) if where.is_dir() else [where]
        found.update(_benchmark(p) for p in specs if p.suffix in (".yaml", ".yml") and p.is_file())
    return sorted(found)


def _benchmark(spec: Path) -> str:
    # read as the run reads it (its size, nesting and aliases bounded);
    # its errors are the run's to say
    try:
        data = parse_yaml(read_spec(spec), str(spec))[0]
    except (EchoBenchError, OSError, ValueError, RecursionError):
        data = None
    name = data.get("benchmark") if isinstance(data, dict) else None
    return (
        name
        if isinstance(name, str) and name and "/" not in name and name.isprintable()
        else spec.stem
    )


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


class Interrupts:
    """The stop signals the supervisor receives, and the child each is passed on to as one SIGINT.

    The handler only records the signal; forwarding, escalating and logging happen in the waiting
    loop, so nothing runs inside a handler that could race with starting the child or with a print.
    """

    def __init__(self, log: Log, grace_s: float = GRACE_S) -> None:
        self.log = log
        self.grace_s = max(grace_s, 0.0)
        # a short grace asks for a quick stop throughout
        self.kill_after_s = min(KILL_AFTER_S, self.grace_s)
        self.received: list[int] = []
        # the run was killed, or not started: it printed no resume line of its own
        self.forced = False

    @contextlib.contextmanager
    def installed(self) -> Iterator[Interrupts]:
        """Handle the stop signals while supervising; restore the previous handlers after."""
        if threading.current_thread() is not threading.main_thread():
            yield self  # only the main thread receives signals in Python: leave them as they are
            return
        wanted = list(HANDLED)
        if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:
            wanted.append(signal.SIGHUP)
        previous = {signum: signal.signal(signum, self._handle) for signum in wanted}
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)

    def name(self) -> str:
        """The first stop signal's name, the one that ended supervision."""
        return signal.Signals(self.received[0]).name if self.received else ""

    def run(self, argv: list[str]) -> int:
        """Run ``argv`` to its end, passing on each stop signal; its exit status
        (128 + N when killed by signal N)."""
        if self.received:
            self.forced = True  # a signal came between two runs: start no other
            return 2
        # Its own session, hence its own process group: a Ctrl-C at a terminal signals the whole
        # foreground group, and were the run in ours it would get that SIGINT and then the one
        # passed on below, and pytest takes a second Ctrl-C as "stop now" (no summary, no resume
        # line). So every signal reaches the run (and its xdist workers) once, from here.
        proc = subprocess.Popen(argv, start_new_session=True)
        return _exit_status(self._wait(proc))

    def _wait(self, proc: subprocess.Popen[bytes]) -> int:
        """The run's exit status; each stop signal is passed on, and a run
        that outlasts the grace is killed."""
        forwarded = 0
        deadline: float | None = None
        escalation = [signal.SIGTERM, signal.SIGKILL]
        while True:
            try:
                return proc.wait(timeout=TICK_S)
            except subprocess.TimeoutExpired:
                pass
            if len(self.received) > forwarded:
                forwarded = self._pass_on(proc, forwarded)
                deadline = deadline if deadline is not None else time.monotonic() + self.grace_s
            elif deadline is not None and time.monotonic() >= deadline:
                self.forced = True
                if not escalation:
                    self.log(
                        f"echo-bench run: the run (pid {proc.pid}) survived SIGKILL for "
                        f"{self.kill_after_s:g}s; "
                        "leaving it"
                    )
                    return 2
                sent = escalation.pop(0)
                waited = self.grace_s if sent == signal.SIGTERM else self.kill_after_s
                self.log(
                    f"echo-bench run: the run did not stop within {waited:g}s; sending {sent.name}"
                )
                _signal_group(proc, sent)
                deadline = time.monotonic() + self.kill_after_s

    def _pass_on(self, proc: subprocess.Popen[bytes], forwarded: int) -> int:
        """Send the run one SIGINT for each stop signal not yet
        passed on; how many have been, now."""
        for signum in self.received[forwarded:]:
            _signal_group(proc, signal.SIGINT)
            got = signal.Signals(signum).name
            if forwarded:  # a second Ctrl-C means to the run what it means without a supervisor
                self.log(f"echo-bench run: got {got} again; sent the run SIGINT once more")
            else:
                self.log(
                    f"echo-bench run: got {got}; sent the run (pid {proc.pid}) SIGINT; "
                    "waiting up to "
                    f"{self.grace_s:g}s for it to stop; not resuming"
                )
            forwarded += 1
        return forwarded

    def sleep(self, seconds: float) -> None:
        """Sleep ``seconds``, or less when a stop signal comes."""
        deadline = time.monotonic() + seconds
        while not self.received and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(TICK_S, left))


def supervise(
    command: Sequence[str],
    max_retries: int,
    backoff_s: float,
    log: Log,
    run: Callable[[list[str]], int] | None = None,
    sleep: Callable[[float], None] | None = None,
    grace_s: float = GRACE_S,
) -> int:
    """Run ``command`` until the sweep completes; return the sweep's final exit status.

    ``run`` and ``sleep`` default to the signal-aware ones; a stop signal ends supervision
    either way. Every line reaches ``log`` escaped (``shown``, line feeds too): it may
    quote a provider's stop message, which may hold ESC, OSC or bidi characters, or a line
    feed drawing a line of its own.
    """
    log = _escaped(log)
    with Interrupts(log, grace_s).installed() as interrupts:
        return _supervise(
            command,
            max_retries,
            backoff_s,
            log,
            run or interrupts.run,
            sleep or interrupts.sleep,
            interrupts,
        )


def _supervise(
    command: Sequence[str],
    max_retries: int,
    backoff_s: float,
    log: Log,
    run: Callable[[list[str]], int],
    sleep: Callable[[float], None],
    interrupts: Interrupts,
) -> int:
    argv, path = results_path(command)
    # Printed to be pasted anywhere: the command's relative paths start in this directory.
    resume = f"cd {shlex.quote(str(Path.cwd()))} && {shlex.join(resume_command(command, path))}"
    attempt = 0
    while True:  # every pass returns, or resumes once more: at most max_retries resumes
        attempt += 1
        remaining = read_json(summary_path(path)).get("remaining")
        left = (
            f"{remaining} items remaining" if attempt > 1 and remaining is not None else "starting"
        )
        log(f"echo-bench run: attempt {attempt} at {_now()} ({left}): {shlex.join(argv)}")
        status = run(argv)
        if interrupts.received:
            return _interrupted(interrupts, status, path, resume)
        marker = read_json(stop_path(path)) if status in (0, 2) else {}
        reason = str(marker.get("reason", ""))
        # exit 0, but not complete: stopped on purpose, the rest not run
        if status == 0 and reason == DECIDED:
            log(
                f"echo-bench run: stopped: decided ({marker.get('message', '')}) after "
                f"{attempt} attempt(s); "
                f"the rest of the sweep is not run (to run it: {resume}): {path}"
            )
            return 0
        if status == 0:
            log(f"echo-bench run: sweep complete after {attempt} attempt(s): {path}")
            return 0
        if reason in NEEDS_FIXING:
            log(
                f"echo-bench run: the run stopped ({reason}: {marker.get('message', '')}); "
                "not resuming: waiting "
                f"would not fix this; fix it, then run: {resume}"
            )
            return status
        if reason not in RESUMABLE:
            why = (
                f"stopped ({reason}: {marker.get('message', '')})"
                if reason
                else f"exited with status {status}"
            )
            log(
                f"echo-bench run: the run {why}; not resuming (only exhaustion, incomplete "
                "items and a lost worker are)"
            )
            return status
        if attempt > max_retries:
            log(
                f"echo-bench run: {reason} again and all {max_retries} retries used; resume "
                f"later with: {resume}"
            )
            return status
        wait, until = (0.0, "") if reason in NO_WAIT else _wait(marker, backoff_s, time.time())
        log(
            f"echo-bench run: {reason}: {marker.get('message', '')}; waiting "
            f"{wait:g}s{until} before resuming"
        )
        sleep(wait)
        if interrupts.received:
            log(
                f"echo-bench run: got {interrupts.name()} during the backoff; not resuming; "
                f"resume later with: {resume}"
            )
            return 2
        argv = resume_command(argv, path)


def _wait(marker: dict[str, object], backoff_s: float, now: float) -> tuple[float, str]:
    """How long to wait before resuming, and how the log says why: until the
    provider's reset, or the backoff."""
    resume_at = marker.get("resume_at")
    if (
        marker.get("reason") != "exhausted"
        or not isinstance(resume_at, (int, float))
        or isinstance(resume_at, bool)
    ):
        return backoff_s, ""
    left = float(resume_at) - now
    # A hand-edited or misread time (NaN, far future, long past) is
    # not trusted: the backoff applies.
    if not math.isfinite(left) or not -MAX_RESET_WAIT_S <= left <= MAX_RESET_WAIT_S:
        return backoff_s, ""
    stamp = (
        datetime.fromtimestamp(float(resume_at), UTC)
        .isoformat(timespec="seconds")
        .replace("+00:00", "Z")
    )
    return round(max(left, 0.0) + RESET_MARGIN_S, 1), f" (the provider's window resets at {stamp})"


def _interrupted(interrupts: Interrupts, status: int, path: Path, resume: str) -> int:
    """The end of supervision after a stop signal: the run's own status,
    or 2 when it had to be killed."""
    if status == 0:
        interrupts.log(f"echo-bench run: sweep complete as {interrupts.name()} came: {path}")
        return 0
    # pytest had no chance to print its resume line; the file resumes all the same
    if interrupts.forced:
        interrupts.log(
            f"echo-bench run: stopped by {interrupts.name()}; resume later with: {resume}"
        )
        return 2
    interrupts.log(
        f"echo-bench run: stopped by {interrupts.name()}; the run exited with status {status}"
    )
    return status


def _escaped(log: Log) -> Log:
    return lambda line: log(shown(line, newlines=False))


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    """Signal the run's process group (the run is its leader), as a terminal
    would, so xdist workers get it too."""
    with contextlib.suppress(ProcessLookupError):  # the group has already gone
        os.killpg(proc.pid, signum)


def _exit_status(returncode: int) -> int:
    """A child's status as a shell reports it: 128 + N for a child killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
