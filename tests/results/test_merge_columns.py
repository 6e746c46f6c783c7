"""Merge's columnar read (``results.merge_scan.scan_columns``, chunk by chunk) merges exactly as
the reference read (every line parsed whole): the same merged file byte for byte, the same
duplicates, conflicts and coverage, or the same refusal, on the corpus of older files, shards,
repeated keys, conflicts, torn tails, hostile lines and generated files."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.results.merge import merge
from pytest_echo_bench.store.keyscan import CHUNK, RowScan
from pytest_echo_bench.store.reader import parse_line
from pytest_echo_bench.store.records import Row
from pytest_echo_bench.store.rows import StatusRow
from pytest_echo_bench.store.writer import write_whole

CORPUS = Path(__file__).parent.parent / "data" / "results"
SETTINGS = settings(max_examples=100, deadline=None, derandomize=True, database=None)
META = {"_meta": True, "benchmark": "b", "arms": {"b": ["a", "c"]},
        "benchmarks": {"b": {"fingerprint": "f0"}}}


def merged(paths: list[Path], fast: bool, **options: Any) -> tuple[object, ...] | str:
    """What a merge gives: the merged file's bytes (its end line's time left out), what it
    counted and printed; or the refusal's text."""
    try:
        found = merge(paths, fast=fast, **options)
    except StoreError as exc:
        return str(exc)
    out = paths[0].parent / f"merged-{fast}.jsonl"
    write_whole(out, found.meta, found.lines)
    lines = out.read_bytes().splitlines(keepends=True)
    tail = [json.loads(line) for line in lines[len(found.lines) + 1:]]
    for line in tail:  # the merged file's end line says when it was written
        line["run_end"].pop("at", None)
    return (lines[:len(found.lines) + 1], tail, found.duplicates, found.conflicts, found.found,
            found.coverage)


def same(paths: list[Path], **options: Any) -> tuple[object, ...] | str:
    fast = merged(paths, True, **options)
    assert fast == merged(paths, False, **options)
    return fast


def good(n: int, arm: str = "a", **changes: object) -> dict[str, Any]:
    """A row as our writer writes it."""
    fields: dict[str, Any] = dict(
        task_id=f"t{n}", arm=arm, passed=n % 3 == 0, detail="passed", wall_seconds=0.25 * n,
        sub_calls=1, benchmark="b", status="correct" if n % 3 == 0 else "wrong",
        output=f"so {n}", answer=str(n), target="4", attempts=1, started_at="s",
        finished_at=f"f{n}", worker="w", run_id="r", subtask=f"s{n % 2}",
        usage={"prompt_tokens": n, "completion_tokens": 2}, cost_usd=0.001 * n,
    )
    return json.loads(Row(**{**fields, **changes}).to_line())  # type: ignore[arg-type]


def write(path: Path, records: list[object], tail: bytes = b"") -> Path:
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in records) + tail)
    return path


def copied(tmp_path: Path, names: tuple[str, ...]) -> list[Path]:
    paths = []
    for i, name in enumerate(names):
        paths.append(tmp_path / f"{i}-{name}")
        paths[-1].write_bytes((CORPUS / name).read_bytes())
    return paths


NAMES = sorted(p.name for p in CORPUS.glob("*.jsonl"))


def test_our_rows_take_the_fast_path(tmp_path: Path) -> None:
    """Every row our writer writes decodes into merge's view: only line 1 is parsed whole."""
    path = write(tmp_path / "r.jsonl", [META] + [good(n, arm) for n in range(60) for arm in "ac"])
    scan = RowScan(path, StatusRow, lambda raw, n, strict: parse_line(raw, path, n, strict))
    batches = list(scan.batches())
    assert sum(len(fast) for fast, _ in batches) == 120 and not any(slow for _, slow in batches)
    assert isinstance(same([path]), tuple)


@pytest.mark.parametrize("name", NAMES)
def test_every_older_file_merges_the_same(tmp_path: Path, name: str) -> None:
    same(copied(tmp_path, (name,)))
    same(copied(tmp_path, (name, name)))  # each key twice


@pytest.mark.parametrize("pair", list(itertools.combinations(NAMES, 2)))
def test_older_files_merged_in_pairs_merge_the_same(tmp_path: Path, pair: tuple[str, str]
                                                    ) -> None:
    same(copied(tmp_path, pair), allow_mismatch=True)


def test_shards_with_repeats_and_conflicts_merge_the_same_over_many_chunks(tmp_path: Path) -> None:
    """Rows long enough that each file is several chunks: the places cross chunk boundaries."""
    pad = "x" * 1200
    paths = []
    for k in (1, 2):
        meta = {**META, "selection": {"shard": f"{k}/2"}, "shard_scheme": 2}
        rows = [good(n, arm, output=pad) for n in range(k, 1500, 2) for arm in "ac"]
        # a retried error, then a changed verdict of the other shard's rows
        rows += [good(n, "a", status="error", passed=False, output=pad) for n in range(0, 40, 2)]
        rows += [good(n, "c", passed=n % 3 != 0, output=pad) for n in range(0, 40)]
        paths.append(write(tmp_path / f"s{k}.jsonl", [meta, *rows], tail=b'{"task_id": "t'))
    assert paths[0].stat().st_size > 2 * CHUNK
    found = same(paths)
    assert isinstance(found, tuple) and found[3]  # conflicts printed


