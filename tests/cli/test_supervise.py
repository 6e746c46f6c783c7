"""``echo-bench run`` under real signals: Ctrl-C, SIGTERM and SIGHUP reach the run once,
as a SIGINT; a run that ignores it is escalated within the bound; a backoff ends at
once; commands print shell-quoted.

The supervisor runs in a subprocess of its own session, so signalling its process group is what a
terminal does on Ctrl-C. The child is a small script that records what it gets.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import make_spec, read_rows, sim_spec

K = ["-k", "c00 or c01"]  # an argument that needs quoting in a shell
CHILD = textwrap.dedent("""\
    import json, os, signal, sys, time
    from pathlib import Path

    mode, args = sys.argv[1], sys.argv[2:]
    flag = "--bench-resume" if "--bench-resume" in args else "--bench-out"
    out = Path(args[args.index(flag) + 1])
    here = out.parent
    with open(here / "starts", "a") as f:
        f.write(json.dumps(sys.argv) + "\\n")

    def stop(reason):
        stop_file = here / (out.name + ".stop.json")
        stop_file.write_text(json.dumps({"reason": reason, "message": mode}))
        print("echo-bench: stopped early; resume with:\\n  pytest --bench-resume " + str(out),
              flush=True)
        sys.exit(2)

    starts = len((here / "starts").read_text().splitlines())
    if mode == "exhaust" or (mode == "exhaust-once" and starts == 1):
        stop("exhausted")
    if mode == "exhaust-once":
        sys.exit(0)
    got = []
    if mode == "stop":
        signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    else:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if mode == "ignore-all":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    (here / "ready").write_text(str(os.getpid()))
    deadline = time.monotonic() + 60
    while not got and time.monotonic() < deadline:
        time.sleep(0.01)
    # a second SIGINT, if sent, arrives within this
    time.sleep(float(os.environ.get("CHILD_WINDOW", "0.5")))
    (here / "sigints").write_text(str(len(got)))
    stop(os.environ.get("CHILD_REASON", "interrupted"))
""")


@dataclass
class Supervisor:
    proc: subprocess.Popen[bytes]
    dir: Path
    log: Path
    child: list[str]

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, what: str | Path, timeout: float = 30.0) -> None:
        """Wait until the output shows ``what`` (a string) or the file ``what`` exists."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            if what.exists() if isinstance(what, Path) else what in self.output():
                return
            time.sleep(0.02)
        pytest.fail(f"gave up waiting for {what}; output:\n{self.output()}")

    def finish(self, timeout: float = 30.0) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
            pytest.fail(f"the supervisor did not end within {timeout}s; output:\n{self.output()}")

    def starts(self) -> list[list[str]]:
        return [json.loads(line) for line in (self.dir / "starts").read_text().splitlines()]

    def sigints(self) -> int:
        return int((self.dir / "sigints").read_text())


