"""The tests' results files (``tests/results_files.py``) are laid out as the writer lays out its
own, and read back as they were written."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from results_files import ABSENT, BRIEF_FIELDS, brief_row, meta, row, row_line, write, write_lines

from conftest import read_rows
from pytest_echo_bench.store.files import encode_line
from pytest_echo_bench.store.records import Row


def test_a_row_keeps_the_writers_field_order_and_is_a_row_it_could_write() -> None:
    order = [field.name for field in dataclasses.fields(Row)]
    assert list(row()) == [name for name in order if name in row()]
    written = json.loads(Row(**row("q1", "b", False)).to_line())
    assert {name: written[name] for name in row()} == row("q1", "b", False)
    assert list(brief_row()) == list(BRIEF_FIELDS)


def test_passed_and_status_follow_each_other_and_overrides_stay_in_place() -> None:
    assert (row()["passed"], row()["status"]) == (True, "correct")
    assert (row(passed=False)["status"], row(status="error")["passed"]) == ("wrong", False)
    changed = row(benchmark="other", answer=ABSENT, cost_usd=0.5)
    assert list(changed)[6] == "benchmark" and changed["benchmark"] == "other"
    assert "answer" not in changed and list(changed)[-1] == "cost_usd"


def test_a_file_reads_back_as_written(tmp_path: Path) -> None:
    head, rows = meta(arms=("A", "B"), items=2), [row("t1", "A"), brief_row("t1", "B", False)]
    assert read_rows(write(tmp_path / "a.jsonl", rows, meta=head)) == (head, rows)
    torn = write(tmp_path / "b.jsonl", rows, tail=b'{"task_id": "t2", "ar')
    assert torn.read_bytes().endswith(b'}\n{"task_id": "t2", "ar')
    exact = write_lines(tmp_path / "c.jsonl", [encode_line(head), row_line("t1", "A")])
    assert exact.read_bytes() == encode_line(head) + encode_line(row("t1", "A"))
