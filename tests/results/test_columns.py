"""The report's columnar read (``store.columns.ReportRow``, chunk by chunk) gives exactly what the
reference read gives (every line parsed whole): the same ``Results``, or the same refusal, on
the corpus of older files and on generated files with hostile values, repeated keys, lines that
are not rows and torn tails."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.report.figures import build_report
from pytest_echo_bench.results.read import Results, load_results
from pytest_echo_bench.store.columns import ReportRow
from pytest_echo_bench.store.keyscan import RowScan
from pytest_echo_bench.store.reader import parse_line
from pytest_echo_bench.store.records import Row
from pytest_echo_bench.store.rows import FIELDS

CORPUS = Path(__file__).parent.parent / "data" / "results"
SETTINGS = settings(max_examples=120, deadline=None, derandomize=True, database=None)
META = {"_meta": True, "benchmark": "b", "arms": {"b": ["a", "c"]}}


def both(paths: list[Path]) -> tuple[Results | str, Results | str]:
    """What the fast and the reference read give: the results, or the refusal's text."""
    found: list[Results | str] = []
    for fast in (True, False):
        try:
            found.append(load_results(paths, fast=fast))
        except StoreError as exc:
            found.append(str(exc))
    return found[0], found[1]


def good(n: int, arm: str = "a", **changes: object) -> dict[str, Any]:
    """A row as our writer writes it."""
    fields: dict[str, Any] = dict(
        task_id=f"t{n}", arm=arm, passed=n % 3 == 0, detail="passed", wall_seconds=0.25 * n,
        sub_calls=1, benchmark="b", status="correct" if n % 3 == 0 else "wrong",
        output=f"so {n}", answer=str(n), target="4", attempts=1, started_at="s",
        finished_at=f"f{n}", worker="w", run_id="r", subtask=f"s{n % 2}",
        usage={"prompt_tokens": n, "completion_tokens": 2}, cost_usd=0.001 * n,
        cost_units=1.0, cache_hits=0, extra={"escalated": n % 2 == 0},
    )
    return json.loads(Row(**{**fields, **changes}).to_line())  # type: ignore[arg-type]


def write(path: Path, records: list[object], tail: bytes = b"") -> Path:
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in records) + tail)
    return path


@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS.glob("*.jsonl")))
def test_every_older_file_reads_the_same(name: str) -> None:
    fast, reference = both([CORPUS / name])
    assert fast == reference


@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS.glob("*.jsonl")))
@pytest.mark.parametrize("fast", [True, False])
def test_a_read_without_spend_is_the_same_read_naming_no_call(name: str, fast: bool) -> None:
    whole = load_results([CORPUS / name], fast=fast)
    lean = load_results([CORPUS / name], fast=fast, spend=False)
    assert lean.spend == {} and all(i.call is None for i in lean.rows)
    assert lean.rows == [msgspec.structs.replace(i, call=None) for i in whole.rows]
    assert replace(lean, rows=whole.rows, spend=whole.spend) == whole


def test_our_rows_take_the_fast_path_and_report_the_same(tmp_path: Path) -> None:
    path = write(tmp_path / "r.jsonl", [META] + [good(n, arm) for n in range(60) for arm in "ac"])
    scan = RowScan(path, ReportRow, lambda raw, n, strict: parse_line(raw, path, n, strict))
    fast = [row for rows, _ in scan.batches() for row in rows]
    assert len(fast) == 120  # every row: line 1, the meta line, is the only one parsed whole
    got, reference = both([path])
    assert got == reference and isinstance(got, Results)
    assert build_report(got) == build_report(reference)  # type: ignore[arg-type]


def test_judged_rows_take_the_fast_path_and_report_the_same(tmp_path: Path) -> None:
    judgments = [{"judge": j, "model": "m", "prompt_sha256": "ab" * 32, "grade": 7.0 + (j == "x"),
                  "passed": True, "label": None, "order": None, "reply": "ok [[7]]",
                  "usage": {"prompt_tokens": 3, "completion_tokens": 1}, "cost_usd": 0.001}
                 for j in ("x", "y")]
    rows = [good(n, arm, score=float(n % 10), judgments=judgments, judge_cost_usd=0.002)
            for n in range(40) for arm in "ac"]
    path = write(tmp_path / "r.jsonl", [META] + rows)
    scan = RowScan(path, ReportRow, lambda raw, n, strict: parse_line(raw, path, n, strict))
    assert sum(len(fast) for fast, _ in scan.batches()) == 80
    got, reference = both([path])
    assert got == reference and isinstance(got, Results)
    assert got.rows[0].judged == (("x", "m", 8.0, None, None), ("y", "m", 7.0, None, None))
    assert build_report(got) == build_report(reference)  # type: ignore[arg-type]


def test_repeated_keys_across_files_keep_the_newest_and_count_each_call_once(
    tmp_path: Path,
) -> None:
    first = write(tmp_path / "1.jsonl", [META] + [good(n) for n in range(10)])
    later = write(tmp_path / "2.jsonl", [META] + [good(n, passed=True, status="correct",
                                                       finished_at="g") for n in range(5, 15)]
                  + [good(3, status="error", detail="error: x", passed=False)])
    got, reference = both([first, later, first])
    assert got == reference and isinstance(got, Results)
    assert got.duplicates == 16 and got.conflicts
    assert got.spend[("b", "a")].known == 20  # the third file copies calls counted already


