"""The controller's and the worker's parts driven directly: what the reports count, the budget's
end, and the window of items a serial run starts early."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_echo_bench.budget.ledger import Ledger, LedgerState
from pytest_echo_bench.engine.outcome import ABORTED, INCOMPLETE, ROW, UNAVAILABLE
from pytest_echo_bench.plugin import budget
from pytest_echo_bench.plugin.calling import Upcoming
from pytest_echo_bench.plugin.collect import BenchItem
from pytest_echo_bench.plugin.counts import LISTED, Counts
from pytest_echo_bench.plugin.payload import Payload
from pytest_echo_bench.store.tally import FileTally


def payload(kind: str, arm: str = "a", message: str = "", optional: bool = False) -> Payload:
    return Payload(kind=kind, benchmark="b", task_id="q", arm=arm, epoch=1, status=kind,
                   wall_seconds=None, retries=0, message=message, optional=optional)


def test_counts_say_an_arms_reason_once_and_keep_what_the_exit_status_needs() -> None:
    counts = Counts()
    said = [counts.add(f"s.yaml::q{i}[a]", payload(UNAVAILABLE, message="quota")) for i in range(3)]
    optional = payload(UNAVAILABLE, arm="c", message="gone", optional=True)
    said.append(counts.add("s.yaml::q[c]", optional))
    assert said == ["echo-bench: arm a stopped: quota", None, None,
                    "echo-bench: arm c stopped: gone"]
    assert counts.required == {"b/a": "quota"}  # an optional arm does not stop the sweep
    assert counts.add("s.yaml::q[a]", payload(ROW)) is None
    for i in range(LISTED + 2):
        counts.add(f"s.yaml::r{i}[a]", payload(INCOMPLETE if i % 2 else ABORTED, message="cut"))
    assert counts.left == LISTED + 2
    assert counts.not_completed == {("b", "a"): 3 + LISTED + 2, ("b", "c"): 1}
    assert counts.kinds == {UNAVAILABLE: 4, ROW: 1, ABORTED: 4, INCOMPLETE: 3}
    assert counts.end_lines() == [
        "not run: 3 items of arm a: quota", "not run: 1 items of arm c: gone",
        *(f"not completed: s.yaml::r{i}[a]: cut" for i in range(LISTED)),
        "... and 2 more not completed"]


def refuse(state: LedgerState) -> None:
    """Two calls not sent, which needed half a cent."""
    state.refused, state.needed = 2, 0.005


def test_the_budgets_end_says_a_missing_ledger_and_a_refusal_gives_the_stop(tmp_path: Path) -> None:
    results = str(tmp_path / "run.jsonl")
    limits: dict[str, float | None] = {"run": 0.01}
    missing = budget.settle_end(results, limits, {"b": ["a"]}, FileTally(), ())
    assert missing.line.startswith("echo-bench: the budget ledger")
    assert "cannot be opened" in missing.line
    assert missing.stop is None and missing.next_usd is None  # said, and no stop of the budget's
    ledger = Ledger(results, limits)
    ledger.create(limits, {"run": 0.008})
    ledger.change(refuse)
    ledger.close()
    end = budget.settle_end(results, limits, {"b": ["a"]}, FileTally(), {("b", "q", 1)})
    assert end.line == ("echo-bench: budget: spent $0.0080 of $0.0100; 0 of 1 items complete for "
                        "all arms (0 started)")
    assert end.stop is not None and end.stop.reason == "budget"
    assert end.details["refused_calls"] == 2
    assert end.next_usd == 0.02  # what is spent and what the refused calls need, up to the cent


def test_a_serial_run_starts_the_items_after_the_one_it_runs_following_along() -> None:
    # Only their kind and identity matter to the window: no node is set up.
    items: list[Any] = [object.__new__(BenchItem) for _ in range(6)]
    upcoming = Upcoming(None, 2)
    assert upcoming.after(items, items[0]) == items[1:3]
    assert upcoming.after(items, items[1]) == items[2:4]
    assert upcoming.after(items, items[1]) == items[2:4]  # the same one again (a rerun)
    assert upcoming.after(items, items[4]) == items[5:6]  # skipped ahead (deselected in between)
    assert upcoming.after(items, items[5]) == []
