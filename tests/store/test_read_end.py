"""``store.files.read_end`` reads a results file backwards a chunk at a time (a million rows are not
held to find the last line): it must find what reading the whole file finds, wherever the chunks cut
the lines, whatever rows with a ``run_end`` key of their own sit after it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_echo_bench.store import files
from pytest_echo_bench.store.files import encode_line, end_line, read_end

ROW = encode_line({"task_id": "t", "arm": "a", "passed": True, "status": "correct"})
DECOY = encode_line(
    {"task_id": "t", "arm": "a", "passed": True, "extra": {"run_end": {"stopped": {"reason": "x"}}}}
)


def _whole(data: bytes) -> tuple[bool, dict[str, Any] | None]:
    """The reference: every line of the file, the last end line wins."""
    for line in reversed(data.splitlines()):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if (
            isinstance(record, dict)
            and record.get("_meta") is True
            and isinstance(record.get("run_end"), dict)
        ):
            stopped = record["run_end"].get("stopped")
            return True, stopped if isinstance(stopped, dict) else None
    return False, None


LINES = st.one_of(
    st.just(ROW),
    st.just(DECOY),
    st.just(b"not json\n"),
    st.builds(
        lambda r, m: end_line("r", "", {"reason": r, "message": m}),
        st.sampled_from(["decided", "exhausted", "merged"]),
        st.text(max_size=30),
    ),
    st.just(end_line("r", "", None)),
)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("end") / "r.jsonl"


@settings(deadline=None, derandomize=True, database=None, max_examples=150)
@given(st.lists(LINES, max_size=12), st.integers(1, 300))
def test_read_end_finds_what_reading_the_whole_file_finds(
    scratch: Path, lines: list[bytes], chunk: int
) -> None:
    path = scratch
    data = b"".join(lines)
    path.write_bytes(data)
    with mock.patch.object(files, "END_CHUNK", chunk):
        assert read_end(path) == _whole(data)


def test_an_end_line_cut_by_a_chunk_and_one_longer_than_a_chunk(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    end = end_line("r", "", {"reason": "decided", "message": "m" * 200})
    path.write_bytes(ROW + end + ROW * 3 + DECOY)
    for chunk in (1, 7, len(ROW) + 3, len(end) // 2, 10_000):
        with mock.patch.object(files, "END_CHUNK", chunk):
            assert read_end(path) == (True, {"reason": "decided", "message": "m" * 200})


def test_the_window_before_upto_is_all_that_is_read(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    end = end_line("r", "", {"reason": "exhausted"})
    path.write_bytes(ROW + end + ROW)
    upto = len(ROW) + len(end)
    with mock.patch.object(files, "END_CHUNK", 5):
        assert read_end(path, upto, len(end)) == (True, {"reason": "exhausted"})
        # the window cuts the line's start
        assert read_end(path, upto, len(end) - 1) == (False, None)
        assert read_end(path, len(ROW)) == (False, None)


def test_a_long_last_line_is_read_back_in_linear_time(tmp_path: Path) -> None:
    """A 4 MB last line searched 64 bytes at a time: 65,536 chunks. Joined to each new chunk
    (as before), it copied about 130 GB; kept as pieces and joined once, it is read once.
    The bound only catches that hang."""
    path = tmp_path / "r.jsonl"
    end = end_line("r", "", {"reason": "exhausted", "message": "m"})
    long_row = encode_line({"task_id": "t", "arm": "a", "output": "x" * (4 << 20)})
    path.write_bytes(ROW + end + long_row)
    started = time.monotonic()
    with mock.patch.object(files, "END_CHUNK", 64):
        assert read_end(path) == (True, {"reason": "exhausted", "message": "m"})
    assert time.monotonic() - started < 60
