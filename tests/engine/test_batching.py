"""Batched arms: each item's request sent once through the provider's batch API (here the sim's,
offline), its answer graded and recorded as a live call's, the journal telling what was sent."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from conftest import Sweep, make_spec, sim_spec
from pytest_echo_bench.cli.main import main
from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.engine.batch_items import custom_id
from pytest_echo_bench.providers import sim_batch
from pytest_echo_bench.providers.base import Request
from pytest_echo_bench.providers.sim import SimProvider
from pytest_echo_bench.providers.sim_batch import SimBatchAPI
from pytest_echo_bench.store.batchlog import BatchState, read_journal, read_states

BATCHED = ("  good: {provider: sim, accuracy: 1.0, batch: {size: 4, poll_s: 0.01}}\n"
           "  live: {provider: sim, accuracy: 0.0}")


@pytest.fixture(autouse=True)
def _fresh_bills() -> None:
    """What the sim billed, counted from each test's start (custom ids repeat across tests)."""
    sim_batch.BILLED.clear()


def fixed(arms: str, fault: str) -> str:
    """The arms with ``fault`` taken away (its quota raised), for the resume."""
    return arms.replace(fault, "transient_rate: 0.0")


def billed(rows: list[dict[str, object]]) -> dict[str, int]:
    return {str(r["task_id"]): sim_batch.BILLED[custom_id("demo", str(r["task_id"]), "good", 1)]
            for r in rows if r["arm"] == "good"}


def test_a_batched_arm_records_every_item_once_with_its_batch(pytester: pytest.Pytester,
                                                              sweep: Sweep) -> None:
    make_spec(pytester, sim_spec(10, arms=BATCHED))
    result, _, rows = sweep.run()
    result.assert_outcomes(passed=10, failed=10)
    good = [r for r in rows if r["arm"] == "good"]
    live = [r for r in rows if r["arm"] == "live"]
    assert sorted(r["task_id"] for r in good) == sorted(f"q{i}" for i in range(10))
    assert all(r["status"] == "correct" and r["batch_id"].startswith("simbatch_") for r in good)
    assert len({r["batch_id"] for r in good}) == 3  # 4 + 4 + 2
    assert all("batch_id" not in r for r in live)  # a live call's row is as it was
    assert set(billed(rows).values()) == {1}
    journal = read_journal(sweep.out)
    assert len(journal.submissions) == 3 and not journal.open()


def test_batch_on_or_off_is_not_an_arm_change(pytester: pytest.Pytester, sweep: Sweep) -> None:
    make_spec(pytester, sim_spec(3, arms="  good: {provider: sim, accuracy: 1.0}"))
    _, meta_live, _ = sweep.run()
    sweep.out.unlink()
    make_spec(pytester, sim_spec(3, arms="  good: {provider: sim, accuracy: 1.0, batch: true}"))
    _, meta_batch, rows = sweep.run("--bench-batch")
    assert meta_live is not None and meta_batch is not None
    assert meta_live["fingerprint"] == meta_batch["fingerprint"]
    assert len(rows) == 3


def test_every_arm_that_can_with_bench_batch(pytester: pytest.Pytester, sweep: Sweep) -> None:
    make_spec(pytester, sim_spec(3, arms="  good: {provider: sim, accuracy: 1.0}\n"
                                 "  alone: {provider: sim, batch: false}"))
    _, _, rows = sweep.run("--bench-batch")
    assert {r["arm"]: "batch_id" in r for r in rows} == {"good": True, "alone": False}


def test_a_provider_without_a_batch_api_is_refused_with_its_line(pytester: pytest.Pytester,
                                                                  sweep: Sweep) -> None:
    make_spec(pytester, sim_spec(2, arms="  r: {provider: reference, batch: true}"))
    result, _, _ = sweep.run()
    result.stdout.fnmatch_lines(["*demo.yaml:*arms.r.batch*has no batch API*"])


def test_request_errors_go_through_the_classifier(pytester: pytest.Pytester,
                                                  sweep: Sweep) -> None:
    # Transient faults go into a later batch; every item ends with its one row.
    arms = ("  good: {provider: sim, accuracy: 1.0, faults: {transient_rate: 0.4, "
            "expire_rate: 0.3}, batch: {size: 5, poll_s: 0.01}}")
    make_spec(pytester, sim_spec(12, arms=arms) + "retries: {attempts: 8}\n")
    result, _, rows = sweep.run()
    assert sorted(r["task_id"] for r in rows) == sorted(f"q{i}" for i in range(12))
    assert all(r["status"] == "correct" for r in rows)
    assert any(r["retries"] > 0 for r in rows)
    assert set(billed(rows).values()) == {1}


