"""Two results files joined into one (``cat v1.jsonl v2.jsonl > both.jsonl``): a meta line after the
first heads another sweep's rows, and every reader refuses it, naming the file and line. A later
meta line that is a run's end line, or a copy of line 1 (same fingerprints, same shard), is read
as before.

Before, every reader skipped the second meta line, and v2's rows replaced v1's under v1's
fingerprint. Generated files of meta lines, rows, end lines and copies (Hypothesis) go to every
reader: each refuses exactly the files a model of the rule refuses, with the same message, and
reads the same keys from the others.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from results_files import brief_row

from conftest import Sweep, make_spec, sim_spec
from pytest_echo_bench.cli.main import main
from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.plugin.live import end_table
from pytest_echo_bench.report.figures import load_results
from pytest_echo_bench.report.page.state import PageFeed
from pytest_echo_bench.results.merge import merge
from pytest_echo_bench.store.files import encode_line, end_line
from pytest_echo_bench.store.reader import read_index, read_records
from pytest_echo_bench.store.records import row_key
from pytest_echo_bench.store.tally import FileTally


def meta(fingerprint: str = "f1", shard: str = "", run_id: str = "r1") -> bytes:
    return encode_line(
        {
            "_meta": True,
            "benchmark": "demo",
            "fingerprint": fingerprint,
            "benchmarks": {"demo": {"spec": "demo.yaml", "fingerprint": fingerprint, "items": 2}},
            "arms": {"demo": ["good"]},
            "run_id": run_id,
            "schema": 1,
            "selection": {"args": [], "keyword": "", "markexpr": "", "shard": shard},
        }
    )


def row(task: str, passed: bool = True, run_id: str = "r1") -> bytes:
    return encode_line(
        brief_row(
            task,
            "good",
            passed,
            detail="passed" if passed else "wrong",
            wall_seconds=0.1,
            run_id=run_id,
            cost_usd=0.01,
        )
    )


V1 = meta("f1") + row("q0") + row("q1")
V2 = meta("f2", run_id="r2") + row("q0", False, "r2") + row("q1", False, "r2")
REFUSAL = (
    r"both\.jsonl:4: a second meta line, of another sweep \(fingerprint 'f2', line 1 has "
    r"'f1'\).*echo-bench merge"
)


def strict_readers(path: Path) -> dict[str, Any]:
    """What each strict reader reads of ``path`` (the keys, or the rows'
    verdicts): or the StoreError it raises."""
    def keys_of_records() -> set[Any]:
        m, rows = read_records(path)
        return {row_key(r.data, str((m or {}).get("benchmark", ""))) for r in rows}

    def tally() -> set[Any]:
        t = FileTally()
        t.update(path, strict=True)
        return set(t.recorded())

    readers = {
        "read_records": keys_of_records,
        "read_index": lambda: set(read_index(path).keys),
        "read_index retry": lambda: set(read_index(path, retry_errors=True).keys),
        "tally": tally,
        "report": lambda: {
            (i.benchmark, i.task_id, i.arm, i.epoch) for i in load_results([path]).rows
        },
    }
    out: dict[str, Any] = {}
    for name, read in readers.items():
        try:
            out[name] = read()
        except StoreError as exc:
            out[name] = str(exc)
    return out


def test_two_sweeps_joined_are_refused_by_every_reader_naming_the_line(tmp_path: Path) -> None:
    both = tmp_path / "both.jsonl"
    both.write_bytes(V1 + V2)
    got = strict_readers(both)
    assert all(isinstance(v, str) for v in got.values()), got
    assert len(set(got.values())) == 1  # one message, whichever reader
    message = next(iter(got.values()))
    assert re.search(REFUSAL, message), message
    with pytest.raises(StoreError, match=REFUSAL):
        merge([both])


@pytest.mark.parametrize(
    "argv",
    [
        ["report", "{both}"],
        ["power", "{both}", "--pair", "good,bad"],
        ["merge", "{both}", "-o", "{out}"],
        ["regrade", "{both}", "-o", "{out}"],
        ["export", "{both}", "-o", "{dir}"],
        ["progress", "{both}", "-o", "{page}"],
        ["estimate", "{spec}", "--results", "{both}", "--cache", "off"],
    ],
)
def test_every_command_refuses_two_sweeps_joined(tmp_path: Path, argv: list[str],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    both = tmp_path / "both.jsonl"
    both.write_bytes(V1 + V2)
    spec = tmp_path / "demo.yaml"
    spec.write_text(sim_spec(2))
    names = {
        "both": both,
        "out": tmp_path / "out.jsonl",
        "dir": tmp_path / "logs",
        "page": tmp_path / "p.html",
        "spec": spec,
    }
    status = main([a.format(**names) for a in argv])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1, err
    assert re.search(REFUSAL, err), err
    assert not (tmp_path / "out.jsonl").exists() and not (tmp_path / "p.html").exists()
    assert not (tmp_path / "out.jsonl.owner").exists()


def test_a_copy_of_the_same_sweep_reads_as_one_file(tmp_path: Path) -> None:
    """``cat run run``: same fingerprints, same shard. Its rows are
    the sweep's rows, each key once."""
    twice = tmp_path / "twice.jsonl"
    # the same spec, run again: the newest row counts
    again = meta("f1", run_id="r9") + row("q1", False, "r9")
    twice.write_bytes(V1 + again)
    got = strict_readers(twice)
    assert all(v == {("demo", "q0", "good", 1), ("demo", "q1", "good", 1)} for v in got.values()), (
        got
    )
    results = load_results([twice])
    assert [(i.task_id, i.passed) for i in results.rows] == [
        ("q0", True),
        ("q1", False),
    ] and results.duplicates == 1
    assert merge([twice]).meta is not None


