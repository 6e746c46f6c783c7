"""The batch journal: what it reads back, a last line cut short by a crash, and a hostile file
refused with its file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.store.batchlog import Journal, read_journal
from pytest_echo_bench.store.files import batches_path


def test_what_is_written_reads_back(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    journal = Journal(out)
    journal.submit("a", "demo", "gpt", "run1", 100.0, ["c1", "c2", "c3"])
    journal.accepted("a", "batch_1")
    journal.submit("b", "demo", "gpt", "run1", 101.0, ["c4"])
    journal.done("a", ["c1"])
    state = read_journal(out)
    assert [s.local for s in state.open()] == ["a", "b"]
    assert state.submissions["a"].batch_ids == ["batch_1"]
    assert state.submissions["b"].batch_ids is None  # its outcome unknown: find it first
    assert set(state.holding()) == {"c2", "c3", "c4"}
    journal.found("b", [])
    journal.done("b", None)
    journal.done("a", ["c2", "c3"])
    assert read_journal(out).open() == []


def test_a_torn_last_line_is_ignored_then_cut(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    journal = Journal(out)
    journal.submit("a", "demo", "gpt", "run1", 100.0, ["c1"])
    with open(batches_path(out), "ab") as f:
        f.write(b'{"op": "accepted", "local": "a", "batch_')
    assert read_journal(out).submissions["a"].batch_ids is None
    journal.accepted("a", "batch_9")  # the torn line is cut before the append
    assert read_journal(out).submissions["a"].batch_ids == ["batch_9"]
    assert batches_path(out).read_bytes().count(b"\n") == 2


def test_no_journal_is_an_empty_one(tmp_path: Path) -> None:
    assert read_journal(tmp_path / "r.jsonl").open() == []


@pytest.mark.parametrize("line", [
    b"[1, 2]",
    b'{"op": "accepted", "local": "zz", "batch_id": "b"}',
    b'{"op": "submit", "local": "a", "benchmark": "d", "arm": "g", "tag": "t", "at": "now", '
    b'"ids": []}',
    b'{"op": "submit", "local": "a", "benchmark": "d", "arm": "g", "tag": "t", "at": 1, '
    b'"ids": [3]}',
    b'{"op": "vanish", "local": "a"}',
    b"\xff\xfe",
])
def test_a_hostile_line_is_refused_naming_file_and_line(tmp_path: Path, line: bytes) -> None:
    out = tmp_path / "r.jsonl"
    Journal(out).submit("a", "demo", "gpt", "run1", 100.0, ["c1"])
    with open(batches_path(out), "ab") as f:
        f.write(line + b"\n")
    with pytest.raises(StoreError, match=rf"{batches_path(out)}:2: .*move it aside"):
        read_journal(out)


RECORDS = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                 max_size=4),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.lists(st.dictionaries(st.sampled_from(
    ["op", "local", "benchmark", "arm", "tag", "at", "ids", "batch_id", "batch_ids"]),
    RECORDS | st.sampled_from(["submit", "accepted", "found", "done", "a"]), max_size=8),
    max_size=5) | st.binary(max_size=60).map(lambda b: [b]))
def test_any_journal_reads_or_is_refused_with_its_line(tmp_path_factory: pytest.TempPathFactory,
                                                       records: list[object]) -> None:
    out = tmp_path_factory.mktemp("j") / "r.jsonl"
    data = b"".join((r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n"
                    for r in records)
    batches_path(out).write_bytes(data)
    try:
        state = read_journal(out)
    except StoreError as exc:
        assert f"{batches_path(out)}:" in str(exc)
        return
    for sub in state.open():  # what it read is what the engine relies on
        assert all(isinstance(cid, str) and cid for cid in sub.open_ids)
        assert sub.batch_ids is None or all(isinstance(b, str) for b in sub.batch_ids)
