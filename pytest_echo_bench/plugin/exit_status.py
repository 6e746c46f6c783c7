"""The run's exit status, decided by one pure function from what the run saw.

``decide(outcomes, stops)`` reads no file and writes none: the controller gathers the counts and
the stop marker, calls it, and writes the marker only when the decision says so. 0 is a sweep
that completed (wrong answers included) or stopped once its comparisons were decided, 1 a failed
gate or ``--bench-strict``, 2 a sweep that stopped early and can be resumed; pytest's own usage
and internal errors pass through.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_echo_bench.store.files import DECIDED, StopReason

OK, FAILED, STOPPED = (
    int(pytest.ExitCode.OK),
    int(pytest.ExitCode.TESTS_FAILED),
    int(pytest.ExitCode.INTERRUPTED),
)
_PASSED_THROUGH = (int(pytest.ExitCode.USAGE_ERROR), int(pytest.ExitCode.INTERNAL_ERROR))


@dataclass(frozen=True)
class Outcomes:
    """What the run's reports and pytest said."""

    pytest_status: int
    left: int = 0  # items incomplete or aborted
    lost: tuple[str, ...] = ()  # xdist workers lost during the run
    # "<benchmark>/<arm>" not optional -> why it could not run
    required: Mapping[str, str] = field(default_factory=dict)
    collect_errors: int = 0
    other_failures: int = 0  # ordinary tests of the same run that failed
    resumed: bool = False
    strict: bool = False
    has_rows: bool = False  # the results file holds anything
    gates_passed: bool = True
    # calls were not sent for the budget: its stop, with the marker's figures
    budget: StopReason | None = None
    budget_details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Stops:
    marked: StopReason | None = None  # the stop marker on disk (the first stop wins)
    # an item's own stop, in case its marker could not be written
    reported: StopReason | None = None


@dataclass(frozen=True)
class Exit:
    status: int
    stop: StopReason | None = None  # why the run stopped early (None: it did not)
    write: bool = False  # the controller writes ``stop`` as the marker, with ``details``
    details: Mapping[str, Any] = field(default_factory=dict)


def decide(outcomes: Outcomes, stops: Stops) -> Exit:
    """The exit status and the stop, in order of precedence: a stop already marked or reported,
    a lost worker, pytest's own errors, arms that could not run, the
    budget, items left or an interrupt."""
    o = outcomes
    # The marker first; else our own stop whose marker could not be
    # written (an unwritable directory).
    for stop in (stops.marked, stops.reported):
        if stop is not None:  # decided: stopped early on purpose, the sweep's question answered
            return Exit(OK if stop.reason == DECIDED else STOPPED, stop)
    if o.lost:
        stop = StopReason(
            "worker-lost",
            f"xdist lost worker {', '.join(o.lost)} (killed or crashed); {o.left} items not "
            "completed",
        )
        return Exit(STOPPED, stop, True, {"workers": list(o.lost)})
    if o.pytest_status in _PASSED_THROUGH or o.collect_errors:
        return Exit(o.pytest_status)
    if o.required:
        names = sorted(o.required)
        # Routing arms over one broken arm carry its message: each message once.
        stop = StopReason(
            "arm-unavailable", "; ".join(dict.fromkeys(o.required[name] for name in names))
        )
        return Exit(STOPPED, stop, True, {"arms": names})
    # an interrupt is the user's stop, not the budget's
    if o.budget is not None and o.pytest_status != STOPPED:
        return Exit(STOPPED, o.budget, True, o.budget_details)
    interrupted = o.pytest_status == STOPPED
    if interrupted or o.left:
        stop = StopReason("incomplete" if o.left and not interrupted else "interrupted",
                          f"{o.left} items not completed" if o.left else "the run was interrupted")
        # an interrupt before any row leaves no marker
        return Exit(STOPPED, stop, o.has_rows or o.left > 0)
    return Exit(_completed(o))


def _completed(o: Outcomes) -> int:
    status = o.pytest_status
    if status == int(pytest.ExitCode.NO_TESTS_COLLECTED) and o.resumed:
        status = OK  # resume found nothing left: the sweep is complete
    elif status == FAILED and not o.strict and not o.other_failures:
        status = OK  # wrong answers are results, not a failed run
    if status == OK and not o.gates_passed:
        return FAILED  # a CI gate failed: the sweep itself completed
    return status
