"""The ``model_graded`` scorer end to end: a sweep whose judges are a real OpenAI-compatible
server on 127.0.0.1 (``openai_server``), driven through ``pytester`` as a user runs it.

The arms are the offline simulator, so every request the server sees is a judge's; the judge's
reply is the server's ``answer`` function of the rendered rubric.
"""

from __future__ import annotations

import hashlib
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from openai_server import FakeOpenAI

from conftest import Sweep, make_spec

KEY = "sk-test-judge-31aa"
TEMPLATE = ("JUDGE the answer.\nQuestion: {question}\nAnswer: {answer}\nReference: {reference}\n"
            "Target: {target}\nTopic: {topic}\nRate it from 1 to 10 as [[n]].")
GRADE = r"{pattern: '\[\[(\d+\.?\d*)\]\]', scale: [1, 10], pass_at: 7}"
PRICE_IN, PRICE_OUT = 3.0, 15.0  # USD per million tokens: the grader's pricing


@pytest.fixture(autouse=True)
def judge_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ECHO_JUDGE_KEY", KEY)


def rates(prompt: str) -> str:
    """A judge that rates the simulator's right answer (the target, 4) 9 and any other 2."""
    answer = prompt.split("Answer: ", 1)[1].split("\n", 1)[0] if "Answer: " in prompt else ""
    return "Correct and clear. Rating: [[9]]" if answer.strip() == "4" else "Wrong. [[2]]"


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(answer=rates) as fake:
        yield fake


def judge(base_url: str, model: str = "judge-1") -> str:
    return (f"{{provider: openai, model: {model}, client: http, base_url: '{base_url}', "
            "api_key_env: ECHO_JUDGE_KEY, max_tokens: 64}")


def items(n: int) -> str:
    return "\n".join(f'    - {{id: q{i}, input: "What is 2+2? ({i})", target: "4", '
                     f'reference: "four ({i})", topic: arithmetic}}' for i in range(n))


def spec(judges: dict[str, str], scorer: str, n: int = 3, extra: str = "") -> str:
    """A sweep of ``n`` items over a right and a wrong simulated arm, graded by ``scorer`` (the
    lines under ``scorer:``, indented two spaces)."""
    declared = "".join(f"  {name}: {conf}\n" for name, conf in judges.items())
    return (f"benchmark: rubric\ndataset:\n  loader: inline\n  items:\n{items(n)}\n"
            f"scorer:\n{scorer}"
            "arms:\n  good: {provider: sim, accuracy: 1.0}\n  bad: {provider: sim, accuracy: 0.0}\n"
            f"judges:\n{declared}"
            "retries: {attempts: 2, backoff_s: 0.01, max_backoff_s: 0.02}\n" + extra)


def rubric(judges: str = "grader", grade: str = GRADE, more: str = "") -> str:
    body = textwrap.indent(TEMPLATE, "    ")
    return (f"  name: model_graded\n  judge: {judges}\n  template: |-\n{body}\n"
            f"  grade: {grade}\n{more}")


def by_key(rows: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    keys = [(r["task_id"], r["arm"]) for r in rows]
    assert len(keys) == len(set(keys)), f"a key recorded twice: {sorted(keys)}"
    return dict(zip(keys, rows, strict=True))


def test_a_rubric_grades_each_answer_and_the_row_keeps_what_the_judge_did(
        pytester: pytest.Pytester, sweep: Sweep, server: FakeOpenAI) -> None:
    server.served_model = "judge-1-2026-01-01"
    pricing = f"pricing: {{grader: {{input: {PRICE_IN}, output: {PRICE_OUT}}}}}\n"
    make_spec(pytester, spec({"grader": judge(server.base_url)}, rubric(), extra=pricing))
    result, _, rows = sweep.run("--bench-cache", "off")
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=3, failed=3)
    rows_by = by_key(rows)
    assert len(server.requests) == 6  # one judge call per answer, none for the arms
    for (task, arm), row in rows_by.items():
        i = task[1:]
        [j] = row["judgments"]
        prompt = TEMPLATE.format(question=f"What is 2+2? ({i})", answer=row["output"],
                                 reference=f"four ({i})", target="4", topic="arithmetic")
        assert j["prompt"] == prompt
        assert j["prompt_sha256"] == hashlib.sha256(prompt.encode()).hexdigest()
        sent = [r["body"] for r in server.requests
                if r["body"]["messages"][-1]["content"] == prompt]
        assert len(sent) == 1 and sent[0]["model"] == "judge-1"
        assert j["judge"] == "grader" and j["model"] == "judge-1-2026-01-01"
        assert j["reply"] == rates(prompt) and j["reply_chars"] == len(rates(prompt))
        want = 9.0 if arm == "good" else 2.0
        assert row["score"] == want and j["grade"] == want
        assert row["passed"] is (arm == "good") and j["passed"] is (arm == "good")
        assert row["status"] == ("correct" if arm == "good" else "wrong")
        usage = {"prompt_tokens": len(prompt.split()),
                 "completion_tokens": len(rates(prompt).split())}
        assert {k: j["usage"][k] for k in usage} == usage
        cost = (usage["prompt_tokens"] * PRICE_IN + usage["completion_tokens"] * PRICE_OUT) / 1e6
        assert j["cost_usd"] == pytest.approx(cost) and row["judge_cost_usd"] == pytest.approx(cost)
        assert "cost_usd" not in row or row["cost_usd"] in (None, 0)  # the sim arm's own: none


