"""Edges a new user meets in the report: arms with no graded row, the counts of repeats, the HTML wording."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest

from conftest import Sweep, make_spec, sim_spec
from pytest_echo_bench.ops.render import render, report_json
from pytest_echo_bench.ops.report import build_report, load_results

META = {"_meta": True, "benchmark": "demo", "benchmarks": {"demo": {"spec": "demo.yaml", "fingerprint": "f1", "items": 3}},
        "arms": {"demo": ["A", "B", "C"]}}


def row(task_id: str, arm: str, passed: bool, **fields: Any) -> dict[str, Any]:
    base = {"task_id": task_id, "arm": arm, "passed": passed, "detail": "passed" if passed else "expected B got C",
            "wall_seconds": 1.0, "sub_calls": 1, "benchmark": "demo", "status": "correct" if passed else "wrong",
            "output": "", "answer": "B" if passed else "C", "target": "B", "schema": 1}
    return {**base, **fields}


def write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture
def silent_arm(tmp_path: Path) -> Path:
    """The meta names A, B and C; C has no graded row (every item of it went unrecorded)."""
    rows = [row("t1", "A", True), row("t2", "A", False), row("t1", "B", False), row("t2", "B", True)]
    return write(tmp_path / "run.jsonl", [META, *rows])


def test_an_arm_without_graded_rows_is_listed_with_n_0_and_no_rate(silent_arm: Path) -> None:
    report = build_report(load_results([silent_arm]))
    assert [(s.arm, s.n, s.pass_rate) for s in report.arms] == [("A", 2, 0.5), ("B", 2, 0.5), ("C", 0, None)]
    c = report.arms[2]
    assert c.not_completed == 2  # the ids the other arms recorded
    # The comparisons leave it out: with it every oracle and pair would shrink to 0 shared items.
    assert [(p.a, p.b, p.n) for p in report.pairs] == [("A", "B", 2)]
    assert report.oracles[0].arms == ("A", "B") and report.oracles[0].n == 2


def test_every_format_shows_the_silent_arm(silent_arm: Path) -> None:
    report = build_report(load_results([silent_arm]))
    line = next(line for line in render(report, "table").splitlines() if line.startswith("demo       C"))
    assert line.split()[2:5] == ["0", "0", "n/a"]
    assert "| demo | C | 0 | 0 | n/a |" in render(report, "markdown")
    data = report_json(report)["arms"]["C"]
    assert (data["n"], data["correct"], data["pass_rate"]) == (0, 0, None)
    assert json.loads(render(report, "json"))["arms"]["C"]["pass_rate"] is None
    (c,) = [r for r in csv.DictReader(io.StringIO(render(report, "csv"))) if r["arm"] == "C"]
    assert (c["n"], c["pass_rate"]) == ("0", "")
    page = render(report, "html")
    assert 'data-arm="C"' in page and "n/a [0.000, 1.000] n=0" in page
    # The disagreement table and pair matrix hold only arms with verdicts: no ✗ for C's missing answers.
    assert '<th class="text">C</th>' not in page


def test_a_report_of_only_silent_arms_renders(tmp_path: Path) -> None:
    path = write(tmp_path / "run.jsonl", [META, row("t1", "A", True)])
    report = build_report(load_results([path]))
    assert [(s.arm, s.n) for s in report.arms] == [("A", 1), ("B", 0), ("C", 0)]
    assert not report.pairs and not report.oracles
    for fmt in ("table", "markdown", "json", "csv", "html"):
        assert "C" in render(report, fmt)


def test_the_end_table_and_the_report_agree_on_an_arm_whose_items_all_failed_transiently(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    arms = ("  ok: {provider: sim, accuracy: 1.0}\n"
            "  flaky: {provider: sim, accuracy: 1.0, faults: {transient_rate: 1.0}}")
    make_spec(pytester, sim_spec(2, arms=arms, extra="retries: {attempts: 2, backoff_s: 0.01, max_backoff_s: 0.02}\n"))
    result, _, rows = sweep.run()
    assert result.ret == 2 and {r["arm"] for r in rows} == {"ok"}
    end = [line.split() for line in result.stdout.lines if line.startswith("demo") and "flaky" in line.split()[:2]]
    assert end and end[0][2:5] == ["0", "0", "n/a"]
    report = build_report(load_results([sweep.out]))
    assert [(s.arm, s.n, s.pass_rate) for s in report.arms] == [("ok", 2, 1.0), ("flaky", 0, None)]
