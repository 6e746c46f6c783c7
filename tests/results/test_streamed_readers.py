"""The readers of a whole results file hold what they keep, never the file: a line at a time.

``benchmarks/readers_scale.py`` measures them on a million rows; these tests check the behaviour
it relies on, on a few megabytes: each reader's peak of Python allocations (``tracemalloc``) is a
small share of the file it reads, which a reader holding the file, its lines or its rows exceeds
many times over; and what the streamed readers give is what reading it whole gave.
"""

from __future__ import annotations

import json
import random
import re
import tracemalloc
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from pytest_echo_bench.cli.estimate import seen_in_results
from pytest_echo_bench.cli.main import main
from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.interop.inspect.exporter import _encode, eval_log, export_inspect, log_pieces
from pytest_echo_bench.results.merge import merge
from pytest_echo_bench.store.files import encode_line
from pytest_echo_bench.store.keyscan import CHUNK
from pytest_echo_bench.store.reader import iter_records, read_records
from pytest_echo_bench.store.records import Row
from pytest_echo_bench.store.rows import read_row
from pytest_echo_bench.store.writer import write_whole

META = {
    "_meta": True,
    "benchmark": "big",
    "benchmarks": {"big": {"spec": "big.yaml", "fingerprint": "f1"}},
    "arms": {"big": ["a", "b"]},
    "run_id": "r1",
    "created_at": "2026-12-01T00:00:00Z",
    "selection": {"args": [], "keyword": "", "markexpr": "", "shard": ""},
    "schema": 1,
}


def row(task: str, arm: str, n: int, output_words: int = 1000, **changes: Any) -> bytes:
    passed = n % 3 != 0
    fields: dict[str, Any] = dict(
        task_id=task,
        arm=arm,
        passed=passed,
        detail="passed" if passed else "expected 4 got 5",
        wall_seconds=0.25 + n % 7,
        sub_calls=1,
        benchmark="big",
        status="correct" if passed else "wrong",
        output=" ".join(["step"] * output_words),
        answer="4" if passed else "5",
        target="4",
        attempts=1,
        started_at=f"2026-12-01T00:{n % 60:02d}:00Z",
        finished_at=f"2026-12-01T01:{n % 60:02d}:00Z",
        worker="gw0",
        run_id="r1",
        usage={"prompt_tokens": 40, "completion_tokens": 10 + n % 5},
    )
    return Row(**{**fields, **changes}).to_line()


def write(
    path: Path, rows: int, meta: dict[str, Any] | None = None, arms: tuple[str, ...] = ("a", "b")
) -> Path:
    with open(path, "wb") as f:
        f.write(encode_line(meta or META))
        for n in range(rows):
            f.write(row(f"t{n // len(arms)}", arms[n % len(arms)], n))
    return path


def peak(fn: Callable[[], object]) -> int:
    """The most bytes Python held at once, above what it held before, while ``fn`` ran."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1,200 rows of about 5.5 kB: 6.6 MB, so a reader that holds it shows as megabytes."""
    return write(tmp_path_factory.mktemp("big") / "big.jsonl", 1200)


def test_iter_records_gives_each_line_its_number_and_offset_and_cuts_at_upto(
    tmp_path: Path,
) -> None:
    lines = [
        encode_line(META),
        row("t0", "a", 1, 3),
        b"\n",
        row("t1", "a", 2, 3),
        row("t2", "a", 3, 3)[:-1],
    ]
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"".join(lines))
    data = path.read_bytes()
    records = list(iter_records(path))
    # the blank line 3 is skipped; the whole last row counts
    assert [r.lineno for r in records] == [1, 2, 4, 5]
    for record in records:
        assert data[record.offset :].startswith(record.raw.rstrip(b"\n")) and record.raw.endswith(
            b"\n"
        )
    cut = records[2].offset + 10  # inside line 4: that line is the last, torn, and skipped
    assert [r.lineno for r in iter_records(path, upto=cut)] == [1, 2]
    assert [r.lineno for r in iter_records(path, upto=records[2].offset)] == [1, 2]
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes(b"".join(lines[:4]) + b'{"task_id": "t9", "ar')
    assert [r.lineno for r in iter_records(torn)] == [1, 2, 4]
    with pytest.raises(StoreError, match=r"r\.jsonl:2: not a results row"):
        path.write_bytes(lines[0] + b"garbage\n" + lines[1])
        list(iter_records(path))