def test_a_quota_stops_the_run_and_the_resume_finishes_it(pytester: pytest.Pytester,
                                                          sweep: Sweep) -> None:
    arms = ("  good: {provider: sim, accuracy: 1.0, faults: {exhaustion_after: 3}, "
            "batch: {size: 10, poll_s: 0.01}}")
    make_spec(pytester, sim_spec(6, arms=arms))
    result, _, rows = sweep.run()
    assert result.ret == 2
    assert len(rows) == 3
    result.stdout.fnmatch_lines(["*--bench-resume*"])
    make_spec(pytester, sim_spec(6, arms=fixed(arms, "exhaustion_after: 3")))
    result, _, rows = sweep.run("--bench-resume", str(sweep.out), "--bench-allow-mismatch")
    assert sorted(r["task_id"] for r in rows) == sorted(f"q{i}" for i in range(6))
    assert set(billed(rows).values()) == {1}


STOPS = ("  good: {provider: sim, accuracy: 1.0, faults: {exhaustion_after: 1}, "
         "batch: {size: 1, open: 1, poll_s: 0.01}}")


def stopped(pytester: pytest.Pytester, sweep: Sweep) -> tuple[str, list[str]]:
    """A sweep of 4 items that a quota stopped after its first row: its run id and the items
    left, with the spec then fixed for the resume."""
    make_spec(pytester, sim_spec(4, arms=STOPS))
    result, meta, rows = sweep.run()
    assert result.ret == 2 and meta is not None and len(rows) == 1
    make_spec(pytester, sim_spec(4, arms=STOPS.replace("exhaustion_after: 1",
                                                       "transient_rate: 0.0")))
    return str(meta["run_id"]), sorted({f"q{i}" for i in range(4)} - {rows[0]["task_id"]})


def submitted(run_id: str, tasks: list[str]) -> tuple[str, list[str]]:
    """A batch of ``tasks`` the sim holds for the run, as a process that died left it."""
    sim = SimProvider("good", 1.0, 0.0, 0.0, None, 0.0, "{answer}", "0")
    ids = [custom_id("demo", task, "good", 1) for task in tasks]
    reqs = [(cid, Request(Example(task, "x", "4"), "good", "x"))
            for cid, task in zip(ids, tasks, strict=True)]
    return SimBatchAPI(sim).submit(reqs, run_id), ids


