"""A sweep whose judged scorer leaves items unjudged: each is recorded as such (its output kept),
counted apart in the end table and the summary, out of the pass rate, never a wrong answer; a plain
resume keeps it and ``--bench-retry-errors`` judges it again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import Sweep, make_spec, read_rows, sim_spec

# The judge (the offline simulator) answers "Rating: [[4]]" on every item; the items named in
# no_grade.txt get a reply with no grade in it this run (an outage, a refusal), so the scorer
# says unjudged: the output stays, graded by no one.
JUDGED = """
    import re
    from pathlib import Path
    from pytest_echo_bench import Verdict, judge, scorer

    @scorer("rated", judges=True)
    def rated(output, example, options, *, judges):
        reply = judges.ask("grader", f"Rate this answer to {example.input!r}: {output}")
        text = reply.text
        if example.id in Path("no_grade.txt").read_text().split():
            text = "I cannot rate this."
        grade = re.search(r"\\[\\[(\\d+)\\]\\]", text)
        if grade is None:
            return Verdict("unjudged", None, f"unjudged: judge grader gave no grade: {text!r}")
        return judge(output.strip(), example.target, output.strip() == example.target)
"""
JUDGE = "{provider: sim, accuracy: 1.0, template: 'Rating: [[{answer}]]'}"


@pytest.fixture
def judged(pytester: pytest.Pytester, sweep: Sweep) -> Sweep:
    """A finished sweep of 4 items x 2 arms (good always right, bad always wrong) whose judge gave
    q0 and q1 no grade."""
    pytester.makeconftest(JUDGED)
    (pytester.path / "no_grade.txt").write_text("q0 q1\n")
    spec = sim_spec(4).replace("scorer: exact\n", f"judges:\n  grader: {JUDGE}\nscorer: rated\n")
    make_spec(pytester, spec)
    return sweep


def statuses(path: Path) -> dict[tuple[str, str], list[str]]:
    """(task id, arm) -> the status of each of its rows, in file order."""
    out: dict[tuple[str, str], list[str]] = {}
    for r in read_rows(path)[1]:
        out.setdefault((r["task_id"], r["arm"]), []).append(r["status"])
    return out


def table(lines: list[str], arm: str) -> dict[str, str]:
    """The end table's cells of ``arm``, by its header's names."""
    names = [n.replace("pass rate", "pass_rate").replace("not completed", "not_completed")
             .replace("mean wall s", "wall").replace("spend $", "spend") for n in lines]
    header = next(n for n in names if n.split()[:2] == ["benchmark", "arm"]).split()
    line = next(n for n in names if n.split()[:2] == ["demo", arm]).split()
    return dict(zip(header, line, strict=False))  # the spend cell may be two words


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_an_unjudged_item_is_recorded_counted_apart_and_out_of_the_pass_rate(
    judged: Sweep, workers: tuple[str, ...]
) -> None:
    result, _, rows = judged.run(*workers)
    out = result.stdout.str()
    assert result.ret == 0, out  # unjudged items are not a failed run
    unjudged = sorted((r["task_id"], r["arm"]) for r in rows if r["status"] == "unjudged")
    assert unjudged == [("q0", "bad"), ("q0", "good"), ("q1", "bad"), ("q1", "good")]
    row = next(r for r in rows if r["status"] == "unjudged")
    assert row["passed"] is False and row["output"]  # the output is kept for a later judging
    assert row["detail"].startswith("unjudged: judge grader gave no grade")
    lines = out.splitlines()
    good, bad = table(lines, "good"), table(lines, "bad")
    assert (good["items"], good["correct"], good["pass_rate"], good["unjudged"]) == (
        "4", "2", "1.000", "2")
    assert (bad["items"], bad["correct"], bad["pass_rate"], bad["unjudged"]) == (
        "4", "0", "0.000", "2")
    result.stdout.fnmatch_lines(["*unjudged: rows a judge gave no grade*--bench-retry-errors*"])
    summary = json.loads(Path(f"{judged.out}.summary.json").read_text())
    assert {k: (a["n"], a["correct"], a["unjudged"], a["pass_rate"])
            for k, a in summary["arms"].items()} == {"good": (2, 2, 2, 1.0),
                                                     "bad": (2, 0, 2, 0.0)}


def test_a_plain_resume_keeps_unjudged_rows_and_a_retrying_one_judges_them_again(
    judged: Sweep, pytester: pytest.Pytester
) -> None:
    judged.run()
    first = statuses(judged.out)
    result, _, _ = judged.run("--bench-resume", str(judged.out))
    assert result.ret == 0 and statuses(judged.out) == first  # nothing ran again
    result.stdout.fnmatch_lines(["*sweep complete*"])

    (pytester.path / "no_grade.txt").write_text("")  # the judge grades everything now
    result, _, _ = judged.run("--bench-resume", str(judged.out), "--bench-retry-errors")
    out = result.stdout.str()
    assert result.ret == 0, out
    result.stdout.fnmatch_lines([
        "*--bench-retry-errors: 4 item(s) whose newest row is an error (0) or unjudged (4) run "
        "again*"])
    again = statuses(judged.out)
    assert again[("q0", "good")] == ["unjudged", "correct"]
    assert again[("q1", "bad")] == ["unjudged", "wrong"]
    assert again[("q2", "good")] == ["correct"]  # a graded row is not run again
    lines = out.splitlines()
    assert "unjudged" not in next(n for n in lines if n.split()[:2] == ["benchmark", "arm"])
    good = table(lines, "good")
    assert (good["items"], good["correct"], good["pass_rate"]) == ("4", "4", "1.000")


def test_the_strict_exit_status_counts_an_unjudged_item_as_not_passed(judged: Sweep) -> None:
    """``--bench-strict`` asks for every item graded correct: an unjudged one is not (as an error
    row is not); without it, unjudged items are results like any other."""
    (judged.pytester.path / "no_grade.txt").write_text("q0\n")
    spec = judged.pytester.path / "demo.yaml"
    spec.write_text(spec.read_text().replace("\n  bad: {provider: sim, accuracy: 0.0}", ""))
    result, _, rows = judged.run("--bench-strict")
    assert result.ret == 1 and [r["status"] for r in rows].count("unjudged") == 1
    result.stdout.fnmatch_lines(["*q0*unjudged: judge grader gave no grade*"])


# The built-in model-graded scorer, its judge the simulator: on two items in three (a draw seeded
# by the item) it replies "I am not sure.", with no grade in it; on the others "Rating: [[8]]".
MODEL_GRADED = """
judges:
  grader: {provider: sim, accuracy: 0.4, unparseable_rate: 1.0, template: 'Rating: [[8]]'}