@pytest.fixture
def supervisors(tmp_path: Path) -> Iterator[list[Supervisor]]:
    started: list[Supervisor] = []
    yield started
    for sup in started:  # never leave a supervisor, or a child that ignores signals, behind
        if sup.proc.poll() is None:
            os.killpg(sup.proc.pid, signal.SIGKILL)
            sup.proc.wait(timeout=10)
        ready = sup.dir / "ready"
        if ready.exists():
            try:
                os.killpg(int(ready.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


def supervise(
    tmp_path: Path,
    started: list[Supervisor],
    mode: str,
    *options: str,
    reason: str = "interrupted",
    window: float = 0.5,
) -> Supervisor:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    child = [sys.executable, str(script), mode, *K, "--bench-out", str(tmp_path / "run.jsonl")]
    log = tmp_path / "supervisor.log"
    with log.open("wb") as out:
        # Its own session: signalling its group below is what a terminal does on Ctrl-C.
        proc = subprocess.Popen(
            [sys.executable, "-m", "pytest_echo_bench.cli.main", "run", *options, "--", *child],
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "CHILD_REASON": reason, "CHILD_WINDOW": str(window)},
            # as from a terminal: a suite run under nohup would hand its ignored SIGHUP on, and
            # the supervisor rightly leaves an ignored SIGHUP ignored
            preexec_fn=_hangup_default,
        )
    sup = Supervisor(proc, tmp_path, log, child)
    started.append(sup)
    return sup


def _hangup_default() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def resume_of(child: list[str], cwd: Path) -> str:
    """The resume line the supervisor prints: ``cd`` to where it ran,
    then the same command resuming."""
    return f"cd {shlex.quote(str(cwd))} && " + shlex.join(
        [*child[:-2], "--bench-resume", child[-1]]
    )


@pytest.mark.parametrize("presses", [1, 2])
def test_each_ctrl_c_reaches_the_run_once_and_ends_supervision(
    tmp_path: Path, supervisors: list[Supervisor], presses: int
) -> None:
    sup = supervise(tmp_path, supervisors, "stop", "--backoff", "0", window=0.5 * presses)
    sup.wait_for(tmp_path / "ready")
    os.killpg(sup.proc.pid, signal.SIGINT)  # the terminal's Ctrl-C: the supervisor's whole group
    if presses == 2:
        sup.wait_for("got SIGINT; sent the run")
        os.killpg(sup.proc.pid, signal.SIGINT)
    assert sup.finish() == 2, sup.output()
    assert sup.sigints() == presses
    assert len(sup.starts()) == 1
    out = sup.output()
    assert (
        "got SIGINT; sent the run" in out
        and "exited with status 2" in out
        and "attempt 2" not in out
    )
    assert ("got SIGINT again; sent the run SIGINT once more" in out) == (presses == 2)
    assert out.count("--bench-resume") == 1  # the run's own resume line; the supervisor adds none


@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_end_supervision_like_ctrl_c(
    tmp_path: Path, supervisors: list[Supervisor], sent: signal.Signals
) -> None:
    # The marker says exhausted and the backoff is 0: only the signal
    # keeps it from resuming at once.
    sup = supervise(tmp_path, supervisors, "stop", "--backoff", "0", reason="exhausted")
    sup.wait_for(tmp_path / "ready")
    os.kill(sup.proc.pid, sent)
    assert sup.finish() == 2, sup.output()
    assert sup.sigints() == 1
    assert len(sup.starts()) == 1
    assert f"got {sent.name}; sent the run" in sup.output()


@pytest.mark.parametrize(
    ("mode", "steps"), [("ignore-int", ["SIGTERM"]), ("ignore-all", ["SIGTERM", "SIGKILL"])]
)
def test_a_run_that_ignores_sigint_is_escalated_within_the_bound(
    tmp_path: Path, supervisors: list[Supervisor], mode: str, steps: list[str]
) -> None:
    sup = supervise(tmp_path, supervisors, mode, "--backoff", "0", "--grace", "0.5")
    sup.wait_for(tmp_path / "ready")
    child = int((tmp_path / "ready").read_text())
    started = time.monotonic()
    os.killpg(sup.proc.pid, signal.SIGINT)
    assert sup.finish(timeout=60) == 2, sup.output()
    # The grace and the SIGKILL step take 0.5 s each; the messages below say they were 0.5 s. The
    # bound is the slack of a loaded machine (a child ignoring every signal never ends by itself).
    assert time.monotonic() - started < 0.5 + 0.5 * len(steps) + 15.0
    out = sup.output()
    for step in steps:
        assert f"did not stop within 0.5s; sending {step}" in out
    assert "SIGKILL" in out or mode == "ignore-int"
    # the killed run could not print it
    assert f"resume later with: {resume_of(sup.child, tmp_path)}" in out
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)  # reaped: nothing left running
    assert len(sup.starts()) == 1


def test_ctrl_c_during_the_backoff_ends_at_once(
    tmp_path: Path, supervisors: list[Supervisor]
) -> None:
    sup = supervise(tmp_path, supervisors, "exhaust", "--backoff", "600")
    sup.wait_for("waiting 600s before resuming")
    started = time.monotonic()
    os.killpg(sup.proc.pid, signal.SIGINT)
    assert sup.finish(timeout=60) == 2, sup.output()
    assert time.monotonic() - started < 20.0  # not the 600 s backoff, however loaded the machine
    out = sup.output()
    assert (
        "got SIGINT during the backoff; not resuming; resume later with: "
        f"{resume_of(sup.child, tmp_path)}" in out
    )
    assert "-k 'c00 or c01'" in out.splitlines()[-1]
    assert len(sup.starts()) == 1