def journal_lines(out: Path, *records: dict[str, object]) -> None:
    with open(str(out) + ".batches", "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)


def test_a_resume_reattaches_to_a_batch_left_open(pytester: pytest.Pytester,
                                                  sweep: Sweep) -> None:
    """The journal says a batch was accepted and never collected: the resume reads it, and sends
    none of its requests again."""
    run_id, left = stopped(pytester, sweep)
    bid, ids = submitted(run_id, left[:2])
    journal_lines(sweep.out, {"op": "submit", "local": "l1", "benchmark": "demo", "arm": "good",
                              "tag": run_id, "at": time.time(), "ids": ids},
                  {"op": "accepted", "local": "l1", "batch_id": bid})
    _, _, rows = sweep.run("--bench-resume", str(sweep.out))
    assert sorted(r["task_id"] for r in rows) == ["q0", "q1", "q2", "q3"]
    by_task = {r["task_id"]: r["batch_id"] for r in rows}
    assert by_task[left[0]] == by_task[left[1]] == bid != by_task[left[2]]
    assert sim_batch.BILLED[ids[0]] == sim_batch.BILLED[ids[1]] == 1
    assert not read_journal(sweep.out).open()


def test_unknown_submission_is_looked_up_before_anything_is_sent(pytester: pytest.Pytester,
                                                                 sweep: Sweep) -> None:
    """Submitted, then the process died before the batch id was written: ``find`` finds it."""
    run_id, left = stopped(pytester, sweep)
    bid, ids = submitted(run_id, left[:1])
    journal_lines(sweep.out, {"op": "submit", "local": "l9", "benchmark": "demo", "arm": "good",
                              "tag": run_id, "at": time.time(), "ids": ids})
    _, _, rows = sweep.run("--bench-resume", str(sweep.out))
    assert {r["task_id"]: r["batch_id"] for r in rows}[left[0]] == bid
    assert sim_batch.BILLED[ids[0]] == 1
    assert len(rows) == 4 and not read_journal(sweep.out).open()


def test_the_offline_demo_needs_no_server(pytester: pytest.Pytester, sweep: Sweep) -> None:
    make_spec(pytester, sim_spec(5, arms="  a: {provider: sim, batch: true}"))
    result, _, rows = sweep.run("-p", "no:socket")
    assert len(rows) == 5
    assert Path(str(sweep.out) + ".batches").exists()


def test_a_stop_leaves_open_batches_running_and_says_so(pytester: pytest.Pytester,
                                                        sweep: Sweep) -> None:
    """A quota on one arm stops the run while the other arm's batch runs on: the summary names
    it, and the resume collects it without sending its requests again."""
    arms = ("  slow: {provider: sim, accuracy: 1.0, latency_s: 4, batch: {poll_s: 0.2}}\n"
            "  quota: {provider: sim, faults: {exhaustion_after: 0}, batch: {poll_s: 0.01}}")
    make_spec(pytester, sim_spec(3, arms=arms))
    result, _, rows = sweep.run()
    assert result.ret == 2 and rows == []
    result.stdout.fnmatch_lines(["*1 batch(es) left running on the provider: the resume "
                                 "collects them*", "  simbatch_*: 3 request(s) of demo/slow*"])
    make_spec(pytester, sim_spec(3, arms=fixed(arms, "exhaustion_after: 0")))
    _, _, rows = sweep.run("--bench-resume", str(sweep.out), "--bench-allow-mismatch")
    assert len(rows) == 6
    slow = [r for r in rows if r["arm"] == "slow"]
    assert len({r["batch_id"] for r in slow}) == 1
    assert all(sim_batch.BILLED[custom_id("demo", r["task_id"], "slow", 1)] == 1 for r in slow)


def test_batch_cancel_cancels_them_on_a_stop(pytester: pytest.Pytester, sweep: Sweep) -> None:
    arms = ("  slow: {provider: sim, accuracy: 1.0, latency_s: 4, batch: {poll_s: 0.2}}\n"
            "  quota: {provider: sim, faults: {exhaustion_after: 0}, batch: {poll_s: 0.01}}")
    make_spec(pytester, sim_spec(3, arms=arms))
    result, _, _ = sweep.run("--bench-batch-cancel")
    result.stdout.fnmatch_lines(["*1 batch(es) cancelled on the stop*"])
    make_spec(pytester, sim_spec(3, arms=fixed(arms, "exhaustion_after: 0")))
    _, _, rows = sweep.run("--bench-resume", str(sweep.out), "--bench-allow-mismatch")
    assert len(rows) == 6  # the cancelled batch ran nothing: its requests sent again, once
    assert all(n == 1 for n in sim_batch.BILLED.values())


def test_a_budget_holds_batch_requests_at_the_batch_price(pytester: pytest.Pytester,
                                                           sweep: Sweep) -> None:
    """Each request's worst case is held at the batch price before its batch is sent; a request
    that does not fit is not sent; the rows are priced at the batch price."""
    arms = "  a: {provider: sim, accuracy: 1.0, batch: {size: 2, poll_s: 0.01}}"
    # The sim reports 2 prompt tokens an item ("2+2=? (i)": 9 characters): at 1000 $/M, 0.002 $
    # live and 0.001 $ in a batch. Its worst case, 0.0125 $ at the batch price, lets two start.
    prices = "pricing:\n  a: {input: 1000.0, output: 0.0, batch_discount: 0.5}\n"
    make_spec(pytester, sim_spec(6, arms=arms) + prices + "budget: {usd: 0.03}\n")
    result, _, rows = sweep.run()
    assert 0 < len(rows) < 6  # some fit the budget, at half their live price
    result.stdout.fnmatch_lines(["*the worst case of all its arms ($0.012500) does not fit*"])
    assert all(r["cost_usd"] == pytest.approx(0.001) for r in rows)
    assert all(r["charged_usd"] == pytest.approx(0.001) for r in rows)
    assert sum(sim_batch.BILLED.values()) == len(rows)  # a request not held was never sent


def test_progress_shows_each_open_batch_and_its_state(pytester: pytest.Pytester,
                                                      sweep: Sweep) -> None:
    """The page (``echo-bench progress``) and the summary show each open batch's state."""
    arms = ("  slow: {provider: sim, accuracy: 1.0, latency_s: 4, batch: {poll_s: 0.2}}\n"
            "  quota: {provider: sim, faults: {exhaustion_after: 0}, batch: {poll_s: 0.01}}")
    make_spec(pytester, sim_spec(3, arms=arms))
    result, _, _ = sweep.run()
    result.stdout.fnmatch_lines(["*simbatch_*: 3 request(s) of demo/slow (last seen: *)"])
    page = pytester.path / "page.html"
    assert main(["progress", str(sweep.out), "-o", str(page)]) == 0
    text = page.read_text()
    assert "Open batches" in text and "(demo/slow): " in text
    states = read_states(sweep.out)
    assert [s.arm for s in states] == ["slow"]
    assert states[0].state in ("validating", "in_progress", "finalizing")
    line = BatchState("b1", "demo", "gpt", "in_progress", 25, 100, 1000.0).line(1100.0)
    assert line == "b1 (demo/gpt): in progress 25/100, ETA 5m00s"


def test_each_xdist_worker_batches_its_own_items(pytester: pytest.Pytester,
                                                 sweep: Sweep) -> None:
    make_spec(pytester, sim_spec(12, arms=BATCHED))
    result, _, rows = sweep.run("-n", "2")
    assert sorted((r["task_id"], r["arm"]) for r in rows) == sorted(
        (f"q{i}", arm) for i in range(12) for arm in ("good", "live"))
    journal = read_journal(sweep.out)
    sent = [cid for sub in journal.submissions.values() for cid in sub.ids]
    assert len(sent) == len(set(sent)) == 12  # no request in two batches
    assert {r["worker"] for r in rows if r["arm"] == "good"} <= {"gw0", "gw1"}
    assert not journal.open()
