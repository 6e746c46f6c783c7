"""An arm's figures read as columns (``report.arm_figures.Columns``) are those of its items read one
by one: every count, sum, mean and percentile of generated items, unjudged ones, unknown figures,
subtasks (one of them None) and repeated task ids included, computed here item by item in the
same order (so float sums are equal to the last bit)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_echo_bench.analysis.stats import cluster_interval, percentile, wilson
from pytest_echo_bench.budget import money
from pytest_echo_bench.report.arm_figures import Columns, arm_stats
from pytest_echo_bench.results.read import Item, by_arm

SETTINGS = settings(max_examples=120, deadline=None, derandomize=True, database=None)
STATUSES = ["correct", "wrong", "unparseable", "error", "unjudged"]
figure = st.one_of(st.none(), st.floats(0, 50, allow_nan=False, allow_infinity=False))


@st.composite
def items(draw: Any) -> list[Item]:
    rows = []
    for _ in range(draw(st.integers(0, 30))):
        status = draw(st.sampled_from(STATUSES))
        rows.append(Item(
            "b", draw(st.sampled_from(["t1", "t2", "t3", "t4", "t5"])), draw(st.sampled_from("xy")),
            status == "correct", status, draw(st.sampled_from([None, "s1", "s2"])),
            draw(figure), draw(figure), draw(st.sampled_from([None, True, False])),
            draw(st.one_of(st.none(), st.tuples(st.integers(0, 9), st.integers(0, 9)))),
            draw(figure), draw(figure)))
    return rows


def _sum(values: list[Any]) -> Any:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _expected(rows: list[Item], universe: set[str]) -> dict[str, Any]:
    """The figures of ``rows``, item by item."""
    graded = [i for i in rows if i.status != "unjudged"]
    correct = sum(1 for i in graded if i.passed)
    walls = [i.wall_seconds for i in rows if i.wall_seconds is not None]
    subs = [i.sub_calls for i in rows if i.sub_calls is not None]
    told = [i.escalated for i in rows if i.escalated is not None]
    usage = [i.usage for i in rows if i.usage is not None]
    # subtasks in order of first appearance among all the rows, each of its graded rows
    groups: dict[str | None, list[Item]] = {}
    for item in rows:
        groups.setdefault(item.subtask, []).append(item)
    groups = {sub: kept for sub, group in groups.items()
              if (kept := [i for i in group if i.status != "unjudged"])}
    clustered = (None if not groups or set(groups) == {None} else
                 cluster_interval([(float(sum(i.passed for i in g)), len(g))
                                   for g in groups.values()]))
    return {
        "n": len(graded), "correct": correct, "ci95": wilson(correct, len(graded)),
        "pass_rate": correct / len(graded) if graded else None,
        "unparseable": sum(i.status == "unparseable" for i in rows),
        "errors": sum(i.status == "error" for i in rows),
        "unjudged": sum(i.status == "unjudged" for i in rows),
        "not_completed": len(universe - {i.task_id for i in rows}),
        "wall_mean": sum(walls) / len(walls) if walls else None,
        "wall_p50": percentile(walls, 50) if walls else None,
        "wall_p95": percentile(walls, 95) if walls else None,
        "sub_calls_mean": sum(subs) / len(subs) if subs else None,
        "escalation_rate": sum(told) / len(told) if told else None,
        "prompt_tokens": sum(u[0] for u in usage) if usage else None,
        "completion_tokens": sum(u[1] for u in usage) if usage else None,
        "cost_units": _sum([i.cost_units for i in rows]),
        "cluster_se": None if clustered is None else clustered[0],
        "cluster_ci95": None if clustered is None else clustered[1:],
    }


@SETTINGS
@given(rows=items())
def test_an_arms_figures_from_columns_are_those_of_its_items_one_by_one(rows: list[Item]) -> None:
    universe = {"t1", "t2", "t3", "t4", "t5", "t6"}
    for (_, arm), group in by_arm(rows).items():
        cols = Columns(group)
        stats = arm_stats("b", arm, None, cols, universe, cols.groups("subtask"))
        found = {key: getattr(stats, key) for key in _expected(group, universe)}
        assert found == _expected(group, universe)
        for sub, part in cols.groups("subtask").items():
            alone = [i for i in group if i.subtask == sub]
            stats = arm_stats("b", arm, sub, part, universe)
            assert stats.n == _expected(alone, universe)["n"]
            assert stats.wall_p95 == _expected(alone, universe)["wall_p95"]
            assert stats.cost_usd == money.figure(_sum([i.cost_usd for i in alone]))


@SETTINGS
@given(rows=items(), names=st.lists(st.sampled_from(["status", "wall_seconds", "usage",
                                                       "task_id", "subtask"]), max_size=4))
def test_a_subsets_columns_are_its_items_columns_in_their_order(rows: list[Item],
                                                               names: list[str]) -> None:
    cols = Columns(rows)
    for name in names:  # some columns read by the parent first, others not
        cols(name)
    at = [p for p in range(len(rows)) if p % 3 != 1]
    part = cols.subset(at)
    assert part.items == [rows[p] for p in at]
    for name in ["status", "wall_seconds", "usage", "task_id", "subtask", "passed"]:
        assert part(name) == [getattr(rows[p], name) for p in at]
    groups = cols.groups("subtask")
    assert list(groups) == list(dict.fromkeys(i.subtask for i in rows))
    for sub, group in groups.items():
        assert group.items == [i for i in rows if i.subtask == sub]
        assert group("wall_seconds") == [i.wall_seconds for i in rows if i.subtask == sub]
    cols.forget()
    assert cols("status") == [i.status for i in rows]
