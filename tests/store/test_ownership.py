"""The lock a run cannot lose: deleting a results file's side files, or the file itself, never lets
two runs record into one file.

Driven with real processes: run A holds its later items until the test lets them go, so the test
meets it mid-sweep however loaded the machine is; then a person does what people do to a file
"in use by another run". Each test ends by checking that no key is recorded twice.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from processes import finish, rows_in, run, start, wait_for

from conftest import held_sweep, read_rows
from pytest_echo_bench.store.owner import OwnedError, Ownership
from pytest_echo_bench.store.writer import ReplacedError, ResultsWriter

ITEMS = 12



def side_files(out: Path) -> list[Path]:
    return [p for p in out.parent.iterdir() if p.name.startswith(f"{out.name}.")]


def keys(out: Path) -> list[tuple[str, str]]:
    _, rows = read_rows(out)
    return [(r["task_id"], r["arm"]) for r in rows]


def test_deleting_every_side_file_does_not_let_a_resume_in(pytester: pytest.Pytester) -> None:
    out = held_sweep(pytester, ITEMS)
    first = start(
        pytester.path, "demo.yaml", "--bench-out", str(out), "-n", "2", "--bench-cache", "off"
    )
    try:
        wait_for(lambda: rows_in(out) >= 2)
        assert Path(f"{out}.owner") in side_files(out)
        for side in side_files(out):
            side.unlink()  # owner, lock, summary: all of them
        status, output = run(
            pytester.path, "--bench-resume", str(out), "-n", "2", "--bench-cache", "off"
        )
        assert status == 4, output
        assert (
            f"{out} is in use by another run (pid {first.pid}, which holds the lock on the "
            "results file itself" in output
        )
    finally:
        (pytester.path / "release").write_text("")
        status, output = finish(first)
    assert status == 0, output  # the owner never noticed: it still owned the file
    assert sorted(keys(out)) == sorted((f"q{i}", "a") for i in range(ITEMS))  # every key once


def test_removing_the_results_file_stops_its_run_and_a_new_run_records_each_key_once(
    pytester: pytest.Pytester,
) -> None:
    out = held_sweep(pytester, ITEMS)
    first = start(pytester.path, "demo.yaml", "--bench-out", str(out), "--bench-cache", "off")
    try:
        wait_for(lambda: rows_in(out) >= 2)
        for path in [out, *side_files(out)]:
            path.unlink()
    finally:
        (pytester.path / "release").write_text("")
        status, output = finish(first)
    assert status == 2, output  # not 0: its rows went with the removed file
    assert f"{out} was removed while this run was appending to it" in output, output
    assert not out.exists()  # the run appended nothing to a new file of its own
    status, output = run(
        pytester.path, "demo.yaml", "--bench-out", str(out), "--bench-cache", "off"
    )
    assert status == 0, output
    assert sorted(keys(out)) == sorted((f"q{i}", "a") for i in range(ITEMS))


def test_a_results_file_replaced_under_its_run_is_left_alone(pytester: pytest.Pytester) -> None:
    out = held_sweep(pytester, ITEMS)
    first = start(pytester.path, "demo.yaml", "--bench-out", str(out), "--bench-cache", "off")
    try:
        wait_for(lambda: rows_in(out) >= 2)
        other = pytester.path / "other.jsonl"
        other.write_bytes(out.read_bytes().splitlines(keepends=True)[0])  # the meta line alone
        os.replace(other, out)  # an editor's save, a `mv`, a merge written over it
        replaced = out.read_bytes()
    finally:
        (pytester.path / "release").write_text("")
        status, output = finish(first)
    assert status == 2, output
    assert f"{out} was replaced while this run was appending to it" in output, output
    assert out.read_bytes() == replaced


# -- in one process: the same locks, without the start-up cost of a run ------------------------

def test_the_results_file_lock_outlives_its_side_file(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    owner = Ownership(out)
    owner.acquire()
    try:
        assert out.exists() and out.stat().st_size == 0  # created to be locked
        Path(f"{out}.owner").unlink()
        second = Ownership(out)
        with pytest.raises(
            OwnedError, match=f"pid {os.getpid()}, which holds the lock on the results file itself"
        ):
            second.acquire()
        # the refused run took its own side file away again
        assert not Path(f"{out}.owner").exists()
    finally:
        owner.release()
    assert not out.exists()  # created by the run, still empty at its end: removed
    third = Ownership(out)
    third.acquire()  # a released file is free
    third.release()


def test_release_leaves_a_file_with_rows_and_another_runs_owner_file(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    owner = Ownership(out)
    owner.acquire()
    out.write_bytes(b'{"_meta": true}\n')
    Path(f"{out}.owner").unlink()
    Path(f"{out}.owner").write_text("{}")  # someone else's owner file, put where ours was
    owner.release()
    assert out.read_bytes() == b'{"_meta": true}\n'
    assert Path(f"{out}.owner").read_text() == "{}"


def test_a_writer_never_opens_a_file_other_than_the_one_its_owner_locked(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    out.write_bytes(b"")
    locked = [out.stat().st_dev, out.stat().st_ino]
    os.link(out, tmp_path / "kept")  # the owner's descriptor keeps the inode (and its number) taken
    other = tmp_path / "other.jsonl"
    other.write_bytes(b'{"_meta": true, "run_id": "another run"}\n')
    os.replace(other, out)  # another run's new file at the path before this worker's first append
    writer = ResultsWriter(out, "never", meta={"_meta": True}, identity=locked)
    with pytest.raises(ReplacedError, match="was replaced while this run was appending"):
        writer.append(b'{"task_id": "q1"}\n')
    writer.close()
    assert out.read_bytes() == b'{"_meta": true, "run_id": "another run"}\n'


def test_a_writer_stops_at_the_first_append_after_its_file_is_removed(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    writer = ResultsWriter(out, "never", meta={"_meta": True})
    writer.append(b'{"task_id": "q0"}\n')
    out.unlink()
    with pytest.raises(ReplacedError, match="was removed while this run was appending"):
        writer.append(b'{"task_id": "q1"}\n')
    writer.close()
    assert not out.exists()
