"""Arm names say what they mean: ``arm`` or ``benchmark/arm`` in every gate, ``--oracle`` and
``--pair``; a bare name two benchmarks share is refused with the choices (``analysis.names``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_spec, sim_spec
from pytest_echo_bench.analysis.names import ArmNames
from pytest_echo_bench.cli.main import main

ARGS = ("-p", "no:cacheprovider", "-W", "ignore::pytest.PytestAssertRewriteWarning")
SHARED = "  good: {provider: sim, accuracy: 1.0}\n  bad: {provider: sim, accuracy: 0.0}"
OWN = "  good: {provider: sim, accuracy: 1.0}\n  solo: {provider: sim, accuracy: 1.0}"


def test_a_name_resolves_bare_qualified_or_not_at_all() -> None:
    names = ArmNames({"demo": ["good", "bad"], "other": ["good", "solo"]})
    assert names.resolve("solo") == ("other", "solo") and names.resolve("demo/good") == (
        "demo",
        "good",
    )
    assert names.label(("demo", "good")) == "demo/good"
    with pytest.raises(
        ValueError,
        match="arm name 'good' is ambiguous: 2 benchmarks have it; write one of demo/good, "
        "other/good",
    ):
        names.resolve("good")
    with pytest.raises(
        ValueError,
        match="no arm 'other/bad'; known arms: demo/bad, demo/good, other/good, other/solo",
    ):
        names.resolve("other/bad")


def test_an_arm_whose_name_holds_a_slash_is_not_taken_for_another() -> None:
    """Benchmark 'a' with arm 'b', and an arm called 'a/b' in 'x': the one name could be either."""
    with pytest.raises(ValueError, match="write one of a/b, x/a/b"):
        ArmNames({"a": ["b"], "x": ["a/b"]}).resolve("a/b")
    assert ArmNames({"a": ["b"], "x": ["a/b"]}).resolve("x/a/b") == ("x", "a/b")


IDENT = st.text("abc", min_size=1, max_size=3)


@settings(max_examples=150, derandomize=True, database=None, deadline=None)
@given(
    st.dictionaries(
        IDENT, st.lists(IDENT, min_size=1, max_size=3, unique=True), min_size=1, max_size=3
    )
)
def test_every_label_picks_its_arm_and_a_bare_name_only_when_one_benchmark_has_it(
    arms: dict[str, list[str]],
) -> None:
    names = ArmNames(arms)
    for bench, listed in arms.items():
        for arm in listed:
            assert names.resolve(f"{bench}/{arm}") == (bench, arm)
            owners = [b for b, a in arms.items() if arm in a]
            if len(owners) == 1:
                assert names.resolve(arm) == (bench, arm)
            else:
                with pytest.raises(ValueError, match="ambiguous"):
                    names.resolve(arm)


def two_specs(pytester: pytest.Pytester) -> None:
    make_spec(pytester, sim_spec(3, arms=SHARED), name="demo")
    make_spec(pytester, sim_spec(3, arms=OWN, benchmark="other"), name="other")


def test_a_shared_bare_name_is_refused_before_the_first_item(pytester: pytest.Pytester) -> None:
    two_specs(pytester)
    out = pytester.path / "r.jsonl"
    result = pytester.runpytest(
        *ARGS, "--bench-out", str(out), "--bench-gate", "solo>=0.5", "--bench-gate", "good>=0.5"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--bench-gate 'good>=0.5': arm name 'good' is ambiguous*write one of demo/good, "
            "other/good*"
        ]
    )
    assert not out.exists()
    result = pytester.runpytest(
        *ARGS,
        "--bench-out",
        str(out),
        "--bench-gate",
        "solo>=0.5",
        "--bench-gate",
        "other/good>=demo/good",
        "--bench-gate",
        "demo/bad>=0.5",
    )
    assert result.ret == 1  # the sweep ran; one gate failed
    result.stdout.fnmatch_lines(["gate solo>=0.5: passed*", "gate other/good>=demo/good: passed*",
                                 "gate demo/bad>=0.5: FAILED (demo/bad = 0.000, bound 0.500)"])


def test_the_qualified_name_holds_on_a_run_of_one_benchmark(pytester: pytest.Pytester) -> None:
    """A nightly's rule, written for the merged file, also runs on one shard or one spec."""
    make_spec(pytester, sim_spec(3, arms=SHARED), name="demo")
    result = pytester.runpytest(
        *ARGS, "--bench-out", "r.jsonl", "--bench-gate", "demo/good>=demo/bad+0.5"
    )
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(
        ["gate demo/good>=demo/bad+0.5: passed (good = 1.000, bound 0.500)"]
    )


@pytest.fixture
def merged(pytester: pytest.Pytester) -> Path:
    two_specs(pytester)
    assert pytester.runpytest(*ARGS, "--bench-out", "r.jsonl").ret == 0
    return pytester.path / "r.jsonl"


@pytest.mark.parametrize(
    ("oracle", "said"),
    [
        (
            "demo/good,other/solo",
            "the arms are of benchmarks demo, other; an oracle row takes arms of one benchmark",
        ),
        ("demo/good,demo/bad,solo", "the arms are of benchmarks demo, other"),
        ("demo/good", "needs two arms or more"),
        ("demo/good,demo/good", "needs two arms or more"),
        (",", "give arm names separated by commas"),
        ("demo/good,", "give arm names separated by commas"),
        ("", "give arm names separated by commas"),
    ],
)
def test_an_oracle_that_would_be_dropped_is_refused(
    merged: Path, capsys: pytest.CaptureFixture[str], oracle: str, said: str
) -> None:
    assert main(["report", str(merged), "--oracle", oracle]) == 2
    printed = capsys.readouterr()
    assert said in printed.err and printed.out == "", printed.err


def test_report_gates_oracle_and_pair_take_both_forms(
    merged: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(merged), "--gate", "good>=0.5"]) == 2
    assert "arm name 'good' is ambiguous" in capsys.readouterr().err
    assert main(["report", str(merged), "--format", "json", "--gate", "demo/good >= demo/bad @95",
                 "--gate", "solo>=0.9", "--oracle", "demo/good,demo/bad"]) == 0
    printed = capsys.readouterr()
    oracle = json.loads(printed.out)["oracle"]
    assert oracle["demo"]["arms"] == ["good", "bad"] and "other" not in oracle
    assert printed.err.count("passed") == 2
    assert main(["report", str(merged), "--oracle", "good"]) == 2
    assert "write one of demo/good, other/good" in capsys.readouterr().err
    assert main(["power", str(merged), "--pair", "demo/good,demo/bad"]) == 0
    assert "pilot demo: demo/good - demo/bad = +1.0000 on 3 items" in capsys.readouterr().out
    assert main(["power", str(merged), "--pair", "good,bad"]) == 2
    assert "--pair: arm name 'good' is ambiguous" in capsys.readouterr().err
    assert main(["power", str(merged), "--pair", "demo/good,other/good"]) == 2
    assert "different benchmarks" in capsys.readouterr().err