def rated(good: str, bad: str) -> FakeOpenAI:
    """A judge's server whose reply to the right answer is ``good`` and to any other ``bad``."""
    return FakeOpenAI(answer=lambda prompt: good if "Answer: 4\n" in prompt else bad)


@pytest.mark.parametrize("how, score, passed", [
    ("mean", 7.5, True), ("median", 7.5, True), ("majority", 7.5, False)])
def test_a_panel_of_two_aggregates_every_judges_grade(
        pytester: pytest.Pytester, sweep: Sweep, how: str, score: float, passed: bool) -> None:
    """Judge a gives the right answer 9 and judge b 6: their mean and median pass at 7, but only
    one of two passes, which is no majority. Every judge's grade is kept in the row."""
    with rated("[[9]]", "[[2]]") as a, rated("So so. [[6]]", "[[5]]") as b:
        judges = {"a": judge(a.base_url, "judge-a"), "b": judge(b.base_url, "judge-b")}
        prices = "pricing: {a: {input: 1.0, output: 1.0}, b: {input: 2.0, output: 0.0}}\n"
        make_spec(pytester, spec(judges, rubric("[a, b]", more=f"  aggregate: {how}\n"),
                                 extra=prices))
        result, _, rows = sweep.run("--bench-cache", "off")
        assert result.ret == 0, result.stdout.str()
        assert len(a.requests) == len(b.requests) == 6
    for (_, arm), row in by_key(rows).items():
        assert [(j["judge"], j["model"]) for j in row["judgments"]] == [
            ("a", "judge-a"), ("b", "judge-b")]
        grades = [j["grade"] for j in row["judgments"]]
        a_said, b_said = row["judgments"]
        used = a_said["usage"]["prompt_tokens"] + a_said["usage"]["completion_tokens"]
        assert a_said["cost_usd"] == pytest.approx(used / 1e6)
        assert b_said["cost_usd"] == pytest.approx(2 * b_said["usage"]["prompt_tokens"] / 1e6)
        assert row["judge_cost_usd"] == pytest.approx(a_said["cost_usd"] + b_said["cost_usd"])
        if arm == "good":
            assert grades == [9, 6] and row["score"] == score and row["passed"] is passed
        else:
            assert grades == [2, 5] and row["score"] == 3.5 and row["passed"] is False
        assert row["status"] == ("correct" if row["passed"] else "wrong")


def test_a_panel_with_one_judge_giving_no_grade_leaves_the_item_unjudged(
        pytester: pytest.Pytester, sweep: Sweep) -> None:
    with rated("[[9]]", "[[2]]") as a, rated("I would rather not say.", "[[5]]") as b:
        judges = {"a": judge(a.base_url, "judge-a"), "b": judge(b.base_url, "judge-b")}
        make_spec(pytester, spec(judges, rubric("[a, b]")))
        result, _, rows = sweep.run("--bench-cache", "off")
    assert result.ret == 0, result.stdout.str()
    for (_, arm), row in by_key(rows).items():
        if arm == "bad":
            assert row["status"] == "wrong" and row["score"] == 3.5
            continue
        assert row["status"] == "unjudged" and row["passed"] is False and "score" not in row
        assert row["output"] == "4"  # the answer is kept, for the resume to grade again
        a_said, b_said = row["judgments"]
        assert a_said["grade"] == 9 and "grade" not in b_said
        assert b_said["note"] == "the judge's reply holds no grade"
        assert "b: the judge's reply holds no grade" in row["detail"]


