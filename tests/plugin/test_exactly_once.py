"""Exactly once, whoever runs it: a results file has one owner, a new sweep never appends to an old
one, the file exists from the start, and a lost xdist worker leaves nothing missing or twice.

Driven as a user would: real pytest processes, real signals, ``-n 2``; each test ends by checking
that every (task_id, arm) is recorded once, with the verdict an uninterrupted run gives.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from processes import finish, rows_in, run, start, wait_for

from conftest import make_spec, read_rows, sim_spec

SLOW = (
    "  a: {provider: sim, accuracy: 0.6, latency_s: 0.05}\n  b: {provider: sim, accuracy: 0.3, "
    "latency_s: 0.05}"
)
# A slow arm at the head of each worker's queue while a fast one's calls finish and are recorded
# behind it: a worker killed then has recorded items it never reported, which xdist hands on.
MIXED = (
    "  a: {provider: sim, accuracy: 0.6, latency_s: 0.6}\n  b: {provider: sim, accuracy: 0.3, "
    "latency_s: 0.01}"
)
def verdicts(path: Path) -> dict[tuple[str, str], tuple[bool, str]]:
    _, rows = read_rows(path)
    keys = [(r["task_id"], r["arm"]) for r in rows]
    assert len(keys) == len(set(keys)), "a key recorded twice"
    return {(r["task_id"], r["arm"]): (r["passed"], r["output"]) for r in rows}


def reference(cwd: Path, spec: str = "demo.yaml") -> dict[tuple[str, str], tuple[bool, str]]:
    """The verdicts of an uninterrupted run. The sim's verdicts depend on the item and arm only, not
    on how many calls are in flight: 64 at once make the slow arms' sleeps overlap (600 items of
    0.05 s took 3.8 s at the default 8, 0.5 s at 64)."""
    out = cwd / "reference.jsonl"
    assert run(cwd, spec, "--bench-out", str(out), "--bench-concurrency", "64")[0] == 0
    return verdicts(out)


# -- ownership ---------------------------------------------------------------------------------

def test_a_second_run_on_the_same_file_is_refused_naming_the_owner(
    pytester: pytest.Pytester,
) -> None:
    # The first run's arm waits for the test to let it go, so the second run meets it mid-sweep
    # however loaded the machine is.
    pytester.makeconftest(f"""
        import time
        from pathlib import Path
        from pytest_echo_bench import arm

        @arm("held")
        def held(ctx):
            deadline = time.monotonic() + 60
            release = Path({str(pytester.path / "release")!r})
            while not release.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            return "4"
    """)
    make_spec(pytester, sim_spec(5, arms="  a: {provider: python, function: held}"))
    out = pytester.path / "r.jsonl"
    first = start(pytester.path, "demo.yaml", "--bench-out", str(out), "--bench-concurrency", "2")
    try:
        wait_for(lambda: Path(f"{out}.owner").exists() and out.exists())
        status, output = run(pytester.path, "demo.yaml", "--bench-out", str(out))
        assert status == 4, output
        assert f"{out} is in use by another run (pid {first.pid} on " in output
        # resume while it runs: the same
        status, output = run(pytester.path, "--bench-resume", str(out))
        assert status == 4 and "is in use by another run" in output, output
    finally:
        (pytester.path / "release").write_text("")
        status, output = finish(first)
    assert status == 0, output
    # the first run alone wrote it
    assert sorted(verdicts(out)) == [(f"q{i}", "a") for i in range(5)]
    assert not Path(f"{out}.owner").exists()


def test_a_killed_owner_never_blocks_a_resume(pytester: pytest.Pytester) -> None:
    make_spec(pytester, sim_spec(40, arms=SLOW))
    out = pytester.path / "r.jsonl"
    proc = start(pytester.path, "demo.yaml", "--bench-out", str(out), "-n", "2")
    wait_for(lambda: rows_in(out) >= 4)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert Path(f"{out}.owner").exists()  # left behind by the killed run: a stale owner
    status, output = run(pytester.path, "--bench-resume", str(out), "-n", "2")
    assert status == 0, output
    assert verdicts(out) == reference(pytester.path)


# -- no silent appends -------------------------------------------------------------------------

def test_a_new_sweep_into_an_existing_file_is_refused_with_the_resume_command(
    pytester: pytest.Pytester,
) -> None:
    make_spec(pytester, sim_spec(3))
    out = pytester.path / "r.jsonl"
    assert run(pytester.path, "demo.yaml", "--bench-out", str(out))[0] == 0
    before = out.read_bytes()
    status, output = run(pytester.path, "demo.yaml", "--bench-out", str(out))
    assert status == 4, output
    assert (
        f"--bench-out {out}: the file already holds a sweep. Resume it with: pytest "
        f"--bench-resume {out}" in output
    )
    assert out.read_bytes() == before


def test_resume_refuses_a_benchmark_the_file_does_not_hold(pytester: pytest.Pytester) -> None:
    make_spec(pytester, sim_spec(3))
    make_spec(pytester, sim_spec(2, benchmark="other"), name="other")
    out = pytester.path / "r.jsonl"
    assert run(pytester.path, "demo.yaml", "--bench-out", str(out))[0] == 0
    before = out.read_bytes()
    status, output = run(pytester.path, "--bench-resume", str(out), "other.yaml")
    assert status == 4, output
    assert "benchmark 'other' is not in this file, which holds demo" in output
    assert out.read_bytes() == before
    status, output = run(
        pytester.path, "--bench-resume", str(out), "other.yaml", "--bench-allow-mismatch"
    )
    assert status == 0, output
    _, rows = read_rows(out)
    assert sorted({r["benchmark"] for r in rows}) == ["demo", "other"] and len(rows) == 6 + 4


# -- the file exists from the start ------------------------------------------------------------

def test_a_stop_before_the_first_row_leaves_a_file_the_resume_command_runs(
    pytester: pytest.Pytester,
) -> None:
    spec = sim_spec(4, arms="  a: {provider: sim, accuracy: 1.0, faults: {exhaustion_after: 0}}")
    make_spec(pytester, spec)
    out = pytester.path / "r.jsonl"
    status, output = run(pytester.path, "demo.yaml", "--bench-out", str(out))
    assert status == 2, output
    meta, rows = read_rows(out)
    assert meta is not None and meta["benchmark"] == "demo" and rows == []
    resume = next(
        line.strip()
        for line in output.splitlines()
        if line.strip().startswith("pytest --bench-resume")
    )
    # the quota is back
    make_spec(pytester, spec.replace("faults: {exhaustion_after: 0}", "latency_s: 0.0"))
    status, output = run(pytester.path, *resume.split()[1:])
    assert status == 0, output
    assert len(verdicts(out)) == 4


# -- a lost worker -----------------------------------------------------------------------------

HELD_AT = 5  # the item at whose setup each worker is held until the test lets it go

# Each xdist worker stops at the setup of its HELD_AT-th item and says so, with its pid, until the
# test writes the release file: the kill then finds the worker mid-run however loaded the machine
# is (with the items free to run, two loaded cores let both workers finish between the test's
# look at the file and its kill). The worker's calls in flight go on while it is held: at 8 at once
# they record items after the held one that the worker never reports.
HOLD = """
import os
import time
from pathlib import Path

