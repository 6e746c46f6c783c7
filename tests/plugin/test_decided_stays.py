"""Decided stays decided: once a file (or a part merged into it) stopped when decided, its fixed-n
figures are not valid, in the run's own end lines and summary and in every report format, however a
later resume ended (``--maxfail``, Ctrl-C, to the end) and whatever order files are merged in; and a
``--maxfail`` stop is not "ran to the end"."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from processes import finish, rows_in, start, wait_for

from conftest import Sweep, make_spec, read_rows
from pytest_echo_bench.cli.main import main

CLEAR = "  strong: {provider: sim, accuracy: 1.0}\n  weak: {provider: sim, accuracy: 0.3}"
EQUAL = (
    "  left: {provider: sim, accuracy: 0.7, seed: 1}\n  right: {provider: sim, accuracy: 0.7, "
    "seed: 2}"
)
EARLIER = "this file stopped once when its comparisons were decided"


def _spec(n: int, arms: str, decide: str = "") -> str:
    items = "\n".join(
        f'    - {{id: q{i}, input: "2+2=? ({i})", target: "4", subtask: s{i % 4}}}'
        for i in range(n)
    )
    return (
        f"benchmark: demo\ndataset:\n  loader: inline\n  items:\n{items}\nscorer: "
        f"exact\narms:\n{arms}\n{decide}"
    )


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(list(argv))
    out = capsys.readouterr()
    return status, out.out, out.err


def _summary(sweep: Sweep) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(Path(f"{sweep.out}.summary.json").read_text())["decide"]
    return data


def _not_valid_everywhere(capsys: pytest.CaptureFixture[str], *files: Path) -> None:
    """Every report format says the planned pair's fixed-n figures are not valid."""
    paths = list(map(str, files))
    status, out, _ = _cli(capsys, "report", *paths, "--format", "json")
    data = json.loads(out)
    assert status == 0 and data["sequential"]["fixed_n_valid"] is False
    assert all(p.get("fixed_n_valid") is False for p in data["pairs"])
    for fmt in ("table", "markdown"):
        assert (
            "not valid for strong vs weak" in _cli(capsys, "report", *paths, "--format", fmt)[1]
        ), fmt
    lines = list(csv.DictReader(io.StringIO(_cli(capsys, "report", *paths, "--format", "csv")[1])))
    assert {line["fixed_n_valid"] for line in lines if line["kind"] == "decide"} == {"False"}
    assert 'class="pair invalid"' in _cli(capsys, "report", *paths, "--format", "html")[1]


def test_a_decided_file_resumed_and_stopped_by_maxfail_stays_not_valid(
        pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]) -> None:
    make_spec(pytester, _spec(120, CLEAR))
    result, _, decided = sweep.run("--bench-stop-when-decided", "strong,weak")
    assert result.ret == 0 and 0 < len(decided) < 240
    result, _, rows = sweep.run("--bench-resume", str(sweep.out), "--maxfail", "1")
    assert len(decided) < len(rows) < 240  # weak's first wrong answer stopped it
    result.stdout.fnmatch_lines(
        [
            f"*{EARLIER} (a run stopped when decided*), and a resume then stopped before its end "
            "(pytest: stopping after 1 failures)*fixed-n*are not valid*"
        ]
    )
    assert _summary(sweep)["fixed_n_valid"] is False and _summary(sweep)[
        "decided_before"
    ].startswith("a run stopped")
    _not_valid_everywhere(capsys, sweep.out)
    status, out, _ = _cli(capsys, "report", str(sweep.out))
    assert EARLIER in out
    # Run on to the end: the file still once stopped on its decision.
    result, _, rows = sweep.run("--bench-resume", str(sweep.out))
    assert result.ret in (0, 1) and len(rows) == 240
    result.stdout.fnmatch_lines([f"*{EARLIER}*and a resume then ran to the end*not valid*"])
    _not_valid_everywhere(capsys, sweep.out)
    page = pytester.path / "page.html"
    assert _cli(capsys, "progress", str(sweep.out), "-o", str(page))[0] == 0
    # the page drawn from the finished file alone says it too
    assert EARLIER in page.read_text(encoding="utf-8")