def test_iter_records_holds_one_line_at_a_time(big: Path) -> None:
    assert peak(lambda: sum(1 for _ in iter_records(big))) < big.stat().st_size / 50


def test_estimate_reads_results_a_line_at_a_time_into_means_per_benchmark(
    big: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other.jsonl"
    other.write_bytes(
        encode_line({**META, "benchmark": "other"})
        + row(
            "t0", "a", 4, 3, benchmark="other", usage={"prompt_tokens": 1, "completion_tokens": 100}
        )
    )
    seen = seen_in_results([big, other], ["big", "other"])
    _, records = read_records(big)
    tokens = [r.data["usage"]["completion_tokens"] for r in records if r.data["arm"] == "a"]
    seconds = [r.data["wall_seconds"] for r in records if r.data["arm"] == "b"]
    assert seen["big"].mean_completion("a") == sum(tokens) / len(tokens)
    assert seen["big"].mean_seconds("b") == sum(seconds) / len(seconds)
    assert seen["other"].mean_completion("a") == 100 and seen["other"].mean_completion("b") is None
    assert peak(lambda: seen_in_results([big], ["big"])) < big.stat().st_size / 50


def shards(tmp_path: Path, rows: int) -> list[Path]:
    """Two shard files of one sweep, the second repeating three keys of
    the first (the last two newer)."""
    paths = []
    for k in (1, 2):
        meta = {**META, "selection": {**META["selection"], "shard": f"{k}/2"}, "shard_scheme": 2}
        paths.append(write(tmp_path / f"s{k}.jsonl", rows, meta, arms=(f"a{k}", "b")))
    with open(paths[1], "ab") as f:
        # wrong; was correct in both: a conflict with the newer of those
        f.write(row("t0", "b", 0, 3))
        f.write(row("t1", "b", 2, 3))  # correct; was wrong
    return paths


def test_merge_keeps_places_not_lines_and_writes_the_newest_rows_in_first_place(
    tmp_path: Path,
) -> None:
    paths = shards(tmp_path, 1000)
    sizes = sum(p.stat().st_size for p in paths)
    out = tmp_path / "merged.jsonl"

    def run(fast: bool) -> None:
        merged = merge(paths, fast=fast)
        write_whole(out, merged.meta, merged.lines)
    # the old merge held every file, its lines and its rows: several times `sizes`
    assert peak(partial(run, False)) < sizes / 5
    # the columns are read a chunk at a time: a few chunks more, whatever the files' size
    assert peak(partial(run, True)) < sizes / 5 + 6 * CHUNK
    merged = merge(paths)
    expected: dict[tuple[str, str], bytes] = {}
    for path in paths:
        for record in read_records(path)[1]:
            expected[(record.data["task_id"], record.data["arm"])] = record.raw
    assert out.read_bytes().split(b"\n", 1)[1] == b"".join(expected.values())
    assert merged.duplicates == 500 + 2 and len(merged.lines) == len(expected)
    assert sorted(c.split(":")[0] for c in merged.conflicts) == ["big/t0[b]", "big/t1[b]"]
    assert all(f"{paths[1]} says passed" in c for c in merged.conflicts)


def test_a_merge_whose_file_changed_before_it_was_written_writes_nothing(tmp_path: Path) -> None:
    paths = shards(tmp_path, 20)
    merged = merge(paths)
    paths[1].write_bytes(paths[1].read_bytes()[:200])  # cut while the merge ran
    out = tmp_path / "merged.jsonl"
    with pytest.raises(StoreError, match="changed while it was merged"):
        write_whole(out, merged.meta, merged.lines)
    assert not out.exists() and not list(tmp_path.glob(".merged.jsonl.*"))


def unstamped(data: bytes) -> bytes:
    return re.sub(rb'"eval_id":"[0-9a-f]{32}"', b'"eval_id":""', data)


def test_a_streamed_log_is_the_log_encoded_whole(tmp_path: Path) -> None:
    rng = random.Random(3)
    rows: list[dict[str, Any]] = []
    for n in range(60):
        status = rng.choice(["correct", "wrong", "unparseable", "error", "unjudged"])
        epoch = rng.choice([None, 2, 3])
        line = row(
            f"t{rng.randrange(20)}",
            "a",
            n,
            4,
            status=status,
            passed=status == "correct",
            epoch=epoch,
            usage=rng.choice([None, {"prompt_tokens": n}]),
            started_at=rng.choice(
                ["", "2026-12-01T00:00:00Z", f"2026-11-{n % 28 + 1:02d}T00:00:00Z"]
            ),
        )
        rows.append(json.loads(line))
    unique = list({(r["task_id"], r.get("epoch") or 1): r for r in rows}.values())
    unique.sort(key=lambda r: ((r.get("epoch") or 1), r["task_id"]))
    for meta in ({**META, "benchmarks": {"big": {"epochs": 3}}}, {}):
        inputs = {("big", "t3"): "What is 2 + 2?"}
        read = [read_row(r, "big") for r in unique]
        whole = _encode(eval_log(meta, "big", "a", read, inputs))
        streamed = b"".join(log_pieces(meta, "big", "a", partial(iter, read), inputs))
        assert unstamped(streamed) == unstamped(whole)
        assert (
            json.loads(streamed)["reductions"][0]["samples"]
            == json.loads(whole)["reductions"][0]["samples"]
        )


def test_export_holds_no_arm_of_rows_and_gives_the_newest_row_of_each_key(
    big: Path, tmp_path: Path
) -> None:
    source = tmp_path / "r.jsonl"
    # t0 was wrong (n=0): now correct
    source.write_bytes(big.read_bytes() + row("t0", "a", 1, 3, epoch=None))
    assert peak(lambda: export_inspect(source, tmp_path / "logs")) < source.stat().st_size / 5
    assert main(["export", str(source), "-o", str(tmp_path / "again")]) == 0
    logs = {
        json.loads(p.read_bytes())["eval"]["model"]: json.loads(p.read_bytes())
        for p in (tmp_path / "again").iterdir()
    }
    assert sorted(logs) == ["a", "b"] and len(logs["a"]["samples"]) == 600
    first = logs["a"]["samples"][0]
    assert first["id"] == "t0" and first["scores"]["echo_bench"]["value"] == "C"
    # sorted by (epoch, id), as before
    assert [s["id"] for s in logs["b"]["samples"][:3]] == ["t0", "t1", "t10"]


def inspect_log(path: Path, task: str, samples: int) -> Path:
    """A ``.json`` Inspect log of ``samples`` scored samples with outputs of about 2 kB."""
    header = {
        "version": 2,
        "status": "success",
        "eval": {"task": task, "model": "m", "config": {"epochs": 1}},
        "results": {"scores": [{"name": "match"}]},
    }
    body = [
        {
            "id": f"s{n}",
            "epoch": 1,
            "input": f"What is {n} + 1?",
            "target": str(n + 1),
            "output": {"completion": " ".join(["step"] * 400)},
            "scores": {"match": {"value": "C" if n % 2 else "I"}},
        }
        for n in range(samples)
    ]
    path.write_text(json.dumps({**header, "samples": body}))
    return path


def test_import_holds_one_log_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each log's samples are let go once they are rows, before the next log is read."""
    from pytest_echo_bench.interop.inspect import importer as inspect_import
    from pytest_echo_bench.interop.inspect.log import InspectLog, read_log

    held: list[InspectLog] = []

    def reading(path: Path) -> InspectLog:
        assert all(not log.samples for log in held), "an earlier log's samples are still held"
        held.append(read_log(path))
        return held[-1]
    monkeypatch.setattr(inspect_import, "read_log", reading)
    logs = [inspect_log(tmp_path / "a.json", "a", 300), inspect_log(tmp_path / "b.json", "b", 200)]
    imported = inspect_import.import_logs(logs)
    assert (
        len(held) == 2 and len(imported.lines) == 500 and list(imported.meta["arms"]) == ["a", "b"]
    )
    assert [source["samples"] for source in imported.meta["imported_from"]] == [300, 200]
    assert imported.meta["benchmarks"]["a"]["items"] == 300


def test_a_capped_read_takes_what_the_file_holds_not_the_cap(tmp_path: Path) -> None:
    from pytest_echo_bench.store.paths import read_regular

    path = tmp_path / "small.json"
    path.write_bytes(b"x" * 5000)
    fail = StoreError
    # it allocated the 2 GiB cap for 5 kB
    assert peak(lambda: read_regular(path, 2 << 30, fail)) < 100_000
    assert read_regular(path, 5000, fail) == b"x" * 5000
    with pytest.raises(StoreError, match="over the limit of 4,999"):
        read_regular(path, 4999, fail)
