"""The end-of-run table's spend column says what the report says: the known spend, and the rows
whose cost is not known counted apart (``0.0100 + 2 unknown``), never folded into the sum as 0. And
a run records no figure above the limit the readers accept (``store.checks.FIGURE_MAX``): one limit,
one place, so the run's own table and a later report agree on every row.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from results_files import brief_row, write

from conftest import Sweep, make_spec, sim_spec
from pytest_echo_bench.plugin.live import end_table
from pytest_echo_bench.providers.answer import MAX_COUNT, count, finite_cost
from pytest_echo_bench.report.figures import load_results
from pytest_echo_bench.store.checks import FIGURE_MAX
from pytest_echo_bench.store.tally import FileTally

META = {"_meta": True, "benchmark": "demo", "fingerprint": "f", "run_id": "r", "schema": 1}


def spend_cell(path: Path) -> str:
    _, line = end_table(path, {})
    return line.split(None, 9)[9]  # benchmark, arm, 7 counts, then the spend column


def report_spend(path: Path) -> tuple[float, int, int]:
    spend = load_results([path]).spend[("demo", "a")]
    return spend.usd, spend.known, spend.unknown


@pytest.mark.parametrize("costs, cell", [
    ([0.01, None, 0.02], "0.0300 + 1 unknown"),
    ([None, None], "2 unknown"),
    # refused figures are unknown, as the report counts them
    ([0.01, -1.0, math.nan, 1e13], "0.0100 + 3 unknown"),
    ([0.01, 0.02], "0.0300"),
])
def test_the_table_counts_unknown_costs_as_the_report_does(
    tmp_path: Path, costs: list[float | None], cell: str
) -> None:
    rows = [brief_row(f"q{n}", cost_usd=c) for n, c in enumerate(costs)]
    path = write(tmp_path / "r.jsonl", rows, meta=META)
    assert spend_cell(path) == cell
    usd, _, unknown = report_spend(path)
    assert cell.startswith(f"{usd:.4f}" if usd else f"{unknown}") and (
        f"{unknown} unknown" in cell
    ) is bool(unknown)


def test_a_cached_row_is_known_and_free_in_both(tmp_path: Path) -> None:
    rows = [
        brief_row("q0", cost_usd=None, cache_hits=1),
        brief_row("q1", cost_usd=0.5, cache_hits=1),
    ]
    path = write(tmp_path / "r.jsonl", rows, meta=META)
    assert spend_cell(path) == "0.0000" and report_spend(path) == (0.0, 2, 0)


@pytest.mark.parametrize("cost", [None, 1.0])
def test_one_hit_of_one_and_a_half_calls_is_not_all_cached_in_either(
    tmp_path: Path, cost: float | None
) -> None:
    """Found by the generated test below: the table read ``sub_calls: 1.5`` as no
    count (so 1 call, all cached)."""
    path = write(
        tmp_path / "r.jsonl",
        [brief_row("q0", cost_usd=cost, cache_hits=1, sub_calls=1.5)],
        meta=META,
    )
    t = FileTally().update(path)[("demo", "a")]
    assert (t.spent, t.costed, t.unknown) == ((1.0, 1, 0) if cost else (0.0, 0, 1))
    assert report_spend(path) == ((1.0, 1, 0) if cost else (0.0, 0, 1))


COSTS = st.one_of(
    st.none(),
    st.floats(min_value=0, max_value=10.0),
    st.sampled_from(
        [
            -1.0,
            math.nan,
            math.inf,
            FIGURE_MAX,
            FIGURE_MAX * 10,
            0,
            "0.5",
            True,
            10**400,
            [],
            {"usd": 1},
        ]
    ),
)


@settings(max_examples=80, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(COSTS, st.sampled_from([0, 1]), st.sampled_from([1, 2, None, 1.5])),
        min_size=1,
        max_size=6,
    )
)
def test_generated_costs_give_the_table_and_the_report_the_same_unknown_count(
        tmp_path: Path, rows: list[tuple[Any, int, Any]]) -> None:
    records = [
        brief_row(f"q{n}", cost_usd=c, cache_hits=h, sub_calls=s)
        for n, (c, h, s) in enumerate(rows)
    ]
    path = write(tmp_path / "g.jsonl", records, meta=META)
    t = FileTally().update(path)[("demo", "a")]
    usd, known, unknown = report_spend(path)
    assert (t.unknown, t.costed) == (unknown, known)
    assert math.isclose(t.spent, usd, rel_tol=1e-9, abs_tol=1e-12)


def test_a_run_records_no_figure_the_readers_would_call_unknown() -> None:
    # 1.5e12 was written as is
    assert finite_cost(FIGURE_MAX) == FIGURE_MAX and finite_cost(FIGURE_MAX * 1.5) is None
    assert (
        finite_cost(10**13) is None and finite_cost(10**400) is None and finite_cost(True) is None
    )
    assert (
        MAX_COUNT == FIGURE_MAX and count(MAX_COUNT) == MAX_COUNT and count(MAX_COUNT + 1) is None
    )


def test_an_arm_reporting_an_absurd_cost_is_unknown_in_the_row_the_table_and_the_report(
        pytester: pytest.Pytester, sweep: Sweep) -> None:
    pytester.makeconftest("""
        from pytest_echo_bench import Completion, arm

        @arm("dear")
        def dear(ctx):
            return Completion("4", cost_usd=5e12 if ctx.example.id == "q0" else 0.25)
    """)
    make_spec(pytester, sim_spec(2, arms="  a: {provider: python, function: dear}"))
    result, _, rows = sweep.run()
    assert result.ret == 0
    assert sorted((r["task_id"], r["cost_usd"]) for r in rows) == [("q0", None), ("q1", 0.25)]
    result.stdout.fnmatch_lines(["demo *a *2 *2 *0.2500 + 1 unknown"])
    assert report_spend(sweep.out) == (0.25, 1, 1)
