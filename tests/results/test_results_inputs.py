"""What ``echo-bench`` reads and rewrites: a results path that is no regular file is refused at once
(a FIFO hung ``report``), and ``merge``/``regrade -o`` onto a file a live run owns is refused (it
lost the rows the run appended while the merge read), while an output that is one of the inputs
is rewritten safely. Driven through ``main(argv)``, and with a real run holding its file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from processes import finish, rows_in, start, wait_for

from conftest import held_sweep, read_rows, sim_spec
from pytest_echo_bench.cli.main import main
from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.store.files import encode_line
from pytest_echo_bench.store.reader import iter_records, read_index
from pytest_echo_bench.store.tally import FileTally

ITEMS = 12
COMMANDS = [
    ["report", "{p}"],
    ["compare", "{p}", "{p}"],
    ["compare", "--base", "{p}", "--cand", "{p}"],
    ["power", "{p}", "--pair", "a,b"],
    ["progress", "{p}", "-o", "{d}/page.html"],
    ["regrade", "{p}", "-o", "{d}/out.jsonl"],
    ["merge", "{p}", "-o", "{d}/out.jsonl"],
    ["export", "{p}", "-o", "{d}/logs"],
    ["estimate", "{d}/demo.yaml", "--results", "{p}", "--cache", "off"],
]


def test_a_fifo_given_as_a_results_file_is_refused_at_once_by_every_command(tmp_path: Path) -> None:
    """In a process of its own, bounded: a regression would hang in ``open``, not fail."""
    fifo = tmp_path / "run.jsonl"
    os.mkfifo(fifo)
    (tmp_path / "demo.yaml").write_text(sim_spec(2))
    script = textwrap.dedent(f"""
        import json, sys
        from pytest_echo_bench.cli.main import main
        print(json.dumps([main([a.format(p={str(fifo)!r}, d={str(tmp_path)!r}) for a in argv])
                          for argv in {COMMANDS!r}]))
    """)
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
    )
    assert json.loads(done.stdout.splitlines()[-1]) == [2] * len(COMMANDS), done.stderr
    lines = done.stderr.splitlines()
    refusals = [
        line
        for line in lines
        if "run.jsonl' is a FIFO (named pipe), not a regular file; give a results file" in line
    ]
    assert len(refusals) == len(COMMANDS) and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "out.jsonl").exists() and not (tmp_path / "page.html").exists()


def test_the_readers_refuse_a_fifo_without_opening_it(tmp_path: Path) -> None:
    fifo = tmp_path / "run.jsonl"
    os.mkfifo(fifo)
    readers = [
        lambda: list(iter_records(fifo)),
        lambda: read_index(fifo),
        lambda: FileTally().update(fifo, strict=True),
    ]
    for read in readers:
        with pytest.raises(
            StoreError,
            match=r"results file .*run\.jsonl is a FIFO \(named pipe\), not a regular file",
        ):
            read()
    FileTally().update(fifo)  # the end-of-run table counts nothing, and neither hangs nor fails


# --- merge and regrade onto a file a run owns
# ------------------------------------------------------


@pytest.mark.parametrize("command", ["merge", "regrade"])
def test_rewriting_a_file_a_live_run_owns_is_refused_and_loses_no_row(
        pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str], command: str) -> None:
    out = held_sweep(pytester, ITEMS)
    run = start(pytester.path, "demo.yaml", "--bench-out", str(out), "--bench-cache", "off")
    try:
        wait_for(lambda: rows_in(out) >= 2)
        before = out.read_bytes()
        argv = [command, str(out), "-o", str(out)] + (
            ["--spec", str(pytester.path / "demo.yaml")] if command == "regrade" else []
        )
        status = main(argv)
        err = capsys.readouterr().err
        assert status == 2 and f"{out} is in use by a run (pid {run.pid} on " in err, err
        assert f"Wait for it to finish or stop it, then run echo-bench {command} again" in err
        # not rewritten: every row the run wrote is still there
        assert out.read_bytes().startswith(before)
    finally:
        (pytester.path / "release").write_text("")
        status, output = finish(run)
    assert status == 0, output
    _, rows = read_rows(out)
    assert sorted(r["task_id"] for r in rows) == sorted(f"q{i}" for i in range(ITEMS))


def test_a_run_cannot_start_on_a_file_while_merge_rewrites_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Held for the whole merge: a resume started meanwhile is refused
    (its owner check sees the merge)."""
    from pytest_echo_bench.results import merge as merge_module
    from pytest_echo_bench.store.owner import OwnedError, Ownership

    a = tmp_path / "a.jsonl"
    a.write_bytes(META + ROW)
    seen: list[str] = []
    real = merge_module.merge

    def watched(*args: object, **kwargs: object) -> object:
        with pytest.raises(OwnedError) as refused:
            Ownership(a).acquire()
        seen.append(str(refused.value))
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(merge_module, "merge", watched)
    assert main(["merge", str(a), "-o", str(a)]) == 0
    assert seen and f"a.jsonl is in use by another run (pid {os.getpid()} on " in seen[0]
    capsys.readouterr()


META = encode_line(
    {
        "_meta": True,
        "benchmark": "demo",
        "fingerprint": "f",
        "benchmarks": {"demo": {"fingerprint": "f", "items": 2}},
        "run_id": "r1",
        "schema": 1,
    }
)
ROW = encode_line(
    {
        "task_id": "q0",
        "arm": "a",
        "passed": True,
        "detail": "passed",
        "benchmark": "demo",
        "status": "correct",
        "run_id": "r1",
    }
)
ROW2 = encode_line(
    {
        "task_id": "q1",
        "arm": "a",
        "passed": False,
        "detail": "wrong",
        "benchmark": "demo",
        "status": "wrong",
        "run_id": "r1",
    }
)


def test_an_output_that_is_one_of_the_inputs_is_rewritten_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_bytes(META + ROW + ROW)
    b.write_bytes(META + ROW2)
    assert main(["merge", str(a), str(b), "-o", str(a)]) == 0
    meta, rows = read_rows(a)
    assert meta is not None and meta["merged_from"] == [str(a), str(b)]
    assert [r["task_id"] for r in rows] == ["q0", "q1"]
    # no owner file left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl", "b.jsonl"]
    capsys.readouterr()


def test_a_refused_merge_leaves_no_output_behind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = tmp_path / "a.jsonl"
    a.write_bytes(META + b"garbage\n")
    assert main(["merge", str(a), "-o", str(tmp_path / "new.jsonl")]) == 2
    assert "a.jsonl:2: not a results row" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl"]
