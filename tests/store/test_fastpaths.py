"""Fast paths give exactly what the plain ones gave: the key scan, the append lock, the row line."""

from __future__ import annotations

import dataclasses
import json
import random
import threading
import time
from pathlib import Path

import pytest
from filelock import FileLock

from conftest import Sweep, make_spec, sim_spec
from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.store.files import row_status
from pytest_echo_bench.store.keyscan import RowScan, ScanRow
from pytest_echo_bench.store.reader import iter_records, read_index, read_records
from pytest_echo_bench.store.records import Row, row_key
from pytest_echo_bench.store.tally import FileTally
from pytest_echo_bench.store.writer import ResultsWriter

META = b'{"_meta":true,"benchmark":"b"}\n'


def row(task_id: str = "t0", arm: str = "a", benchmark: str = "b", **changes: object) -> Row:
    fields = dict(
        task_id=task_id,
        arm=arm,
        passed=True,
        detail="passed",
        wall_seconds=0.5,
        sub_calls=1,
        benchmark=benchmark,
        status="correct",
        output="so 4",
        answer="4",
        target="4",
        attempts=1,
        started_at="s",
        finished_at="f",
        worker="main",
        run_id="r",
        usage={"prompt_tokens": 3},
    )
    return Row(**{**fields, **changes})  # type: ignore[arg-type]


def full_parser(
    path: Path, upto: int | None = None
) -> tuple[dict[str, object] | None, set[tuple[str, str, str]]]:
    """What read_index returned before the key scan: json.loads of every line."""
    meta, records = read_records(path, upto=upto)
    default = str((meta or {}).get("benchmark", ""))
    return meta, {row_key(r.data, default) for r in records}


def assert_same(path: Path, upto: int | None = None) -> set[tuple[str, str, str]]:
    try:
        expected = full_parser(path, upto)
    except StoreError as exc:
        with pytest.raises(StoreError) as got:
            read_index(path, upto)
        assert str(got.value) == str(exc)
        return set()
    index = read_index(path, upto)
    assert (index.meta, index.keys) == expected and len(index.keys) == len(expected[1])
    # epoch 1: the key as it was before epochs
    return {k[:3] if k[3] == 1 else k for k in index.keys}


TRICKY = [
    row('q"1', "arm\\x").to_line(),  # escaped quote and backslash in the keys
    row("caf\u00e9 \U0001f600", "\u2192", "b\u00e9").to_line(),  # unicode escapes, a surrogate pair
    row("new\nline\ttab", "a").to_line(),
    row("t1", "a", benchmark="").to_line(),  # an empty benchmark: the meta line's
    row("t2", "a", extra={"sandbox": {"limits": {"cpu": [1, None]}}, "x": "}{"}).to_line(),
    row("t3", "a", output='{"task_id":"fake","arm":"fake","benchmark":"fake"}').to_line(),
    row("t4", "a", wall_seconds=1e-07, cost_usd=-0.0, usage=None).to_line(),
    json.dumps(
        {
            "task_id": "old",
            "arm": "a",
            "passed": True,
            "detail": "passed",
            "wall_seconds": 1.0,
            "sub_calls": 1,
        }
    ).encode()
    + b"\n",  # the older six-field format, with spaces
    b'{"task_id":"nobench","arm":"a","passed":true}\n',  # no benchmark field
    b'{"task_id":"dup","arm":"a","benchmark":"b","task_id":"last"}\n',  # json.loads keeps the last
    b'{"task_id":"m","arm":"a","benchmark":"b","_meta":true}\n',  # a meta line after the first
    b'{"task_id":"7","arm":"a","benchmark":"b","x":Infinity}\n',  # Python's JSON, not msgspec's
    '{"task_id":"raw caf\u00e9","arm":"a","benchmark":"b"}\n'.encode(),  # raw UTF-8
    b'{"task_id":"crlf","arm":"a","benchmark":"b"}\r\n',
    b'{"task_id":"nan","arm":"a","benchmark":"b","x":NaN}\n',
    b'{"task_id":"deep","arm":"a","benchmark":"b","x":[[[[[[1]]]]]]}\n',
    b"   \n",
    b"\n",
]


