"""The rows as read: one field list, one typed ``ReadRow``, and fast views that agree with it."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import msgspec
import pytest

from pytest_echo_bench.cli.estimate import SeenRow
from pytest_echo_bench.report.page.state import PageRow
from pytest_echo_bench.store.files import STATUSES
from pytest_echo_bench.store.keyscan import ScanRow
from pytest_echo_bench.store.reader import iter_records
from pytest_echo_bench.store.records import Row
from pytest_echo_bench.store.rows import (
    FIELDS,
    FIGURES,
    ReadRow,
    StatusRow,
    fields_of,
    read_row,
    view,
)
from pytest_echo_bench.store.tally import TallyRow

CORPUS = Path(__file__).parent.parent / "data" / "results"
KEY = {"task_id", "arm", "benchmark", "epoch"}
TYPED = [StatusRow, TallyRow, SeenRow]


def full_row(**changes: object) -> Row:
    fields = dict(task_id="t0", arm="a", passed=True, detail="passed", wall_seconds=0.5,
                  sub_calls=2, benchmark="b", status="correct", output="so 4", answer="4",
                  target="4", attempts=1, started_at="s", finished_at="f", worker="w", run_id="r",
                  subtask="st", usage={"prompt_tokens": 3, "completion_tokens": 4}, retries=1,
                  cost_usd=0.25, cost_units=2.0, cache_hits=1, extra={"escalated": True}, epoch=2,
                  charged_usd=0.5, served_model="m-1", served_fingerprint="fp_1",
                  item_sha256="ab" * 32, batch_id="batch_1", judged_at="2024-01-02T00:00:00.000Z",
                  score=7.5, judge_cost_usd=0.125,
                  judgments=[{"judge": "j", "prompt_sha256": "ab", "grade": 7.5}])
    return Row(**{**fields, **changes})  # type: ignore[arg-type]


def test_every_field_the_writer_writes_is_in_the_one_field_list_and_the_read_row() -> None:
    written = {f.name for f in dataclasses.fields(Row)} - KEY - {"schema"}
    assert set(FIELDS) == written
    assert set(ReadRow.__struct_fields__) == written | KEY | {"unknown"}


def test_the_read_row_is_built_in_the_field_lists_order() -> None:
    texts = tuple(n for n, (kind, _) in FIELDS.items() if kind is str and n != "status")
    key = ("benchmark", "task_id", "arm", "epoch", "passed", "status")
    assert ReadRow.__struct_fields__ == (*key, *texts, *FIGURES, "usage", "extra", "unknown",
                                         "score", "judgments")


def test_a_row_written_reads_back_with_every_field_typed() -> None:
    row = full_row()
    read = read_row(json.loads(row.to_line()), "other")
    for name in set(FIELDS) - {"judgments"} | KEY:
        assert getattr(read, name) == getattr(row, name), name
    assert list(read.judgments) == row.judgments
    assert read.unknown == () and read.cached() is False


def test_an_older_six_field_row_reads_with_its_verdict_and_the_meta_lines_benchmark() -> None:
    record = {"task_id": "bbh/dates/1", "arm": "a", "passed": False, "detail": "unparseable",
              "wall_seconds": 1, "sub_calls": 1}
    read = read_row(record, "bbh")
    got = (read.benchmark, read.epoch, read.status, read.passed, read.target)
    assert got == ("bbh", 1, "unparseable", False, None)
    assert read.wall_seconds == 1.0 and isinstance(read.wall_seconds, float)


@pytest.mark.parametrize(("name", "value"), [
    ("wall_seconds", math.nan), ("cost_usd", -1.0), ("retries", 1.5), ("cache_hits", True),
    ("sub_calls", "2"), ("charged_usd", 1e13),
])
def test_a_figure_checks_refuse_is_unknown_and_named(name: str, value: object) -> None:
    read = read_row({**json.loads(full_row().to_line()), name: value}, "")
    assert getattr(read, name) is None and read.unknown == (name,)


def test_odd_texts_and_usage_are_unknown_never_a_crash() -> None:
    odd = {"output": 5, "target": None, "usage": {"prompt_tokens": "x"}, "extra": [1], "passed": 1}
    record = {**json.loads(full_row().to_line()), **odd}
    read = read_row(record, "")
    got = (read.output, read.target, read.usage, read.extra, read.passed)
    assert got == (None, None, None, {}, False)
    assert read.unknown == ("usage",)


def test_a_view_takes_only_names_of_the_field_list() -> None:
    with pytest.raises(KeyError):
        view("Bad", "no_such_field")
    two = view("_Two", "answer", "retries")
    assert two.__struct_fields__ == (*ScanRow.__struct_fields__, "answer", "retries")


def corpus_rows() -> list[tuple[str, bytes, dict[str, object]]]:
    rows = []
    for path in sorted(CORPUS.glob("*.jsonl")):
        for record in iter_records(path):
            if not record.data.get("_meta"):
                rows.append((f"{path.name}:{record.lineno}", record.raw.rstrip(b"\n"), record.data))
    return rows


@pytest.mark.parametrize("row_type", TYPED)
def test_every_corpus_row_decodes_fast_as_the_full_parser_reads_it(row_type: type[ScanRow]) -> None:
    decode = msgspec.json.Decoder(row_type).decode
    for where, raw, data in corpus_rows():
        fast, slow = decode(raw), fields_of(row_type, data)
        for name in row_type.__struct_fields__[len(ScanRow.__struct_fields__):]:
            value = getattr(fast, name)
            # A fast view holds what the line says; the full parser's figures are read by the rules
            # the readers apply to both (``store.checks``), and agree on every row written.
            read = getattr(slow, name)
            assert value == read or FIELDS[name][1](value) == read, (where, name)
        assert (fast.task_id, fast.arm, fast.epoch or 1) == (slow.task_id, slow.arm, slow.epoch)


def test_the_page_view_takes_any_value_as_it_is() -> None:
    record = {"task_id": "t", "arm": "a", "target": 4, "retries": "x"}
    decoded = msgspec.json.decode(json.dumps(record).encode(), type=PageRow)
    slow = fields_of(PageRow, record, loose=True)
    assert (decoded.target, decoded.retries) == (4, "x") == (slow.target, slow.retries)


def test_every_corpus_row_reads_with_known_figures() -> None:
    for where, _, data in corpus_rows():
        read = read_row(data, "arith")
        assert read.unknown == () and read.status in STATUSES
        assert all(getattr(read, n) is None or getattr(read, n) >= 0 for n in FIGURES), where


def test_a_judged_rows_grade_and_judgments_read_back_and_bad_ones_are_unknown() -> None:
    read = read_row({"task_id": "t", "arm": "a", "score": -2, "judgments": [{"judge": "j"}, 3]},
                    "b")
    assert read.score == -2.0 and read.judgments == ({"judge": "j"},) and read.unknown == ()
    bad = read_row({"task_id": "t", "arm": "a", "score": "7", "judgments": {"judge": "j"}}, "b")
    assert bad.score is None and bad.judgments == () and bad.unknown == ("score", "judgments")
    assert read_row({"task_id": "t", "arm": "a", "score": float("nan")}, "b").score is None
