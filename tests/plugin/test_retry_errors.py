"""``--bench-retry-errors``: resume runs error rows again; the newest row
of each key counts everywhere."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import Sweep, make_spec, read_rows, sim_spec
from pytest_echo_bench.cli.main import main
from pytest_echo_bench.report.page.state import progress_state
from pytest_echo_bench.store.reader import read_index
from pytest_echo_bench.store.tally import FileTally

ARMS = "  good: {provider: sim, accuracy: 1.0}\n  flaky: {provider: python, function: flaky}"
FLAKY = """
    from pathlib import Path
    from pytest_echo_bench import arm

    @arm("flaky")
    def flaky(ctx):
        # Items named in fail.txt fail with a permanent error (an error row); the others answer
        # right.
        if ctx.example.id in Path("fail.txt").read_text().split():
            raise ValueError("prompt rejected")
        return ctx.example.target
"""


@pytest.fixture
def errored(pytester: pytest.Pytester, sweep: Sweep) -> Sweep:
    """A finished sweep of 4 items x 2 arms in which flaky's q0 and q1 are error rows."""
    pytester.makeconftest(FLAKY)
    (pytester.path / "fail.txt").write_text("q0 q1\n")
    make_spec(pytester, sim_spec(4, arms=ARMS))
    result, _, rows = sweep.run()
    assert result.ret == 0 and sorted(r["task_id"] for r in rows if r["status"] == "error") == [
        "q0",
        "q1",
    ]
    return sweep


def cli(*argv: str) -> str:
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink):
        assert main(list(argv)) == 0
    return sink.getvalue()


