"""The plugin end to end: collection, outcomes, the results file, exit statuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import SHARED_DATA, Sweep, bbh_data, bbh_examples, make_spec, sim_spec


def test_items_are_one_test_per_task_and_arm_with_stable_ids(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, sim_spec(3))
    result, _, _ = sweep.run("--collect-only", "-q")
    result.stdout.fnmatch_lines(
        ["demo.yaml::q0[[]good[]]", "demo.yaml::q0[[]bad[]]", "demo.yaml::q2[[]bad[]]"]
    )
    assert "6 tests collected" in result.stdout.str()
    assert not sweep.out.exists()  # collecting writes nothing


def test_outcomes_rows_and_exit_zero_with_wrong_answers(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, sim_spec(4))
    result, meta, rows = sweep.run()
    result.assert_outcomes(passed=4, failed=4)
    assert result.ret == 0
    assert meta is not None and meta["_meta"] is True and meta["benchmark"] == "demo"
    assert meta["benchmarks"]["demo"]["items"] == 8 and len(meta["fingerprint"]) == 16
    assert len(rows) == 8
    good = [r for r in rows if r["arm"] == "good"]
    bad = [r for r in rows if r["arm"] == "bad"]
    assert all(r["passed"] and r["detail"] == "passed" and r["status"] == "correct" for r in good)
    assert all(not r["passed"] and r["detail"].startswith("expected 4 got ") for r in bad)
    for key in (
        "task_id",
        "arm",
        "wall_seconds",
        "sub_calls",
        "benchmark",
        "output",
        "answer",
        "target",
        "attempts",
        "started_at",
        "finished_at",
        "worker",
        "run_id",
        "usage",
    ):
        assert key in rows[0]
    assert rows[0]["run_id"] == meta["run_id"]


def test_wrong_answer_shows_domain_lines_not_a_traceback(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, sim_spec(1))
    result, _, _ = sweep.run()
    out = result.stdout.str()
    assert "wrong: expected 4 got" in out and "target: 4" in out
    assert "Traceback" not in out and "runtest" not in out
    result.stdout.fnmatch_lines(
        ["*echo-bench summary*", "*demo*bad*1*0*0.000*", "*demo*good*1*1*1.000*"]
    )


def test_extra_keywords_a_plugin_adds_to_one_item_select_only_that_item(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, sim_spec(3))
    pytester.makeconftest("""
        def pytest_itemcollected(item):
            if item.name == "q2[good]":
                item.extra_keyword_matches.add("flagged")
            assert not item.extra_keyword_matches or item.name == "q2[good]"
    """)
    result, _, rows = sweep.run("-k", "flagged")
    result.assert_outcomes(passed=1)
    assert [(r["task_id"], r["arm"]) for r in rows] == [("q2", "good")]


def test_a_spec_whose_arms_come_after_a_large_inline_dataset_is_collected(
    pytester: pytest.Pytester,
) -> None:
    spec = make_spec(pytester, sim_spec(2500))  # 2,500 items put `arms:` about 110 KB into the file
    assert spec.read_text().index("\narms:") > 100_000
    result = pytester.runpytest("-p", "no:cacheprovider", "--collect-only", "-q", "demo.yaml")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*5000 tests collected*"])


def test_bench_strict_gives_pytest_exit_status(pytester: pytest.Pytester, sweep: Sweep) -> None:
    make_spec(pytester, sim_spec(2))
    result, _, _ = sweep.run("--bench-strict")
    assert result.ret == 1


def test_select_by_arm_and_task_with_k_and_markers(pytester: pytest.Pytester, sweep: Sweep) -> None:
    make_spec(pytester, sim_spec(3))
    result, meta, rows = sweep.run("-k", "good and q1")
    result.assert_outcomes(passed=1)
    assert [(r["task_id"], r["arm"]) for r in rows] == [("q1", "good")]
    assert meta is not None and meta["selection"]["keyword"] == "good and q1"
    sweep.out.unlink()
    result, _, rows = sweep.run("-m", "arm_bad")
    result.assert_outcomes(failed=3)
    assert {r["arm"] for r in rows} == {"bad"}


def test_ordinary_yaml_and_tests_are_left_alone(pytester: pytest.Pytester) -> None:
    pytester.makefile(".yaml", config="benchmark_like: 1\nitems: [a, b]\n")
    pytester.makepyfile("def test_one():\n    assert 1\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert (
        "echo-bench:" not in result.stdout.str() and "echo-bench summary" not in result.stdout.str()
    )
    assert not (pytester.path / "bench_results").exists()


def test_ordinary_failures_still_fail_the_run(pytester: pytest.Pytester, sweep: Sweep) -> None:
    make_spec(pytester, sim_spec(1, arms="  good: {provider: sim, accuracy: 1.0}"))
    pytester.makepyfile("def test_broken():\n    assert 0\n")
    result, _, rows = sweep.run(str(pytester.path))
    result.assert_outcomes(passed=1, failed=1)
    assert result.ret == 1 and len(rows) == 1


def test_default_results_path_is_under_bench_results(pytester: pytest.Pytester) -> None:
    make_spec(pytester, sim_spec(1))
    result = pytester.runpytest("-p", "no:cacheprovider")
    files = list((pytester.path / "bench_results").glob("*_demo.jsonl"))
    assert len(files) == 1
    assert result.stdout.str().count(str(files[0])) >= 2  # printed at start and at the end


def test_sim_is_deterministic_across_runs_and_workers(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, sim_spec(30, arms="  mid: {provider: sim, accuracy: 0.5}"))
    _, _, serial = sweep.run()
    sweep.out.unlink()
    _, _, parallel = sweep.run("-n", "2")
    verdicts = lambda rows: sorted((r["task_id"], r["passed"]) for r in rows)  # noqa: E731
    assert verdicts(serial) == verdicts(parallel)
    assert 5 < sum(r["passed"] for r in serial) < 25
    assert {r["worker"] for r in parallel} == {"gw0", "gw1"}


def test_python_arm_routes_between_sub_arms(pytester: pytest.Pytester, sweep: Sweep) -> None:
    pytester.makeconftest("""
        from pytest_echo_bench import ArmContext, arm

        @arm("escalate")
        def escalate(ctx: ArmContext) -> str:
            a, b = ctx.call("cheap"), ctx.call("other")
            if ctx.answer(a) == ctx.answer(b):
                return a
            ctx.extra["escalated"] = True
            return ctx.call("strong")
    """)
    arms = (
        "  cheap: {provider: sim, accuracy: 0.0}\n  other: {provider: sim, accuracy: 1.0}\n"
        "  strong: {provider: sim, accuracy: 1.0}\n  route: {provider: python, function: escalate}"
    )
    make_spec(pytester, sim_spec(3, arms=arms))
    result, _, rows = sweep.run("-k", "route")
    result.assert_outcomes(passed=3)
    assert all(r["sub_calls"] == 3 and r["extra"] == {"escalated": True} for r in rows)


def test_unknown_python_arm_skips_with_what_to_do(pytester: pytest.Pytester, sweep: Sweep) -> None:
    make_spec(pytester, sim_spec(2, arms="  route: {provider: python, function: nowhere}"))
    result, _, rows = sweep.run("-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(
        ["*python arm function 'nowhere' not found*@pytest_echo_bench.arm*"]
    )
    assert rows == []


def test_json_report_keeps_working(pytester: pytest.Pytester, sweep: Sweep) -> None:
    make_spec(pytester, sim_spec(2))
    report = pytester.path / "report.json"
    result, _, _ = sweep.run("--json-report", f"--json-report-file={report}")
    assert result.ret == 0
    summary = json.loads(report.read_text())["summary"]
    assert summary["passed"] == 2 and summary["failed"] == 2


def test_per_arm_concurrency_limit_is_respected(pytester: pytest.Pytester, sweep: Sweep) -> None:
    arms = ("  solo: {provider: sim, accuracy: 1.0, latency_s: 0.05, concurrency: 1}\n"
            "  wide: {provider: sim, accuracy: 1.0, latency_s: 0.05}")
    make_spec(pytester, sim_spec(8, arms=arms))
    result, _, rows = sweep.run("--bench-concurrency", "8")
    assert result.ret == 0

    def most_in_flight(arm: str) -> int:
        spans = [(r["started_at"], r["finished_at"]) for r in rows if r["arm"] == arm]
        return max(sum(s <= start < f for s, f in spans) for start, _ in spans)

    assert most_in_flight("solo") == 1
    assert most_in_flight("wide") > 1


BBH = bbh_data()  # all of BBH beside the project, else the fixture's first three items of each task


def cot_prompts(pytester: pytest.Pytester, tasks: list[str]) -> Path:
    """The paper's prompts beside the project, else stand-ins laid out like them (a
    canary block, then the shots)."""
    shared = SHARED_DATA / "bbh-cot-prompts"
    if shared.is_dir():
        return shared
    folder = pytester.path / "cot-prompts"
    folder.mkdir()
    for task in tasks:
        (folder / f"{task}.txt").write_text(
            f"CANARY\n-----\nA {task} shot.\n\nQ: a question\nA: Let's think step by step.\n"
            "So the answer is x.\n"
        )
    return folder


def test_bbh_loader_slices_subtasks_with_stable_ids(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    tasks, start, n = ["navigate", "word_sorting"], 1, 3
    body = (
        f"benchmark: bbh\ndataset:\n  loader: bbh\n  path: {BBH}\n  subtasks: "
        f"[{', '.join(tasks)}]\n"
        f"  n_per_subtask: {n}\n  start: {start}\n  cot_prompts: {cot_prompts(pytester, tasks)}\n"
        "scorer: bbh\narms:\n  oracle: {provider: sim, accuracy: 1.0, template: 'So the "
        "answer is {answer}.'}\n"
    )
    make_spec(pytester, body)
    result, meta, rows = sweep.run("-m", "subtask_navigate")
    # A slice stops at the end of its task file: three items of each task on the
    # full data, two on the fixture.
    sliced = {task: bbh_examples(task, BBH)[start:start + n] for task in tasks}
    expected = {
        f"bbh/navigate/{start + i}": rec["target"] for i, rec in enumerate(sliced["navigate"])
    }
    assert expected
    result.assert_outcomes(passed=len(expected))
    assert {r["task_id"]: r["target"] for r in rows} == expected
    assert all(r["subtask"] == "navigate" for r in rows)
    assert meta is not None and meta["benchmarks"]["bbh"]["items"] == sum(map(len, sliced.values()))


def test_custom_scorer_registered_in_a_conftest(pytester: pytest.Pytester, sweep: Sweep) -> None:
    pytester.makeconftest("""
        from pytest_echo_bench import judge, scorer

        @scorer("contains")
        def contains(output, example, options):
            found = example.target in output
            return judge(example.target if found else output, example.target, found)
    """)
    arms = "  chatty: {provider: sim, accuracy: 1.0, template: 'Well, I think {answer}, really.'}"
    make_spec(pytester, sim_spec(3, arms=arms).replace("scorer: exact", "scorer: contains"))
    result, _, rows = sweep.run()
    result.assert_outcomes(passed=3)
    assert all(r["answer"] == "4" for r in rows)


def test_junitxml_keeps_working(pytester: pytest.Pytester, sweep: Sweep) -> None:
    make_spec(pytester, sim_spec(2))
    xml = pytester.path / "junit.xml"
    result, _, _ = sweep.run(f"--junitxml={xml}")
    assert result.ret == 0
    text = xml.read_text()
    assert 'tests="4"' in text and 'failures="2"' in text and "expected 4 got" in text