def test_verdict_words_grade_by_their_labels(pytester: pytest.Pytester, sweep: Sweep) -> None:
    labels = "{labels: {correct: pass, incorrect: fail, partial: 0.5}}"
    with rated("The answer matches.\nGRADE: correct", "GRADE: Partial") as server:
        make_spec(pytester, spec({"grader": judge(server.base_url)}, rubric(grade=labels)))
        result, _, rows = sweep.run("--bench-cache", "off")
    assert result.ret == 0, result.stdout.str()
    for (_, arm), row in by_key(rows).items():
        [j] = row["judgments"]
        if arm == "good":
            assert (row["score"], row["passed"], j["label"]) == (1.0, True, "correct")
        else:
            assert (row["score"], row["passed"], j["label"]) == (0.5, False, "Partial")


def test_a_template_file_beside_the_spec_is_part_of_the_scorer(
        pytester: pytest.Pytester, sweep: Sweep, server: FakeOpenAI) -> None:
    """The rubric's text is in the fingerprint: a changed file, or another judge model, refuses a
    resume as a changed scorer does; a judge moved to another endpoint does not (nothing is
    graded again)."""
    (pytester.path / "rubrics").mkdir()
    rubric_file = pytester.path / "rubrics" / "rate.txt"
    rubric_file.write_text(TEMPLATE, encoding="utf-8")
    scorer = f"  name: model_graded\n  judge: grader\n  template_file: rubrics/rate.txt\n" \
             f"  grade: {GRADE}\n"
    body = spec({"grader": judge(server.base_url)}, scorer)
    make_spec(pytester, body)
    elsewhere = pytester.mkdir("elsewhere")  # the run starts in another folder
    sweep.out = pytester.path / "results.jsonl"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(elsewhere)
        result, _, rows = sweep.run(str(pytester.path / "demo.yaml"), "--rootdir",
                                    str(pytester.path))
    assert result.ret == 0, result.stdout.str()
    assert [r["score"] for r in rows if r["arm"] == "good"] == [9.0] * 3
    assert all(r["judgments"][0]["prompt"].startswith("JUDGE the answer.") for r in rows)

    with FakeOpenAI(answer=rates) as moved:
        make_spec(pytester, body.replace(server.base_url, moved.base_url))
        result, _, again = sweep.run("--bench-resume", str(sweep.out))
        assert result.ret == 0, result.stdout.str() + result.stderr.str()
        assert moved.requests == [] and again == rows

    make_spec(pytester, body.replace("model: judge-1", "model: judge-2"))  # another judge model
    result, _, _ = sweep.run("--bench-resume", str(sweep.out))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*was recorded with fingerprint*changed: the scorer.*"])

    make_spec(pytester, body)
    rubric_file.write_text(TEMPLATE.replace("1 to 10", "one to ten"), encoding="utf-8")
    result, _, _ = sweep.run("--bench-resume", str(sweep.out))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*was recorded with fingerprint*changed: the scorer.*"])
    assert len(server.requests) == 6  # no refused resume asked a judge


@pytest.mark.parametrize("change, words", [
    (("judge: grader", "judge: grder"),
     "scorer judge 'grder' is not a declared judge; declared: grader"),
    (("pass_at: 7}", "}"), "grade.pass_at must be a number on the scale [1, 10]"),
    (("Answer: {answer}", "Answer: (none)"), "template has no {answer}"),
    (("'\\[\\[(\\d+\\.?\\d*)\\]\\]'", "'[[(\\d+'"), "grade.pattern is not a regular expression"),
    (("'\\[\\[(\\d+\\.?\\d*)\\]\\]'", "'\\d+'"), "grade.pattern must have exactly one group"),
    (("judge: grader", "judge: [grader, grader]"), "judge names a judge twice"),
    (("Question: {question}", "Question: {question:d}"),
     "template field {question:d}: its format cannot format text"),
    (("Answer: {answer}", "Answer: {answer:{width}}"),
     "template field {answer:{width}}: its format cannot format text"),
], ids=["unknown-judge", "no-pass-at", "no-answer", "bad-regex", "no-group", "twice",
        "number-format", "nested-format"])
def test_a_scorer_option_that_cannot_work_is_named_with_file_and_line(
        pytester: pytest.Pytester, sweep: Sweep, server: FakeOpenAI,
        change: tuple[str, str], words: str) -> None:
    body = spec({"grader": judge(server.base_url)}, rubric())
    assert change[0] in body
    path = make_spec(pytester, body.replace(*change))
    result, _, rows = sweep.run()
    out = result.stdout.str() + result.stderr.str()
    assert result.ret != 0 and rows == [] and server.requests == []
    lines = textwrap.dedent(body.replace(*change)).splitlines()
    key = "  judge:" if "not a declared judge" in words else "scorer:"
    line = 1 + next(i for i, text in enumerate(lines) if text.startswith(key))
    assert f"{path}:{line}" in out and words in out, out
    assert "Traceback" not in out and "INTERNALERROR" not in out