def test_two_shards_joined_are_refused_and_merge_is_named(tmp_path: Path) -> None:
    both = tmp_path / "both.jsonl"
    both.write_bytes(meta("f1", "1/2") + row("q0") + meta("f1", "2/2") + row("q1"))
    with pytest.raises(
        StoreError,
        match=r"both\.jsonl:3: a second meta line, of another shard of the sweep "
        r"\(shard '2/2', line 1 has '1/2'\).*echo-bench merge A B -o OUT",
    ):
        load_results([both])


def test_a_meta_line_after_rows_of_a_file_without_one_is_refused(tmp_path: Path) -> None:
    both = tmp_path / "both.jsonl"
    both.write_bytes(row("q0") + V2)
    got = strict_readers(both)
    assert all(
        isinstance(v, str)
        and "both.jsonl:2: a meta line after rows of a file whose line 1 is no meta line" in v
        for v in got.values()
    ), got


def test_end_lines_and_a_torn_last_meta_line_keep_their_rules(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(
        V1
        + end_line("r1", "t", {"reason": "exhausted"})
        + row("q2")
        + end_line("r1", "t", None)
        + meta("f2").rstrip(b"\n")
    )  # another sweep's header, even without its newline
    with pytest.raises(StoreError, match=r"r\.jsonl:7: a second meta line, of another sweep"):
        read_index(path)
    path.write_bytes(
        V1 + end_line("r1", "t", {"reason": "exhausted"}) + row("q2") + end_line("r1", "t", None)
    )
    got = strict_readers(path)
    assert all(v == {("demo", f"q{i}", "good", 1) for i in range(3)} for v in got.values()), got


def test_best_effort_readers_stop_at_another_sweeps_header(tmp_path: Path) -> None:
    """The end-of-run table and a live run's page never fail the run:
    they count what comes before it."""
    both = tmp_path / "both.jsonl"
    both.write_bytes(V1 + V2)
    header, line = end_table(both, {})
    assert line.split()[:5] == ["demo", "good", "2", "2", "1.000"]  # v1's rows, not v2's
    feed = PageFeed(both, started_at=0.0)
    feed.update()
    assert feed.refused is not None and feed.arms[("demo", "good")].correct == 2
    feed.update()  # read on from where it stopped: nothing counted twice
    assert feed.arms[("demo", "good")].done == 2


def test_growing_file_checked_from_where_the_tally_stopped(tmp_path: Path) -> None:
    """The table reads on from its last offset: a header appended later
    is checked against line 1 too."""
    path = tmp_path / "r.jsonl"
    path.write_bytes(V1)
    counted = FileTally()
    counted.update(path, strict=True)
    with open(path, "ab") as f:
        f.write(meta("f1") + row("q2"))
    counted.update(path, strict=True)  # a copy of line 1: read on
    assert len(counted.recorded()) == 3
    with open(path, "ab") as f:
        f.write(V2)
    with pytest.raises(StoreError, match=r"r\.jsonl:6: a second meta line, of another sweep"):
        counted.update(path, strict=True)


def test_resume_of_two_sweeps_joined_is_refused(pytester: pytest.Pytester, sweep: Sweep) -> None:
    make_spec(pytester, sim_spec(3))
    first, _, _ = sweep.run()
    assert first.ret == 0
    v1 = sweep.out.read_bytes()
    make_spec(pytester, sim_spec(4))  # another dataset: another fingerprint
    sweep.out.unlink()
    second, _, _ = sweep.run()
    assert second.ret == 0
    both = pytester.path / "both.jsonl"
    both.write_bytes(v1 + sweep.out.read_bytes())
    result = pytester.runpytest("-p", "no:cacheprovider", "--bench-resume", str(both))
    assert result.ret == 4
    lines = len(v1.splitlines()) + 1
    result.stderr.fnmatch_lines(
        [f"*--bench-resume: {both}:{lines}: a second meta line, of another sweep*echo-bench merge*"]
    )
    assert both.read_bytes().count(b'"_meta"') == 2  # nothing appended


# --- generated files ----------------------------------------------------------------------------

HEADS = {
    "a": meta("f1"),
    "a copy": meta("f1", run_id="r7"),
    "b": meta("f2"),
    "shard": meta("f1", "1/2"),
    "b under a": meta("f1").replace(b'"fingerprint":"f1","items"', b'"fingerprint":"f9","items"'),
}
LINE = st.one_of(
    st.sampled_from(sorted(HEADS)).map(lambda k: ("head", k)),
    st.tuples(st.just("row"), st.sampled_from(["q0", "q1", "q2"]), st.booleans()),
    st.sampled_from([("end", "stopped"), ("end", "done")]),
)


def build(lines: list[tuple[Any, ...]]) -> tuple[bytes, str | None]:
    """The file and the model's verdict: None when it reads, else the refusal's start."""
    data, head, refused = b"", None, None
    for n, line in enumerate(lines, 1):
        if line[0] == "head":
            data += HEADS[line[1]]
            if n == 1:
                head = line[1]
            elif refused is None and (head is None or HEADS[head] != HEADS[line[1]]) and \
                    {head, line[1]} != {"a", "a copy"}:
                refused = f":{n}: a "
        elif line[0] == "row":
            data += row(line[1], line[2])
        else:
            data += end_line("r", "t", {"reason": "exhausted"} if line[1] == "stopped" else None)
    return data, refused


SETTINGS = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@SETTINGS
@given(st.lists(LINE, min_size=1, max_size=10))
def test_generated_files_are_refused_or_read_alike_by_every_reader(
    tmp_path: Path, lines: list[tuple[Any, ...]]
) -> None:
    path = tmp_path / "g.jsonl"
    data, refused = build(lines)
    path.write_bytes(data)
    got = strict_readers(path)
    if refused is not None:
        assert all(isinstance(v, str) and f"g.jsonl{refused}" in v for v in got.values()), (
            got,
            refused,
        )
        assert len(set(got.values())) == 1
        with pytest.raises(StoreError) as merged:
            merge([path], {"demo": "f1"})
        assert str(merged.value) == next(iter(got.values()))
        return
    assert all(not isinstance(v, str) for v in got.values()), got
    assert len({frozenset(v) for v in got.values()}) == 1, got
    expected = {("demo", line[1], "good", 1) for line in lines if line[0] == "row"}
    assert got["read_index"] == expected
    if any(line[0] == "head" for line in lines) or expected:  # merge refuses a file of nothing
        assert len(merge([path], {"demo": "f1"}).lines) == len(expected)


@SETTINGS
@given(st.lists(LINE, min_size=1, max_size=10))
def test_generated_files_never_fail_the_table_or_a_live_page(
    tmp_path: Path, lines: list[tuple[Any, ...]]
) -> None:
    """They count the rows before the first line a strict reader refuses,
    once, however often they read."""
    path = tmp_path / "g.jsonl"
    data, refused = build(lines)
    path.write_bytes(data)
    stop = int(refused.strip(":a ")) - 1 if refused else len(lines)
    before = {line[1] for line in lines[:stop] if line[0] == "row"}
    counted = FileTally()
    for _ in range(2):
        counted.update(path)
        assert {key[1] for key in counted.recorded()} == before
    feed = PageFeed(path, started_at=0.0)
    for _ in range(2):
        feed.update()
        assert sum(arm.done for arm in feed.arms.values()) == len(before)
    assert (feed.refused is not None) is (refused is not None)
