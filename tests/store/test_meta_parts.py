"""The meta line's typed parts (``store.meta``): each reads every shape our writers ever wrote, and
a line read and written again is the same bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.store.files import encode_line, end_line
from pytest_echo_bench.store.meta import (
    BenchmarkEntry,
    DecideRecord,
    OrderRecord,
    RunEnd,
    RunOptions,
    SelectionRecord,
    ShardFields,
    StopRecord,
    benchmark_entry,
)
from pytest_echo_bench.store.records import Meta

CORPUS = Path(__file__).parents[1] / "data" / "results"
# The parent harness's line is read as today's shape (``store.checks.current_meta``): not the same
# bytes.
OURS = sorted(p for p in CORPUS.glob("*.jsonl") if not p.name.startswith("parent_"))


@pytest.mark.parametrize("path", OURS, ids=lambda p: p.stem)
def test_every_meta_line_of_the_corpus_is_written_back_byte_for_byte(path: Path) -> None:
    first = path.read_bytes().splitlines(keepends=True)[0]
    line = json.loads(first)
    if (
        "rootdir" not in line
    ):  # written before the field: a merge or regrade of it has always added it, empty
        at = list(line).index("fsync") + 1
        line = dict([*list(line.items())[:at], ("rootdir", ""), *list(line.items())[at:]])
        first = encode_line(line)
    assert encode_line(Meta.from_json(line).to_json()) == first


@pytest.mark.parametrize("path", OURS, ids=lambda p: p.stem)
def test_every_end_line_of_the_corpus_is_written_back_byte_for_byte(path: Path) -> None:
    for line in path.read_bytes().splitlines(keepends=True)[1:]:
        record = json.loads(line)
        if record.get("_meta") is True and "run_end" in record:
            end = RunEnd.from_json(record["run_end"])
            assert end_line(end.run_id, end.at, end.stopped, end.decided) == line


def test_older_shapes_read_as_what_they_meant() -> None:
    first = Meta.from_json(json.loads((CORPUS / "first_format.jsonl").read_text().splitlines()[0]))
    assert (
        first.selection == SelectionRecord(["arith.yaml"], "", "") and first.selection.shard is None
    )
    assert first.benchmarks["arith"] == BenchmarkEntry("arith.yaml", "712e14cece58785c", items=12)
    assert first.benchmarks["arith"].samples == 1 and first.order is None and first.decide is None
    parent = Meta.from_json(
        json.loads((CORPUS / "parent_bbh_sweep.jsonl").read_text().splitlines()[0])
    )
    assert (
        parent.benchmarks == {}
        and parent.selection == SelectionRecord()
        and parent.run_options() is None
    )
    assert parent.arms == {"bbh": ["haiku", "sonnet", "vote_escalate"]}
    file_order = Meta.from_json(json.loads((CORPUS / "run_end.jsonl").read_text().splitlines()[0]))
    assert file_order.order == OrderRecord("file") and not file_order.order.random


def test_a_part_keeps_what_it_does_not_name_and_leaves_out_what_it_was_not_given() -> None:
    for part, line in (
        (BenchmarkEntry, {"fingerprint": "f", "items": 3, "newer": [1]}),
        (SelectionRecord, {"args": [], "keyword": "k", "newer": 1}),
        (OrderRecord, {"order": "random", "seed": 4, "newer": "x"}),
        (DecideRecord, {"pairs": [["b", "x", "y"]], "newer": None}),
    ):
        typed = part.from_json(line)
        assert typed.to_json() == line and list(typed.to_json()) == list(line)
        assert typed.extra == {"newer": line["newer"]}


def test_the_benchmark_entry_is_built_as_every_writer_wrote_it() -> None:
    run = benchmark_entry("f", spec="a.yaml", items=6, parts={"dataset": "d"}, epochs=2)
    assert (
        list(run.to_json()) == ["spec", "fingerprint", "parts", "items", "epochs"]
        and run.samples == 2
    )
    assert benchmark_entry("f", spec="", items=6).to_json() == {
        "spec": "",
        "fingerprint": "f",
        "items": 6,
    }
    assert benchmark_entry("f").to_json() == {"fingerprint": "f"}  # a merge's assumed fingerprint


def test_run_options_tell_a_null_budget_from_none_recorded() -> None:
    whole = RunOptions.from_json({"cache": "off", "concurrency": 2, "budget_usd": None})
    assert (
        whole.given == ("cache", "concurrency", "budget_usd")
        and whole.to_json()["budget_usd"] is None
    )
    partial = RunOptions.from_json({"concurrency": 2})
    assert partial.given == ("concurrency",) and partial.to_json() == {"concurrency": 2}
    with pytest.raises(ValueError, match="not an object"):
        RunOptions.from_json(["off"])
    meta = Meta.from_json({"_meta": True, "options": {"cache": "default"}})
    assert meta.run_options() == RunOptions("default", given=("cache",))


def test_shard_fields_are_read_and_broken_ones_named() -> None:
    shard = Meta.from_json({"_meta": True, "shard_scheme": 2, "shard_items": 8}).shard_fields("f:1")
    assert shard == ShardFields(scheme=2, items=8)
    merged = ShardFields.from_json(
        {"merged_from": ["a"], "shards": ["1/2"], "complete": True}, "m:1"
    )
    assert merged.merged and merged.complete and merged.shards == ["1/2"] and merged.parts is None
    with pytest.raises(StoreError, match="^f:1: .*'shard_items'"):
        ShardFields.from_json({"shard_items": -1}, "f:1")
    with pytest.raises(StoreError, match="^f:1: .*'shard_parts'"):
        ShardFields.from_json({"shard_parts": {}}, "f:1")


def test_a_stop_record_says_what_a_decided_stop_and_a_merge_of_one_carry() -> None:
    decided = StopRecord.from_json(
        {"reason": "decided", "message": "", "at": "t", "pairs": [{"a": 1}, 3]}
    )
    assert decided is not None and decided.pairs == ({"a": 1},) and not decided.parts_decided
    merged = StopRecord.from_json({"reason": "merged", "parts": [{"reason": "decided"}]})
    assert merged is not None and merged.parts_decided and merged.pairs == ()
    assert StopRecord.from_json(None) is None and StopRecord.from_json({}) is None
    end = RunEnd.from_json({"run_id": "merged", "at": "t", "stopped": "garbage", "decided": 5})
    assert end.merged and end.stop is None and end.decided == ""
