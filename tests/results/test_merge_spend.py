"""A merged file reports the spend of its parts: merge keeps each key's newest row, and records in
its meta line what the rows it drops spent (``results.spent``), each call and judging counted once
by the report, also when the merged file is read beside one of its parts or merged with it again.
Checked on generated shards (retried errors, cached rows, unknown costs, judged rows, rows naming
no call), through both merge reads and both report reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from results_files import meta, row, write

from pytest_echo_bench.cli.main import main
from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.results import spent
from pytest_echo_bench.results.merge import merge
from pytest_echo_bench.results.read import load_results
from pytest_echo_bench.store.writer import write_whole

SETTINGS = settings(max_examples=120, deadline=None, derandomize=True, database=None)
JUDGED_AT = [None, "2024-01-02T00:00:00.000Z", "2024-01-03T00:00:00.000Z"]
# What a call cost, by its run and start (a copy of a row keeps its call's cost): None unknown,
# "cached" answered by the response cache (its list price is not spent)
COSTS: dict[tuple[str | None, str], float | str | None] = {
    ("r1", "s1"): 0.5, ("r1", "s2"): None, ("r2", "s1"): "cached", ("r2", "s2"): 0.25,
    (None, "s1"): 0.125, (None, "s2"): 2.0}
JUDGE_COSTS = {JUDGED_AT[0]: 0.01, JUDGED_AT[1]: 0.02, JUDGED_AT[2]: None}


def made(task: str, arm: str, run: str | None, start: str, error: bool, judged_at: str | None,
         grade: float | None) -> dict[str, Any]:
    """A row of one call: an error row, or one graded (by a judge when ``grade`` is given)."""
    cost = COSTS[(run, start)]
    fields: dict[str, Any] = {"run_id": run, "started_at": start, "finished_at": f"f{start}"}
    if cost == "cached":
        fields.update(cost_usd=0.75, cache_hits=1, sub_calls=1)
    else:
        fields["cost_usd"] = cost
    if grade is not None and not error:
        fields.update(judgments=[{"judge": "g", "prompt_sha256": "p", "grade": grade}],
                      judge_cost_usd=JUDGE_COSTS[judged_at], score=grade)
        if judged_at is not None:
            fields["judged_at"] = judged_at
    return row(task, arm, status="error" if error else "correct", **fields)


rows = st.builds(made, st.sampled_from(["t0", "t1", "t2"]), st.sampled_from(["a", "b"]),
                 st.sampled_from(["r1", "r2", None]), st.sampled_from(["s1", "s2"]), st.booleans(),
                 st.sampled_from(JUDGED_AT), st.sampled_from([None, 1.0, 2.0]))
shards = st.lists(st.lists(rows, max_size=8), min_size=1, max_size=3)


def spend(paths: list[Path], fast: bool = True) -> dict[tuple[str, str], tuple[Any, ...]]:
    """Each arm's spend as the report counts it."""
    found = load_results(paths, fast=fast).spend
    return {arm: (pytest.approx(s.usd, abs=1e-9), s.known, s.unknown,
                  pytest.approx(s.judge_usd, abs=1e-9), s.judged, s.judge_unknown)
            for arm, s in found.items() if s.known or s.unknown or s.judged or s.judge_unknown}


def merged(paths: list[Path], out: Path, fast: bool = True) -> Path:
    found = merge(paths, fast=fast)
    write_whole(out, found.meta, found.lines)
    return out


def files(where: Path, drawn: list[list[dict[str, Any]]]) -> list[Path]:
    return [write(where / f"part{n}.jsonl", part, meta=meta()) for n, part in enumerate(drawn)]


