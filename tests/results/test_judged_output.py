"""A judging pass's output read back for its resume: the keys it skips, the keys judged again only
when asked, what its judges spent, and the outputs it refuses (another judge spec, other source
runs, a file no judging pass wrote), whatever the file holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from results_files import meta, row, write

from pytest_echo_bench.results.judge_source import JudgeError
from pytest_echo_bench.results.judged import read_output

SOURCES = [{"file": "run.jsonl", "run_id": "r1", "fingerprint": "f1"}]
PASS = meta(judged_from=SOURCES, judge_fingerprint={"demo": "s1"})


def judged_row(task_id: str, arm: str, status: str, cost: float | None = 0.01,
               **fields: Any) -> dict[str, Any]:
    extra = {"judge_cost_usd": cost} if cost is not None else {}
    return row(task_id, arm, status=status, output="4", **extra, **fields)


def test_judged_keys_are_skipped_and_unjudged_ones_judged_again_only_when_asked(
        tmp_path: Path) -> None:
    out = write(tmp_path / "judged.jsonl", [
        judged_row("q0", "a", "correct"), judged_row("q1", "a", "unjudged"),
        judged_row("q2", "a", "error"),  # the scorer failed on a stored output
        row("q3", "a", status="error", output=""),  # carried over: nothing to judge
        judged_row("q1", "b", "unjudged"), judged_row("q1", "b", "wrong"),  # judged again since
    ], meta=PASS)
    held = read_output(out, PASS, retry=False)
    key = [("demo", t, a, 1) for t, a in (("q0", "a"), ("q1", "a"), ("q2", "a"), ("q3", "a"),
                                           ("q1", "b"))]
    assert held.done == {key[0], key[3], key[4]} and held.again == {key[1], key[2]}
    assert held.spent == pytest.approx(0.05)  # every call paid for, the row judged again's too
    retried = read_output(out, PASS, retry=True)
    assert retried.done == held.done and retried.again == set()


def test_a_torn_last_line_is_cut_and_its_item_judged_again(tmp_path: Path) -> None:
    out = write(tmp_path / "judged.jsonl", [judged_row("q0", "a", "correct")],
                tail='{"task_id": "q1", "arm": "a", "pas', meta=PASS)
    assert read_output(out, PASS, retry=False).done == {("demo", "q0", "a", 1)}
    assert out.read_text().endswith("}\n")


@pytest.mark.parametrize(("line", "said"), [
    (meta(), "not the output of a judging pass"),
    ({**PASS, "judge_fingerprint": {"demo": "s2"}}, "another scorer or judges"),
    ({**PASS, "judged_from": [{**SOURCES[0], "run_id": "r2"}]}, "other source runs"),
])
def test_an_output_of_another_pass_or_none_is_refused(tmp_path: Path, line: dict[str, Any],
                                                       said: str) -> None:
    out = write(tmp_path / "judged.jsonl", [judged_row("q0", "a", "correct")], meta=line)
    before = out.read_bytes()
    with pytest.raises(JudgeError, match=said):
        read_output(out, PASS, retry=False)
    assert out.read_bytes() == before


@pytest.mark.parametrize("line", [meta(), {**PASS, "judge_fingerprint": {"demo": "s2"}}])
def test_a_refused_output_is_not_repaired_first(tmp_path: Path, line: dict[str, Any]) -> None:
    """A file refused as -o keeps its last line, torn or not: nothing is cut into OUT.torn."""
    out = write(tmp_path / "run.jsonl", [judged_row("q0", "a", "correct")],
                tail='{"task_id": "q1", "arm": "a", "pas', meta=line)
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\nimportant last line")
    for path in (out, notes):
        before = path.read_bytes()
        with pytest.raises(JudgeError, match="give a new -o"):
            read_output(path, PASS, retry=False)
        assert path.read_bytes() == before
        assert not path.with_name(path.name + ".torn").exists()


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8)


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(judged_from=st.one_of(st.just(SOURCES), JSON),
       fingerprint=st.one_of(st.just({"demo": "s1"}), JSON), cost=JSON, status=JSON)
def test_any_provenance_and_row_values_read_or_are_refused_by_name(
        tmp_path_factory: pytest.TempPathFactory, judged_from: Any, fingerprint: Any, cost: Any,
        status: Any) -> None:
    """Hostile provenance and row figures: refused with a JudgeError, or read with a finite,
    non-negative spend; never a crash."""
    out = tmp_path_factory.mktemp("judged") / "judged.jsonl"
    line = {**PASS, "judged_from": judged_from, "judge_fingerprint": fingerprint}
    record = {**judged_row("q0", "a", "correct"), "judge_cost_usd": cost, "status": status}
    out.write_text(json.dumps(line) + "\n" + json.dumps(record) + "\n")
    try:
        held = read_output(out, PASS, retry=False)
    except JudgeError as exc:
        assert str(out) in str(exc)
        return
    assert 0 <= held.spent < float("inf")
    assert held.done | held.again == {("demo", "q0", "a", 1)}