import pytest

HELD_AT, HERE = {held_at}, Path({here!r})
seen = []


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    seen.append(item.nodeid)
    worker = getattr(item.config, "workerinput", {{}}).get("workerid")
    if worker is None or len(seen) != HELD_AT or (HERE / "release").exists():
        return
    (HERE / (worker + ".part")).write_text(str(os.getpid()))
    (HERE / (worker + ".part")).replace(HERE / (worker + ".held"))
    deadline = time.monotonic() + 300
    while not (HERE / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
"""


def rows_of(path: Path, worker: str) -> int:
    """Rows ``worker`` wrote so far: the file's whole lines, read while the run appends."""
    lines = path.read_bytes().split(b"\n")[:-1] if path.exists() else []
    return sum(json.loads(line).get("worker") == worker for line in lines[1:])


@pytest.mark.parametrize("concurrency", ["1", "8"])
def test_a_killed_worker_loses_and_repeats_nothing(
    pytester: pytest.Pytester, concurrency: str
) -> None:
    pytester.makeconftest(HOLD.format(held_at=HELD_AT, here=str(pytester.path)))
    make_spec(pytester, sim_spec(30, arms=MIXED))
    out = pytester.path / "r.jsonl"
    held = [pytester.path / f"gw{i}.held" for i in range(2)]
    proc = start(
        pytester.path,
        "demo.yaml",
        "--bench-out",
        str(out),
        "-n",
        "2",
        "--bench-concurrency",
        concurrency,
    )
    try:
        wait_for(lambda: all(path.exists() for path in held), seconds=300)
        if concurrency != "1":  # the held item and one after it recorded, neither reported
            wait_for(lambda: rows_of(out, "gw0") >= HELD_AT + 1, seconds=300)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)  # no run left behind by a failed wait
        proc.communicate(timeout=60)
        raise
    # one worker only; the controller and the other go on
    os.kill(int(held[0].read_text()), signal.SIGKILL)
    (pytester.path / "release").write_text("")
    status, output = finish(proc, timeout=300)
    assert status == 2, output  # resumable, never "1 failed" for a run whose answers are all fine
    marker = json.loads(Path(f"{out}.stop.json").read_text())
    assert marker["reason"] == "worker-lost", marker
    assert output.count("pytest --bench-resume") == 1, output
    summary = json.loads(Path(f"{out}.summary.json").read_text())
    assert summary["partial"] is True and summary["stopped"].startswith("worker-lost")
    recorded = len(verdicts(out))  # no key twice, even before the resume
    # The summary is the file's: at 8 at once the held item may have been recorded before the kill,
    # and then nothing remains (the stop's own message still counts it as not completed here).
    assert summary["done"] == recorded and summary["remaining"] == 60 - recorded, (
        summary,
        recorded,
    )
    if concurrency == "1":
        assert recorded < 60  # the held item was never called
    status, output = run(pytester.path, "--bench-resume", str(out), "-n", "2")
    assert status == 0, output
    assert verdicts(out) == reference(pytester.path)