def test_logged_commands_are_shell_quoted(tmp_path: Path, supervisors: list[Supervisor]) -> None:
    sup = supervise(tmp_path, supervisors, "exhaust-once", "--backoff", "0")
    assert sup.finish() == 0, sup.output()
    attempts = [
        line.split("): ", 1)[1]
        for line in sup.output().splitlines()
        if line.startswith("echo-bench run: attempt")
    ]
    # each pastes back
    assert [shlex.split(a) for a in attempts] == [[sys.executable, *argv] for argv in sup.starts()]
    assert all("-k 'c00 or c01'" in a for a in attempts) and "--bench-resume" in attempts[1]

    (tmp_path / "starts").unlink()
    again = supervise(tmp_path, supervisors, "exhaust", "--backoff", "0", "--max-retries", "0")
    assert again.finish() == 2, again.output()
    assert f"retries used; resume later with: {resume_of(again.child, tmp_path)}" in again.output()


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_ctrl_c_under_the_supervisor_stops_a_real_sweep_resumably(
    pytester: pytest.Pytester, workers: list[str]
) -> None:
    make_spec(pytester, sim_spec(60, arms="  a: {provider: sim, accuracy: 1.0, latency_s: 0.05}\n"
                                           "  b: {provider: sim, accuracy: 0.0, latency_s: 0.05}"))
    out = pytester.path / "r.jsonl"
    pytest_cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest_echo_bench.cli.main",
            "run",
            "--backoff",
            "0",
            "--",
            *pytest_cmd,
            "demo.yaml",
            "--bench-out",
            str(out),
            "--bench-concurrency",
            "1",
            *workers,
        ],
        cwd=pytester.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while (
            time.monotonic() < deadline
            and proc.poll() is None
            and (not out.exists() or out.read_text().count("\n") < 6)
        ):
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C at the terminal
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    assert proc.returncode == 2, output
    assert json.loads((pytester.path / "r.jsonl.stop.json").read_text())["reason"] == "interrupted"
    resume = [line.strip() for line in output.splitlines() if "--bench-resume" in line]
    # the run's own, once
    assert resume == [
        shlex.join(
            ["pytest", "--bench-resume", str(out), *workers, "--rootdir", str(pytester.path)]
        )
    ], output
    assert "attempt 2" not in output
    _, rows = read_rows(out)
    assert 5 <= len(rows) < 120

    resumed = subprocess.run(
        [*pytest_cmd, "--bench-resume", str(out), *workers],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    _, rows = read_rows(out)
    keys = [(r["task_id"], r["arm"]) for r in rows]
    assert sorted(keys) == sorted((f"q{i}", arm) for i in range(60) for arm in ("a", "b"))


# A provider's stop message as it may come: clear the screen, write the clipboard, reverse the
# text, a lone surrogate, and a line feed that would draw a line of its own.
HOSTILE = "\x1b[2J\x1b]52;c;ZXZpbA==\x07\u202eexe.txt\u202c\x9b31m\ud800\n===== 2 passed ====="
UNSAFE = "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"


@pytest.mark.parametrize("reason", ["exhausted", "local-error", "\x1b[31mmade-up\u202e"])
def test_a_stop_message_in_the_log_is_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], reason: str
) -> None:
    import re

    from pytest_echo_bench.cli.main import main

    script = tmp_path / "stops.py"
    script.write_text(
        "import json, sys\nout = sys.argv[sys.argv.index('--bench-out' if '--bench-out' in "
        "sys.argv "
        "else '--bench-resume') + 1]\nopen(out + '.stop.json', 'w').write(json.dumps("
        f"{{'reason': {reason!r}, 'message': {HOSTILE!r}}}))\nsys.exit(2)\n"
    )
    out = tmp_path / "run.jsonl"
    status = main(["run", "--backoff", "0", "--max-retries", "1", "--", sys.executable, str(script),
                   "--bench-out", str(out), "-k", "a\x1b[2Jb"])
    printed = capsys.readouterr()
    log = printed.out + printed.err
    assert status == 2 and "echo-bench run: attempt 1" in log
    # one line per message: its own line feed escaped
    assert not re.search(UNSAFE, log.replace("\n", "")), log
    assert "\\x1b]52;c;ZXZpbA==\\x07\\u202eexe.txt" in log and "\\ud800\\x0a===== 2 passed" in log
    assert all(not line.startswith("=====") for line in log.splitlines())
