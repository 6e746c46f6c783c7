"""Sweep operations: shards and merge, regrade, gates, the supervisor, live artifacts."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from openai_server import FakeOpenAI

from conftest import Sweep, make_spec, read_rows, sim_spec
from pytest_echo_bench.analysis.gates import bind_gates, parse_gate
from pytest_echo_bench.cli.main import main

ARMS = "  a: {provider: sim, accuracy: 0.7}\n  b: {provider: sim, accuracy: 0.4}"


def report_json(*files: Path) -> dict[str, Any]:
    from pytest_echo_bench.report.figures import build_report, load_results
    from pytest_echo_bench.report.formats.text import report_json

    return report_json(build_report(load_results(list(files))))


def test_four_shards_merged_equal_the_unsharded_run(pytester: pytest.Pytester, sweep: Sweep,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    make_spec(pytester, sim_spec(40, arms=ARMS))
    whole = pytester.path / "whole.jsonl"
    sweep.run("--bench-out", str(whole))
    shards = []
    for k in range(1, 5):
        shard = pytester.path / f"shard{k}.jsonl"
        result, _, _ = sweep.run("--bench-out", str(shard), "--bench-shard", f"{k}/4")
        assert result.ret == 0
        shards.append(shard)
    keys = [{(r["task_id"], r["arm"]) for r in read_rows(s)[1]} for s in shards]
    assert sum(map(len, keys)) == 80 and len(set().union(*keys)) == 80  # disjoint and complete
    assert all(5 < len(k) < 35 for k in keys)
    merged = pytester.path / "merged.jsonl"
    assert main(["merge", *map(str, shards), "-o", str(merged)]) == 0
    assert "80 rows, 0 duplicates removed, 0 conflicts" in capsys.readouterr().out
    verdicts = (
        "n",
        "correct",
        "pass_rate",
        "ci95",
        "unparseable",
        "errors",
        "not_completed",
        "sub_calls_mean",
    )
    def numbers(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {arm: {k: v[k] for k in verdicts} for arm, v in report["arms"].items()}

    # wall times differ between runs
    assert numbers(report_json(merged)) == numbers(report_json(whole))
    assert report_json(merged)["pairs"] == report_json(whole)["pairs"]
    meta, _ = read_rows(merged)
    assert meta is not None and meta["selection"]["shard"] == "" and len(meta["merged_from"]) == 4
    assert (
        meta["complete"] is True
        and meta["missing_shards"] == []
        and meta["shards"] == ["1/4", "2/4", "3/4", "4/4"]
    )
    tasks = [{task for task, _ in k} for k in keys]
    # both arms of each item in one shard
    assert all(len(k) == 2 * len(t) for k, t in zip(keys, tasks, strict=True))


def test_merge_refuses_different_specs_and_reports_conflicts(
    pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]
) -> None:
    make_spec(pytester, sim_spec(4, arms=ARMS))
    one, two = pytester.path / "one.jsonl", pytester.path / "two.jsonl"
    sweep.run("--bench-out", str(one))
    rows = one.read_text().splitlines()
    flipped = json.loads(rows[1])
    flipped["passed"] = not flipped["passed"]
    two.write_text("\n".join([rows[0], json.dumps(flipped), rows[2]]) + "\n")
    out = pytester.path / "out.jsonl"
    assert main(["merge", str(one), str(two), "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert "2 duplicates removed, 1 conflicts" in captured.out and "kept the newest" in captured.err
    make_spec(pytester, sim_spec(5, arms=ARMS))
    other = pytester.path / "other.jsonl"
    sweep.run("--bench-out", str(other))
    assert main(["merge", str(one), str(other), "-o", str(pytester.path / "bad.jsonl")]) == 2
    assert "cannot be merged" in capsys.readouterr().err
    assert not (pytester.path / "bad.jsonl").exists()


def _flipped(source: Path, target: Path, count: int) -> None:
    """``target``: the meta line of ``source`` and its first ``count``
    rows with their verdicts flipped."""
    lines = source.read_text().splitlines()
    rows = [json.loads(line) for line in lines[1:count + 1]]
    target.write_text(
        "\n".join([lines[0], *(json.dumps({**r, "passed": not r["passed"]}) for r in rows)]) + "\n"
    )


def test_the_merged_file_records_the_conflicts_and_its_report_shows_them(
    pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]
) -> None:
    make_spec(pytester, sim_spec(60, arms=ARMS))
    one, two, merged = (
        pytester.path / "one.jsonl",
        pytester.path / "two.jsonl",
        pytester.path / "merged.jsonl",
    )
    sweep.run("--bench-out", str(one))
    _flipped(one, two, 2)
    assert main(["merge", str(one), str(two), "-o", str(merged)]) == 0
    assert "2 conflicts" in capsys.readouterr().out
    meta, _ = read_rows(merged)
    assert (
        meta is not None
        and meta["merge_conflicts"]["count"] == 2
        and len(meta["merge_conflicts"]["keys"]) == 2
    )
    data = report_json(merged)  # the merged rows hold each key once: only the meta line still knows
    assert (
        len(data["conflicts"]) == 2 and data["duplicates"] == 0 and "conflicts_unlisted" not in data
    )
    assert {(c["task_id"], c["first"], c["second"]) for c in data["conflicts"]} == {
        (r["task_id"], not r["passed"], r["passed"]) for r in read_rows(two)[1]}
    capsys.readouterr()
    assert main(["report", str(merged)]) == 0
    assert (
        "duplicates: 0 repeated row(s) counted once (the newest kept); conflicts: 2"
        in capsys.readouterr().out
    )
    again = pytester.path / "again.jsonl"  # merged again, with no new conflict: the record is kept
    assert main(["merge", str(merged), "-o", str(again)]) == 0
    assert read_rows(again)[0]["merge_conflicts"] == meta["merge_conflicts"]  # type: ignore[index]
    # Bounded: 120 conflicts are all counted, the first 100 listed.
    many = pytester.path / "many.jsonl"
    _flipped(one, many, 120)
    assert main(["merge", str(one), str(many), "-o", str(merged)]) == 0
    recorded = read_rows(merged)[0]["merge_conflicts"]  # type: ignore[index]
    assert recorded["count"] == 120 and len(recorded["keys"]) == 100
    data = report_json(merged)
    assert len(data["conflicts"]) == 100 and data["conflicts_unlisted"] == 20
    capsys.readouterr()
    assert main(["report", str(merged)]) == 0
    assert "conflicts: 120 (20 counted by a merge, not listed)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "value",
    [
        {"count": 1, "keys": [{"benchmark": "demo"}]},
        {"count": 0, "keys": [{}]},
        {"count": "2", "keys": []},
        [],
        {"count": 500, "keys": [{}] * 101},
    ],
)
def test_a_broken_conflict_record_is_refused_naming_the_file(
    pytester: pytest.Pytester, sweep: Sweep, value: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    make_spec(pytester, sim_spec(2, arms=ARMS))
    sweep.run()
    lines = sweep.out.read_text().splitlines()
    sweep.out.write_text(
        "\n".join([json.dumps({**json.loads(lines[0]), "merge_conflicts": value}), *lines[1:]])
        + "\n"
    )
    for argv in (
        ["report", str(sweep.out)],
        ["merge", str(sweep.out), "-o", str(pytester.path / "m.jsonl")],
    ):
        capsys.readouterr()
        assert main(argv) == 2
        assert f"{sweep.out}:1: 'merge_conflicts'" in capsys.readouterr().err
    assert not (pytester.path / "m.jsonl").exists()


@pytest.mark.parametrize("content", ["", "\n\n", "   \n"])
def test_merging_or_reporting_nothing_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 content: str) -> None:
    empty, out = tmp_path / "empty.jsonl", tmp_path / "out.jsonl"
    empty.write_text(content)
    assert main(["merge", str(empty), str(empty), "-o", str(out)]) == 2
    assert (
        f"{empty}:1: nothing to merge: no meta line and no row in {empty}"
        in capsys.readouterr().err
    )
    assert not out.exists()
    for fmt in ("table", "json", "csv"):
        assert main(["report", str(empty), "--format", fmt]) == 2
        printed = capsys.readouterr()
        assert (
            printed.out == "" and f"no results in {empty}: no meta line and no row" in printed.err
        )


def test_regrade_with_a_changed_scorer_changes_exactly_the_expected_verdicts(
    pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]
) -> None:
    # Outputs say "So the answer is 4.": exact marks every one wrong, bbh reads the answer.
    arms = ("  right: {provider: sim, accuracy: 1.0, template: 'So the answer is {answer}.'}\n"
            "  wrong: {provider: sim, accuracy: 0.0, template: 'So the answer is {answer}.'}")
    spec = make_spec(pytester, sim_spec(5, arms=arms))
    _, _, before = sweep.run()
    assert not any(r["passed"] for r in before)
    spec.write_text(spec.read_text().replace("scorer: exact", "scorer: bbh"))
    new = pytester.path / "regraded.jsonl"
    assert main(["regrade", str(sweep.out), "--spec", str(spec), "-o", str(new)]) == 0
    out = capsys.readouterr().out
    assert "5 verdicts changed" in out
    assert sorted(
        line.split(":")[0] for line in out.splitlines() if "->" in line and "[" in line
    ) == [f"q{i}[right]" for i in range(5)]
    meta, after = read_rows(new)
    assert [r["passed"] for r in after if r["arm"] == "right"] == [True] * 5
    assert not any(r["passed"] for r in after if r["arm"] == "wrong")
    result, _, _ = sweep.run("--bench-resume", str(new))  # the regraded file matches the new spec
    assert result.ret == 0


@pytest.mark.parametrize(
    ("gate", "status", "line"),
    [
        ("a>=0.5", 0, "passed"),
        ("b>=0.9", 1, "FAILED"),
        ("a>=b+0.1", 0, "passed"),
        ("a<b", 1, "FAILED"),
    ],
)
def test_gates_decide_the_exit_status(
    pytester: pytest.Pytester, sweep: Sweep, gate: str, status: int, line: str
) -> None:
    make_spec(pytester, sim_spec(20, arms=ARMS))
    result, _, _ = sweep.run("--bench-gate", gate)
    assert result.ret == status
    result.stdout.fnmatch_lines([f"gate {gate}: *{line}*"])


@pytest.mark.parametrize(
    ("gate", "name"),
    [("zz>=0.1", "zz"), ("a>=zz-0.1", "zz"), ("a >= c", "c"), ("other/a>=0.1", "other/a")],
)
def test_a_gate_naming_no_arm_is_refused_before_the_first_item(
    pytester: pytest.Pytester, sweep: Sweep, gate: str, name: str,
) -> None:
    make_spec(pytester, sim_spec(20, arms=ARMS))
    result, _, _ = sweep.run("--bench-gate", "a>=0.1", "--bench-gate", gate)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--bench-gate '{gate}': no arm '{name}'; known arms: a, b"])
    # nothing ran, nothing was started: the corrected command runs as new
    assert not sweep.out.exists()
    result, _, rows = sweep.run("--bench-gate", "a>=0.1")
    assert result.ret == 0 and len(rows) == 40


def test_gate_names_carry_the_benchmark_when_a_run_has_several() -> None:
    gates = [parse_gate("demo/a>=0.5"), parse_gate("other/x>=demo/a-0.1"), parse_gate("x >= a")]
    bound = bind_gates(gates, {"demo": ["a"], "other": ["x"]})
    assert [(g.arm, g.rhs) for g in bound] == [
        ("demo/a", "0.5"),
        ("other/x", "demo/a - 0.1"),
        ("other/x", "demo/a"),
    ]
    assert bound[1].check({"demo/a": 0.5, "other/x": 0.45}) == (
        True,
        "gate other/x>=demo/a-0.1: passed (other/x = 0.450, bound 0.400)",
    )
    with pytest.raises(
        ValueError,
        match="gate 'a>=0.5': arm name 'a' is ambiguous: 2 benchmarks have it; write one of "
        "demo/a, other/a",
    ):
        bind_gates([parse_gate("a>=0.5")], {"demo": ["a"], "other": ["a"]})
    # one benchmark: keyed bare
    assert [g.arm for g in bind_gates([parse_gate("demo/a>=0.5")], {"demo": ["a"]})] == ["a"]


def test_bad_gate_is_a_usage_error(pytester: pytest.Pytester, sweep: Sweep) -> None:
    make_spec(pytester, sim_spec(2, arms=ARMS))
    result, _, _ = sweep.run("--bench-gate", "a=0.5")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_summary_json_json_report_html_and_progress_lines(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, sim_spec(6, arms=ARMS))
    page, report = pytester.path / "status.html", pytester.path / "report.json"
    result, _, rows = sweep.run("--bench-html", str(page), "--bench-progress-every", "0.000001",
                                "--json-report", f"--json-report-file={report}")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["echo-bench: */12 done · a */6 pass * · b */6 pass *"])
    summary = json.loads((pytester.path / "results.jsonl.summary.json").read_text())
    assert (
        summary["partial"] is False and summary["remaining"] == 0 and summary["arms"]["a"]["n"] == 6
    )
    assert "<progress" in page.read_text() or "arm-progress" in page.read_text()
    data = json.loads(report.read_text())
    assert data["echo_bench"]["arms"]["b"]["n"] == 6
    entry = next(t for t in data["tests"] if t["nodeid"].endswith("q0[a]"))
    assert (
        entry["metadata"]["echo_bench"]["task_id"] == "q0"
        and "output" in entry["metadata"]["echo_bench"]
    )
    assert {r["task_id"] for r in rows} == {f"q{i}" for i in range(6)}


def test_summary_json_is_partial_after_exhaustion(pytester: pytest.Pytester, sweep: Sweep) -> None:
    make_spec(
        pytester,
        sim_spec(8, arms="  a: {provider: sim, accuracy: 1.0, faults: {exhaustion_after: 3}}"),
    )
    result, _, _ = sweep.run("--bench-concurrency", "1")
    assert result.ret == 2
    summary = json.loads((pytester.path / "results.jsonl.summary.json").read_text())
    assert (
        summary["partial"] is True
        and summary["stopped"].startswith("exhausted")
        and summary["remaining"] == 5
    )


def test_supervisor_resumes_through_quota_windows(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeOpenAI(lambda prompt: "4") as server:
        server.quota_after, server.quota_window_s = 5, 1.0
        arms = (
            "  gpt:\n    provider: openai\n    client: http\n    model: m\n    base_url: "
            f"{server.base_url}\n"
            "    api_key_env: null"
        )
        make_spec(
            pytester, sim_spec(12, arms=arms, extra="retries: {attempts: 2, backoff_s: 0.01}\n")
        )
        out = pytester.path / "sup.jsonl"
        status = main(
            [
                "run",
                "--backoff",
                "1.2",
                "--max-retries",
                "5",
                "--",
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                str(pytester.path / "demo.yaml"),
                "--bench-out",
                str(out),
                "--bench-concurrency",
                "1",
                "--rootdir",
                str(pytester.path),
            ]
        )
    log = capsys.readouterr().out
    assert status == 0, log
    assert log.count("echo-bench run: attempt") == 3  # 5 + 5 + 2 items
    assert (
        "attempt 2 at" in log
        and "items remaining" in log
        and "sweep complete after 3 attempt(s)" in log
    )
    _, rows = read_rows(out)
    assert sorted(r["task_id"] for r in rows) == sorted(f"q{i}" for i in range(12))


def test_supervisor_says_a_decided_stop_is_not_a_complete_sweep(
        pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]) -> None:
    arms = "  strong: {provider: sim, accuracy: 1.0}\n  weak: {provider: sim, accuracy: 0.2}"
    make_spec(pytester, sim_spec(120, arms=arms))
    status = main(
        [
            "run",
            "--backoff",
            "0",
            "--",
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(pytester.path / "demo.yaml"),
            "--bench-out",
            str(pytester.path / "d.jsonl"),
            "--bench-stop-when-decided",
            "strong,weak",
            "--rootdir",
            str(pytester.path),
        ]
    )
    log = capsys.readouterr().out
    assert status == 0, log
    assert (
        "echo-bench run: stopped: decided (strong better than weak at" in log
        and "sweep complete" not in log
    )


def test_supervisor_does_not_resume_other_stops(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    make_spec(pytester, sim_spec(2, arms=ARMS))
    status = main(
        [
            "run",
            "--backoff",
            "0",
            "--",
            sys.executable,
            "-m",
            "pytest",
            str(pytester.path / "demo.yaml"),
            "--bench-concurrency",
            "zero",
            "--rootdir",
            str(pytester.path),
        ]
    )
    assert status == 4
    assert "exited with status 4; not resuming" in capsys.readouterr().out


def test_report_command_reads_a_sweep(
    pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]
) -> None:
    make_spec(pytester, sim_spec(10, arms=ARMS))
    sweep.run()
    capsys.readouterr()  # pytester echoes the inner run's output
    assert main(["report", str(sweep.out), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["arms"]["a"]["n"] == 10 and data["pairs"][0]["a"] in ("a", "b")
    assert main(["report", str(pytester.path / "missing.jsonl")]) == 2


def test_report_gates_for_merged_nightly_runs(pytester: pytest.Pytester, sweep: Sweep,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    make_spec(pytester, sim_spec(20, arms=ARMS))
    sweep.run()
    capsys.readouterr()
    assert main(["report", str(sweep.out), "--gate", "a>=0.5", "--gate", "a>=b"]) == 0
    assert main(["report", str(sweep.out), "--gate", "b>=0.9"]) == 1
    assert "gate b>=0.9: FAILED" in capsys.readouterr().err
