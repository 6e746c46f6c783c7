"""``pair_runs`` on columns gives what pairing item by item gave (``across_reference``): the same
pairings, figures, gates and every format's text, byte for byte, on generated pairs of files
(flips, items one run lacks, repeated rows, epochs, unjudged rows, judged grades, changed digests
and served models, several benchmarks, renamed arms), with rows read in chunks of any size."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from across_reference import pair_runs as pair_item_by_item
from hypothesis import given, settings
from hypothesis import strategies as st
from results_files import ABSENT, meta, row, write

from pytest_echo_bench.analysis.across import figures, parse_across_gate
from pytest_echo_bench.report import compare as formats
from pytest_echo_bench.report.compare_html import render_html
from pytest_echo_bench.results import arm_rows
from pytest_echo_bench.results.across import Paired, pair_runs
from pytest_echo_bench.results.read import Item, Results, load_results

RENDERERS = (formats.render_text, formats.render_markdown, formats.render_json,
             formats.render_csv, render_html)
GATES = ("no-regression@95", "a >= base - 0.05 @90", "b >= base @95 anytime",
         "b1/c >= base - 0.1 @95")
STATUSES = ("correct", "wrong", "error", "unparseable", "unjudged")


@st.composite
def rows(draw: st.DrawFn, graded: bool) -> list[dict[str, Any]]:
    """One run's rows over a small space of keys, so two runs share most of them."""
    def maybe(values: st.SearchStrategy[Any]) -> Any:
        return draw(st.one_of(st.just(ABSENT), values))

    found = []
    for _ in range(draw(st.integers(0, 40))):
        status = draw(st.sampled_from(STATUSES))
        verdict = status != "unjudged"
        found.append(row(
            draw(st.sampled_from(["t0", "t1", "t2", "t3", "q/4", "é5"])),
            draw(st.sampled_from(["a", "b", "c"])), status == "correct", status=status,
            benchmark=draw(st.sampled_from(["b1", "b1", "b2"])),
            epoch=draw(st.sampled_from([1, 1, 2, 3])),
            wall_seconds=maybe(st.floats(0.0, 9.0, allow_subnormal=False)),
            cost_usd=maybe(st.sampled_from([0.1, 0.2, 0.3, 1e-7, 3.3333])),
            item_sha256=maybe(st.sampled_from(["d1", "d1", "d2"])),
            served_model=maybe(st.sampled_from(["m1", "m2"])),
            answer=draw(st.one_of(st.none(), st.text(max_size=90))),
            score=draw(st.floats(0.0, 10.0)) if graded and verdict else ABSENT))
    return found


def paired_both_ways(base: Results, cand: Results,
                     pairs: dict[str, str]) -> tuple[Paired, Paired]:
    return pair_runs(base, cand, pairs), pair_item_by_item(base, cand, pairs)


def assert_same(new: Paired, old: Paired) -> None:
    assert new == old
    new_arms, old_arms = figures(new), figures(old)
    assert new_arms == old_arms
    new_data, old_data = (formats.compare_json(new, new_arms),
                          formats.compare_json(old, old_arms))
    for render in RENDERERS:
        assert render(new_data) == render(old_data)
    for text in GATES:
        gate = parse_across_gate(text)
        assert gate.check(new_arms) == gate.check(old_arms)


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(data=st.data(), chunk=st.sampled_from([1, 2, 3, 7, arm_rows.CHUNK]),
       graded=st.booleans(), rename=st.booleans())
def test_columns_pair_as_items_did(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject,
                                   chunk: int, graded: bool, rename: bool) -> None:
    folder = tmp_path_factory.mktemp("runs")
    head = meta("b1", arms=("a", "b", "c"), epochs=3)
    base = load_results([write(folder / "base.jsonl", data.draw(rows(graded)), meta=head)])
    cand = load_results([write(folder / "cand.jsonl", data.draw(rows(graded)), meta=head)])
    saved = arm_rows.CHUNK
    arm_rows.CHUNK = chunk  # chunk boundaries anywhere: an arm's rows span several chunks
    try:
        new, old = paired_both_ways(base, cand, {"a": "b"} if rename else {})
    finally:
        arm_rows.CHUNK = saved
    assert_same(new, old)


def item(task: str, passed: bool, digest: str | None = "d", epoch: int = 1) -> Item:
    return Item("b1", task, "a", passed, "correct" if passed else "wrong", None, 1.0, 1.0, None,
                None, 0.1, epoch=epoch, item_sha256=digest, answer=task)


def test_a_key_held_twice_meets_once_at_its_first_row() -> None:
    """Rows given without ``load_results`` may repeat a key: its first BASE row meets CAND's
    last row of the key, the others are BASE's or CAND's alone, as item by item."""
    base = Results(rows=[item("t0", True), item("t1", False), item("t0", False),
                         item("t2", True, None), item("t2", True, "d")])
    cand = Results(rows=[item("t0", False), item("t0", True), item("t1", True, "e"),
                         item("t2", False), item("t3", True, epoch=2)])
    new, old = paired_both_ways(base, cand, {})
    assert_same(new, old)
    arm = new.arms[0]
    assert arm.only_base == [("t0", 1), ("t2", 1)] and arm.only_cand == [("t3", 2)]
    assert (arm.both, arm.changed, arm.unknown, arm.regressed) == (1, [("t1", 1)], 1, 1)


def test_sums_keep_the_rows_order(tmp_path: Path) -> None:
    """Costs that round differently in another order sum as the rows come, across chunks."""
    costs = [0.1, 0.2, 0.3, 0.7] * 3
    lines = [row(f"t{n}", "a", True, cost_usd=c, wall_seconds=abs(c), benchmark="b1",
                 item_sha256="d") for n, c in enumerate(costs)]
    base = load_results([write(tmp_path / "a.jsonl", lines, meta=meta("b1", arms=("a",)))])
    saved = arm_rows.CHUNK
    arm_rows.CHUNK = 4
    try:
        new, old = paired_both_ways(base, base, {})
    finally:
        arm_rows.CHUNK = saved
    assert_same(new, old)
    assert new.arms[0].base.cost_usd == old.arms[0].base.cost_usd
