"""Regrade keeps provenance: it replaces the scorer of a results file and refuses anything else.

Each test runs a real sweep, changes the spec the way a user would, and calls ``echo-bench
regrade`` in-process; the regraded file is then resumed, as a user would continue it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import Sweep, make_spec, read_rows, sim_spec
from pytest_echo_bench.cli.main import main

# Outputs read "So the answer is 4.": exact marks them all wrong, numeric reads the number.
ARMS = ("  right: {provider: sim, accuracy: 1.0, template: 'So the answer is {answer}.'}\n"
        "  wrong: {provider: sim, accuracy: 0.0, template: 'So the answer is {answer}.'}")
N = 5


@pytest.fixture
def swept(pytester: pytest.Pytester, sweep: Sweep) -> Path:
    """A finished sweep of N items x 2 arms scored by exact; returns its spec."""
    spec = make_spec(pytester, sim_spec(N, arms=ARMS))
    result, meta, rows = sweep.run()
    assert result.ret == 0 and len(rows) == 2 * N and meta is not None
    assert not any(r["passed"] for r in rows)
    return spec


def edit(spec: Path, old: str, new: str) -> None:
    text = spec.read_text()
    assert old in text
    spec.write_text(text.replace(old, new, 1))


def regrade(
    results: Path, out: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, str, str]:
    capsys.readouterr()  # what the sweep printed is not the regrade's
    status = main(["regrade", str(results), *extra, "-o", str(out)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def rewrite_meta(results: Path, change: Any) -> None:
    """Rewrite the meta line as an older version of the plugin wrote it
    (``change`` edits it in place)."""
    lines = results.read_text().splitlines(keepends=True)
    meta = json.loads(lines[0])
    change(meta)
    results.write_text(json.dumps(meta) + "\n" + "".join(lines[1:]))


def drop_parts(meta: dict[str, Any]) -> None:
    for info in meta["benchmarks"].values():
        del info["parts"]


def test_a_scorer_change_regrades_and_the_new_file_resumes_as_complete(
    pytester: pytest.Pytester, sweep: Sweep, swept: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old_meta, _ = read_rows(sweep.out)
    assert old_meta is not None
    edit(swept, "scorer: exact", "scorer: numeric")
    new = pytester.path / "regraded.jsonl"
    status, out, _ = regrade(sweep.out, new, capsys)
    assert status == 0
    assert f"{N} verdicts changed" in out and "could not be verified" not in out
    meta, rows = read_rows(new)
    assert meta is not None and len(rows) == 2 * N
    assert [r["passed"] for r in rows if r["arm"] == "right"] == [True] * N
    assert not any(r["passed"] for r in rows if r["arm"] == "wrong")
    old_parts, parts = old_meta["benchmarks"]["demo"]["parts"], meta["benchmarks"]["demo"]["parts"]
    assert parts["scorer"] != old_parts["scorer"]
    assert (parts["dataset"], parts["arms"]) == (old_parts["dataset"], old_parts["arms"])
    assert meta["fingerprint"] != old_meta["fingerprint"]

    size = new.stat().st_size
    result, _, _ = sweep.run("--bench-resume", str(new))
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*resuming*: 10 recorded, 0 to run*", "*sweep complete*"])
    assert new.stat().st_size == size  # nothing appended
    # The original still records the old scorer, so the same spec refuses it.
    result, _, _ = sweep.run("--bench-resume", str(sweep.out))
    assert result.ret == pytest.ExitCode.USAGE_ERROR


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ('input: "2+2=? (2)", target: "4"', 'input: "2+2=? (2)", target: "9"'),
        ("accuracy: 0.0", "accuracy: 0.5"),
    ],
    ids=["dataset", "arms"],
)
def test_the_regraded_file_refuses_a_resume_after_its_dataset_or_arms_change(
    pytester: pytest.Pytester,
    sweep: Sweep,
    swept: Path,
    capsys: pytest.CaptureFixture[str],
    old: str,
    new: str,
) -> None:
    edit(swept, "scorer: exact", "scorer: numeric")
    regraded = pytester.path / "regraded.jsonl"
    assert regrade(sweep.out, regraded, capsys)[0] == 0
    edit(swept, old, new)
    result, _, _ = sweep.run("--bench-resume", str(regraded))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "fingerprint" in result.stderr.str() + result.stdout.str()


def test_a_changed_target_is_refused_naming_the_dataset(
    pytester: pytest.Pytester, sweep: Sweep, swept: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit(swept, "scorer: exact", "scorer: numeric")
    edit(swept, 'input: "2+2=? (2)", target: "4"', 'input: "2+2=? (2)", target: "9"')
    new = pytester.path / "regraded.jsonl"
    status, out, err = regrade(sweep.out, new, capsys)
    assert status == 2
    assert str(sweep.out) in err and "benchmark 'demo'" in err and "the dataset of" in err
    assert "arms" not in err  # the arms did not change
    assert not new.exists() and "regraded" not in out


def test_a_changed_arm_is_refused_naming_the_arms(
    pytester: pytest.Pytester, sweep: Sweep, swept: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit(swept, "accuracy: 0.0", "accuracy: 0.5")
    new = pytester.path / "regraded.jsonl"
    status, _, err = regrade(sweep.out, new, capsys, "--spec", str(swept))
    assert status == 2
    assert "benchmark 'demo'" in err and "the arms of" in err and "dataset" not in err
    assert not new.exists()


def test_an_operational_arm_setting_is_not_a_change_of_the_arms(
    pytester: pytest.Pytester, sweep: Sweep, swept: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit(swept, "accuracy: 1.0,", "accuracy: 1.0, latency_s: 0.001,")
    new = pytester.path / "regraded.jsonl"
    status, out, _ = regrade(sweep.out, new, capsys)
    assert status == 0 and "0 verdicts changed" in out
    assert len(read_rows(new)[1]) == 2 * N


def test_a_file_without_parts_regrades_with_a_note_when_its_targets_match(
    pytester: pytest.Pytester, sweep: Sweep, swept: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rewrite_meta(sweep.out, drop_parts)
    edit(swept, "scorer: exact", "scorer: numeric")
    new = pytester.path / "regraded.jsonl"
    status, out, _ = regrade(sweep.out, new, capsys)
    assert status == 0 and f"{N} verdicts changed" in out
    notes = [line for line in out.splitlines() if "could not be verified" in line]
    assert len(notes) == 1 and "records no fingerprint parts" in notes[0] and "'demo'" in notes[0]
    # Unproven arms: the new file claims no spec's fingerprint, so a
    # resume must be asked for explicitly.
    meta, _ = read_rows(new)
    assert meta is not None and "parts" not in meta["benchmarks"]["demo"]
    result, _, _ = sweep.run("--bench-resume", str(new))
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_a_file_without_parts_is_verified_by_an_unchanged_fingerprint(
    pytester: pytest.Pytester, sweep: Sweep, swept: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The same spec gives the recorded fingerprint, which proves the arms: no note, and it resumes.
    rewrite_meta(sweep.out, drop_parts)
    new = pytester.path / "regraded.jsonl"
    status, out, _ = regrade(sweep.out, new, capsys)
    assert status == 0 and "could not be verified" not in out
    meta, _ = read_rows(new)
    assert meta is not None and {"dataset", "scorer", "arms", "arm/right/accuracy"} <= set(
        meta["benchmarks"]["demo"]["parts"]
    )
    result, _, _ = sweep.run("--bench-resume", str(new))
    assert result.ret == 0


def test_a_file_without_parts_whose_target_changed_is_refused_naming_the_line(
    pytester: pytest.Pytester, sweep: Sweep, swept: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rewrite_meta(sweep.out, drop_parts)
    edit(swept, 'input: "2+2=? (2)", target: "4"', 'input: "2+2=? (2)", target: "9"')
    lines = sweep.out.read_text().splitlines()
    lineno = next(i for i, line in enumerate(lines, 1) if json.loads(line).get("task_id") == "q2")
    new = pytester.path / "regraded.jsonl"
    status, _, err = regrade(sweep.out, new, capsys)
    assert status == 2
    assert (
        f"{sweep.out}:{lineno}:" in err
        and "'q2'" in err
        and "target '4'" in err
        and "now gives '9'" in err
    )
    assert not new.exists()


def test_a_file_without_a_meta_line_refuses_a_task_the_dataset_lost(
    pytester: pytest.Pytester, sweep: Sweep, swept: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = sweep.out.read_text().splitlines(keepends=True)
    sweep.out.write_text("".join(lines[1:]))
    edit(swept, '    - {id: q4, input: "2+2=? (4)", target: "4"}\n', "")
    new = pytester.path / "regraded.jsonl"
    status, _, err = regrade(sweep.out, new, capsys, "--spec", str(swept))
    assert status == 2 and "'q4' is not in the dataset" in err
    assert not new.exists()


def test_regraded_rows_carry_the_target_they_were_scored_against(
    pytester: pytest.Pytester, sweep: Sweep, swept: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A file without a meta line whose rows record no target (the older format): the rows get the
    # target of the dataset item they were scored against, so detail and target agree.
    lines = sweep.out.read_text().splitlines()[1:]
    old = [json.loads(line) for line in lines]
    for row in old:
        del row["target"]
    sweep.out.write_text("".join(json.dumps(row) + "\n" for row in old))
    new = pytester.path / "regraded.jsonl"
    status, out, _ = regrade(sweep.out, new, capsys, "--spec", str(swept))
    assert status == 0
    assert "has no meta line" in out and f"{2 * N} rows record no target" in out
    meta, rows = read_rows(new)
    assert meta is None and len(rows) == 2 * N
    assert all(r["target"] == "4" for r in rows)
    assert all(r["detail"].startswith("expected 4 got") for r in rows if r["arm"] == "wrong")


def test_a_spec_whose_arms_and_scorer_live_in_a_conftest_regrades(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    """Regrade runs outside pytest: it imports the conftest.py files
    pytest would, for @arm and @scorer."""
    pytester.makeconftest("""
from pytest_echo_bench import arm, scorer
from pytest_echo_bench.scoring.verdict import Verdict

@arm("regrade_conftest_arm")
def answer(ctx):
    return "So the answer is 4."

@scorer("regrade_conftest_scorer")
def has_four(output, example, options):
    ok = example.target in output
    return Verdict("correct" if ok else "wrong", example.target if ok else None,
                   "passed" if ok else "no")
""")
    spec = sim_spec(3, arms="  py: {provider: python, function: regrade_conftest_arm}")
    make_spec(pytester, spec.replace("scorer: exact", "scorer: regrade_conftest_scorer"))
    result, _, rows = sweep.run()
    assert result.ret == 0 and len(rows) == 3
    out = pytester.path / "regraded.jsonl"
    done = pytester.run(
        sys.executable,
        "-c",
        "import sys; from pytest_echo_bench.cli.main import main; "
        f"sys.exit(main(['regrade', {str(sweep.out)!r}, '-o', {str(out)!r}]))",
    )
    assert done.ret == 0, done.stdout.str() + done.stderr.str()
    assert len(read_rows(out)[1]) == 3