# -- every stop says the truth -----------------------------------------------------------------

@pytest.mark.parametrize("how", ["two Ctrl-C", "SIGTERM"])
def test_a_signalled_stop_leaves_its_marker_summary_and_one_resume_line(
    pytester: pytest.Pytester, how: str
) -> None:
    make_spec(pytester, sim_spec(300, arms=SLOW))
    out = pytester.path / "r.jsonl"
    proc = start(pytester.path, "demo.yaml", "--bench-out", str(out), "-n", "2")
    wait_for(lambda: rows_in(out) >= 20)
    if how == "SIGTERM":
        proc.send_signal(signal.SIGTERM)  # the controller only, as `kill` or a CI timeout sends it
    else:
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole group
        time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGINT)
    status, output = finish(proc)
    assert status == 2, output
    assert "Traceback" not in output and "PluggyTeardownRaisedWarning" not in output, output
    assert output.count("pytest --bench-resume") == 1, output
    marker = json.loads(Path(f"{out}.stop.json").read_text())
    assert marker["reason"] == "interrupted" and ("SIGTERM" in marker["message"]) == (
        how == "SIGTERM"
    ), marker
    summary = json.loads(Path(f"{out}.summary.json").read_text())
    recorded = len(verdicts(out))
    assert (
        summary["partial"] is True
        and summary["status"] == 2
        and summary["stopped"].startswith("interrupted")
    )
    assert summary["remaining"] == 600 - summary["done"] and 0 < recorded < 600
    # Rows that landed after the stop (calls in flight finishing) are
    # counted: the summary is the file's.
    assert summary["done"] == recorded, (summary["done"], recorded)
    assert sum(a["n"] for a in summary["arms"].values()) == recorded
    assert {k: a["correct"] for k, a in summary["arms"].items()} == {
        arm: sum(passed for (_, a), (passed, _) in verdicts(out).items() if a == arm)
        for arm in ("a", "b")
    }
    status, output = run(pytester.path, "--bench-resume", str(out), "-n", "2")
    assert status == 0, output
    assert verdicts(out) == reference(pytester.path)


# -- what a careless user or an unlucky machine does to the file ------------------------------

def test_resume_keeps_a_last_row_that_lost_only_its_newline(pytester: pytest.Pytester) -> None:
    make_spec(pytester, sim_spec(6, arms=SLOW))
    full = pytester.path / "full.jsonl"
    assert run(pytester.path, "demo.yaml", "--bench-out", str(full))[0] == 0
    lines = full.read_bytes().splitlines(keepends=True)
    out = pytester.path / "r.jsonl"
    # meta, four rows, a fifth without newline
    out.write_bytes(b"".join(lines[:5]) + lines[5].rstrip(b"\n"))
    status, output = run(pytester.path, "--bench-resume", str(out))
    assert status == 0, output
    assert "5 recorded, 7 to run" in output
    assert verdicts(out) == verdicts(full) and out.read_bytes().startswith(b'{"_meta"')


def test_collect_only_writes_nothing_and_leaves_a_files_summary_alone(
    pytester: pytest.Pytester,
) -> None:
    make_spec(pytester, sim_spec(3))
    out = pytester.path / "r.jsonl"
    assert run(pytester.path, "demo.yaml", "--bench-out", str(out))[0] == 0
    before = {p.name: p.read_bytes() for p in pytester.path.glob("r.jsonl*")}
    for args in (
        ["--bench-out", str(out)],
        ["--bench-resume", str(out)],
        ["--bench-out", str(pytester.path / "new.jsonl")],
    ):
        status, output = run(pytester.path, "demo.yaml", "--collect-only", *args)
        assert status == 0, output
    assert {p.name: p.read_bytes() for p in pytester.path.glob("r.jsonl*")} == before
    assert list(pytester.path.glob("new.jsonl*")) == []


def test_the_printed_resume_command_works_from_another_directory(pytester: pytest.Pytester) -> None:
    spec = sim_spec(4, arms="  a: {provider: sim, accuracy: 1.0, faults: {exhaustion_after: 2}}")
    (pytester.path / "specs").mkdir()
    (pytester.path / "specs" / "demo.yaml").write_text(spec)
    out = pytester.path / "out" / "r.jsonl"
    status, output = run(
        pytester.path, "specs/demo.yaml", "--bench-out", "out/r.jsonl", "-k", "q1 or q2 or q3"
    )
    assert status == 2, output
    resume = next(
        line.strip()
        for line in output.splitlines()
        if line.strip().startswith("pytest --bench-resume")
    )
    (pytester.path / "specs" / "demo.yaml").write_text(
        spec.replace(", faults: {exhaustion_after: 2}", "")
    )
    elsewhere = pytester.path.parent / f"{pytester.path.name}-elsewhere"
    elsewhere.mkdir()
    status, output = run(elsewhere, *resume.split()[1:])  # pasted in another directory
    assert status == 0, output
    # the recorded -k, every key once
    assert sorted(verdicts(out)) == [(f"q{i}", "a") for i in (1, 2, 3)]
