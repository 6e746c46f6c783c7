"""What `echo-bench report` says was spent: per arm the sum of the rows' cost_usd (unknown costs
counted, never as 0), and a budgeted run's budget and spend as its
stop marker or summary recorded."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from results_files import meta, row, write

from pytest_echo_bench.budget.spend import run_budget
from pytest_echo_bench.cli.main import main
from pytest_echo_bench.report.figures import Report, build_report, load_results
from pytest_echo_bench.report.formats import render
from pytest_echo_bench.report.formats.text import report_json

META_AB = meta(arms=("A", "B"), items=9)


def spend_rows() -> list[dict[str, Any]]:
    """A: 0.5 + 0.5 (a retried key: both calls were paid for) + a cached row (0) + two unknown
    costs; B: three rows, none of which says what it cost."""
    return [
        META_AB,
        row("t0", "A", False, status="error", cost_usd=0.5),
        row(
            "t0",
            "A",
            True,
            cost_usd=0.5,
            started_at="2024-01-01T00:00:05Z",
            finished_at="2024-01-01T00:00:06Z",
        ),
        row("t1", "A", True, cost_usd=None),
        row("t2", "A", True, cost_usd="NaN"),
        row("t3", "A", True, cost_usd=0.25, cache_hits=1),
        *(row(f"t{i}", "B", True, cost_usd=None) for i in range(3)),
    ]


@pytest.fixture
def spent(tmp_path: Path) -> Report:
    return build_report(load_results([write(tmp_path / "run.jsonl", spend_rows())]))


def test_spend_per_arm_counts_every_paid_row_and_unknown_costs_apart(spent: Report) -> None:
    a, b = spent.arms[0], spent.arms[1]
    assert (a.arm, a.spend_usd, a.spend_unknown) == ("A", pytest.approx(1.0), 2)
    # the list price of the newest rows: not what was spent
    assert a.cost_usd == pytest.approx(0.75)
    assert (b.arm, b.spend_usd, b.spend_unknown) == ("B", None, 3)  # no cost known: never 0


def test_every_format_shows_the_spend_and_the_unknown(spent: Report) -> None:
    table = render(spent, "table")
    header, line_a, line_b = table.splitlines()[1:4]
    assert (
        header.endswith("spend usd")
        and line_a.endswith("1.0000 + 2 unknown")
        and line_b.endswith("3 unknown")
    )
    assert "0.0000" not in line_b and "N unknown: rows whose cost is not known" in table
    assert "| 1.0000 + 2 unknown |" in render(spent, "markdown")
    data = report_json(spent)
    assert (data["arms"]["A"]["spend_usd"], data["arms"]["A"]["spend_unknown"]) == (
        pytest.approx(1.0),
        2,
    )
    assert (data["arms"]["B"]["spend_usd"], data["arms"]["B"]["spend_unknown"]) == (None, 3)
    lines = {r["arm"]: r for r in csv.DictReader(io.StringIO(render(spent, "csv")))}
    assert (lines["A"]["spend_usd"], lines["A"]["spend_unknown"]) == ("1.0", "2")
    # empty: unknown, not 0
    assert (lines["B"]["spend_usd"], lines["B"]["spend_unknown"]) == ("", "3")
    page = render(spent, "html")
    assert "<h3>Spend per arm</h3>" in page
    assert "<td>1.0000 + 2 unknown</td>" in page and "<td>3 unknown</td>" in page


def test_a_report_without_costs_shows_no_spend(tmp_path: Path) -> None:
    report = build_report(
        load_results(
            [write(tmp_path / "run.jsonl", [META_AB, row("t0", "A", True), row("t0", "B", True)])]
        )
    )
    assert "spend" not in render(report, "table") and "Spend per arm" not in render(report, "html")
    assert report_json(report)["budgets"] == []


def test_a_subtasks_line_has_no_spend_of_its_own(tmp_path: Path) -> None:
    records = [
        META_AB,
        row("t0", "A", True, subtask="x", cost_usd=0.1),
        row("t1", "A", True, subtask="y", cost_usd=0.2),
    ]
    data = report_json(build_report(load_results([write(tmp_path / "run.jsonl", records)])))
    assert data["arms"]["A"]["spend_usd"] == pytest.approx(0.3)
    assert all("spend_usd" not in s for s in data["subtasks"]["A"].values())


STOP = {
    "reason": "budget",
    "message": "spent",
    "spent_usd": 0.032,
    "budget_usd": 0.034,
    "needed_usd": 0.048,
    "suggested_usd": 0.08,
    "refused_calls": 12,
}


def test_the_report_shows_the_budget_its_stop_marker_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = write(tmp_path / "run.jsonl", spend_rows())
    Path(f"{results}.stop.json").write_text(json.dumps(STOP))
    assert main(["report", str(results)]) == 0
    out = capsys.readouterr().out
    assert (
        f"budget: {results}: spent $0.0320 of a $0.0340 budget; the calls not sent need up "
        "to $0.0480 more; "
        "resume with --bench-budget-usd 0.08 (from its stop marker)"
    ) in out
    assert main(["report", str(results), "--format", "json"]) == 0
    budgets = json.loads(capsys.readouterr().out)["budgets"]
    assert budgets == [
        {
            "results": str(results),
            "source": "stop marker",
            "budget_usd": 0.034,
            "spent_usd": 0.032,
            "needed_usd": 0.048,
            "suggested_usd": 0.08,
            "over_bound_replies": 0,
            "over_bound_usd": 0.0,
        }
    ]
    assert main(["report", str(results), "--format", "html"]) == 0
    assert '<p class="budget">Budget: ' in capsys.readouterr().out


def test_without_a_budget_stop_the_summary_says_what_the_last_run_spent(tmp_path: Path) -> None:
    results = write(tmp_path / "run.jsonl", spend_rows())
    Path(f"{results}.stop.json").write_text(
        json.dumps({"reason": "interrupted", "message": "Ctrl-C"})
    )
    Path(f"{results}.summary.json").write_text(
        json.dumps({"budget": {"spent_usd": 0.01, "budget_usd": None}})
    )
    found = run_budget(results)
    assert found is not None and (found.source, found.spent_usd, found.budget_usd) == (
        "summary",
        0.01,
        None,
    )
    assert found.text().endswith("spent $0.0100 (budgets per benchmark or arm) (from its summary)")


@pytest.mark.parametrize("marker", [
    {**STOP, "spent_usd": "0.03"}, {**STOP, "spent_usd": -1}, {**STOP, "spent_usd": float("nan")},
    {**STOP, "budget_usd": "lots"}, {**STOP, "spent_usd": 10 ** 400}, ["budget"], "budget",
])
def test_a_marker_whose_figures_are_not_amounts_is_not_shown(tmp_path: Path, marker: Any) -> None:
    results = write(tmp_path / "run.jsonl", spend_rows())
    Path(f"{results}.stop.json").write_text(json.dumps(marker))
    assert run_budget(results) is None


def test_side_files_that_are_not_small_regular_files_are_not_read(tmp_path: Path) -> None:
    results = write(tmp_path / "run.jsonl", spend_rows())
    Path(f"{results}.stop.json").write_text(json.dumps(STOP) + " " * (1 << 20))  # over the cap
    assert run_budget(results) is None
    Path(f"{results}.stop.json").unlink()
    # a FIFO would block a plain open: refused without opening it
    os.mkfifo(f"{results}.summary.json")
    assert run_budget(results) is None
    assert run_budget(tmp_path / "missing.jsonl") is None
