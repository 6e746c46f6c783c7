"""The report module: numbers checked against hand-computed values, and every rendering."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from results_files import meta, row, write

from conftest import Sweep, make_spec, sim_spec
from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.report.figures import ArmStats, Conflict, Report, build_report, load_results
from pytest_echo_bench.report.formats import render
from pytest_echo_bench.report.formats.text import report_json

META = meta(arms=("B", "A"), items=30)


def old_row(task_id: str, arm: str, detail: str, wall: float = 2.0) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "arm": arm,
        "passed": detail == "passed",
        "detail": detail,
        "wall_seconds": wall,
        "sub_calls": 1,
    }


def paired(a_only: int, b_only: int, both: int, neither: int) -> list[dict[str, Any]]:
    """Rows for arms A and B with the given 2x2 table, one task id per cell entry."""
    cells = (
        [(True, False)] * a_only
        + [(False, True)] * b_only
        + [(True, True)] * both
        + [(False, False)] * neither
    )
    return [
        row(f"t{i}", arm, ok) for i, (a, b) in enumerate(cells) for arm, ok in (("A", a), ("B", b))
    ]


def report_of(
    tmp_path: Path, records: list[dict[str, Any]], tail: str = "", **kwargs: Any
) -> Report:
    return build_report(load_results([write(tmp_path / "run.jsonl", records, tail)]), **kwargs)


def arm(report: Report, name: str) -> ArmStats:
    return next(s for s in report.arms if s.arm == name)


@pytest.fixture
def thirty(tmp_path: Path) -> Report:
    """30 items: A right on 27, B on 26 (a_only=2, b_only=1, both=25, neither=2)."""
    return report_of(tmp_path, [META, *paired(2, 1, 25, 2)])


def test_pass_rates_and_wilson_interval(thirty: Report) -> None:
    a, b = arm(thirty, "A"), arm(thirty, "B")
    assert (a.n, a.correct, b.n, b.correct) == (30, 27, 30, 26)
    assert round(a.pass_rate, 3) == 0.900 and round(b.pass_rate, 3) == 0.867
    assert (round(a.ci95[0], 4), round(a.ci95[1], 4)) == (0.7438, 0.9654)
    assert [s.arm for s in thirty.arms] == ["B", "A"]  # the meta's arm order


@pytest.mark.parametrize(
    ("a_only", "b_only", "both", "neither", "p_value"),
    [(2, 1, 25, 2, 1.0), (10, 2, 5, 3, 0.03857421875), (0, 0, 4, 1, 1.0)],
)
def test_paired_comparison(
    tmp_path: Path, a_only: int, b_only: int, both: int, neither: int, p_value: float
) -> None:
    (pair,) = report_of(tmp_path, paired(a_only, b_only, both, neither)).pairs
    n = a_only + b_only + both + neither
    assert (pair.a, pair.b, pair.n, pair.a_only, pair.b_only, pair.both, pair.neither) == (
        "A",
        "B",
        n,
        a_only,
        b_only,
        both,
        neither,
    )
    assert pair.p_value == pytest.approx(p_value)


def test_paired_comparison_uses_shared_items_only(tmp_path: Path) -> None:
    records = [
        row("t1", "A", True),
        row("t1", "B", False),
        row("t2", "A", True),
        row("t3", "B", True),
    ]
    (pair,) = report_of(tmp_path, records).pairs
    assert (pair.n, pair.a_only, pair.b_only, pair.a_rate, pair.b_rate) == (1, 1, 0, 1.0, 0.0)


def test_older_rows_without_meta(tmp_path: Path) -> None:
    records = [old_row("q1", "x", "passed", 1.0), old_row("q2", "x", "expected 4 got 5", 2.0),
               old_row("q3", "x", "unparseable", 3.0), old_row("q4", "x", "error: timeout", 4.0)]
    s = arm(report_of(tmp_path, records), "x")
    assert (s.benchmark, s.n, s.correct, s.unparseable, s.errors, s.not_completed) == (
        "",
        4,
        1,
        1,
        1,
        0,
    )
    assert (s.wall_mean, s.wall_p50, s.sub_calls_mean) == (2.5, 2.5, 1.0)
    assert (s.escalation_rate, s.prompt_tokens, s.completion_tokens, s.cost_usd) == (
        None,
        None,
        None,
        None,
    )


def test_older_rows_take_the_meta_benchmark_and_a_late_meta_is_ignored(tmp_path: Path) -> None:
    late = {**META, "benchmark": "other"}
    report = report_of(
        tmp_path, [META, old_row("q1", "x", "passed"), late, old_row("q2", "x", "passed")]
    )
    # B and A, which the meta names and no row has, are listed with n = 0
    # (tests/report/test_report_edges.py).
    assert [(s.benchmark, s.arm, s.n) for s in report.arms] == [
        ("demo", "B", 0),
        ("demo", "A", 0),
        ("demo", "x", 2),
    ]


def test_duplicates_are_counted_once_and_conflicts_listed(tmp_path: Path) -> None:
    first = write(
        tmp_path / "a.jsonl",
        [META, row("t1", "A", True), row("t1", "A", True), row("t2", "A", False)],
    )
    second = write(tmp_path / "b.jsonl", [META, row("t1", "A", False), row("t3", "A", True)])
    results = load_results([first, second])
    assert (results.duplicates, results.conflicts) == (
        2,
        [Conflict(("demo", "t1", "A", 1), True, False)],
    )
    report = build_report(results)
    # the newest row of t1 (b.jsonl's) counts
    assert (arm(report, "A").n, arm(report, "A").correct) == (3, 1)
    data = report_json(report)
    assert data["duplicates"] == 2
    assert data["conflicts"] == [
        {"benchmark": "demo", "task_id": "t1", "arm": "A", "first": True, "second": False}
    ]
    assert "duplicates: 2" in render(report) and "t1" in render(report, "markdown")


def test_torn_tail_is_ignored(tmp_path: Path) -> None:
    report = report_of(
        tmp_path, [META, row("t1", "A", True)], tail='{"task_id": "t2", "arm": "A", "pas'
    )
    assert arm(report, "A").n == 1


def test_complete_last_line_without_newline_counts(tmp_path: Path) -> None:
    report = report_of(
        tmp_path, [META, row("t1", "A", True)], tail=json.dumps(row("t2", "A", True))
    )
    assert arm(report, "A").n == 2


@pytest.mark.parametrize("garbage", ["{not json", "[1, 2]", '{"task_id": "t9"}'])
def test_garbage_in_the_middle_names_the_line(tmp_path: Path, garbage: str) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text(
        json.dumps(META) + "\n" + garbage + "\n" + json.dumps(row("t1", "A", True)) + "\n"
    )
    with pytest.raises(StoreError, match=f"{path}:2: "):
        load_results([path])


def test_several_files_are_combined(tmp_path: Path) -> None:
    first = write(tmp_path / "a.jsonl", [META, row("t1", "A", True), row("t1", "B", False)])
    second = write(tmp_path / "b.jsonl", [META, row("t2", "A", False), row("t2", "B", True)])
    report = build_report(load_results([first, second]))
    assert [(s.arm, s.n, s.correct) for s in report.arms] == [("B", 2, 1), ("A", 2, 1)]


def test_not_completed_counts_ids_other_arms_recorded(tmp_path: Path) -> None:
    records = [
        row("t1", "A", True),
        row("t2", "A", True),
        row("t3", "A", False),
        row("t1", "B", True),
    ]
    report = report_of(tmp_path, records)
    assert (arm(report, "A").not_completed, arm(report, "B").not_completed) == (0, 2)


# t1: only C right; t2: A and B right; t3: nobody; t4: only A; t5: answered by A alone
ORACLE_ROWS = [
    ("t1", "A", False), ("t1", "B", False), ("t1", "C", True),
    ("t2", "A", True), ("t2", "B", True), ("t2", "C", False),
    ("t3", "A", False), ("t3", "B", False), ("t3", "C", False),
    ("t4", "A", True), ("t4", "B", False), ("t4", "C", False),
    ("t5", "A", True),
]


@pytest.mark.parametrize(
    ("oracle_arms", "arms", "n", "correct"),
    [(None, ("A", "B", "C"), 4, 3), (["A", "B"], ("A", "B"), 4, 2)],
)
def test_oracle(
    tmp_path: Path, oracle_arms: list[str] | None, arms: tuple[str, ...], n: int, correct: int
) -> None:
    report = report_of(tmp_path, [row(*r) for r in ORACLE_ROWS], oracle_arms=oracle_arms)
    (oracle,) = report.oracles
    assert (oracle.arms, oracle.n, oracle.correct, oracle.pass_rate) == (
        arms,
        n,
        correct,
        correct / n,
    )


def test_unknown_oracle_arm_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown oracle arm"):
        report_of(tmp_path, [row(*r) for r in ORACLE_ROWS], oracle_arms=["Z"])


def test_complementarity(tmp_path: Path) -> None:
    (comp,) = report_of(tmp_path, [row(*r) for r in ORACLE_ROWS]).complementarity
    assert (comp.n, comp.alone) == (4, {"A": 1, "B": 0, "C": 1})


def test_subtasks_from_bbh_ids_and_the_row_field(tmp_path: Path) -> None:
    records = [
        row("bbh/navigate/0", "A", True),
        row("bbh/navigate/1", "A", False),
        row("bbh/navigate/0", "B", True),
        row("q7", "A", True, subtask="arith"),
        row("bbh/snarks/0", "B", False),
    ]
    report = report_of(tmp_path, records)
    subs = {(s.arm, s.subtask): (s.n, s.correct, s.not_completed) for s in report.subtasks}
    assert subs == {
        ("A", "arith"): (1, 1, 0),
        ("A", "navigate"): (2, 1, 0),
        ("B", "navigate"): (1, 1, 1),
        ("B", "snarks"): (1, 0, 0),
    }
    assert report_json(report)["subtasks"]["A"]["navigate"]["correct"] == 1


def test_usage_cost_escalation_and_wall_percentiles(tmp_path: Path) -> None:
    records = [
        row(
            f"t{i}",
            "A",
            True,
            wall_seconds=float(i + 1),
            usage={"prompt_tokens": 10, "completion_tokens": i},
            cost_usd=0.5,
            extra={"escalated": i < 1},
        )
        for i in range(4)
    ]
    # no usage, cost or escalation key
    records.append(row("t4", "A", True, wall_seconds=5.0, extra={"note": "x"}))
    s = arm(report_of(tmp_path, records), "A")
    assert (s.prompt_tokens, s.completion_tokens, s.cost_usd, s.escalation_rate) == (
        40,
        6,
        2.0,
        0.25,
    )
    assert (s.wall_mean, s.wall_p50) == (3.0, 3.0)
    assert s.wall_p95 == pytest.approx(4.8)


def test_json_keys_arms_by_name_for_one_benchmark(thirty: Report) -> None:
    data = json.loads(render(thirty, "json"))
    assert set(data) >= {
        "arms",
        "pairs",
        "benchmarks",
        "oracle",
        "subtasks",
        "complementarity",
        "duplicates",
        "conflicts",
    }
    assert data["arms"]["A"]["ci95"] == [
        pytest.approx(0.7438, abs=1e-4),
        pytest.approx(0.9654, abs=1e-4),
    ]
    assert {
        "n",
        "correct",
        "pass_rate",
        "unparseable",
        "errors",
        "not_completed",
        "wall_p95",
        "cost_usd",
    } <= set(data["arms"]["A"])
    assert (
        data["pairs"][0]["a_only"],
        data["pairs"][0]["b_only"],
        data["pairs"][0]["p_value"],
    ) == (1, 2, 1.0)
    assert data["oracle"]["demo"]["correct"] == 28 and data["benchmarks"]["demo"] == {
        "arms": ["B", "A"],
        "tasks": 30,
    }


def test_json_keys_arms_by_benchmark_when_several(tmp_path: Path) -> None:
    report = report_of(
        tmp_path, [row("t1", "A", True, benchmark="one"), row("t1", "A", False, benchmark="two")]
    )
    assert set(report_json(report)["arms"]) == {"one/A", "two/A"}


def test_csv_has_arm_subtask_and_oracle_lines(tmp_path: Path) -> None:
    records = [row("bbh/navigate/0", "A", True), row("bbh/navigate/0", "B", False)]
    lines = list(csv.DictReader(io.StringIO(render(report_of(tmp_path, records), "csv"))))
    assert [(r["kind"], r["arm"], r["subtask"], r["n"], r["correct"]) for r in lines] == [
        ("arm", "A", "", "1", "1"),
        ("subtask", "A", "navigate", "1", "1"),
        ("arm", "B", "", "1", "0"),
        ("subtask", "B", "navigate", "1", "0"),
        ("oracle", "(oracle)", "", "1", "1"),
    ]
    assert (
        lines[0]["pass_rate"] == "1.0"
        and lines[4]["unparseable"] == ""
        and lines[4]["oracle_arms"] == "A,B"
    )


def test_csv_oracle_line_cannot_be_taken_for_an_arm_called_oracle(tmp_path: Path) -> None:
    records = [row("t1", "oracle", False), row("t1", "B", True)]
    lines = list(csv.DictReader(io.StringIO(render(report_of(tmp_path, records), "csv"))))
    assert [(r["kind"], r["arm"], r["correct"]) for r in lines] == [
        ("arm", "oracle", "0"),
        ("arm", "B", "1"),
        ("oracle", "(oracle)", "1"),
    ]


def test_csv_bounds_are_clamped_and_numbers_stay_numbers(tmp_path: Path) -> None:
    records = [row(f"t{i}", "A", False) for i in range(20)] + [
        row(f"t{i}", "B", True) for i in range(20)
    ]
    lines = list(csv.DictReader(io.StringIO(render(report_of(tmp_path, records), "csv"))))
    # not 5.55e-17, not 0.9999999999999999
    assert (lines[0]["ci95_lo"], lines[1]["ci95_hi"]) == ("0.0", "1.0")
    for line in lines:
        for field in ("n", "correct", "pass_rate", "ci95_lo", "ci95_hi"):
            float(line[field])  # what pandas' numeric inference needs: no quote, no prefix


@pytest.mark.parametrize("name", ["=1+cmd|' /C calc'!A0", "@SUM(1+1)", "+1", "-2+3", "\tx", "\rx"])
def test_csv_text_cells_that_look_like_formulas_are_neutralised(tmp_path: Path, name: str) -> None:
    records = [
        row("bbh/sub/0", name, True, subtask=name),
        row("bbh/sub/0", "B", False, subtask=name),
    ]
    lines = list(
        csv.DictReader(io.StringIO(render(report_of(tmp_path, records), "csv"), newline=""))
    )
    assert lines[0]["arm"] == "'" + name and lines[1]["subtask"] == "'" + name
    assert lines[-1]["oracle_arms"] == "'" + name + ",B"
    assert lines[0]["n"] == "1" and lines[0]["pass_rate"] == "1.0"


def test_table_shows_the_numbers(thirty: Report) -> None:
    text = render(thirty)
    assert "0.900" in text and "0.867" in text and "[0.744, 0.965]" in text
    assert "1.000" in text and "p >= 0.05" in text and "complementarity" in text
    assert "tokens" not in text and "cost" not in text and "escalation" not in text


def test_table_formats_a_small_p_value(tmp_path: Path) -> None:
    assert "0.03857" in render(report_of(tmp_path, paired(10, 2, 5, 3)))


def test_markdown_tables(thirty: Report) -> None:
    text = render(thirty, "markdown")
    assert "| demo | A | 30 | 27 | 0.900 | [0.744, 0.965] |" in text
    assert "| :-- | :-- | --: |" in text


def test_unknown_format_is_refused(thirty: Report) -> None:
    with pytest.raises(ValueError, match="unknown report format 'pdf'"):
        render(thirty, "pdf")


def test_pairs_have_diff_interval_holm_and_power(thirty: Report) -> None:
    (pair,) = report_json(thirty)["pairs"]  # B against A: b_only=2 (A alone right), a_only=1
    assert pair["diff"] == pytest.approx(-1 / 30)
    assert pair["diff_ci95"] == [pytest.approx(-0.1860, abs=1e-4), pytest.approx(0.1144, abs=1e-4)]
    # 3 discordant items: no difference is detectable
    assert pair["p_holm"] == 1.0 and pair["mde80"] is None
    # Connor at psi = 0.1, delta = 1/30: (1.95996 sqrt(0.1) + 0.84162
    # sqrt(0.1 - 1/900))^2 * 900 = 704.1
    assert pair["n_for_80"] == 705
    text = render(thirty)
    assert "[-0.186, +0.114]" in text and "n for 80%" in text and "p holm" in text


def test_holm_adjusts_over_the_pairs_of_one_benchmark(tmp_path: Path) -> None:
    cells = [(True, False, False)] * 12 + [(False, False, True)] * 3 + [(True, True, True)] * 5
    records = [
        row(f"t{i}", arm, ok) for i, c in enumerate(cells) for arm, ok in zip("ABC", c, strict=True)
    ]
    pairs = report_json(report_of(tmp_path, records))["pairs"]
    raw = [p["p_value"] for p in pairs]
    # A-B: 12 vs 0, A-C: 12 vs 3, B-C: 0 vs 3, smallest first: times 3, 2 and 1.
    assert raw == pytest.approx([2 / 4096, 2 * (1 + 15 + 105 + 455) / 2**15, 0.25])
    assert [p["p_holm"] for p in pairs] == pytest.approx([3 * raw[0], 2 * raw[1], raw[2]])


def test_cluster_robust_interval_over_subtasks(tmp_path: Path) -> None:
    # A: 5/10, 5/10, 8/10 over three subtasks: SE 0.1 by hand (tests/analysis/test_stats.py).
    records = [
        row(f"bbh/s{s}/{i}", "A", i < right) for s, right in enumerate((5, 5, 8)) for i in range(10)
    ]
    data = report_json(report_of(tmp_path, records))["arms"]["A"]
    assert (data["clusters"], data["cluster_se"]) == (3, pytest.approx(0.1))
    assert data["cluster_ci95"] == [pytest.approx(0.404, abs=1e-3), pytest.approx(0.796, abs=1e-3)]
    assert "cluster 95% CI" in render(report_of(tmp_path, records))
    plain = report_json(report_of(tmp_path, [row("t1", "A", True)]))["arms"]["A"]
    assert plain["clusters"] is None and plain["cluster_ci95"] is None


def test_cost_per_correct_and_frontier(tmp_path: Path) -> None:
    prices = {
        "strong": (0.9, 0.010),
        "judge": (0.85, 0.002),
        "cheap": (0.5, 0.001),
        "waste": (0.6, 0.020),
    }
    records = [row(f"t{i}", arm, i < rate * 20, cost_usd=cost, cost_units=cost * 1000)
               for arm, (rate, cost) in prices.items() for i in range(20)]
    data = report_json(report_of(tmp_path, records))
    assert data["arms"]["judge"]["cost_per_correct"] == pytest.approx(0.002 * 20 / 17)
    assert data["arms"]["judge"]["cost_units_per_correct"] == pytest.approx(2 * 20 / 17)
    assert (
        data["frontier"]["demo"]["arms"] == ["cheap", "judge", "strong"]
        and data["frontier"]["demo"]["basis"] == "cost_usd"
    )
    assert "cost frontier" in render(report_of(tmp_path, records))
    unpriced = report_json(report_of(tmp_path, [row("t1", "A", True)]))
    assert unpriced["frontier"] == {} and unpriced["arms"]["A"]["cost_per_correct"] is None


def test_disagreements_list_answers(tmp_path: Path) -> None:
    records = [
        row("t1", "A", True, answer="B"),
        row("t1", "B", False, answer="C"),
        row("t2", "A", True),
        row("t2", "B", True),
    ]
    data = report_json(report_of(tmp_path, records))["disagreements"]["demo"]
    assert data["count"] == 1 and data["shown"][0]["answers"] == {"A": "B", "B": "C"}
    assert data["shown"][0]["verdicts"] == {"A": True, "B": False}


# --- large inputs: every path past 1,024 discordant pairs, where float(1 << n) overflowed ---------


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """8,000 items, 3,200 discordant (past both 1,024 and the
    exact-integer limit), over four subtasks."""
    cells = (
        [(True, False)] * 1700
        + [(False, True)] * 1500
        + [(True, True)] * 4000
        + [(False, False)] * 800
    )
    records = [row(f"bbh/s{i % 4}/{i}", arm, ok, cost_usd=0.001 if arm == "A" else 0.002)
               for i, (a, b) in enumerate(cells) for arm, ok in (("A", a), ("B", b))]
    return write(tmp_path_factory.mktemp("large") / "large.jsonl", [META, *records])


@pytest.mark.parametrize("fmt", ["table", "markdown", "json", "csv", "html"])
def test_every_format_on_a_large_file(
    large: Path, fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_echo_bench.cli.main import main

    assert main(["report", str(large), "--format", fmt]) == 0
    out = capsys.readouterr().out
    assert len(out) > 500
    if fmt == "json":
        (pair,) = json.loads(out)["pairs"]
        assert (pair["a_only"], pair["b_only"]) == (1500, 1700)  # B against A, in the meta's order
        assert 0 < pair["p_value"] < 0.001 and pair["diff"] == pytest.approx(-200 / 8000)


def test_gates_on_a_large_file(large: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_echo_bench.cli.main import main

    assert (
        main(
            [
                "report",
                str(large),
                "--format",
                "json",
                "--gate",
                "A>=B",
                "--gate",
                "A >= B - 0.02 @95",
            ]
        )
        == 0
    )
    assert "gate A >= B - 0.02 @95: passed" in capsys.readouterr().err
    assert main(["report", str(large), "--gate", "B >= A - 0.01 @95"]) == 1
    assert "gate B >= A - 0.01 @95: FAILED" in capsys.readouterr().err


@pytest.mark.parametrize(("level", "shown"), [("99.6", "99.6%"), ("99.95", "99.95%")])
def test_a_gate_names_its_level_as_written(large: Path, capsys: pytest.CaptureFixture[str],
                                           level: str, shown: str) -> None:
    """``:.0%`` made every level from 99.5 on "100%"."""
    from pytest_echo_bench.cli.main import main

    assert main(["report", str(large), "--format", "json", "--gate", f"A >= B - 0.5 @{level}"]) == 0
    assert f"passed (A - B {shown} CI [" in capsys.readouterr().err


def test_three_thousand_items_of_two_independent_70_percent_arms(tmp_path: Path) -> None:
    rng = __import__("random").Random(7)
    records = [row(f"t{i}", arm, rng.random() < 0.7) for i in range(3000) for arm in "AB"]
    (pair,) = report_of(tmp_path, records).pairs
    assert pair.a_only + pair.b_only > 1024 and 0 <= pair.p_value <= 1


# --- gates -------------------------------------------------------------------------------------


def test_non_inferiority_gate_uses_the_lower_bound() -> None:
    from pytest_echo_bench.analysis.gates import parse_gate

    gate = parse_gate("judge >= strong - 0.02 @95", paired=True)
    assert (gate.arm, gate.rhs, gate.level) == ("judge", "strong - 0.02", 0.95)
    rates = {"judge": 0.80, "strong": 0.81}
    assert gate.check(rates, lambda a, b, level: (-0.019, 0.01))[0]
    assert not gate.check(rates, lambda a, b, level: (-0.021, 0.01))[0]
    ok, line = gate.check(rates)  # no paired data
    assert not ok and "needs the items both arms answered" in line
    upper = parse_gate("cheap <= strong + 0.05 @90", paired=True)
    seen: list[float] = []
    assert upper.check(
        {"cheap": 0.5, "strong": 0.6}, lambda a, b, level: seen.append(level) or (-0.2, 0.04)
    )[0]
    assert seen == [0.9]


def test_plain_gates_keep_working_and_interval_gates_are_refused_without_pairs() -> None:
    from pytest_echo_bench.analysis.gates import parse_gate

    assert parse_gate("a>=b-0.02").check({"a": 0.5, "b": 0.51})[0]
    assert parse_gate("gpt-4 >= gpt-3 - 0.02").check({"gpt-4": 0.5, "gpt-3": 0.51})[0]
    assert not parse_gate("a>=0.6").check({"a": 0.5})[0]
    with pytest.raises(ValueError, match="needs the items both arms answered"):
        # what --bench-gate calls: a running sweep has no pairs
        parse_gate("judge >= strong - 0.02 @95")
    with pytest.raises(ValueError, match="compares two arms"):
        parse_gate("judge >= 0.8 @95", paired=True)


BAD_BOUNDS = ["nan", "NaN", "inf", "-inf", "1e309", "1.5", "-0.1", "1_0"]


@pytest.mark.parametrize("bound", BAD_BOUNDS)
def test_a_gate_bound_that_is_no_pass_rate_is_refused_before_the_sweep(
        pytester: pytest.Pytester, sweep: Sweep, bound: str) -> None:
    make_spec(pytester, sim_spec(2))
    result, _, _ = sweep.run("--bench-gate", f"good>={bound}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and not sweep.out.exists()
    result.stderr.fnmatch_lines(
        [f"*gate 'good>={bound}': the bound '{bound}' is not a pass rate*from 0 to 1*"]
    )


@pytest.mark.parametrize("bound", BAD_BOUNDS)
def test_a_report_gate_bound_that_is_no_pass_rate_is_a_usage_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], bound: str) -> None:
    from pytest_echo_bench.cli.main import main

    assert main(["report", str(tmp_path / "any.jsonl"), "--gate", f"demo/strong>={bound}"]) == 2
    assert f"the bound '{bound}' is not a pass rate" in capsys.readouterr().err


@pytest.mark.parametrize("bound", ["0", "1", "0.85", " 1.0", "1e-3"])
def test_a_gate_bound_from_0_to_1_is_a_pass_rate(bound: str) -> None:
    from pytest_echo_bench.analysis.gates import parse_gate

    assert parse_gate(f"a>={bound}").check({"a": 1.0})[0]


def test_an_interval_gate_given_to_a_sweep_is_a_usage_error(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, sim_spec(2))
    result, _, _ = sweep.run("--bench-gate", "good >= bad - 0.02 @95")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*needs the items both arms answered*echo-bench report RUN.jsonl --gate RULE*"]
    )


def test_every_format_is_named_once_and_a_new_one_is_a_registry_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_echo_bench.registry import Registry
    from pytest_echo_bench.report import formats

    report = report_of(tmp_path, paired(2, 1, 3, 1))
    assert formats.FORMATS[0] == "table" and set(formats.FORMATS) == set(formats.RENDERERS.names())
    for fmt in formats.FORMATS:
        assert render(report, fmt) == formats.RENDERERS[fmt](report) != ""
    with pytest.raises(
        ValueError, match="unknown report format 'yaml'; choose one of: table, markdown"
    ):
        render(report, "yaml")
    with_arms = Registry("report format", formats._BUILTIN)
    with_arms.register("arms", lambda r: ",".join(s.arm for s in r.arms))
    monkeypatch.setattr(formats, "RENDERERS", with_arms)
    assert render(report, "arms") == "A,B"
