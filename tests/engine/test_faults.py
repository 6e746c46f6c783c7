"""Exhaustion stops the run (status 2, resumable); transient errors are retried, never graded."""

from __future__ import annotations

import json

import pytest

from conftest import Sweep, make_spec, sim_spec

FAST_RETRY = "retries: {attempts: 3, backoff_s: 0.01, max_backoff_s: 0.02}\n"


def exhausting_spec(n: int, after: int) -> str:
    return sim_spec(
        n,
        arms=f"  a: {{provider: sim, accuracy: 1.0, faults: {{exhaustion_after: {after}}}}}",
        extra=FAST_RETRY,
    )


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_exhaustion_stops_the_run_with_status_2_and_one_resume_line(
    pytester: pytest.Pytester, sweep: Sweep, workers: list[str]
) -> None:
    make_spec(pytester, exhausting_spec(12, after=3))
    result, _, rows = sweep.run(*workers, "--bench-concurrency", "1")
    out = result.stdout.str()
    assert result.ret == 2
    assert "crashed" not in out and "INTERNALERROR" not in out
    assert out.count("resume with:") == 1
    result.stdout.fnmatch_lines([f"*pytest --bench-resume {sweep.out}*"])
    # at most `after` calls per process succeeded, and only those are rows
    assert 0 < len(rows) <= 3 * max(1, len(workers))
    assert all(r["passed"] for r in rows)
    marker = json.loads((pytester.path / "results.jsonl.stop.json").read_text())
    assert marker["reason"] == "exhausted" and "usage limit" in marker["message"]


def test_resume_after_exhaustion_completes_every_item_once(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, exhausting_spec(10, after=4))
    for _ in range(5):
        result, _, rows = (
            sweep.run("--bench-resume", str(sweep.out)) if sweep.out.exists() else sweep.run()
        )
        if result.ret == 0:
            break
        assert result.ret == 2
    assert result.ret == 0
    assert sorted(r["task_id"] for r in rows) == sorted(f"q{i}" for i in range(10))
    assert not (pytester.path / "results.jsonl.stop.json").exists()


def test_exhaustion_in_flight_does_not_record_aborted_items(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, exhausting_spec(30, after=5))
    result, _, rows = sweep.run("--bench-concurrency", "8")
    assert result.ret == 2
    assert len(rows) == 5 and all(r["passed"] for r in rows)
    assert "aborted" in result.stdout.str()


def test_transient_errors_are_retried_and_never_graded(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    arms = "  a: {provider: sim, accuracy: 1.0, faults: {transient_rate: 0.4}}"
    make_spec(
        pytester,
        sim_spec(
            20, arms=arms, extra="retries: {attempts: 8, backoff_s: 0.001, max_backoff_s: 0.002}\n"
        ),
    )
    result, _, rows = sweep.run()
    assert result.ret == 0
    assert len(rows) == 20 and all(r["passed"] for r in rows)
    assert any(r["attempts"] > 1 for r in rows)
    assert "retries" in result.stdout.str()


def test_transient_errors_past_the_last_attempt_leave_the_item_incomplete(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    arms = "  a: {provider: sim, accuracy: 1.0, faults: {transient_rate: 1.0}}"
    make_spec(pytester, sim_spec(3, arms=arms, extra=FAST_RETRY))
    result, _, rows = sweep.run()
    assert result.ret == 2
    assert rows == []
    result.stdout.fnmatch_lines(
        [
            "*a*0*0*n/a*0*0*3*",
            "*not completed: demo.yaml::q0[[]a[]]*3 transient errors*",
            "*resume with:*",
            "*3 incomplete*",
        ]
    )
    marker = json.loads((pytester.path / "results.jsonl.stop.json").read_text())
    assert marker["reason"] == "incomplete"


def test_spec_error_patterns_reclassify_messages(pytester: pytest.Pytester, sweep: Sweep) -> None:
    pytester.makeconftest("""
        from pytest_echo_bench import arm

        @arm("grumpy")
        def grumpy(ctx):
            raise RuntimeError("server says: try again, we are busy")
    """)
    extra = FAST_RETRY + "errors:\n  exhaustion: ['we are busy']\n"
    make_spec(pytester, sim_spec(3, arms="  g: {provider: python, function: grumpy}", extra=extra))
    result, _, rows = sweep.run()
    assert result.ret == 2 and rows == []
    extra = FAST_RETRY + "errors:\n  transient: ['we are busy']\n"
    make_spec(pytester, sim_spec(3, arms="  g: {provider: python, function: grumpy}", extra=extra))
    sweep.out.unlink(missing_ok=True)
    (pytester.path / "results.jsonl.stop.json").unlink()
    result, _, rows = sweep.run()
    result.stdout.fnmatch_lines(["*3 incomplete*"])


def test_a_permanent_error_is_a_failed_row_with_the_error(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    pytester.makeconftest("""
        from pytest_echo_bench import arm

        @arm("broken")
        def broken(ctx):
            raise ValueError("prompt rejected")
    """)
    make_spec(pytester, sim_spec(2, arms="  b: {provider: python, function: broken}"))
    result, _, rows = sweep.run()
    assert result.ret == 0
    assert [r["status"] for r in rows] == ["error", "error"]
    assert "prompt rejected" in rows[0]["detail"] and not rows[0]["passed"]


def test_a_results_path_through_a_file_is_a_usage_error_before_anything_runs(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    # Once a store error at the first append (exit 2); the path is now examined with the options.
    (pytester.path / "blocker").write_text("a file where a directory should be")
    make_spec(pytester, sim_spec(3))
    result, _, _ = sweep.run("--bench-out", str(pytester.path / "blocker" / "r.jsonl"))
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*--bench-out*blocker/r.jsonl*Not a directory*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert sorted(p.name for p in pytester.path.iterdir() if p.name != "blocker") == ["demo.yaml"]
