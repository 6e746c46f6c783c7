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
