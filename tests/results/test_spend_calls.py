"""The report counts each call's spend once: a row names its call by its key, run id and times (a
regraded or merged copy keeps them), and a row that does not name its call is counted as it comes.
Checked against a set of every (key, call) seen, row by row, over generated histories of a few
keys (calls repeated, interleaved with rows naming none, within a file and across files), through
both readers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from results_files import meta, row, write

from pytest_echo_bench.results.read import load_results

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True, database=None)
RUNS = [None, "r1", "r2", "r\u0000x", "r"]  # the last two: a NUL that a separator would blur
STARTS = ["s", "x\u0000s", None]


def _expected(files: list[list[dict[str, Any]]]) -> tuple[float, int]:
    """(USD, rows counted) of each arm's calls once, item by item with a set of every call."""
    seen: set[tuple[Any, ...]] = set()
    usd, counted = 0.0, 0
    for rows in files:
        for r in rows:
            call = (r["run_id"], r["started_at"], r["finished_at"])
            named = None not in call
            if named and (r["task_id"], call) in seen:
                continue
            if named:
                seen.add((r["task_id"], call))
            usd += r["cost_usd"]
            counted += 1
    return usd, counted


histories = st.lists(st.lists(st.tuples(st.sampled_from(["t0", "t1"]), st.sampled_from(RUNS),
                                        st.sampled_from(STARTS), st.sampled_from([0.5, 1.0, 2.0])),
                              min_size=1, max_size=8), min_size=1, max_size=3)


@SETTINGS
@given(history=histories)
def test_each_call_is_counted_once_however_its_rows_come(
        tmp_path_factory: pytest.TempPathFactory,
        history: list[list[tuple[str, str | None, str | None, float]]]) -> None:
    where = tmp_path_factory.mktemp("calls")
    files = [[row(task, "a", run_id=run, started_at=start, cost_usd=cost)
              for task, run, start, cost in rows] for rows in history]
    paths = [write(where / f"{n}.jsonl", rows, meta=meta(arms=["a"]))
             for n, rows in enumerate(files)]
    usd, counted = _expected(files)
    for fast in (True, False):
        spend = load_results(paths, fast=fast).spend[("demo", "a")]
        assert (spend.known, spend.unknown) == (counted, 0)
        assert spend.usd == pytest.approx(usd, abs=1e-12)


# --- the examples that found bugs, kept as plain tests --------------------------------------------

@pytest.mark.parametrize("runs", [["r1", None, "r1"], ["r1", None, None, "r1"]])
def test_a_call_is_counted_once_when_a_row_naming_none_comes_between(
        tmp_path: Path, runs: list[str | None]) -> None:
    rows = [row("t0", "a", run_id=run, cost_usd=1.0) for run in runs]
    path = write(tmp_path / "r.jsonl", rows, meta=meta(arms=["a"]))
    for fast in (True, False):
        spend = load_results([path], fast=fast).spend[("demo", "a")]
        assert (spend.usd, spend.known) == (len(runs) - 1.0, len(runs) - 1)


def test_two_calls_whose_parts_differ_only_around_a_nul_are_two(tmp_path: Path) -> None:
    rows = [row("t0", "a", run_id="r\u0000x", started_at="s", cost_usd=1.0),
            row("t0", "a", run_id="r", started_at="x\u0000s", cost_usd=1.0)]
    path = write(tmp_path / "r.jsonl", rows, meta=meta(arms=["a"]))
    for fast in (True, False):
        assert load_results([path], fast=fast).spend[("demo", "a")].usd == 2.0


# --- judgings: a row judged again keeps its call, and adds a judging ------------------------------

JUDGED_AT = [None, "2024-01-02T00:00:00.000Z", "2024-01-03T00:00:00.000Z"]


def _expected_judging(rows: list[dict[str, Any]]) -> tuple[float, int, float, int]:
    """(arm USD, calls, judge USD, judgings) of each call once and each judging once: a judging is
    its call, when a judging pass judged it, and what its judges said."""
    seen: set[tuple[Any, ...]] = set()
    usd = judge_usd = 0.0
    calls = judgings = 0
    for r in rows:
        call = (r["task_id"], r["run_id"], r["started_at"], r["finished_at"])
        named = None not in call
        if not named or call not in seen:
            seen.add(call)
            usd, calls = usd + r["cost_usd"], calls + 1
        if "judgments" in r:
            judging = (*call, r.get("judged_at"), r["judgments"][0]["grade"])
            if not named or judging not in seen:
                seen.add(judging)
                judge_usd, judgings = judge_usd + r["judge_cost_usd"], judgings + 1
    return usd, calls, judge_usd, judgings


def judged(task: str, run: str | None, judged_at: str | None, grade: float | None,
           cost: float) -> dict[str, Any]:
    """A row of one arm call, judged (``grade`` None: not judged) when ``judged_at`` says."""
    fields: dict[str, Any] = {"run_id": run, "cost_usd": 1.0}
    if grade is not None:
        fields.update(judgments=[{"judge": "g", "prompt_sha256": "p", "grade": grade}],
                      judge_cost_usd=cost, score=grade)
        if judged_at is not None:
            fields["judged_at"] = judged_at
    return row(task, "a", **fields)


judged_histories = st.lists(st.tuples(
    st.sampled_from(["t0", "t1"]), st.sampled_from(["r1", "r2", None]), st.sampled_from(JUDGED_AT),
    st.sampled_from([None, 1.0, 2.0]), st.sampled_from([0.25, 0.5])), min_size=1, max_size=10)


@SETTINGS
@given(history=judged_histories, split=st.integers(0, 10))
def test_each_judging_is_counted_once_and_a_key_judged_again_counts_its_new_one(
        tmp_path_factory: pytest.TempPathFactory,
        history: list[tuple[str, str | None, str | None, float | None, float]],
        split: int) -> None:
    where = tmp_path_factory.mktemp("judgings")
    rows = [judged(*drawn) for drawn in history]
    paths = [write(where / "0.jsonl", rows[:split], meta=meta(arms=["a"])),
             write(where / "1.jsonl", rows[split:], meta=meta(arms=["a"]))]
    usd, calls, judge_usd, judgings = _expected_judging(rows)
    for fast in (True, False):
        spend = load_results(paths, fast=fast).spend[("demo", "a")]
        assert (spend.known, spend.judged) == (calls, judgings)
        assert spend.usd == pytest.approx(usd, abs=1e-12)
        assert spend.judge_usd == pytest.approx(judge_usd, abs=1e-12)


def test_a_row_judged_again_by_a_judging_pass_counts_its_judging_not_its_call(
        tmp_path: Path) -> None:
    unjudged = judged("t0", "r1", JUDGED_AT[1], 1.0, 0.25)
    again = judged("t0", "r1", JUDGED_AT[2], 1.0, 0.5)  # the same reply, judged later
    path = write(tmp_path / "r.jsonl", [unjudged, again, again], meta=meta(arms=["a"]))
    for fast in (True, False):
        spend = load_results([path, path], fast=fast).spend[("demo", "a")]
        assert (spend.usd, spend.known, spend.judge_usd, spend.judged) == (1.0, 1, 0.75, 2)