def test_tricky_rows_read_the_same_keys(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(META + b"".join(TRICKY))
    keys = assert_same(path)
    assert ("b", 'q"1', "arm\\x") in keys and ("b\u00e9", "caf\u00e9 \U0001f600", "\u2192") in keys
    assert ("b", "t1", "a") in keys and ("b", "old", "a") in keys and ("b", "last", "a") in keys
    assert ("b", "7", "a") in keys and ("b", "m", "a") not in keys


def test_our_own_rows_take_the_fast_path_and_the_others_the_full_parser(tmp_path: Path) -> None:
    def batches(lines: list[bytes]) -> list[tuple[int, int]]:
        path = tmp_path / "r.jsonl"
        path.write_bytes(META + b"".join(lines))
        scan = RowScan(path, ScanRow, lambda raw, n, strict: json.loads(raw))
        return [(len(fast), len(slow)) for fast, slow in scan.batches()]

    plain = TRICKY[:10] + [TRICKY[13], TRICKY[15]]  # any JSON object with string keys
    assert batches(plain) == [(len(plain), 0)]
    for line in TRICKY[10:13] + [TRICKY[14]] + TRICKY[16:]:  # meta, Infinity, UTF-8, NaN, blank
        assert batches(plain + [line])[0][0] == 0


@pytest.mark.parametrize(
    "garbage",
    [
        b"this is not json",
        b"[1, 2]",
        b'{"task_id": "t9"}',
        # merged
        b'{"task_id":"q1","arm":"a","benchmark":"b","output":"to{"task_id":"q2","arm":"a","be'
        b'nchmark":"b"}',
        b'{"task_id":"q1","arm":"a","benchmark":"b","x":01}',
        b'{"task_id":"q1","arm":"a","benchmark":"b","x":"\x01"}',
        b'{"task_id":"q1","arm":"a","benchmark":"b","x":[1,]}',
        b'{"task_id":"q1","arm":"a","benchmark":"b","x":"\xff"}',
        b'{"task_id":"q1","arm":"a","benchmark":"b"}}',
    ],
)
def test_garbage_in_the_middle_is_refused_with_the_same_message(
    tmp_path: Path, garbage: bytes
) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(META + row("t0").to_line() + garbage + b"\n" + row("t1").to_line())
    with pytest.raises(StoreError, match=r"r\.jsonl:3: not a results row"):
        read_index(path)
    assert_same(path)


@pytest.mark.parametrize(
    "tail", [b'{"task_id":"t9","arm":"a","pas', row("t9").to_line().rstrip(b"\n"), b"garbage"]
)
def test_the_last_line_without_a_newline_counts_only_when_whole(
    tmp_path: Path, tail: bytes
) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(META + row("t0").to_line() + tail)
    assert assert_same(path) >= {("b", "t0", "a")}


def test_every_offset_reads_the_same_keys(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(
        META + b"".join(row(f"t{i}", extra={"k": i}).to_line() for i in range(3)) + TRICKY[7]
    )
    for upto in range(0, path.stat().st_size + 1, 7):
        assert_same(path, upto)


def test_random_rows_read_the_same_keys(tmp_path: Path) -> None:
    rng = random.Random(1)
    alphabet = 'ab"\\\n\t\x00\x1f\x7f /{}[],:\u00e9\u2028\U0001f600'

    def text() -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8)))

    def value(depth: int) -> object:
        kind = rng.randrange(7 if depth < 6 else 4)
        return [
            text,
            lambda: rng.random() * 10 ** rng.randint(-9, 9),
            lambda: rng.choice([True, False, None]),
            lambda: rng.randint(-5, 5),
            lambda: [value(depth + 1) for _ in range(rng.randint(0, 3))],
            lambda: {text(): value(depth + 1) for _ in range(rng.randint(0, 3))},
            text,
        ][kind]()

    lines = [META]
    for _ in range(300):
        line = row(
            text(), text(), rng.choice(["", "b", text()]), output=text(), extra={"v": value(0)}
        ).to_line()
        lines.append(line if rng.random() < 0.8 else json.dumps(json.loads(line)).encode() + b"\n")
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"".join(lines))
    assert len(assert_same(path)) > 250


