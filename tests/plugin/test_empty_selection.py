"""A selection that selects nothing (``-k``, ``-m``, a shard) names the benchmarks and arms there
are and exits 5, serially and under xdist; where the specs alone tell (``-k``, a shard) no xdist
worker starts. ``echo-bench estimate`` says the same and exits 5 too. And a spec error under
``-n 2`` is found before any worker starts, with the serial status, 2."""

from __future__ import annotations

import time

import pytest

from conftest import Sweep, make_spec, sim_spec
from pytest_echo_bench.cli.main import main

WORKERS = pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
ARMS = "*demo (demo.yaml): good, bad; other (other.yaml): solo*"


@pytest.fixture
def two_specs(pytester: pytest.Pytester) -> None:
    make_spec(pytester, sim_spec(3))  # tasks q0, q1, q2: shard 2/2 holds none of them
    make_spec(
        pytester, sim_spec(1, arms="  solo: {provider: sim}", benchmark="other"), name="other"
    )


def no_worker_started(result: pytest.RunResult) -> bool:
    text = result.stdout.str()
    return "created:" not in text and "[gw" not in text and "bringing up nodes" not in text


@WORKERS
@pytest.mark.parametrize(
    ("select", "said"),
    [
        (["-k", "nomatch"], "-k 'nomatch'"),
        (["-k", "demo", "--bench-shard", "2/2"], "-k 'demo' and --bench-shard 2/2"),
    ],
    ids=["keyword", "keyword-and-shard"],
)
def test_a_keyword_or_shard_that_selects_nothing_names_the_arms_and_starts_no_worker(
    pytester: pytest.Pytester,
    sweep: Sweep,
    two_specs: None,
    workers: list[str],
    select: list[str],
    said: str,
) -> None:
    result, _, rows = sweep.run(*select, *workers)
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines(
        [
            f"*echo-bench: {said} selects none of the 7 item(s). Benchmarks and their arms: "
            + ARMS.lstrip("*")
        ]
    )
    assert rows == [] and no_worker_started(result)


@WORKERS
def test_a_shard_that_holds_nothing_says_so(
    pytester: pytest.Pytester, sweep: Sweep, workers: list[str]
) -> None:
    make_spec(pytester, sim_spec(3))
    result, _, _ = sweep.run("--bench-shard", "2/2", *workers)
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    assert no_worker_started(result)
    result.stdout.fnmatch_lines(
        [
            "*echo-bench: --bench-shard 2/2 selects none of the 6 item(s). Benchmarks and "
            "their arms: demo (demo.yaml): good, bad*"
        ]
    )


@WORKERS
def test_a_mark_expression_that_selects_nothing_names_the_arms_at_the_end(
        pytester: pytest.Pytester, sweep: Sweep, two_specs: None, workers: list[str]) -> None:
    result, _, rows = sweep.run("-m", "arm_nomatch", *workers)
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED and rows == []
    result.stdout.fnmatch_lines(
        [
            "*echo-bench: -m 'arm_nomatch' selects none of the 7 item(s). Benchmarks and their "
            "arms: " + ARMS.lstrip("*")
        ]
    )


def test_a_keyword_that_selects_something_runs_as_before(
    pytester: pytest.Pytester, sweep: Sweep, two_specs: None
) -> None:
    result, _, rows = sweep.run("-k", "solo")
    assert result.ret == 0 and [r["arm"] for r in rows] == ["solo"]
    assert "selects none" not in result.stdout.str() + result.stderr.str()


def test_a_keyword_a_conftest_adds_still_selects_under_xdist(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    """The specs cannot show a keyword a conftest adds: the
    controller collects, and pytest decides."""
    make_spec(pytester, sim_spec(3))
    pytester.makeconftest("""
        def pytest_itemcollected(item):
            if item.name == "q2[good]":
                item.extra_keyword_matches.add("flagged")
    """)
    result, _, rows = sweep.run("-k", "flagged", "-n", "2")
    assert result.ret == 0 and [(r["task_id"], r["arm"]) for r in rows] == [("q2", "good")]


def test_estimate_agrees(
    pytester: pytest.Pytester, two_specs: None, capsys: pytest.CaptureFixture[str]
) -> None:
    specs = [str(pytester.path / "demo.yaml"), str(pytester.path / "other.yaml")]
    assert main(["estimate", *specs, "-k", "nomatch", "--cache", "off"]) == 5
    out, err = capsys.readouterr()
    assert out == ""
    assert (
        "echo-bench: -k 'nomatch' selects none of the 7 item(s). Benchmarks and their arms: "
        "demo (demo.yaml): "
        "good, bad; other (other.yaml): solo" in err
    )
    assert (
        main(["estimate", specs[0], "--bench-shard", "2/2", "--cache", "off", "--format", "json"])
        == 5
    )
    assert "--bench-shard 2/2 selects none of the 6 item(s)" in capsys.readouterr().err
    assert main(["estimate", *specs, "-k", "solo", "--cache", "off"]) == 0


@WORKERS
def test_a_spec_error_is_found_before_workers_start_with_the_serial_status(
        pytester: pytest.Pytester, sweep: Sweep, workers: list[str]) -> None:
    make_spec(pytester, sim_spec(2, arms="  good: {provider: sim, acuracy: 1}"))
    started = time.monotonic()
    result, _, rows = sweep.run(*workers)
    took = time.monotonic() - started
    # 2, as serially (xdist said 1)
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()[-2000:]
    result.stdout.fnmatch_lines(
        [
            "*echo-bench: invalid benchmark spec: *demo.yaml:*[[]arms.good.acuracy[]]: "
            "unknown sim option 'acuracy'*",
            "*Interrupted: 1 error during collection*",
        ]
    )
    assert no_worker_started(result) and rows == []
    assert took < 60  # only a hang is caught here; the figures are in docs/reliability.md


def test_continue_on_collection_errors_still_runs_the_good_spec_on_workers(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, sim_spec(2))
    make_spec(
        pytester,
        sim_spec(2, arms="  good: {provider: sim, acuracy: 1}", benchmark="broken"),
        name="broken",
    )
    result, _, rows = sweep.run("-n", "2", "--continue-on-collection-errors")
    assert len(rows) == 4 and {r["benchmark"] for r in rows} == {"demo"}
    result.stdout.fnmatch_lines(["*unknown sim option 'acuracy'*"])
