"""How a sweep ended, read from its files (``results.ending``), and what it makes valid: a stop the
comparison decided makes the planned pairs' fixed-n figures not valid, any other stop (a quota,
``--maxfail``) leaves them valid, and a merge of parts one of which stopped when
decided makes neither valid; an error row is never graded, in the file feed the
controller, the report and the page share."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from results_files import brief_row

from pytest_echo_bench.analysis.decide.feed import FileFeed
from pytest_echo_bench.analysis.decide.monitor import Monitor, Plan
from pytest_echo_bench.cli.main import main
from pytest_echo_bench.results.ending import collection
from pytest_echo_bench.store.files import encode_line, end_line

META = {
    "_meta": True,
    "benchmark": "d",
    "benchmarks": {"d": {"fingerprint": "f", "items": 30}},
    "spec_files": [],
    "fingerprint": "f",
    "arms": {"d": ["a", "b"]},
    "selection": {},
    "run_id": "r",
    "plugin_version": "0",
    "created_at": "",
    "decide": {"pairs": [["d", "a", "b"]], "alpha": 0.05, "margin": 0.0},
}


def _file(path: Path, stopped: dict[str, Any] | None, n: int = 30) -> Path:
    """``n`` items a answers right and b wrong, then the end line
    ``stopped`` (None: no end line)."""
    lines = [encode_line(META)]
    for i in range(n):
        lines += [encode_line(brief_row(f"t{i}", "a", status="correct", benchmark="d")),
                  encode_line(brief_row(f"t{i}", "b", status="wrong", benchmark="d"))]
    if stopped is not None:
        lines.append(end_line("r", "", stopped))
    path.write_bytes(b"".join(lines))
    return path


def _report(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    status = main(["report", *args, "--format", "json"])
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return status, data["sequential"]


MERGED_DECIDED = {"reason": "merged", "message": "s1.jsonl: decided",
                  "parts": [{"file": "s1.jsonl", "reason": "decided", "message": ""}]}
MERGED_QUOTA = {"reason": "merged", "message": "s1.jsonl: exhausted",
                "parts": [{"file": "s1.jsonl", "reason": "exhausted", "message": ""}]}


@pytest.mark.parametrize(
    ("stopped", "collected", "valid"),
    [
        (None, "ran-to-end", True),
        ({"reason": "decided", "message": "", "pairs": []}, "stopped-when-decided", False),
        ({"reason": "exhausted", "message": "quota"}, "stopped-before-end", True),
        (MERGED_QUOTA, "stopped-before-end", True),
        (MERGED_DECIDED, "stopped-before-end", False),
        # A merge of a merge: the inner one's decided part still counts.
        (
            {
                "reason": "merged",
                "message": "m.jsonl: merged",
                "parts": [
                    {"file": "m.jsonl", "reason": "merged", "message": "", "parts_decided": True}
                ],
            },
            "stopped-before-end",
            False,
        ),
        # A regraded merge carries only that its parts decided.
        (
            {"reason": "merged", "message": "s1.jsonl: decided", "parts_decided": True},
            "stopped-before-end",
            False,
        ),
    ],
)
def test_the_end_line_says_what_the_fixed_n_figures_are_worth(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    stopped: dict[str, Any] | None,
    collected: str,
    valid: bool,
) -> None:
    path = _file(tmp_path / "r.jsonl", stopped)
    status, seq = _report(capsys, str(path))
    assert status == 0 and (seq["collection"], seq["fixed_n_valid"]) == (collected, valid)
    capsys.readouterr()
    assert main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    merged_decided = stopped is not None and stopped["reason"] == "merged" and not valid
    assert (
        f"parts of this merged file stopped early ({stopped and stopped['message']})" in out
    ) == merged_decided
    assert ("not valid for a vs b" in out) == (not valid)


def test_an_interval_gate_reads_the_anytime_interval_only_where_fixed_n_is_not_valid(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for stopped, anytime in (
        (MERGED_DECIDED, True),
        (MERGED_QUOTA, False),
        ({"reason": "exhausted"}, False),
    ):
        path = _file(tmp_path / "r.jsonl", stopped)
        capsys.readouterr()
        assert main(["report", str(path), "--gate", "a>=b+0.0@95"]) == 0
        line = capsys.readouterr().err
        assert ("anytime-valid CI" in line) == anytime and "passed" in line
        # At a level the plan has no interval for, the merged-decided file
        # fails rather than read Newcombe's.
        assert main(["report", str(path), "--gate", "a>=b+0.0@90"]) == (1 if anytime else 0)


def test_a_file_that_stopped_when_decided_wins_over_another_stop(tmp_path: Path) -> None:
    quota = _file(tmp_path / "q.jsonl", {"reason": "exhausted", "message": "quota"})
    decided = _file(
        tmp_path / "d.jsonl", {"reason": "decided", "message": "", "pairs": [{"decided_at": 7}]}
    )
    plain = _file(tmp_path / "p.jsonl", None)
    assert collection([plain, quota, decided]).reason == "decided"
    assert collection([plain, quota]).reason == "exhausted"
    assert not collection([plain]).early


def test_a_stop_marker_beside_a_file_without_an_end_line_counts(tmp_path: Path) -> None:
    path = _file(tmp_path / "r.jsonl", None)
    Path(f"{path}.stop.json").write_text(
        json.dumps({"reason": "decided", "message": "m", "pairs": [{"decided_at": 3}]})
    )
    ended = collection([path])
    assert (ended.reason, ended.message, ended.pairs) == ("decided", "m", ({"decided_at": 3},))


@pytest.mark.parametrize("legacy", [False, True])
def test_error_rows_are_not_graded_by_the_feed_and_a_retried_row_is(
    tmp_path: Path, legacy: bool
) -> None:
    """The feed the controller decides with: ``status`` rows take the fast path, rows of the older
    format (no ``status``; ``detail`` "error: ...") the legacy rule;
    an unparseable answer counts 0."""
    def error(task: str) -> dict[str, Any]:
        row = brief_row(task, "b", status="error", benchmark="d")
        if legacy:
            del row["status"]
            row["detail"] = "error: 500"
        return row

    lines = [encode_line(META)]
    for i in range(20):
        lines += [encode_line(brief_row(f"t{i}", "a", status="correct", benchmark="d")),
                  encode_line(error(f"t{i}"))]
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"".join(lines))
    monitor = Monitor(Plan((("d", "a", "b"),)))
    feed = FileFeed(path, monitor)
    assert not feed.update()
    # counted as wrong, 20 items of a right and b wrong would decide a better
    assert monitor.pairs[0].test.n == 0
    with open(path, "ab") as f:  # the retries: b graded now, once unparseable, once right
        f.write(encode_line(brief_row("t0", "b", status="unparseable", benchmark="d"))
                + encode_line(brief_row("t1", "b", status="correct", benchmark="d")))
    assert feed.update()
    state = monitor.pairs[0]
    assert state.test.n == 2 and state.test.mean() == pytest.approx(0.5)  # (1 - 0 + 1 - 1) / 2


@pytest.mark.parametrize(
    ("decide", "words"),
    [
        (
            {"pairs": [["d", "a", "nope"]]},
            "it names arm 'd/nope', which the meta line's arms do not hold",
        ),
        ({"pairs": [["d", "a", "b"]], "alpha": 7}, "its alpha must be between 0 and 1, got 7.0"),
    ],
)
def test_a_hand_edited_plan_is_left_out_saying_why_not_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], decide: dict[str, Any], words: str
) -> None:
    path = _file(tmp_path / "r.jsonl", None)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(encode_line({**META, "decide": decide}) + b"".join(lines[1:]))
    status, seq = _report(capsys, str(path))
    assert (
        status == 0
        and seq["pairs"] == []
        and seq["problem"] == f"the meta line's decide plan cannot be used: {words}"
    )
