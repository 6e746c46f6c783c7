"""Judges that are servers and programs written by others: the LiteLLM proxy (its own status
codes, error bodies and mock model) and the real ``claude`` CLI from npm, not logged in.

The proxy is the session's shared one (``test_litellm_proxy``): its one model answers "4", and a
marker in the prompt ("[500-once]", "[400]") turns into one of LiteLLM's own mock errors for that
call (``litellm/faults.py``). The items carry the markers, so only their judge's prompt does.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from cli_fakes import NOT_INSTALLED, REAL_CLAUDE, launches, wrapper
from npm_tools import npm_ci
from test_litellm_proxy import MASTER_KEY, WRONG_KEY, Proxy, proxy

from conftest import Sweep, make_spec

__all__ = ["proxy"]  # the session's proxy, shared with test_litellm_proxy

# The mock model's whole reply is its grade ("4"): taken as the judge's, though the answer it
# judges is "4" too (a reply that is only a grade is no quote of the answer).
GRADE = r"{pattern: '^\s*(\d+)\s*$', scale: [1, 10], pass_at: 4}"
TEMPLATE = "Question: {question}\\nAnswer: {answer}\\nGrade it 1-10, the number alone."


def judged(items: list[str], judge: str, arms: str = "  good: {provider: sim, accuracy: 1.0}\n",
           extra: str = "") -> str:
    lines = "\n".join(f'    - {{id: q{i}, input: "{text}", target: "4"}}'
                      for i, text in enumerate(items))
    return (f"benchmark: judged\ndataset:\n  loader: inline\n  items:\n{lines}\n"
            f'scorer: {{name: model_graded, judge: grader, template: "{TEMPLATE}", '
            f"grade: {GRADE}}}\narms:\n{arms}judges:\n  grader: {judge}\n"
            "retries: {attempts: 3, backoff_s: 0.01, max_backoff_s: 0.02}\ntimeout_s: 20\n"
            + extra)


def by_id(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    ids = [r["task_id"] for r in rows]
    assert len(ids) == len(set(ids)), f"an item was recorded twice: {sorted(ids)}"
    return {r["task_id"]: r for r in rows}


@pytest.mark.parametrize("client", ["http", "sdk"])
def test_a_judge_behind_the_litellm_proxy(
        pytester: pytest.Pytester, sweep: Sweep, proxy: Proxy, client: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Grades read from LiteLLM's replies, its usage priced as the judge's; a 500 it serves once
    is retried; a prompt it refuses (400, context window) leaves that item unjudged, its answer
    kept, never wrong."""
    monkeypatch.setenv("LITELLM_JUDGE_KEY", MASTER_KEY)
    tag = f"judge-{client}"
    items = [f"{tag} plain", f"{tag} [500-once] flaky", f"{tag} [400] refused"]
    judge = (f"{{provider: openai, model: mock, base_url: '{proxy.base_url}', "
             f"api_key_env: LITELLM_JUDGE_KEY, client: {client}}}")
    make_spec(pytester, judged(items, judge,
                               extra="pricing: {grader: {input: 1.0, output: 2.0}}\n"))
    result, _, rows = sweep.run("--bench-cache", "off", "--bench-concurrency", "1")
    assert result.ret == 0, result.stdout.str()
    rows_by_id = by_id(rows)
    for task in ("q0", "q1"):
        row = rows_by_id[task]
        [j] = row["judgments"]
        assert (row["status"], row["score"], row["passed"]) == ("correct", 4.0, True)
        assert j["reply"] == "4" and j["model"] and "mock" in j["model"]
        assert j["usage"] == {"prompt_tokens": 10, "completion_tokens": 20}  # LiteLLM's mock usage
        assert j["cost_usd"] == pytest.approx((10 * 1.0 + 20 * 2.0) / 1e6) == row["judge_cost_usd"]
    refused = rows_by_id["q2"]
    assert refused["status"] == "unjudged" and refused["passed"] is False
    assert refused["output"] == "4" and "score" not in refused
    assert refused["detail"].startswith("unjudged: judge grader: HTTP 400")
    assert len(proxy.events(f"{tag} [500-once]", "failure")) == 1
    assert len(proxy.events(f"{tag} [500-once]", "call")) == 2  # the retry
    assert len(proxy.events(f"{tag} plain", "call")) == 1


def test_a_judge_whose_key_litellm_refuses_stops_the_run_after_one_call(
        pytester: pytest.Pytester, sweep: Sweep, proxy: Proxy,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """LiteLLM refuses any key but its master key ("400 No connected db."): the judge cannot
    work, so nothing is graded (no answer recorded as wrong), one call told us, and the key is
    shown nowhere."""
    monkeypatch.setenv("LITELLM_JUDGE_KEY", WRONG_KEY)
    tag = "judge-wrongkey"
    judge = (f"{{provider: openai, model: mock, base_url: '{proxy.base_url}', "
             "api_key_env: LITELLM_JUDGE_KEY, client: http}")
    make_spec(pytester, judged([f"{tag} ({i})" for i in range(5)], judge))
    result, _, rows = sweep.run("--bench-cache", "off", "--bench-concurrency", "4")
    out = result.stdout.str()
    assert result.ret == 2, out
    assert rows == []
    assert "judge 'grader'" in out and "resume with:" in out
    marker = json.loads((pytester.path / "results.jsonl.stop.json").read_text())
    assert marker["reason"] == "arm-unavailable" and "grader" in json.dumps(marker)
    refused = [e for e in proxy.events(tag, "failure") if "No connected db" in e["error"]]
    assert len(refused) == 1, refused
    assert WRONG_KEY not in out and WRONG_KEY not in sweep.out.read_text(encoding="utf-8")


@pytest.fixture
def real_claude() -> Path:
    npm_ci(REAL_CLAUDE)
    if not REAL_CLAUDE.exists():
        if os.environ.get("CI"):
            pytest.fail(NOT_INSTALLED, pytrace=False)
        pytest.skip(NOT_INSTALLED)
    return REAL_CLAUDE


@pytest.fixture(autouse=True)
def no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)


def test_a_claude_cli_judge_that_is_not_logged_in_stops_the_run_at_once(
        pytester: pytest.Pytester, sweep: Sweep, real_claude: Path, tmp_path: Path) -> None:
    """The real CLI says it is not logged in: the run stops with status 2 after one launch,
    naming the judge and what to do; no answer is recorded as wrong, none as graded."""
    logged = tmp_path / "launches"
    binary = wrapper(tmp_path / "bin", logged, real_claude)
    judge = f"{{provider: command, preset: claude, model: sonnet, binary: {binary}}}"
    arms = "  good: {provider: sim, accuracy: 1.0}\n  bad: {provider: sim, accuracy: 0.0}\n"
    make_spec(pytester, judged([f"2+2=? ({i})" for i in range(6)], judge, arms))
    result, _, rows = sweep.run("--bench-concurrency", "4")
    text = result.stdout.str()
    assert result.ret == 2, text[-3000:]
    assert rows == [], rows
    assert len(launches(logged)) == 1, text[-3000:]
    for words in ("judge 'grader'", "Not logged in", "--bench-resume"):
        assert words in text, (words, text[-3000:])
    marker = json.loads((pytester.path / "results.jsonl.stop.json").read_text())
    assert "grader" in json.dumps(marker)
