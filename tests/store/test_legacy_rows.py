"""Rows of the older six-field format (no ``status``) read the same everywhere: the report, the
progress page, the end-of-run table and regrade all count a detail starting with "error" as an
error, "unparseable" as unparseable, and the rest by ``passed``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_echo_bench.plugin.live import end_table
from pytest_echo_bench.report.figures import build_report, load_results
from pytest_echo_bench.report.page.state import progress_state
from pytest_echo_bench.results.regrade import regrade
from pytest_echo_bench.store.tally import FileTally

DETAILS = [
    ("q1", True, "passed"),
    ("q2", False, "expected 4 got 5"),
    ("q3", False, "unparseable"),
    ("q4", False, "error: timeout"),
    ("q5", False, "error: HTTP 400: bad request"),
    ("q6", False, "expected 1 got 2"),
]
# What every reader must make of them: (correct, wrong, unparseable, errors).
EXPECTED = (1, 2, 1, 2)
SPEC = """\
benchmark: old
dataset:
  loader: inline
  items: [{id: q1, input: a, target: '1'}, {id: q2, input: b, target: '4'},
          {id: q3, input: c, target: '3'}, {id: q4, input: d, target: '4'},
          {id: q5, input: e, target: '5'}, {id: q6, input: f, target: '1'}]
scorer: exact
arms:
  x: {provider: sim}
"""


@pytest.fixture
def legacy(tmp_path: Path) -> Path:
    path = tmp_path / "old.jsonl"
    rows = [
        {"task_id": t, "arm": "x", "passed": p, "detail": d, "wall_seconds": 0.5, "sub_calls": 1}
        for t, p, d in DETAILS
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_report(legacy: Path) -> None:
    (arm,) = build_report(load_results([legacy])).arms
    assert (
        arm.correct,
        arm.n - arm.correct - arm.unparseable - arm.errors,
        arm.unparseable,
        arm.errors,
    ) == EXPECTED


def test_progress_page(legacy: Path) -> None:
    arm = progress_state(legacy).arms["x"]
    assert (
        arm.correct,
        arm.done - arm.correct - arm.unparseable - arm.errors,
        arm.unparseable,
        arm.errors,
    ) == EXPECTED


def test_end_of_run_table(legacy: Path) -> None:
    ((_, tally),) = FileTally().update(legacy).items()
    assert (tally.correct, tally.items - tally.correct - tally.unparseable - tally.errors,
            tally.unparseable, tally.errors) == EXPECTED
    header, line = end_table(legacy, {})
    assert header.split()[2:8] == ["items", "correct", "pass", "rate", "unparseable", "errors"]
    # arm, items, correct, pass rate, unparseable, errors, not completed, mean wall, spend (no
    # benchmark name; no row has a cost: 6 unknown, not 0, as the report says it)
    assert line.split() == ["x", "6", "1", "0.167", "1", "2", "0", "0.500", "6", "unknown"]


def test_regrade(legacy: Path, tmp_path: Path) -> None:
    """Regrade keeps error rows without output as they are and names
    every other row's old verdict."""
    spec = tmp_path / "old.yaml"
    spec.write_text(SPEC)
    result = regrade(legacy, [spec])
    before = [change.split(": ", 1)[1].split(" -> ", 1)[0] for change in result.changes]
    # The stored outputs are empty, so every regraded row becomes unparseable: the unparseable row
    # is unchanged, and every other row that is not kept names its old verdict.
    assert result.kept == EXPECTED[3]
    assert (
        before.count("correct"),
        before.count("wrong"),
        len(DETAILS) - result.kept - len(before),
        result.kept,
    ) == EXPECTED