scorer:
  name: model_graded
  judge: grader
  template: "Question: {question}\\nAnswer: {answer}\\nRate 1-10 as [[n]]."
  grade: {pattern: '\\[\\[(\\d+)\\]\\]', scale: [1, 10], pass_at: 7}
"""


def test_a_model_graded_judge_with_no_grade_leaves_the_item_unjudged_until_retried(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, sim_spec(6).replace("scorer: exact\n", MODEL_GRADED))
    result, _, rows = sweep.run()
    assert result.ret == 0, result.stdout.str()
    unjudged = {(r["task_id"], r["arm"]) for r in rows if r["status"] == "unjudged"}
    graded = [r for r in rows if r["status"] != "unjudged"]
    assert unjudged and graded  # the draw gives both
    assert all(r["status"] == "correct" and r["score"] == 8 for r in graded)
    for r in rows:
        (judgment,) = r["judgments"]
        assert judgment["judge"] == "grader"
        if r["status"] == "unjudged":
            assert r["passed"] is False and "score" not in r
            assert judgment["reply"] == "I am not sure."
    lines = result.stdout.str().splitlines()
    for arm in ("good", "bad"):
        mine = sum(a == arm for _, a in unjudged)
        cells = table(lines, arm)
        assert (cells["unjudged"], cells["pass_rate"]) == (str(mine), "1.000")

    result, _, _ = sweep.run("--bench-resume", str(sweep.out))
    assert result.ret == 0 and len(read_rows(sweep.out)[1]) == len(rows)  # a plain resume: none
    result, _, again = sweep.run("--bench-resume", str(sweep.out), "--bench-retry-errors")
    assert result.ret == 0, result.stdout.str()
    # each unjudged item judged again (the simulator's judge answers as before), no other
    assert sorted((r["task_id"], r["arm"]) for r in again[len(rows):]) == sorted(unjudged)