@pytest.mark.parametrize("line", [
    b'{"task_id": "t1", "arm": "a", "wall_seconds": NaN}',
    b'{"task_id": "t1", "arm": "a", "cost_usd": -1}',
    b'{"task_id": "t1", "arm": "a", "usage": {"prompt_tokens": 1.5}}',
    b'{"task_id": "t1", "arm": "a", "extra": [1], "judgments": "x", "score": true}',
    # judgments: records beside what is not one, fields of the wrong type, no prompt digest
    b'{"task_id": "t1", "arm": "a", "score": 3, "judgments": [{"judge": "j", "prompt_sha256": '
    b'"d", "grade": 3}, 7, null, [1]]}',
    b'{"task_id": "t1", "arm": "a", "judgments": [{"judge": 1, "prompt_sha256": "d"}, '
    b'{"judge": "j", "grade": "7", "label": 5, "order": "ab", "model": ["m"]}]}',
    b'{"task_id": "t1", "arm": "a", "judge_cost_usd": 0.5, "judgments": [{"judge": "j", '
    b'"prompt_sha256": "d", "grade": 1e400, "label": "GOOD", "order": "xy", "grade": 2}]}',
    b'{"task_id": "t1", "arm": "a", "judgments": {"judge": "j", "prompt_sha256": "d"}}',
    b'{"task_id": "t1", "arm": "a", "judgments": []}',
    b'{"task_id": "t1", "arm": "a", "output": 5, "answer": null, "subtask": 3}',
    b'{"task_id": "bbh/dates/1", "arm": "a", "passed": 1, "detail": "unparseable"}',
    b'{"task_id": "t1", "arm": "a", "task_id": "t2", "epoch": 2}',
    b'{"task_id": "caf\xc3\xa9", "arm": "a"}',
    b'{"task_id": "\\ud800", "arm": "a", "output": "\\udfff"}',
    b'{"task_id": "t1", "arm": "a", "epoch": 0}',
    b"not json",
    b'{"_meta": true, "benchmark": "other"}',
    b"",
])
@pytest.mark.parametrize("tail", [b"", b'{"task_id": "t9", "ar'])
def test_a_hostile_line_among_good_ones_reads_as_the_full_reader_reads_it(
    tmp_path: Path, line: bytes, tail: bytes
) -> None:
    path = tmp_path / "r.jsonl"
    rows = [json.dumps(r).encode() for r in [META] + [good(n) for n in range(40)]]
    path.write_bytes(b"\n".join(rows[:20] + [line] + rows[20:]) + b"\n" + tail)
    fast, reference = both([path])
    assert fast == reference


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
# a few values of each field, hostile or not; a small key space, so keys repeat
changes = st.dictionaries(
    st.sampled_from([*FIELDS, "epoch", "benchmark"]),
    st.one_of(values, st.sampled_from([0.5, 3, "correct", "error", {"escalated": True},
                                       {"random_guess": True}, {"prompt_tokens": 7}])),
    max_size=3,
)
lines = st.lists(st.tuples(st.integers(0, 6), st.sampled_from("ac"), changes), max_size=30)


@SETTINGS
@given(rows=lines, ascii=st.booleans(), cut=st.integers(0, 40))
def test_generated_files_read_the_same(
    tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[int, str, dict[str, Any]]],
    ascii: bool, cut: int,
) -> None:
    path = tmp_path_factory.mktemp("gen") / "r.jsonl"
    records = [META] + [{**good(n, arm), **change} for n, arm, change in rows]
    data = b"".join(json.dumps(r, ensure_ascii=ascii).encode() + b"\n" for r in records)
    path.write_bytes(data[: len(data) - cut])  # a torn tail, or none
    fast, reference = both([path])
    assert fast == reference
    if isinstance(fast, Results):
        assert build_report(fast) == build_report(reference)  # type: ignore[arg-type]


@SETTINGS
@given(row=st.tuples(st.integers(0, 6), st.sampled_from("ac"), changes))
def test_a_generated_row_the_fast_path_takes_reads_the_same(
    tmp_path_factory: pytest.TempPathFactory, row: tuple[int, str, dict[str, Any]],
) -> None:
    """One row after a good one: when it decodes into the columns, the fast path reads both."""
    n, arm, change = row
    path = write(tmp_path_factory.mktemp("one") / "r.jsonl", [META, good(0), {**good(n, arm),
                                                                            **change}])
    fast, reference = both([path])
    assert fast == reference
    if isinstance(fast, Results):
        assert build_report(fast) == build_report(reference)  # type: ignore[arg-type]


def test_token_classes_read_the_same_on_both_paths(tmp_path: Path) -> None:
    from pytest_echo_bench.spec.pricing import CLASS_KEYS
    from pytest_echo_bench.store import columns

    assert columns._CLASSES == CLASS_KEYS  # the store's copy of the spec's order
    usages = [{"prompt_tokens": 9, "completion_tokens": 4, "cache_read_tokens": 3},
              {"prompt_tokens": 9, "completion_tokens": 4, "reasoning_tokens": 2,
               "cache_write_tokens": 0},
              {"prompt_tokens": 9, "completion_tokens": 4}]
    rows = [good(n, usage=usages[n % 3]) for n in range(9)]
    got, reference = both([write(tmp_path / "r.jsonl", [META, *rows])])
    assert got == reference and isinstance(got, Results)
    assert [item.classes for item in got.rows[:3]] == [(3, 0, 0), (0, 0, 2), None]
