"""A Gemini judge in a ``model_graded`` sweep, against a Gemini API server on 127.0.0.1
(``gemini_server``), through both clients: its system text sent as Gemini's system instruction,
its grade read from its reply, its thoughts not taken for the reply, its usage and cost kept."""

from __future__ import annotations

import pytest
from gemini_server import FakeGemini
from test_model_graded import TEMPLATE, rates, rubric, spec

from conftest import Sweep, make_spec

KEY = "AIzaSy-test-judge-planted-5d1e"
SYSTEM = "You are a strict grader."


@pytest.fixture(autouse=True)
def gemini_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ECHO_GEMINI_JUDGE_KEY", KEY)
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("client", ["http", "sdk"])
def test_a_gemini_judge_grades_each_answer_with_its_system_text(
        pytester: pytest.Pytester, sweep: Sweep, client: str) -> None:
    with FakeGemini(rates, key=KEY) as server:
        server.thoughts = "Rating: [[1]] would be harsh; think again"  # a thought, never the reply
        judge = (f"{{provider: gemini, model: gemini-2.5-flash, client: {client}, "
                 f"base_url: '{server.base_url}', api_key_env: ECHO_GEMINI_JUDGE_KEY, "
                 "max_tokens: 64}")
        pricing = "pricing: {grader: {input: 0.3, output: 2.5}}\n"
        make_spec(pytester, spec({"grader": judge}, rubric(more=f"  system: {SYSTEM}\n"),
                                 extra=pricing))
        result, _, rows = sweep.run("--bench-cache", "off")
        requests = list(server.requests)
    assert result.ret == 0, result.stdout.str()[-2000:]
    result.assert_outcomes(passed=3, failed=3)
    assert len(requests) == 6  # one call per answer, none for the simulated arms
    for sent in requests:
        assert sent["key"] == KEY and sent["auth"] is None
        assert sent["body"]["systemInstruction"] == {"parts": [{"text": SYSTEM}]}
        assert sent["path"] == "/v1beta/models/gemini-2.5-flash:generateContent"
        assert sent["body"]["contents"][-1]["parts"][0]["text"].startswith("JUDGE the answer.")
    for row in rows:
        [judgment] = row["judgments"]
        want = 9.0 if row["arm"] == "good" else 2.0
        assert row["score"] == want and judgment["grade"] == want, row
        assert row["status"] == ("correct" if row["arm"] == "good" else "wrong")
        assert judgment["model"] == "gemini-2.5-flash-001"
        assert judgment["reply"] in ("Correct and clear. Rating: [[9]]", "Wrong. [[2]]")
        assert judgment["usage"]["reasoning_tokens"] == len(server.thoughts.split())
        assert judgment["cost_usd"] > 0 and row["judge_cost_usd"] == judgment["cost_usd"]
        assert judgment["prompt"].startswith(TEMPLATE.split("{", 1)[0])
    assert KEY not in sweep.out.read_text() and KEY not in result.stdout.str()
