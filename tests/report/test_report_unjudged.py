"""Unjudged rows in the report: left out of n, the pass rates, the intervals and every comparison
(never a wrong answer), counted apart as ``unjudged`` in every format."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from results_files import meta, row, write

from pytest_echo_bench.cli.main import main
from pytest_echo_bench.report.figures import ArmStats, Report, build_report, load_results
from pytest_echo_bench.report.formats import FORMATS, render
from pytest_echo_bench.report.formats.tables import UNJUDGED_NOTE

META = meta(arms=("A", "B"))


def unjudged(task_id: str, arm: str, **fields: Any) -> dict[str, Any]:
    return row(task_id, arm, False, status="unjudged", output="It is B.",
               detail="unjudged: judge grader gave no grade", **fields)


def records() -> list[dict[str, Any]]:
    """A: t1..t4 right, t5 wrong, t6 and t7 unjudged; B: t1 right, t2..t5 wrong, t6 right,
    t7 unjudged."""
    a = [row(f"t{i}", "A", True) for i in range(1, 5)] + [row("t5", "A", False)]
    b = [row("t1", "B", True)] + [row(f"t{i}", "B", False) for i in range(2, 6)]
    return [META, *a, unjudged("t6", "A"), unjudged("t7", "A"), *b, row("t6", "B", True),
            unjudged("t7", "B")]


def report_of(tmp_path: Path, rows: list[dict[str, Any]], **kwargs: Any) -> Report:
    return build_report(load_results([write(tmp_path / "run.jsonl", rows)]), **kwargs)


def arm(report: Report, name: str) -> ArmStats:
    return next(s for s in report.arms if s.arm == name)


def test_unjudged_rows_are_out_of_n_and_counted_apart(tmp_path: Path) -> None:
    report = report_of(tmp_path, records())
    a, b = arm(report, "A"), arm(report, "B")
    assert (a.n, a.correct, a.pass_rate, a.unjudged, a.errors, a.not_completed) == (
        5, 4, 0.8, 2, 0, 0)
    assert (b.n, b.correct, b.unjudged, b.not_completed) == (6, 2, 1, 0)
    assert report.benchmarks[0].tasks == 7  # an unjudged item is recorded, not missing


def test_comparisons_pair_only_items_both_arms_have_a_grade_for(tmp_path: Path) -> None:
    report = report_of(tmp_path, records())
    (pair,) = report.pairs
    # t1..t5 are graded in both; t6 (unjudged in A) and t7 (in both) are left out
    assert (pair.n, pair.a_only, pair.b_only, pair.both, pair.neither) == (5, 3, 0, 1, 1)
    (oracle,) = report.oracles
    assert (oracle.n, oracle.correct) == (5, 4)
    count, shown = report.disagreements["demo"]
    assert count == 3 and {d.task_id for d in shown} == {"t2", "t3", "t4"}


def test_a_report_without_unjudged_rows_is_unchanged(tmp_path: Path) -> None:
    plain = [META, row("t1", "A", True), row("t1", "B", False)]
    report = report_of(tmp_path, plain)
    assert all(s.unjudged == 0 for s in report.arms)
    for fmt in ("table", "markdown"):
        assert "unjudged" not in render(report, fmt).lower(), fmt
    assert "unjudged row" not in render(report, "html")
    assert json.loads(render(report, "json"))["arms"]["A"]["unjudged"] == 0


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_counts_unjudged_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    path = write(tmp_path / "run.jsonl", records())
    assert main(["report", str(path), "--format", fmt]) == 0
    out = capsys.readouterr().out
    if fmt == "json":
        arms = json.loads(out)["arms"]
        assert (arms["A"]["n"], arms["A"]["unjudged"], arms["A"]["pass_rate"]) == (5, 2, 0.8)
        assert (arms["B"]["n"], arms["B"]["unjudged"]) == (6, 1)
    elif fmt == "csv":
        lines = [line for line in csv.DictReader(io.StringIO(out)) if line["kind"] == "arm"]
        assert [(line["arm"], line["n"], line["unjudged"]) for line in lines] == [
            ("A", "5", "2"), ("B", "6", "1")]
    elif fmt == "html":
        assert "3 unjudged row(s)" in out and "A 2 · B 1" in out
    else:
        header = next(line for line in out.splitlines() if "errors" in line)
        cells = [c.strip() for c in header.strip("| ").split("|")] if fmt == "markdown" else (
            header.replace("pass rate", "pass_rate").replace("95% CI", "ci")
            .replace("not completed", "not_completed").split())
        at = cells.index("unjudged")
        assert cells[at - 1] == "errors"
        first = next(line for line in out.splitlines() if line.lstrip("| ").startswith("demo"))
        assert "0.800" in first
        assert UNJUDGED_NOTE in out


def test_with_epochs_an_unjudged_sample_is_not_one_of_the_items_samples(tmp_path: Path) -> None:
    """t1: one sample right, one unjudged: reduced from the right one alone. t2: both unjudged:
    an unjudged item, out of n and pass@k."""
    rows = [meta(arms=("A",), epochs=2),
            row("t1", "A", True, epoch=1), unjudged("t1", "A", epoch=2),
            unjudged("t2", "A", epoch=1), unjudged("t2", "A", epoch=2),
            row("t3", "A", False, epoch=1), row("t3", "A", True, epoch=2)]
    for how, rate in (("mean", 0.75), ("majority", 0.5), ("pass_at_k", 1.0)):
        report = report_of(tmp_path, rows, reduce=how)
        a = arm(report, "A")
        assert (a.n, a.pass_rate, a.unjudged, a.samples, a.not_completed) == (2, rate, 3, 6, 0)
        # pass@2 of the one item with two graded samples (t3)
        assert a.pass_at == {"1": 0.75, "2": 1.0}
        render(report, "csv")  # every format draws it
        render(report, "html")


def test_subtasks_and_clusters_leave_unjudged_rows_out(tmp_path: Path) -> None:
    rows = [META, row("t1", "A", True, subtask="x"), row("t2", "A", False, subtask="y"),
            unjudged("t3", "A", subtask="y"), unjudged("t4", "A", subtask="z")]
    report = report_of(tmp_path, rows)
    a = arm(report, "A")
    assert (a.n, a.clusters, a.unjudged) == (2, 2, 2)  # z has no graded item: no cluster
    subs = {s.subtask: (s.n, s.unjudged, s.pass_rate) for s in report.subtasks}
    assert subs == {"x": (1, 0, 1.0), "y": (1, 1, 0.0), "z": (0, 1, None)}
    render(report, "table")


def test_a_retried_unjudged_row_changing_its_verdict_is_no_conflict(tmp_path: Path) -> None:
    """As a retried error row: an unjudged row judged again is expected to change."""
    first = write(tmp_path / "first.jsonl", [META, unjudged("t1", "A")])
    second = write(tmp_path / "second.jsonl", [META, row("t1", "A", True)])
    report = build_report(load_results([first, second]))
    assert (report.duplicates, report.conflicts) == (1, [])
    assert (arm(report, "A").n, arm(report, "A").unjudged) == (1, 0)
    merged = tmp_path / "merged.jsonl"
    assert main(["merge", str(first), str(second), "-o", str(merged)]) == 0
    assert [json.loads(line)["status"] for line in merged.read_text().splitlines()[1:]] == [
        "correct"]
