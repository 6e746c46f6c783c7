"""The ``model_graded`` scorer end to end: a sweep whose judges are a real OpenAI-compatible
server on 127.0.0.1 (``openai_server``), driven through ``pytester`` as a user runs it.

The arms are the offline simulator, so every request the server sees is a judge's; the judge's
reply is the server's ``answer`` function of the rendered rubric.
"""

from __future__ import annotations

import hashlib
import json
import re
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
