"""Resume: deselect recorded items by id, append to the same file, refuse a different spec."""

from __future__ import annotations

import json

import pytest

from conftest import Sweep, make_spec, read_rows, sim_spec


def test_resume_runs_only_what_is_missing(pytester: pytest.Pytester, sweep: Sweep) -> None:
    make_spec(pytester, sim_spec(5))
    sweep.run("-k", "q1 or q3")
    _, first = read_rows(sweep.out)
    assert len(first) == 4
    result, meta, rows = sweep.run("--bench-resume", str(sweep.out), str(pytester.path))
    result.stdout.fnmatch_lines([f"echo-bench: resuming {sweep.out}: 4 recorded, 6 to run"])
    result.assert_outcomes(passed=3, failed=3, deselected=4)
    assert result.ret == 0
    keys = [(r["task_id"], r["arm"]) for r in rows]
    assert len(keys) == 10 == len(set(keys))
    assert sweep.out.read_text().count('"_meta"') == 1


def test_bare_resume_reuses_spec_and_selection_from_meta(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, sim_spec(4))
    make_spec(pytester, sim_spec(2, benchmark="other"), name="other")
    rows_file = sweep.out
    lines = None
    sweep.run(str(pytester.path / "demo.yaml"), "-k", "good")
    # keep only the meta line and one row: as if the run had been killed early
    lines = rows_file.read_text().splitlines()
    rows_file.write_text("\n".join(lines[:2]) + "\n")
    result, _, rows = sweep.run("--bench-resume", str(rows_file))
    result.stdout.fnmatch_lines(["echo-bench: resuming *: 1 recorded, 3 to run"])
    assert sorted(r["task_id"] for r in rows) == ["q0", "q1", "q2", "q3"]
    assert {r["arm"] for r in rows} == {"good"} and {r["benchmark"] for r in rows} == {"demo"}


def test_resume_of_a_complete_sweep_exits_zero(pytester: pytest.Pytester, sweep: Sweep) -> None:
    make_spec(pytester, sim_spec(2))
    sweep.run()
    result, _, rows = sweep.run("--bench-resume", str(sweep.out))
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*0 to run*", "*sweep complete*"])
    assert len(rows) == 4


def test_resume_under_xdist(pytester: pytest.Pytester, sweep: Sweep) -> None:
    make_spec(pytester, sim_spec(10))
    sweep.run("-k", "q1 or q2")
    result, _, rows = sweep.run("--bench-resume", str(sweep.out), "-n", "2", str(pytester.path))
    result.stdout.fnmatch_lines(["echo-bench: resuming *: 4 recorded, 16 to run"])
    assert result.ret == 0
    keys = [(r["task_id"], r["arm"]) for r in rows]
    assert len(keys) == 20 == len(set(keys))


def test_resume_refuses_a_changed_spec_unless_told(pytester: pytest.Pytester, sweep: Sweep) -> None:
    make_spec(pytester, sim_spec(2))
    sweep.run()
    make_spec(pytester, sim_spec(3))  # a different dataset: answers would not be comparable
    result, _, _ = sweep.run("--bench-resume", str(sweep.out))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*was recorded with fingerprint*--bench-allow-mismatch*"])
    result, _, rows = sweep.run("--bench-resume", str(sweep.out), "--bench-allow-mismatch")
    assert result.ret == 0 and len(rows) == 6


def test_operational_settings_do_not_change_the_fingerprint(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, sim_spec(2, arms="  a: {provider: sim, accuracy: 1.0}"))
    sweep.run("-k", "q0")
    make_spec(pytester, sim_spec(2, arms="  a: {provider: sim, accuracy: 1.0, latency_s: 0.001}",
                                 extra="retries: {attempts: 2}\ntimeout_s: 5\n"))
    result, _, rows = sweep.run("--bench-resume", str(sweep.out), str(pytester.path))
    assert result.ret == 0 and len(rows) == 2


def test_torn_tail_is_repaired_and_kept_aside(pytester: pytest.Pytester, sweep: Sweep) -> None:
    make_spec(pytester, sim_spec(3))
    sweep.run("-k", "q0")
    sweep.out.write_text(sweep.out.read_text().replace('"keyword":"q0"', '"keyword":""'))
    torn = '{"task_id":"q1","arm":"good","pas'
    with open(sweep.out, "a") as f:
        f.write(torn)  # what a SIGKILL in the middle of a write leaves
    result, _, rows = sweep.run("--bench-resume", str(sweep.out))
    result.stdout.fnmatch_lines(["*repaired a torn last line*"])
    assert result.ret == 0
    assert len(rows) == 6 == len({(r["task_id"], r["arm"]) for r in rows})
    assert (pytester.path / "results.jsonl.torn").read_text().strip() == torn


def test_garbage_in_the_middle_is_refused_naming_the_line(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, sim_spec(2))
    sweep.run()
    lines = sweep.out.read_text().splitlines()
    lines.insert(2, "this is not json")
    sweep.out.write_text("\n".join(lines) + "\n")
    before = sweep.out.read_bytes()
    result = pytester.runpytest("--bench-resume", str(sweep.out))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{sweep.out}:3: not a results row*remove or fix that line*"])
    assert sweep.out.read_bytes() == before


def test_resume_of_a_missing_file_is_a_usage_error(pytester: pytest.Pytester, sweep: Sweep) -> None:
    make_spec(pytester, sim_spec(1))
    result, _, _ = sweep.run("--bench-resume", str(pytester.path / "nope.jsonl"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*no such results file*"])


def test_resume_reads_older_rows_without_the_new_fields(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, sim_spec(2))
    old = {
        "task_id": "q0",
        "arm": "good",
        "passed": True,
        "detail": "passed",
        "wall_seconds": 1.0,
        "sub_calls": 1,
    }
    sweep.out.write_text(json.dumps(old) + "\n")
    # No meta line, so no fingerprint to check the rows against: refused unless the
    # user says they answer this spec.
    refused, _, rows = sweep.run("--bench-resume", str(sweep.out), str(pytester.path))
    assert refused.ret == pytest.ExitCode.USAGE_ERROR and len(rows) == 1
    refused.stderr.fnmatch_lines(["*the file has no meta line*--bench-allow-mismatch*"])
    result, _, rows = sweep.run(
        "--bench-resume", str(sweep.out), "--bench-allow-mismatch", str(pytester.path)
    )
    result.stdout.fnmatch_lines(["*1 recorded, 3 to run*"])
    assert len(rows) == 4


def test_collect_only_resume_deselects_what_a_resume_runs_and_changes_nothing(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    """Collecting only reads the keys alone (no count, no spend): the same deselection, with a
    repeated key and a torn tail in the file, which stays byte for byte."""
    make_spec(pytester, sim_spec(5))
    sweep.run("-k", "q1 or q3")
    lines = sweep.out.read_bytes().splitlines(keepends=True)
    sweep.out.write_bytes(b"".join(lines + [lines[1], b'{"task_id": "q4", "ar']))
    before = sweep.out.read_bytes()
    result = pytester.runpytest("--bench-resume", str(sweep.out), "--collect-only", "-q",
                                str(pytester.path))
    assert sweep.out.read_bytes() == before
    result.stdout.fnmatch_lines(["6/10 tests collected (4 deselected)*"])
    assert not [line for line in result.stdout.lines if "q1" in line or "q3" in line]