@pytest.mark.parametrize("line", [
    b'{"task_id": "t1", "arm": "a", "passed": 1, "detail": "passed"}',
    b'{"task_id": "t1", "arm": "a", "status": 3, "detail": "error: x"}',
    b'{"task_id": "t1", "arm": "a", "task_id": "t2", "epoch": 2}',
    b'{"task_id": "t1", "arm": "a", "benchmark": ""}',
    b'{"task_id": "caf\xc3\xa9", "arm": "a"}',
    b'{"task_id": "\\ud800", "arm": "a", "status": "\\udfff"}',
    b'{"task_id": "t1", "arm": "a", "epoch": 0}',
    b'{"task_id": "t1", "arm": "a", "epoch": 2.0}',
    b'{"task_id": "t1", "arm": "a", "_meta": false, "wall_seconds": NaN}',
    b'{"task_id": "t1", "arm": "a", "_meta": 0}',
    b'{"_meta": true, "run_end": {"run_id": "r", "at": "t", "stopped": null}}',
    b'{"_meta": true, "benchmark": "other"}',
    b'{"task_id": 5, "arm": "a"}',
    b"not json",
    b"   ",
    b"",
])
@pytest.mark.parametrize("tail", [b"", b'{"task_id": "t9", "ar', b'{"task_id": "t9", "arm": "a"}'])
def test_a_hostile_line_among_good_ones_merges_as_the_full_reader_reads_it(
    tmp_path: Path, line: bytes, tail: bytes
) -> None:
    path = tmp_path / "r.jsonl"
    rows = [json.dumps(r).encode() for r in [META] + [good(n) for n in range(40)]]
    path.write_bytes(b"\n".join(rows[:20] + [line] + rows[20:]) + b"\n" + tail)
    other = write(tmp_path / "o.jsonl", [META] + [good(n, "c") for n in range(30)])
    same([path, other])
    same([other, path])


def test_a_file_without_a_meta_line_merges_the_same_under_an_assumed_fingerprint(
    tmp_path: Path,
) -> None:
    bare = write(tmp_path / "bare.jsonl", [good(n, benchmark="") for n in range(10)])
    other = write(tmp_path / "o.jsonl", [META] + [good(n, "c") for n in range(10)])
    assert isinstance(same([bare, other]), str)  # refused alike: nothing says its spec
    assert isinstance(same([bare, other], assumed={"b": "f0"}), tuple)


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=5,
)
# what merge reads of a row as our writers write it, so that keys repeat and verdicts change
sound = st.fixed_dictionaries({}, optional={
    "passed": st.booleans(), "epoch": st.integers(1, 3), "benchmark": st.sampled_from(["b", ""]),
    "status": st.sampled_from(["correct", "wrong", "error", "unjudged", "unparseable"]),
    "detail": st.sampled_from(["passed", "error: x", "unparseable", "expected 4 got 5"]),
})
# and anything at all in those fields, or a ``_meta`` of any value
hostile = st.dictionaries(
    st.sampled_from(["passed", "status", "detail", "epoch", "benchmark", "task_id", "_meta"]),
    values, min_size=1, max_size=2,
)
files = st.lists(st.lists(st.tuples(st.integers(0, 6), st.sampled_from("ac"), sound),
                          max_size=20), min_size=1, max_size=3)


@SETTINGS
@given(contents=files, odd=st.none() | st.tuples(st.integers(0, 2), st.integers(0, 20), hostile),
       ascii=st.booleans(), cut=st.integers(0, 40), headless=st.booleans())
def test_generated_files_merge_the_same(
    tmp_path_factory: pytest.TempPathFactory, contents: list[list[tuple[int, str, dict[str, Any]]]],
    odd: tuple[int, int, dict[str, Any]] | None, ascii: bool, cut: int, headless: bool,
) -> None:
    """Files of sound rows whose keys repeat within and across files, one of them (``odd``)
    perhaps hostile."""
    folder = tmp_path_factory.mktemp("gen")
    if odd is not None:
        which, at, change = odd
        rows = contents[which % len(contents)]
        rows.insert(at % (len(rows) + 1), (at % 7, "a", change))
    paths = []
    for i, rows in enumerate(contents):
        # the first file without its meta line, sometimes: its rows take the assumed fingerprint
        head = [] if headless and i == 0 else [META]
        records = head + [{**good(n, arm), **change} for n, arm, change in rows]
        data = b"".join(json.dumps(r, ensure_ascii=ascii).encode() + b"\n" for r in records)
        paths.append(folder / f"{i}.jsonl")
        paths[-1].write_bytes(data[: len(data) - cut] if i == len(contents) - 1 else data)
    same(paths, assumed={"b": "f0"})