def flaky_rows(rows: list[dict[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in rows:
        if r["arm"] == "flaky":
            out.setdefault(r["task_id"], []).append(r["status"])
    return out


def test_the_flag_without_a_resume_is_a_usage_error(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, sim_spec(2))
    result, _, rows = sweep.run("--bench-retry-errors")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and rows == []
    result.stderr.fnmatch_lines(
        ["*--bench-retry-errors re-runs the error rows*use it with --bench-resume PATH*"]
    )


def test_a_plain_resume_leaves_error_rows_alone(pytester: pytest.Pytester, errored: Sweep) -> None:
    result, _, rows = errored.run("--bench-resume", str(errored.out))
    result.stdout.fnmatch_lines(["*8 recorded, 0 to run*"])
    assert len(rows) == 8


def test_retried_errors_count_once_with_their_newest_row_everywhere(
    pytester: pytest.Pytester, errored: Sweep
) -> None:
    (pytester.path / "fail.txt").write_text("q1\n")  # q0 now passes, q1 still errors
    page = pytester.path / "page.html"
    result, _, rows = errored.run(
        "--bench-resume", str(errored.out), "--bench-retry-errors", "--bench-html", str(page)
    )
    result.stdout.fnmatch_lines(
        [
            "*--bench-retry-errors: 2 item(s) whose newest row is an error run again*",
            "echo-bench: resuming *: 6 recorded, 2 to run",
        ]
    )
    result.assert_outcomes(passed=1, failed=1)
    assert flaky_rows(rows) == {
        "q0": ["error", "correct"],
        "q1": ["error", "error"],
        "q2": ["correct"],
        "q3": ["correct"],
    }
    # The end table and the live summary: 4 items of flaky, 3 correct, 1 error.
    result.stdout.fnmatch_lines(["*flaky*4*3*0.750*0*1*0*"])
    summary = json.loads(Path(f"{errored.out}.summary.json").read_text())["arms"]["flaky"]
    assert (summary["n"], summary["correct"], summary["errors"]) == (4, 3, 1)
    # The report: counted once, q0 passed; retried error rows are duplicates, not conflicts.
    report = json.loads(cli("report", str(errored.out), "--format", "json"))
    flaky = report["arms"]["flaky"]
    assert (
        flaky["n"],
        flaky["correct"],
        flaky["errors"],
        report["duplicates"],
        report["conflicts"],
    ) == (4, 3, 1, 2, [])
    # The progress page, the tally, resume's index.
    state = progress_state(errored.out)
    assert (
        state.arms["flaky"].done,
        state.arms["flaky"].correct,
        state.arms["flaky"].errors,
        state.done,
    ) == (4, 3, 1, 8)
    assert "8 / 8 items" in page.read_text()
    tally = FileTally().update(errored.out)["demo", "flaky"]
    assert (tally.items, tally.correct, tally.errors) == (4, 3, 1)
    assert (
        len(read_index(errored.out).keys) == 8
        and len(read_index(errored.out, retry_errors=True).keys) == 7
    )
    # merge and regrade keep the newest row of each key, once.
    merged = pytester.path / "merged.jsonl"
    assert "8 rows, 2 duplicates removed, 0 conflicts" in cli(
        "merge", str(errored.out), "-o", str(merged)
    )
    assert flaky_rows(read_rows(merged)[1]) == {
        "q0": ["correct"],
        "q1": ["error"],
        "q2": ["correct"],
        "q3": ["correct"],
    }
    regraded = pytester.path / "regraded.jsonl"
    out = cli("regrade", str(errored.out), "-o", str(regraded))
    assert "2 older row(s) of repeated items left out" in out
    assert flaky_rows(read_rows(regraded)[1]) == {
        "q0": ["correct"],
        "q1": ["error"],
        "q2": ["correct"],
        "q3": ["correct"],
    }


def test_an_error_that_errors_again_is_still_one_item(
    pytester: pytest.Pytester, errored: Sweep
) -> None:
    for _ in range(2):
        result, _, rows = errored.run("--bench-resume", str(errored.out), "--bench-retry-errors")
        result.stdout.fnmatch_lines(
            ["echo-bench: resuming *: 6 recorded, 2 to run", "*flaky*4*2*0.500*0*2*0*"]
        )
    assert flaky_rows(rows) == {
        "q0": ["error"] * 3,
        "q1": ["error"] * 3,
        "q2": ["correct"],
        "q3": ["correct"],
    }
    flaky = json.loads(cli("report", str(errored.out), "--format", "json"))["arms"]["flaky"]
    assert (flaky["n"], flaky["correct"], flaky["errors"]) == (4, 2, 2)


def test_retry_errors_under_xdist_and_from_the_ini(
    pytester: pytest.Pytester, errored: Sweep
) -> None:
    (pytester.path / "fail.txt").write_text("")
    pytester.makeini("[pytest]\nbench_retry_errors = true\n")
    result, _, rows = errored.run("--bench-resume", str(errored.out), "-n", "2")
    result.stdout.fnmatch_lines(
        ["echo-bench: resuming *: 6 recorded, 2 to run", "*flaky*4*4*1.000*0*0*0*"]
    )
    assert result.ret == 0 and len(rows) == 10
    # the ini key alone: no resume, no error
    result, _, _ = errored.run("--bench-out", str(pytester.path / "fresh.jsonl"))
    assert result.ret == 0


def test_retry_errors_with_epochs_reruns_only_the_error_epoch(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    pytester.makeconftest(FLAKY)
    (pytester.path / "fail.txt").write_text("")
    make_spec(pytester, sim_spec(2, arms=ARMS, extra="epochs: 2\n"))
    sweep.run()
    lines = sweep.out.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if '"arm":"flaky"' in line and '"epoch":2' in line)
    row = json.loads(lines[at])
    row.update(passed=False, status="error", detail="error: boom")  # as if that call had failed
    lines[at] = json.dumps(row)
    sweep.out.write_text("\n".join(lines) + "\n")
    result, _, rows = sweep.run("--bench-resume", str(sweep.out), "--bench-retry-errors")
    result.stdout.fnmatch_lines(["echo-bench: resuming *: 7 recorded, 1 to run"])
    result.assert_outcomes(passed=1)
    assert [
        r["status"]
        for r in rows
        if (r["task_id"], r["arm"], r["epoch"]) == (row["task_id"], "flaky", 2)
    ] == ["error", "correct"]
    assert len(rows) == 9


def test_the_supervisor_passes_retry_errors_to_its_resumes(
    pytester: pytest.Pytester, errored: Sweep, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest_command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
    assert (
        main(["run", "--retry-errors", "--", *pytest_command, "--bench-out", str(errored.out)]) == 4
    )
    assert "give the pytest command --bench-resume PATH" in capsys.readouterr().err
    (pytester.path / "fail.txt").write_text("")
    assert (
        main(["run", "--retry-errors", "--", *pytest_command, "--bench-resume", str(errored.out)])
        == 0
    )
    assert "--bench-retry-errors" in capsys.readouterr().out
    assert flaky_rows(read_rows(errored.out)[1]) == {
        "q0": ["error", "correct"],
        "q1": ["error", "correct"],
        "q2": ["correct"],
        "q3": ["correct"],
    }


def test_the_retry_read_agrees_with_the_full_parser_row_by_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import random

    from pytest_echo_bench.store.files import row_status
    from pytest_echo_bench.store.reader import read_records
    from pytest_echo_bench.store.records import row_key

    # many chunks, fast and slow ones mixed
    monkeypatch.setattr("pytest_echo_bench.store.keyscan.CHUNK", 80)
    rng = random.Random(5)
    lines = [json.dumps({"_meta": True, "benchmark": "b"})]
    for i in range(300):
        status = rng.choice(["correct", "wrong", "unparseable", "error", "unjudged"])
        row: dict[str, Any] = {
            "task_id": f"t{rng.randrange(40)}",
            "arm": rng.choice(["a", "b"]),
            "passed": status == "correct",
            "status": status,
            "detail": "error: x" if status == "error" else status,
        }
        if i % 5 == 0:
            # null: epoch 1 (an epoch of 0 is refused: store.checks)
            row["epoch"] = rng.choice([1, 2, None])
        # the older format: the verdict is in detail; or a non-ASCII id (the slow path)
        if i % 7 == 0:
            del row["status"]
        if i % 11 == 0:
            row["task_id"] += "\u00e9"
        lines.append(json.dumps(row, ensure_ascii=False))
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    newest: dict[tuple[str, str, str, int], str] = {}
    for record in read_records(path)[1]:
        newest[row_key(record.data, "b")] = row_status(record.data)
    assert read_index(path, retry_errors=True).keys == {
        k for k, status in newest.items() if status not in ("error", "unjudged")
    }
    tally = FileTally()
    tally.update(path, strict=True)
    assert tally.recorded(retry_errors=True) == read_index(path, retry_errors=True).keys
    assert tally.recorded() == set(newest)
