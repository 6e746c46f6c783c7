"""The DuckDB baseline of ``benchmarks/report_scale.py`` (``benchmarks/report_duckdb.py``) against
the report: on a file of well-formed rows its figures are the report's, its typed reader casts
what the report refuses (a cost of ``"0.5"``, ``passed: 1``, an infinite time), and its
``--checked`` reading, which keeps each value only where the report's reader does, gives the
report's figures on any file (Hypothesis-generated rows with hostile values). The CPU each costs
on a million rows is ``docs/performance.md``'s section 7."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_echo_bench.report.figures import build_report, load_results

pytest.importorskip("duckdb")
sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from report_duckdb import figures, report_columns  # noqa: E402

META = {"_meta": True, "benchmark": "demo", "benchmarks": {}, "arms": {"demo": ["a", "b"]},
        "schema": 1}


def row(task: str, arm: str, **values: Any) -> dict[str, Any]:
    found = {"task_id": task, "arm": arm, "benchmark": "demo", "passed": True,
             "status": "correct", "subtask": "s1", "wall_seconds": 0.5, "cost_usd": 0.01,
             "usage": {"prompt_tokens": 10, "completion_tokens": 5}}
    return {**found, **values}


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in [META, *rows]))
    return path


def report_figures(path: Path) -> dict[str, tuple[Any, ...]]:
    """Per arm (n, correct, cost, prompt tokens, completion tokens, mean time), as the report."""
    report = build_report(load_results([path]))
    return {s.arm: (s.n, s.correct, s.cost_usd, s.prompt_tokens, s.completion_tokens, s.wall_mean)
            for s in report.arms if s.n}


def duckdb_figures(path: Path, checked: bool) -> dict[str, tuple[Any, ...]]:
    """The same figures, as the baseline computes them."""
    return {arm: (n, correct, cost, prompt, completion, wall)
            for _, arm, n, correct, _, _, cost, prompt, completion, wall, _, _
            in figures(str(path), checked=checked)["arms"]}


def same(ours: dict[str, tuple[Any, ...]], theirs: dict[str, tuple[Any, ...]]) -> bool:
    """Equal figures: counts exactly, sums to the last few bits (each adds in its own order)."""
    return ours.keys() == theirs.keys() and all(
        len(a) == len(b) and all(x == y if x is None or y is None or isinstance(x, int)
                                 else x == pytest.approx(y, rel=1e-9, abs=1e-12)
                                 for x, y in zip(a, b, strict=True))
        for arm in ours for a, b in [(ours[arm], theirs[arm])])


HOSTILE = [
    row("t1", "a"), row("t1", "b", passed=False, status="wrong"),
    row("t2", "a", cost_usd="0.5"), row("t2", "b", passed=1, status="wrong"),
    row("t3", "a", wall_seconds=1e400), row("t3", "b", cost_usd=-3),
    row("t4", "a", usage={"prompt_tokens": 1.5, "completion_tokens": 5}),
    row("t4", "b", usage={"prompt_tokens": "40", "completion_tokens": 5}),
    row("t5", "a", passed="true", status="wrong"), row("t5", "b", subtask=7),
]


def test_on_well_formed_rows_the_baseline_gives_the_report_s_figures(tmp_path: Path) -> None:
    path = write(tmp_path / "r.jsonl", [row(f"t{i}", arm, passed=i % 3 != 0, cost_usd=0.001 * i,
                                             wall_seconds=0.1 * i)
                                         for i in range(20) for arm in ("a", "b")])
    ours = report_figures(path)
    assert ours["a"][:2] == (20, 13)
    assert same(ours, duckdb_figures(path, checked=False))
    assert same(ours, duckdb_figures(path, checked=True))
    assert report_columns(str(path)) == 40


def test_the_typed_reader_casts_what_the_report_refuses(tmp_path: Path) -> None:
    path = write(tmp_path / "hostile.jsonl", HOSTILE)
    ours, cast = report_figures(path), duckdb_figures(path, checked=False)
    # "0.5", 1e400 and 1.5 tokens read as figures; passed: 1 and "true" as passes; -3 as a cost
    assert ours["a"][:2] == (5, 4) and cast["a"][1] == 5
    assert ours["b"][:2] == (5, 3) and cast["b"][1] == 4
    assert cast["a"][2] == pytest.approx(0.54) and cast["a"][5] == float("inf")
    assert cast["b"][2] < 0 and ours["b"][2] == pytest.approx(0.04)
    assert same(ours, duckdb_figures(path, checked=True))
    # every column the report reads, read as checked: no value stops it
    assert report_columns(str(path)) == len(HOSTILE)


def test_an_empty_usage_reads_as_no_tokens_in_both(tmp_path: Path) -> None:
    """An example the property below found: ``usage: {}`` is a usage of 0 tokens to the report."""
    path = write(tmp_path / "empty.jsonl", [row("t1", "a", usage={}),
                                            row("t1", "b", usage={"prompt_tokens": None})])
    ours = report_figures(path)
    assert ours["a"][3:5] == (0, 0) and ours["b"][3:5] == (0, 0)
    assert same(ours, duckdb_figures(path, checked=True))


ODD = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 10**13), st.floats(allow_nan=False),
    st.text(max_size=4), st.sampled_from(["0.5", "1e400", "true", "7"]),
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(st.sampled_from("xy"), st.integers(0, 3)),
)
USAGE = st.one_of(ODD, st.dictionaries(
    st.sampled_from(["prompt_tokens", "completion_tokens", "reasoning_tokens", "total"]), ODD,
    max_size=4))
VALUES = st.fixed_dictionaries({}, optional={
    "passed": ODD, "status": st.one_of(ODD, st.sampled_from(["correct", "wrong", "error"])),
    "subtask": st.one_of(ODD, st.sampled_from(["s1", "s2", ""])), "wall_seconds": ODD,
    "cost_usd": ODD, "usage": USAGE})


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(VALUES, min_size=1, max_size=12))
def test_the_checked_reading_gives_the_report_s_figures_on_any_file(
        tmp_path: Path, values: list[dict[str, Any]]) -> None:
    path = write(tmp_path / "g.jsonl", [row(f"t{n // 2}", "ab"[n % 2], **v)
                                         for n, v in enumerate(values)])
    assert same(report_figures(path), duckdb_figures(path, checked=True))
