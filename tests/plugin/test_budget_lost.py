"""A budget run that loses an xdist worker to SIGKILL while the worker has a call in flight.

The worker's hold is never settled by the worker. Before, every process read that hold as room
coming back, so the last calls waited 10 minutes for it; now the first call that finds no room
settles it (its worst case charged: the reply never came) and the run ends at once.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from openai_server import FakeOpenAI
from processes import finish, start, wait_for

from conftest import make_spec, read_rows, sim_spec

WORDS = 4
# output only, at 1000 USD per million tokens: each call costs its worst case
PER_CALL = WORDS * 1000.0 / 1e6

pytestmark = pytest.mark.skipif(
    not Path("/proc/net/tcp").exists(), reason="finds the calling worker in /proc"
)


def _children(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                kids.append(int(entry.name))
    return kids


def _caller(port: int, pids: list[int]) -> int | None:
    """Which of ``pids`` has the TCP socket whose local port is ``port``
    (the client end of a request)."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].rsplit(":", 1)[1], 16) == port:
            inodes.add(f"socket:[{fields[9]}]")
    for pid in pids:
        try:
            links = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
        except OSError:
            continue
        if inodes & set(links):
            return pid
    return None


def hang_the_third_call(server: FakeOpenAI) -> tuple[threading.Event, list[str]]:
    """The third call hangs (30 s: its worker is killed long before); the others answer at once.
    Every call costs exactly its worst case: ``WORDS`` words of output, as ``max_tokens`` allows."""
    hung, prompts = threading.Event(), []

    def answer(prompt: str) -> str:
        with server.lock:
            prompts.append(prompt)
            third = len(prompts) == 3
        if third:
            hung.set()
            time.sleep(30)
        return " ".join(["w"] * WORDS)

    server.answer = answer
    return hung, prompts


def priced_sweep(
    pytester: pytest.Pytester, server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Twelve items of one priced OpenAI arm on ``server``, each call's worst case
    ``PER_CALL``; the results path."""
    monkeypatch.setenv("TEST_OPENAI_KEY", "sk-test-budget")
    monkeypatch.delenv("ECHO_BENCH_BUDGET_USD", raising=False)
    arm = (f"  a:\n    provider: openai\n    model: m-a\n    base_url: {server.base_url}\n"
           f"    api_key_env: TEST_OPENAI_KEY\n    max_tokens: {WORDS}\n")
    make_spec(
        pytester,
        sim_spec(
            12, arms=arm, extra="retries: {attempts: 1}\npricing:\n  a: {input: 0, output: 1000}\n"
        ),
    )
    return pytester.path / "r.jsonl"


def test_a_killed_workers_hold_is_settled_and_the_run_stops_at_once(
    pytester: pytest.Pytester, openai_server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    hung, prompts = hang_the_third_call(openai_server)
    out = priced_sweep(pytester, openai_server, monkeypatch)
    budget = 6.5 * PER_CALL  # 6 calls: the lost one (charged) and 5 more; never a 7th
    proc = start(
        pytester.path,
        "demo.yaml",
        "--bench-out",
        str(out),
        "-n",
        "2",
        "--bench-concurrency",
        "1",
        "--bench-budget-usd",
        repr(budget),
    )
    try:
        wait_for(hung.is_set, 60)
        port = next(
            r["port"]
            for r in openai_server.requests
            if r["body"]["messages"][-1]["content"] == prompts[2]
        )
        lost = _caller(port, _children(proc.pid))
        assert lost is not None
        os.kill(lost, signal.SIGKILL)
        t0 = time.monotonic()
        status, output = finish(proc, timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert status == 2, output
    # before: the last call waited 600 s for the lost hold to come back
    assert time.monotonic() - t0 < 60, output
    _, rows = read_rows(out)
    assert len(rows) == 5 and sum(float(r["cost_usd"]) for r in rows) <= budget + 1e-9
    ledger = json.loads(Path(f"{out}.budget").read_text())
    assert [name.split("/")[1] for name in ledger["released"]] == [str(lost)] and ledger[
        "holders"
    ] == {}
    # the lost call stands as spent
    assert ledger["accounts"]["run"]["spent"] == pytest.approx(6 * PER_CALL)


def test_a_resume_counts_the_charge_of_the_call_a_killed_worker_lost(
    pytester: pytest.Pytester, openai_server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    hung, prompts = hang_the_third_call(openai_server)
    out = priced_sweep(pytester, openai_server, monkeypatch)
    budget = repr(6.5 * PER_CALL)
    proc = start(
        pytester.path,
        "demo.yaml",
        "--bench-out",
        str(out),
        "-n",
        "2",
        "--bench-concurrency",
        "1",
        "--bench-budget-usd",
        budget,
    )
    try:
        wait_for(hung.is_set, 60)
        port = next(
            r["port"]
            for r in openai_server.requests
            if r["body"]["messages"][-1]["content"] == prompts[2]
        )
        lost = _caller(port, _children(proc.pid))
        assert lost is not None
        os.kill(lost, signal.SIGKILL)
        status, output = finish(proc, timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert status == 2 and len(read_rows(out)[1]) == 5, output
    # The same budget again: the lost call was paid for (no row says so, the
    # ledger does), so nothing fits.
    status, output = finish(
        start(pytester.path, "--bench-resume", str(out), "--bench-budget-usd", budget)
    )
    assert status == 2, output
    assert len(openai_server.requests) == 6  # before: a 7th call, $0.028 billed on a $0.026 budget
    assert "budget: spent $0.0240 of $0.0260" in output


def test_a_resume_after_the_whole_run_was_killed_counts_the_calls_it_had_in_flight(
    pytester: pytest.Pytester, openai_server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    hung, _ = hang_the_third_call(openai_server)
    out = priced_sweep(pytester, openai_server, monkeypatch)
    budget = repr(3.5 * PER_CALL)
    proc = start(pytester.path, "demo.yaml", "--bench-out", str(out), "--bench-concurrency", "1",
                 "--bench-budget-usd", budget)
    try:
        wait_for(hung.is_set, 60)
        # the run and all it started: the hold is left in the ledger
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert len(read_rows(out)[1]) == 2
    status, output = finish(
        start(pytester.path, "--bench-resume", str(out), "--bench-budget-usd", budget)
    )
    assert status == 2, output
    assert len(openai_server.requests) == 3  # before: a 4th call, $0.016 billed on a $0.014 budget
    assert "budget: spent $0.0120 of $0.0140" in output