@SETTINGS
@given(drawn=shards)
def test_a_merged_file_reports_the_spend_of_its_parts(
        tmp_path_factory: pytest.TempPathFactory, drawn: list[list[dict[str, Any]]]) -> None:
    where = tmp_path_factory.mktemp("merge")
    parts = files(where, drawn)
    expected = spend(parts)
    for fast in (True, False):
        once = merged(parts, where / f"merged-{fast}.jsonl", fast)
        assert spend([once], fast) == expected
        # beside one of its parts, or merged with it again: each call counted as the files are
        again = spend([*parts, parts[0]])
        assert spend([once, parts[0]], fast) == again
        assert spend([parts[0], once], fast) == again
        twice = merged([once, parts[0]], where / f"twice-{fast}.jsonl", fast)
        assert spend([twice], fast) == again
        if all(r["run_id"] is not None for part in drawn for r in part):
            assert again == expected  # every row names its call: nothing counted twice
        thrice = merged([twice, once], where / "thrice.jsonl")
        assert spend([thrice]) == spend([*parts, parts[0], *parts])


def test_a_resumed_shard_merged_reports_the_retried_errors_spend(tmp_path: Path) -> None:
    error = made("t0", "a", "r1", "s1", True, None, None)
    retried = made("t0", "a", "r2", "s2", False, None, None)
    other = made("t1", "a", "r1", "s2", False, None, None)
    part = write(tmp_path / "run.jsonl", [error, other, retried], meta=meta())
    out = tmp_path / "merged.jsonl"
    assert main(["merge", str(part), "-o", str(out)]) == 0
    head = json.loads(out.read_text().splitlines()[0])
    assert head[spent.FIELD]["rows"] == [
        {"benchmark": "demo", "task_id": "t0", "arm": "a", "call": "2:r12:s1fs1",
         "cost_usd": 0.5}]
    assert spend([out]) == spend([part]) == {("demo", "a"): (0.75, 2, 1, 0.0, 0, 0)}
    # a file merged with itself drops nothing a report would count again
    again = tmp_path / "again.jsonl"
    assert main(["merge", str(out), str(out), "-o", str(again)]) == 0
    assert json.loads(again.read_text().splitlines()[0])[spent.FIELD] == head[spent.FIELD]
    assert spend([again]) == spend([part])


def test_a_merge_that_drops_nothing_records_nothing(tmp_path: Path) -> None:
    parts = [write(tmp_path / f"{n}.jsonl", [made(f"t{n}", "a", "r1", "s1", False, None, 1.0)],
                   meta=meta()) for n in range(2)]
    found = merge(parts)
    assert found.meta is not None and spent.FIELD not in found.meta.extra


def test_rows_beyond_the_listed_ones_are_summed_per_arm(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spent, "LISTED", 1)
    drawn = [made("t0", "a", run, start, True, None, None)
             for run, start in (("r1", "s1"), ("r2", "s2"), (None, "s2"))]
    part = write(tmp_path / "run.jsonl", [*drawn, made("t0", "a", "r2", "s1", False, None, 1.0)],
                 meta=meta())
    out = merged([part], tmp_path / "merged.jsonl")
    record = json.loads(out.read_text().splitlines()[0])[spent.FIELD]
    assert len(record["rows"]) == 1
    assert record["unlisted"] == [{"benchmark": "demo", "arm": "a", "usd": 2.25, "known": 2,
                                   "unknown": 0, "judge_usd": 0.0, "judged": 0,
                                   "judge_unknown": 0}]
    assert spend([out]) == spend([part])


@pytest.mark.parametrize("record", [
    [], {"rows": {}}, {"rows": [{"task_id": "t0", "arm": "a"}]},
    {"rows": [{"benchmark": "demo", "task_id": "t0", "arm": "a", "call": 3, "cost_usd": 1}]},
    {"rows": [{"benchmark": "demo", "task_id": "t0", "arm": "a", "call": None,
               "cost_usd": -1}]},
    {"rows": [], "unlisted": [{"benchmark": "demo", "arm": "a", "usd": 1.0}]},
])
def test_a_record_not_in_its_shape_is_refused_naming_the_line(tmp_path: Path,
                                                              record: Any) -> None:
    path = write(tmp_path / "m.jsonl", [row("t0", "a")], meta=meta(**{spent.FIELD: record}))
    for fast in (True, False):
        with pytest.raises(StoreError, match=rf"m\.jsonl:1: '{spent.FIELD}'"):
            load_results([path], fast=fast)
    with pytest.raises(StoreError, match=rf"m\.jsonl:1: '{spent.FIELD}'"):
        merge([path])