def test_row_line_is_the_asdict_line() -> None:
    judged = row(score=7.5, judgments=[{"judge": "j", "prompt_sha256": "ab"}], judge_cost_usd=0.01)
    for r in (row(), row(extra={"escalated": True}), row(usage=None, cost_usd=0.25), judged):
        data = dataclasses.asdict(r)
        if not data["extra"]:
            del data["extra"]
        if data["epoch"] is None:
            del data["epoch"]
        # a run without a budget, a row without judges
        for name in ("charged_usd", "score", "judgments", "judge_cost_usd", "served_model",
                     "served_fingerprint", "item_sha256", "batch_id", "judged_at"):
            if data[name] is None:
                del data[name]
        assert r.to_line() == (json.dumps(data, separators=(",", ":")) + "\n").encode()


def test_a_tail_torn_by_another_process_is_cut_before_the_next_row(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    writer, other = ResultsWriter(path), ResultsWriter(path)
    writer.append(row("t0").to_line())
    other.append(row("t1").to_line())
    with open(path, "ab") as f:
        f.write(b'{"task_id":"t2","arm":"a","pas')  # another process killed mid-write
    writer.append(row("t3").to_line())
    other.append(row("t4").to_line())
    writer.close()
    other.close()
    assert [json.loads(line)["task_id"] for line in path.read_bytes().splitlines()] == [
        "t0",
        "t1",
        "t3",
        "t4",
    ]
    assert (tmp_path / "r.jsonl.torn").read_bytes() == b'{"task_id":"t2","arm":"a","pas\n'


def test_the_append_lock_is_the_lock_filelock_takes(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    writer = ResultsWriter(path)
    writer.append(row("t0").to_line())
    (tmp_path / "r.jsonl.lock").unlink()  # the controller removes it at the end of a run
    held = FileLock(str(path) + ".lock")
    held.acquire()
    done = threading.Event()
    threading.Thread(target=lambda: (writer.append(row("t1").to_line()), done.set())).start()
    time.sleep(0.3)
    assert not done.is_set()  # waits for the holder of the new lock file
    held.release()
    assert done.wait(5)
    writer.close()
    assert len(path.read_bytes().splitlines()) == 2


def test_silent_setup_and_teardown_reports_of_items_are_not_kept(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, sim_spec(3))
    pytester.makeconftest("""
        def pytest_terminal_summary(terminalreporter):
            print("kept:", len(terminalreporter.stats.get("", [])))
    """)
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    result, _, rows = sweep.run(str(pytester.path))
    result.assert_outcomes(passed=4, failed=3)
    result.stdout.fnmatch_lines(["kept: 2"])  # the ordinary test's setup and teardown only
    assert len(rows) == 6


def test_xdist_workers_keep_no_silent_setup_and_teardown_reports_either(
    pytester: pytest.Pytester, sweep: Sweep, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A worker's terminal reporter prints nothing, but at the end it scans every kept report once
    # per failed test: 5 s of CPU per worker at 10,000 items and 3,000 wrong answers.
    make_spec(pytester, sim_spec(6))
    pytester.makeconftest("""
        import os
        def pytest_terminal_summary(terminalreporter, config):
            worker = getattr(config, "workerinput", {}).get("workerid")
            if worker:
                kept = len(terminalreporter.stats.get("", []))
                failed = len(terminalreporter.stats.get("failed", []))
                with open(os.path.join(os.environ["KEPT_DIR"], worker), "w") as f:
                    f.write(f"{kept} {failed}")
    """)
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    kept_dir = pytester.mkdir("kept")
    monkeypatch.setenv("KEPT_DIR", str(kept_dir))
    result, _, rows = sweep.run(str(pytester.path), "-n", "2")
    result.assert_outcomes(passed=7, failed=6)
    seen = {p.name: tuple(map(int, p.read_text().split())) for p in kept_dir.iterdir()}
    assert set(seen) == {"gw0", "gw1"}
    assert sum(failed for _, failed in seen.values()) == 6  # the workers did see the wrong answers
    # the ordinary test's setup and teardown only
    assert sum(kept for kept, _ in seen.values()) == 2
    assert len(rows) == 12


@pytest.mark.parametrize("chunk", [1, 13, 200, 4096])
def test_chunk_boundaries_anywhere_read_the_same_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """Lines cut across reads, a garbage line or a blank one at any place, a torn tail."""
    monkeypatch.setattr("pytest_echo_bench.store.keyscan.CHUNK", chunk)
    rng = random.Random(chunk)
    lines = [row(f"t{i}", extra={"k": "}\n{" * (i % 3)}).to_line() for i in range(40)]
    path = tmp_path / "r.jsonl"
    for odd in [b"garbage\n", b"\n", TRICKY[11], TRICKY[12], TRICKY[10]]:
        at = rng.randrange(len(lines))
        path.write_bytes(META + b"".join(lines[:at] + [odd] + lines[at:]) + b'{"task_id":"torn')
        keys = assert_same(path)
        assert odd == b"garbage\n" or len(keys) >= 40
        for upto in rng.sample(range(path.stat().st_size), 5):
            assert_same(path, upto)


def test_the_end_of_run_table_counts_what_the_full_parser_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("pytest_echo_bench.store.keyscan.CHUNK", 64)
    rng = random.Random(3)
    lines = [META]
    for i in range(200):
        status = rng.choice(["correct", "wrong", "unparseable", "error", "unjudged"])
        line = row(f"t{i % 150}", rng.choice(["a", "b"]), status=status, passed=status == "correct",
                   wall_seconds=rng.random()).to_line()
        lines.append(
            line
            if i % 7
            else json.dumps(
                {k: v for k, v in json.loads(line).items() if k != "status"} | {"detail": status}
            ).encode()
            + b"\n"
        )
    lines[50:50] = [b"garbage\n"] + TRICKY
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"".join(lines))
    expected: dict[tuple[str, str], list[float]] = {}
    newest: dict[tuple[str, str, str, int], tuple[str, bool, float]] = {}
    for record in iter_records(path, strict=False):  # the table's rules, on json.loads of each line
        if record.data.get("_meta"):
            continue
        key = row_key(record.data, "b")
        verdict = row_status(record.data)  # the one rule for old rows, on the full parse
        wall = float(record.data.get("wall_seconds") or 0.0)
        old = newest.get(key)
        # The newest row's verdict counts; its wall replaces the old one's when that was an error
        # or unjudged (the rows a retry runs again).
        newest[key] = (
            verdict,
            bool(record.data.get("passed")),
            wall if old is None or old[0] in ("error", "unjudged") else old[2],
        )
    for key, (verdict, passed, wall) in newest.items():
        got = expected.setdefault((key[0], key[2]), [0, 0, 0, 0, 0, 0.0])
        got[0] += 1
        got[1] += passed
        got[2] += verdict == "unparseable"
        got[3] += verdict == "error"
        got[4] += verdict == "unjudged"
        got[5] += wall
    counted = {
        k: [t.items, t.correct, t.unparseable, t.errors, t.unjudged, pytest.approx(t.wall)]
        for k, t in FileTally().update(path).items()
    }
    assert counted == expected and sum(v[0] for v in expected.values()) > 150


def test_the_table_counts_only_what_was_appended_since_it_last_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("pytest_echo_bench.store.keyscan.CHUNK", 100)
    path = tmp_path / "r.jsonl"
    path.write_bytes(
        META + b"".join(row(f"t{i}").to_line() for i in range(5)) + b'{"task_id":"torn'
    )
    counted = FileTally()
    assert counted.update(path)["b", "a"].items == 5
    start = counted.end[0]
    with open(path, "r+b") as f:  # a writer repairs the torn tail and appends, with a duplicate
        f.truncate(start)
        f.seek(start)
        f.write(b"".join(row(f"t{i}", passed=False).to_line() for i in range(3, 9)))
    assert counted.end[0] == start and counted.update(path) == FileTally().update(path)
    # the newest row of t3, t4 counts
    assert (counted.arms["b", "a"].items, counted.arms["b", "a"].correct) == (9, 3)
    with open(path, "ab") as f:
        f.write(b"garbage\n" + row("t9").to_line())
    with pytest.raises(StoreError, match=r"r\.jsonl:13: not a results row"):
        FileTally().update(path, strict=True)
    assert counted.update(path)["b", "a"].items == 10


def test_an_append_to_a_file_truncated_under_the_writer_is_refused(tmp_path: Path) -> None:
    """Appends only grow the file: one shorter than the writer's last
    row was truncated or replaced."""
    path = tmp_path / "r.jsonl"
    writer = ResultsWriter(path)
    writer.append(b'{"task_id":"t0","arm":"a"}\n')
    writer.append(b'{"task_id":"t1","arm":"a"}\n')
    path.write_bytes(b"")
    with pytest.raises(StoreError, match="shrank from 54 to 0 bytes"):
        writer.append(b'{"task_id":"t2","arm":"a"}\n')
    writer.close()
    assert path.read_bytes() == b""
