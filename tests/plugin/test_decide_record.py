"""How a sweep ended travels in its results file: a copy, a merge of shards and a regrade of a sweep
that stopped when decided report it so, the fixed-n comparison not valid; a sweep cut by
``--maxfail`` reports that it stopped before its end, not on its decision, the fixed-n comparison
valid; error rows are not graded, so they do not count in the anytime-valid decision."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import Sweep, make_spec
from pytest_echo_bench.cli.main import main
from pytest_echo_bench.store.files import encode_line

CLEAR = "  strong: {provider: sim, accuracy: 1.0}\n  weak: {provider: sim, accuracy: 0.3}"


def _spec(n: int, arms: str = CLEAR, extra: str = "") -> str:
    items = "\n".join(
        f'    - {{id: q{i}, input: "2+2=? ({i})", target: "4", subtask: s{i % 4}}}'
        for i in range(n)
    )
    return (
        f"benchmark: demo\ndataset:\n  loader: inline\n  items:\n{items}\nscorer: "
        f"exact\narms:\n{arms}\n{extra}"
    )


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    capsys.readouterr()
    assert main(["report", *args, "--format", "json"]) == 0
    data: dict[str, object] = json.loads(capsys.readouterr().out)
    return data


def _text(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()
    assert main(["report", *args]) == 0
    return capsys.readouterr().out


def test_a_copied_decided_file_still_reports_the_early_stop_and_its_recorded_decision(
        pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]) -> None:
    make_spec(pytester, _spec(120))
    result, _, rows = sweep.run("--bench-stop-when-decided", "strong,weak")
    assert result.ret == 0 and 0 < len(rows) < 240
    marker = json.loads(Path(f"{sweep.out}.stop.json").read_text())
    last = json.loads(sweep.out.read_bytes().splitlines()[-1])
    assert last["_meta"] is True and last["run_end"]["stopped"]["reason"] == "decided"
    copy = pytester.path / "copy" / "results.jsonl"
    copy.parent.mkdir()
    shutil.copy(sweep.out, copy)  # the marker stays behind
    seq = _json(capsys, str(copy))["sequential"]
    assert (
        isinstance(seq, dict)
        and seq["collection"] == "stopped-when-decided"
        and not seq["fixed_n_valid"]
    )
    assert seq["pairs"][0]["decided_at"] == marker["pairs"][0]["decided_at"]
    out = _text(capsys, str(copy))
    assert "stopped once these comparisons were decided" in out and "ran to the end" not in out


def test_the_report_takes_decided_at_from_the_record_not_the_replay(
        pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]) -> None:
    make_spec(pytester, _spec(120))
    sweep.run("--bench-stop-when-decided", "strong,weak")
    lines = sweep.out.read_bytes().splitlines(keepends=True)
    end = json.loads(lines[-1])
    # what the controller saw: under xdist it may differ
    end["run_end"]["stopped"]["pairs"][0]["decided_at"] = 1
    sweep.out.write_bytes(b"".join(lines[:-1]) + encode_line(end))
    seq = _json(capsys, str(sweep.out))["sequential"]
    assert isinstance(seq, dict) and seq["pairs"][0]["decided_at"] == 1


def test_merged_shards_that_decided_alone_say_neither_figure_is_valid(
        pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]) -> None:
    make_spec(pytester, _spec(120))
    parts = []
    for k in (1, 2):
        out = pytester.path / f"s{k}.jsonl"
        result, _, _ = sweep.run(
            "--bench-stop-when-decided",
            "strong,weak",
            "--bench-shard",
            f"{k}/2",
            "--bench-out",
            str(out),
        )
        assert result.ret == 0
        parts.append(str(out))
    merged = pytester.path / "merged.jsonl"
    capsys.readouterr()
    assert main(["merge", *parts, "-o", str(merged)]) == 0
    seq = _json(capsys, str(merged))["sequential"]
    assert isinstance(seq, dict) and not seq["fixed_n_valid"]
    out = _text(capsys, str(merged))
    assert "parts of this merged file stopped early (s1.jsonl: decided; s2.jsonl: decided)" in out
    assert "each part's own figures are" in out and "ran to the end" not in out


def test_maxfail_cuts_the_sweep_and_the_report_says_so(
        pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]) -> None:
    # The stop was not decided by the comparison: its items were not chosen by looking at it, so the
    # fixed-n figures stay valid for the items the file holds (as for a quota stop).
    make_spec(
        pytester,
        _spec(
            60,
            "  a: {provider: sim, accuracy: 0.5}\n  b: {provider: sim, accuracy: 0.5, seed: 3}",
            "decide: {pairs: [[a, b]]}\n",
        ),
    )
    result, _, rows = sweep.run("--maxfail", "5")
    assert len(rows) < 120  # wrong answers are failures to pytest: it stops after 5
    last = json.loads(sweep.out.read_bytes().splitlines()[-1])
    assert last["run_end"]["stopped"] == {
        "reason": "pytest",
        "message": "stopping after 5 failures",
    }
    seq = _json(capsys, str(sweep.out))["sequential"]
    assert isinstance(seq, dict) and (seq["collection"], seq["fixed_n_valid"], seq["stop"]) == (
        "stopped-before-end", True, "pytest")
    out = _text(capsys, str(sweep.out))
    assert (
        "this sweep stopped before its end (pytest), not on its decision" in out
        and "sweep ran to the end" not in out
    )
    assert "not valid for" not in out


def test_error_rows_do_not_count_as_wrong_in_the_decision(
        pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]) -> None:
    # b errs on every item (never graded), c answers wrong: counting errors as wrong decides
    # "c better than b" or its mirror; only items both arms graded count, so nothing is decided.
    meta = {
        "_meta": True,
        "benchmark": "d",
        "benchmarks": {"d": {"fingerprint": "f", "items": 40}},
        "spec_files": [],
        "fingerprint": "f",
        "arms": {"d": ["b", "c"]},
        "selection": {},
        "run_id": "r",
        "plugin_version": "0",
        "created_at": "",
        "decide": {"pairs": [["d", "b", "c"]], "alpha": 0.05, "margin": 0.0},
    }
    lines = [encode_line(meta)]
    for i in range(40):
        lines.append(
            encode_line(
                {
                    "task_id": f"t{i}",
                    "arm": "b",
                    "passed": False,
                    "detail": "error: 500",
                    "status": "error",
                    "wall_seconds": 0.1,
                    "sub_calls": 1,
                    "benchmark": "d",
                }
            )
        )
        lines.append(
            encode_line(
                {
                    "task_id": f"t{i}",
                    "arm": "c",
                    "passed": True,
                    "detail": "ok",
                    "status": "correct",
                    "wall_seconds": 0.1,
                    "sub_calls": 1,
                    "benchmark": "d",
                }
            )
        )
    path = pytester.path / "de.jsonl"
    path.write_bytes(b"".join(lines))
    seq = _json(capsys, str(path))["sequential"]
    assert isinstance(seq, dict)
    (pair,) = seq["pairs"]
    assert pair["n"] == 0 and pair["decided_at"] is None and pair["verdict"] == "undecided"


def test_an_interval_gate_on_a_decided_file_reads_the_anytime_valid_interval(
        pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]) -> None:
    make_spec(pytester, _spec(120))
    sweep.run("--bench-stop-when-decided", "strong,weak")
    seq = _json(capsys, str(sweep.out))["sequential"]
    assert isinstance(seq, dict)
    lo, hi = seq["pairs"][0]["ci"]
    capsys.readouterr()
    assert main(["report", str(sweep.out), "--gate", "strong>=weak-0.0@95"]) == 0
    line = capsys.readouterr().err
    assert f"95% anytime-valid CI [{lo:+.3f}, {hi:+.3f}]" in line and "passed" in line
    # Newcombe's lower bound is above 0.05
    assert main(["report", str(sweep.out), "--gate", "strong>=weak+0.05@95"]) == 1
    # Another level has no anytime-valid interval: the gate fails rather than read Newcombe's.
    capsys.readouterr()
    assert main(["report", str(sweep.out), "--gate", "strong>=weak-0.0@90"]) == 1
    assert "the fixed-n interval is not valid" in capsys.readouterr().err


def test_a_regraded_decided_file_still_says_it_stopped_early(
        pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]) -> None:
    make_spec(pytester, _spec(120))
    sweep.run("--bench-stop-when-decided", "strong,weak")
    regraded = pytester.path / "regraded.jsonl"
    capsys.readouterr()
    assert main(["regrade", str(sweep.out), "-o", str(regraded)]) == 0
    seq = _json(capsys, str(regraded))["sequential"]
    assert (
        isinstance(seq, dict)
        and seq["collection"] == "stopped-when-decided"
        and not seq["fixed_n_valid"]
    )
