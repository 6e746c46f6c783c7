"""``pair_runs`` and the figures of two runs paired: epochs, judged grades, unjudged rows, several
benchmarks, renamed arms, and Holm over the arms, on files read as ``report`` reads them."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

import pytest
from results_files import meta, row, write

from pytest_echo_bench.analysis.across import anytime_interval, figures, interval
from pytest_echo_bench.results.across import pair_runs
from pytest_echo_bench.results.read import load_results


def read(path: Path, rows: list[dict[str, Any]], **fields: Any) -> Any:
    return load_results([write(path, rows, meta=meta(**fields))])


def test_epochs_pair_sample_by_sample(tmp_path: Path) -> None:
    base = read(tmp_path / "a.jsonl", [row("q", "a", e != 2, epoch=e) for e in (1, 2, 3)],
                epochs=3)
    cand = read(tmp_path / "b.jsonl", [row("q", "a", e == 2, epoch=e) for e in (1, 2)], epochs=3)
    arm = pair_runs(base, cand).arms[0]
    assert (arm.n, arm.regressed, arm.fixed) == (2, 1, 1)
    assert arm.only_base == [("q", 3)] and arm.only_cand == []
    assert sorted((f.task_id, f.epoch, f.regressed) for f in arm.flips) == [
        ("q", 1, True), ("q", 2, False)]


def test_judged_grades_are_compared_by_a_paired_t(tmp_path: Path) -> None:
    grades = [(7.0, 8.0), (5.0, 5.5), (9.0, 6.0), (4.0, 7.0), (6.0, 6.5)]
    base = read(tmp_path / "a.jsonl", [row(f"t{i}", "a", g >= 6, score=g)
                                       for i, (g, _) in enumerate(grades)])
    cand = read(tmp_path / "b.jsonl", [row(f"t{i}", "a", g >= 6, score=g)
                                       for i, (_, g) in enumerate(grades)])
    found = figures(pair_runs(base, cand))[0]
    diffs = [c - b for b, c in grades]
    mean, sd = statistics.fmean(diffs), statistics.stdev(diffs)
    half = 2.7764451051977987 * sd / math.sqrt(len(diffs))  # t(0.975, 4), from a table
    assert found.method == "paired-t" and found.diff == pytest.approx(mean)
    assert found.diff_ci == pytest.approx((mean - half, mean + half), rel=1e-6)
    # grades on 1-10: no anytime-valid sequence for differences outside [-1, 1]
    assert anytime_interval(found.pairing, 0.95) is None


def test_unjudged_rows_are_counted_not_paired(tmp_path: Path) -> None:
    base = read(tmp_path / "a.jsonl", [row("t0", "a", True), row("t1", "a", True)])
    cand = read(tmp_path / "b.jsonl", [row("t0", "a", status="unjudged"), row("t1", "a", False)])
    arm = pair_runs(base, cand).arms[0]
    assert (arm.n, arm.unjudged, arm.regressed) == (1, 1, 1)
    assert arm.cand.unjudged == 1 and arm.cand.rate(arm.cand.unjudged) == 0.5


def test_several_benchmarks_label_arms_and_holm_covers_them_all(tmp_path: Path) -> None:
    rows = [row(f"t{i}", arm, True, benchmark=bench) for bench in ("x", "y")
            for arm in ("a", "b") for i in range(30)]
    worse = [{**r, "passed": r["benchmark"] == "y" or int(r["task_id"][1:]) >= 12,
              "status": "correct" if r["benchmark"] == "y" or int(r["task_id"][1:]) >= 12
              else "wrong"} for r in rows]
    base, cand = read(tmp_path / "a.jsonl", rows), read(tmp_path / "b.jsonl", worse)
    found = figures(pair_runs(base, cand))
    assert [f.label for f in found] == ["x/a", "x/b", "y/a", "y/b"]
    p = 2 / 2**12  # 12 right then wrong, none fixed
    assert found[0].p_value == pytest.approx(p)
    # four arms: the smallest p times 4, the next its own times 3 but never below the one before
    assert found[0].p_holm == found[1].p_holm == pytest.approx(4 * p)
    assert found[2].p_value == 1.0 and found[2].p_holm == 1.0


def test_a_renamed_arm_is_not_named_changed_when_its_parts_agree(tmp_path: Path) -> None:
    def entry(arm: str, model: str) -> dict[str, Any]:
        parts = {f"arm/{arm}": f"d-{model}", f"arm/{arm}/model": model}
        return {"demo": {"spec": "demo.yaml", "fingerprint": "f", "parts": parts}}

    base = read(tmp_path / "a.jsonl", [row("t0", "old", True)], arms=["old"],
                benchmarks=entry("old", "m1"))
    same = read(tmp_path / "b.jsonl", [row("t0", "new", True)], arms=["new"],
                benchmarks=entry("new", "m1"))
    other = read(tmp_path / "c.jsonl", [row("t0", "new", True)], arms=["new"],
                 benchmarks=entry("new", "m2"))
    assert pair_runs(base, same, {"old": "new"}).arms[0].arm_changes == []
    assert pair_runs(base, other, {"old": "new"}).arms[0].arm_changes == [
        "arm 'old' (key 'model')"]


def test_the_anytime_interval_is_wider_than_the_fixed_one(tmp_path: Path) -> None:
    base = read(tmp_path / "a.jsonl", [row(f"t{i}", "a", i % 2 == 0) for i in range(400)])
    cand = read(tmp_path / "b.jsonl", [row(f"t{i}", "a", i % 3 == 0) for i in range(400)])
    arm = pair_runs(base, cand).arms[0]
    fixed, anytime = interval(arm, 0.95), anytime_interval(arm, 0.95)
    assert fixed is not None and anytime is not None
    assert anytime[0] < fixed[0] <= fixed[1] < anytime[1]