def test_a_decided_file_resumed_and_interrupted_stays_not_valid(
        pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]) -> None:
    """A real Ctrl-C (SIGINT to the run's process group) during the resume, after a resume killed
    outright: the decided stop is found behind the killed run's rows, however many."""
    make_spec(pytester, _spec(120, CLEAR))
    assert sweep.run("--bench-stop-when-decided", "strong,weak")[0].ret == 0
    # latency is not in the fingerprint
    make_spec(pytester, _spec(120, CLEAR.replace("}", ", latency_s: 0.05}")))
    for sig in (signal.SIGKILL, signal.SIGINT):
        before = rows_in(sweep.out)
        proc = start(pytester.path, "--bench-resume", str(sweep.out))
        wait_for(lambda: rows_in(sweep.out) >= before + 4)  # noqa: B023
        os.killpg(proc.pid, sig)
        status, output = finish(proc)
        assert status != 0
    assert EARLIER in output and "interrupted" in output, output[-2000:]
    _not_valid_everywhere(capsys, sweep.out)


def test_a_plan_with_maxfail_says_it_stopped_before_its_end(
        pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]) -> None:
    make_spec(pytester, _spec(300, EQUAL, "decide: {pairs: [[left, right]], alpha: 0.05}\n"))
    result, _, rows = sweep.run("--maxfail", "1")
    assert 0 < len(rows) < 600
    out = result.stdout.str()
    assert "ran to the end" not in out
    result.stdout.fnmatch_lines(
        [
            "*this sweep stopped before its end (pytest: stopping after 1 failures), not on its "
            "decision: the fixed-n paired comparison is valid for the items it holds*"
        ]
    )
    assert _summary(sweep)["collection"] == "stopped-before-end" and _summary(sweep)[
        "stop"
    ].startswith("pytest:")
    data = json.loads(_cli(capsys, "report", str(sweep.out), "--format", "json")[1])
    assert data["sequential"]["collection"] == "stopped-before-end"


@pytest.mark.parametrize("decided_first", [True, False])
def test_a_merge_keeps_a_decided_shard_whatever_its_place(
    pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str], decided_first: bool
) -> None:
    make_spec(pytester, _spec(120, CLEAR))
    plain, decided = pytester.path / "plain.jsonl", pytester.path / "decided.jsonl"
    assert sweep.run("--bench-out", str(plain), "--bench-shard", "1/2")[0].ret in (0, 1)
    result, meta, _ = sweep.run(
        "--bench-out",
        str(decided),
        "--bench-shard",
        "2/2",
        "--bench-stop-when-decided",
        "strong,weak",
    )
    assert (
        result.ret == 0
        and json.loads(Path(f"{decided}.stop.json").read_text())["reason"] == "decided"
    )
    files = [decided, plain] if decided_first else [plain, decided]
    merged = pytester.path / "merged.jsonl"
    assert _cli(capsys, "merge", *map(str, files), "-o", str(merged))[0] == 0
    decide = read_rows(merged)[0]["decide"]
    assert decide["pairs"] == [["demo", "strong", "weak"]]  # type: ignore[index]
    for given in ([merged], files):
        _not_valid_everywhere(capsys, *given)
        # A fixed-n interval gate at a level no anytime figure has fails; the
        # shard's stop leaves it partial.
        status, _, err = _cli(
            capsys, "report", *map(str, given), "--gate", "strong>=weak+0.0@90", "--allow-partial"
        )
        assert status == 1 and "fixed-n interval is not valid" in err, err
    # A merge of the merge, in either order with the plain shard, still knows.
    again = pytester.path / "again.jsonl"
    assert (
        _cli(capsys, "merge", str(plain), str(merged), "-o", str(again), "--allow-mismatch")[0] == 0
    )
    _not_valid_everywhere(capsys, again)
