"""Unjudged rows (an output a judge gave no grade) through every reader of the store: counted
apart, never a pass, out of the pass rate's denominator, and run again by a retrying resume only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from results_files import meta, row, write

from pytest_echo_bench.analysis.decide.monitor import score_of
from pytest_echo_bench.plugin.live import UNJUDGED_LINE, end_table
from pytest_echo_bench.report.page.html import render_progress
from pytest_echo_bench.report.page.state import progress_state
from pytest_echo_bench.store.files import STATUSES, UNGRADED, row_status
from pytest_echo_bench.store.reader import read_index
from pytest_echo_bench.store.rows import read_row
from pytest_echo_bench.store.tally import FileTally

JUDGE_FAILED = "unjudged: judge grader: no grade in its reply"


def unjudged(task_id: str, arm: str = "a", passed: bool = False, **fields: Any) -> dict[str, Any]:
    """A row whose output is stored but a judge gave it no grade."""
    return row(task_id, arm, passed, status="unjudged", detail=JUDGE_FAILED,
               output="The answer is B.", **fields)


def sweep_file(path: Path) -> Path:
    """Arm a: 2 correct, 1 wrong, 2 unjudged, 1 error; arm b: 1 correct, 1 unjudged."""
    return write(path, [
        meta(arms=("a", "b")),
        row("t1", "a", True), row("t2", "a", True), row("t3", "a", False),
        unjudged("t4"), unjudged("t5"), row("t6", "a", status="error", detail="error: HTTP 400"),
        row("t1", "b", True), unjudged("t2", "b"),
    ])


def test_the_status_is_known_last_and_holds_no_grade() -> None:
    assert STATUSES == ("correct", "wrong", "unparseable", "error", "unjudged")
    assert UNGRADED == {"error", "unjudged"}
    assert row_status({"status": "unjudged", "passed": False}) == "unjudged"


def test_a_passed_flag_beside_an_unjudged_status_is_not_a_pass(tmp_path: Path) -> None:
    """A hand-edited or hostile row: ``passed: true`` with no grade would put a pass in the
    numerator of a rate whose denominator leaves the row out (a rate above 1)."""
    record = unjudged("t1", passed=True)
    assert read_row(record, "").passed is False
    path = write(tmp_path / "run.jsonl", [meta(arms=("a",)), record])
    (t,) = FileTally().update(path).values()
    assert (t.items, t.correct, t.unjudged, t.graded, t.pass_rate) == (1, 0, 1, 0, 0.0)
    state = progress_state(path)
    assert (state.arms["a"].correct, state.arms["a"].unjudged) == (0, 1)


def test_the_tally_counts_unjudged_rows_apart_and_leaves_them_out_of_the_rate(
    tmp_path: Path,
) -> None:
    path = sweep_file(tmp_path / "run.jsonl")
    tally = FileTally()
    arms = tally.update(path)
    a, b = arms[("demo", "a")], arms[("demo", "b")]
    assert (a.items, a.correct, a.errors, a.unjudged, a.graded) == (6, 2, 1, 2, 4)
    assert a.pass_rate == 0.5  # 2 of the 4 graded rows: the error row counts, as it always has
    assert (b.items, b.correct, b.unjudged, b.pass_rate) == (2, 1, 1, 1.0)
    assert tally.retried() == {"error": 1, "unjudged": 3}


def test_a_plain_resume_keeps_unjudged_rows_a_retrying_one_runs_them_again(
    tmp_path: Path,
) -> None:
    path = sweep_file(tmp_path / "run.jsonl")
    tally = FileTally()
    tally.update(path)
    everything = {("demo", "a", 1): {f"t{i}" for i in range(1, 7)}, ("demo", "b", 1): {"t1", "t2"}}
    graded = {("demo", "a", 1): {"t1", "t2", "t3"}, ("demo", "b", 1): {"t1"}}
    assert tally.recorded().by_arm == everything
    assert tally.recorded(retry_errors=True).by_arm == graded
    # the fast key reader agrees with the tally, on rows of our writer and on rows it cannot type
    assert read_index(path).keys.by_arm == everything
    assert read_index(path, retry_errors=True).keys.by_arm == graded
    odd = tmp_path / "odd.jsonl"
    odd.write_text(path.read_text().replace('"sub_calls": 1', '"sub_calls": "one"'))
    assert read_index(odd, retry_errors=True).keys.by_arm == graded


def test_a_retried_unjudged_row_is_replaced_by_its_grade(tmp_path: Path) -> None:
    """The newest row of a key counts: an unjudged row judged again on a retrying resume becomes
    a graded one, its wall time replaced (the rows a retry runs again keep theirs)."""
    path = sweep_file(tmp_path / "run.jsonl")
    tally = FileTally()
    tally.update(path)
    assert tally.previous(("demo", "t4", "a", 1)) == (4, 1.0)  # unjudged's code, its wall
    with path.open("a") as f:
        f.write(json.dumps(row("t4", "a", True, wall_seconds=3.0)) + "\n")
    a = tally.update(path)[("demo", "a")]
    assert (a.items, a.correct, a.unjudged, a.graded, a.wall) == (6, 3, 1, 5, 8.0)
    assert tally.recorded(retry_errors=True).by_arm[("demo", "a", 1)] == {"t1", "t2", "t3", "t4"}


def test_the_end_table_has_an_unjudged_column_only_when_a_row_is_unjudged(
    tmp_path: Path,
) -> None:
    lines = end_table(sweep_file(tmp_path / "run.jsonl"), {})
    header = lines[0].split()
    assert header[header.index("errors") + 1] == "unjudged"
    cells = dict(zip(["benchmark", "arm", "items", "correct", "pass", "unparseable", "errors",
                      "unjudged"], lines[1].split(), strict=False))
    assert (cells["items"], cells["correct"], cells["pass"], cells["unjudged"]) == (
        "6", "2", "0.500", "2")
    assert lines[-1] == UNJUDGED_LINE
    plain = write(tmp_path / "plain.jsonl", [meta(), row("t1", "a", True)])
    assert not any("unjudged" in line for line in end_table(plain, {}))


def test_an_arm_whose_every_row_is_unjudged_has_no_rate(tmp_path: Path) -> None:
    path = write(tmp_path / "run.jsonl", [meta(arms=("a",)), unjudged("t1"), unjudged("t2")])
    (t,) = FileTally().update(path).values()
    assert (t.graded, t.pass_rate) == (0, 0.0)
    assert end_table(path, {})[1].split()[4] == "n/a"


def test_the_progress_page_counts_unjudged_rows_apart(tmp_path: Path) -> None:
    state = progress_state(sweep_file(tmp_path / "run.jsonl"))
    a = state.arms["a"]
    assert (a.done, a.correct, a.errors, a.unjudged, a.graded) == (6, 2, 1, 2, 4)
    assert state.unjudged == 3 and state.errors == 1
    page = render_progress(state)
    assert "<th>unjudged</th>" in page and "<strong>Unjudged:</strong> 3" in page
    assert "<td>0.500</td>" in page  # 2 of 4 graded
    plain = progress_state(write(tmp_path / "plain.jsonl", [meta(), row("t1", "a", True)]))
    assert "unjudged" not in render_progress(plain).lower()


def test_the_decide_monitor_leaves_unjudged_rows_out() -> None:
    assert score_of("unjudged", False) is None
    assert score_of("unjudged", True) is None
    assert score_of("error", False) is None
    assert score_of("wrong", False) == 0.0


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from(STATUSES), st.booleans()),
                min_size=1, max_size=30))
def test_every_reader_agrees_on_any_mix_of_statuses(
    tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[int, str, bool]],
) -> None:
    """Any sequence of rows (keys repeated, any status, any ``passed`` flag beside it): the tally,
    the page and the key reader count the newest row of each key alike, never a rate above 1."""
    path = tmp_path_factory.mktemp("mix") / "run.jsonl"
    records = [row(f"t{n}", "a", passed, status=status) for n, status, passed in rows]
    write(path, [meta(arms=("a",)), *records])
    newest = {f"t{n}": (status, passed) for n, status, passed in rows}
    (t,) = FileTally().update(path).values()
    unjudged_rows = sum(s == "unjudged" for s, _ in newest.values())
    correct = sum(p and s != "unjudged" for s, p in newest.values())
    assert (t.items, t.unjudged, t.correct) == (len(newest), unjudged_rows, correct)
    assert 0.0 <= t.pass_rate <= 1.0
    arm = progress_state(path).arms["a"]
    assert (arm.done, arm.unjudged, arm.correct) == (t.items, t.unjudged, t.correct)
    again = {k for k, (s, _) in newest.items() if s not in UNGRADED}
    assert read_index(path, retry_errors=True).keys.by_arm.get(("demo", "a", 1), set()) == again


def test_the_tally_counts_the_judges_spend_unless_a_budget_charged_the_item(
    tmp_path: Path,
) -> None:
    """A resume's budget starts from what the file spent: the judges' calls too (a row of a run
    without a budget keeps them apart from the arm's ``cost_usd``), but a budget's charge already
    covers them, and a judgment answered from the cache spent nothing."""
    path = write(tmp_path / "run.jsonl", [
        meta(arms=("a",)),
        row("t1", "a", True, cost_usd=0.5, judge_cost_usd=0.25),
        row("t2", "a", True, cost_usd=0.5, judge_cost_usd=0.25, charged_usd=0.75),
        row("t3", "a", True, cost_usd=0.5, judge_cost_usd="garbage"),
    ])
    (t,) = FileTally().update(path).values()
    assert t.spent == pytest.approx(0.75 + 0.75 + 0.5)
    from pytest_echo_bench.scoring.judgment import Judgment, judge_cost

    paid = Judgment("j", None, "ab", cost_usd=0.25)
    cached = Judgment("j", None, "ab", cost_usd=0.25, cached=True)
    assert judge_cost([paid, cached]) == 0.25 and judge_cost([cached]) == 0.0
    assert judge_cost([Judgment("j", None, "ab")]) is None
