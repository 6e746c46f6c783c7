"""SIGKILL a running sweep (xdist workers included) and resume: nothing lost, nothing twice."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import make_spec, read_rows, sim_spec

ARMS = (
    "  a: {provider: sim, accuracy: 0.6, latency_s: 0.05}\n  b: {provider: sim, accuracy: 0.3, "
    "latency_s: 0.05}"
)


def run(
    cwd: Path, *args: str, kill_after: float | None = None, watch: Path | None = None
) -> int | None:
    """Run pytest; with ``kill_after``, SIGKILL the whole group that
    long after ``watch`` gets rows."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # its own group: the kill reaches every worker
    if kill_after is None:
        return proc.wait(timeout=120)
    deadline = time.monotonic() + 60
    # Kill mid-run, not mid-startup: wait for the first rows (a loaded machine starts slowly).
    while watch is not None and proc.poll() is None and time.monotonic() < deadline:
        if watch.exists() and watch.read_bytes().count(b"\n") >= 3:
            break
        time.sleep(0.02)
    try:
        return proc.wait(timeout=kill_after)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None


def test_sigkill_mid_run_then_resume_loses_nothing(pytester: pytest.Pytester) -> None:
    make_spec(pytester, sim_spec(80, arms=ARMS))
    out = pytester.path / "killed.jsonl"
    rng = random.Random(1234)
    kills, status = 0, None
    for attempt in range(6):
        args = ["--bench-resume", str(out)] if attempt else ["demo.yaml", "--bench-out", str(out)]
        status = run(pytester.path, *args, "-n", "2", "--bench-concurrency", "2",
                     kill_after=rng.uniform(0.0, 1.0), watch=out)
        if status == 0:
            break
        kills += status is None
    if status != 0:
        status = run(pytester.path, "--bench-resume", str(out), "-n", "2")
    assert status == 0
    assert kills >= 1

    meta, rows = read_rows(out)  # every line parses: no torn or merged lines
    keys = [(r["task_id"], r["arm"]) for r in rows]
    assert len(keys) == len(set(keys)) == 160

    reference = pytester.path / "reference.jsonl"
    assert run(pytester.path, "demo.yaml", "--bench-out", str(reference)) == 0
    _, expected = read_rows(reference)

    def verdict(rs: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[Any, Any]]:
        return {(r["task_id"], r["arm"]): (r["passed"], r["output"]) for r in rs}

    assert verdict(rows) == verdict(expected)
    assert meta is not None and meta["benchmark"] == "demo"


def test_ctrl_c_exits_2_with_an_interrupted_marker_and_resumes(pytester: pytest.Pytester) -> None:
    make_spec(pytester, sim_spec(60, arms="  a: {provider: sim, accuracy: 1.0, latency_s: 0.05}"))
    out = pytester.path / "r.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "demo.yaml",
            "--bench-out",
            str(out),
            "--bench-concurrency",
            "1",
        ],
        cwd=pytester.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (not out.exists() or out.read_text().count("\n") < 5):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 2, output
    assert '"reason": "interrupted"' in (pytester.path / "r.jsonl.stop.json").read_text()
    assert "pytest --bench-resume" in output
    _, rows = read_rows(out)
    assert 4 <= len(rows) < 60
    assert run(pytester.path, "--bench-resume", str(out)) == 0
    _, rows = read_rows(out)
    assert sorted(r["task_id"] for r in rows) == sorted(f"q{i}" for i in range(60))
