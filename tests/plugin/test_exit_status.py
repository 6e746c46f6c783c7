"""The exit decision as a table: (what the run saw, the stops) -> (status, stop, marker written).

``decide`` is pure; the controller only gathers its inputs and writes the marker it decides on,
so each row here is a run that the sweep tests would need minutes and real signals to stage.
"""

from __future__ import annotations

import pytest

from pytest_echo_bench.plugin.exit_status import Exit, Outcomes, Stops, decide
from pytest_echo_bench.store.files import StopReason

EXHAUSTED = StopReason("exhausted", "429 insufficient_quota")
MARKED = StopReason("interrupted", "SIGTERM")

# (name, outcomes, stops, status, stop reason or None, the marker written)
TABLE = [
    ("complete", Outcomes(0), Stops(), 0, None, False),
    ("wrong answers are results", Outcomes(1), Stops(), 0, None, False),
    ("--bench-strict makes them a failure", Outcomes(1, strict=True), Stops(), 1, None, False),
    (
        "an ordinary test failed beside the sweep",
        Outcomes(1, other_failures=1),
        Stops(),
        1,
        None,
        False,
    ),
    ("a failed gate", Outcomes(0, gates_passed=False), Stops(), 1, None, False),
    ("a failed gate after wrong answers", Outcomes(1, gates_passed=False), Stops(), 1, None, False),
    ("resume with nothing left", Outcomes(5, resumed=True), Stops(), 0, None, False),
    (
        "resume with nothing left and a failed gate",
        Outcomes(5, resumed=True, gates_passed=False),
        Stops(),
        1,
        None,
        False,
    ),
    ("nothing collected, not a resume", Outcomes(5), Stops(), 5, None, False),
    (
        "the marker wins over everything",
        Outcomes(0, left=3, lost=("gw0",)),
        Stops(marked=MARKED),
        2,
        "interrupted",
        False,
    ),
    (
        "an item's stop whose marker could not be written",
        Outcomes(0),
        Stops(reported=EXHAUSTED),
        2,
        "exhausted",
        False,
    ),
    (
        "the marker wins over a reported stop",
        Outcomes(0),
        Stops(MARKED, EXHAUSTED),
        2,
        "interrupted",
        False,
    ),
    ("a lost worker", Outcomes(0, left=1, lost=("gw1",)), Stops(), 2, "worker-lost", True),
    (
        "a lost worker before a usage error",
        Outcomes(4, lost=("gw0",)),
        Stops(),
        2,
        "worker-lost",
        True,
    ),
    ("a usage error passes through", Outcomes(4, left=2), Stops(), 4, None, False),
    ("an internal error passes through", Outcomes(3), Stops(), 3, None, False),
    (
        "a collection error keeps pytest's status",
        Outcomes(2, collect_errors=1),
        Stops(),
        2,
        None,
        False,
    ),
    (
        "an arm that cannot run",
        Outcomes(0, required={"demo/gpt": "no key"}),
        Stops(),
        2,
        "arm-unavailable",
        True,
    ),
    ("items left incomplete", Outcomes(0, left=2, has_rows=True), Stops(), 2, "incomplete", True),
    ("interrupted with rows", Outcomes(2, has_rows=True), Stops(), 2, "interrupted", True),
    ("interrupted before any row leaves no marker", Outcomes(2), Stops(), 2, "interrupted", False),
    ("interrupted with items left", Outcomes(2, left=4), Stops(), 2, "interrupted", True),
]


@pytest.mark.parametrize(
    ("outcomes", "stops", "status", "reason", "write"),
    [row[1:] for row in TABLE],
    ids=[row[0] for row in TABLE],
)
def test_the_exit_decision(
    outcomes: Outcomes, stops: Stops, status: int, reason: str | None, write: bool
) -> None:
    decided = decide(outcomes, stops)
    assert decided.status == status
    assert (decided.stop.reason if decided.stop else None) == reason
    assert decided.write == write


def test_a_written_stop_carries_its_details() -> None:
    lost = decide(Outcomes(0, left=3, lost=("gw0", "gw1")), Stops())
    assert lost.details == {"workers": ["gw0", "gw1"]} and lost.stop is not None
    assert (
        lost.stop.message == "xdist lost worker gw0, gw1 (killed or crashed); 3 items not completed"
    )
    arms = decide(Outcomes(0, required={"b/y": "same", "a/x": "same", "c/z": "other"}), Stops())
    assert arms == Exit(
        2, StopReason("arm-unavailable", "same; other"), True, {"arms": ["a/x", "b/y", "c/z"]}
    )
    assert decide(Outcomes(2, left=4), Stops()).stop == StopReason(
        "interrupted", "4 items not completed"
    )
    assert decide(Outcomes(0, left=4), Stops()).stop == StopReason(
        "incomplete", "4 items not completed"
    )
