"""``echo-bench estimate`` with a scorer that asks judges: the judge calls counted and priced apart
from the arms', checked against sums written out here, in every format."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
import results_files
from openai_server import FakeOpenAI

from conftest import Sweep
from pytest_echo_bench.budget.money import usd
from pytest_echo_bench.cli.main import main

QUESTIONS = ["What is 2+2?", "What is 3+3? Say it.", "Twice three?"]
TEMPLATE = "Q: {question}\\nA: {answer}\\nGrade it 1-10."
SPEC = """benchmark: demo
dataset:
  loader: inline
  items:
    - {{id: q1, input: "What is 2+2?", target: "4"}}
    - {{id: q2, input: "What is 3+3? Say it.", target: "6"}}
    - {{id: q3, input: "Twice three?", target: "6"}}
scorer:
  name: model_graded
  judge: [g1, g2]
  grade: {{labels: {{correct: pass, incorrect: fail}}}}
  template: "{template}"
judges:
  g1: {{provider: openai, model: j1, base_url: 'http://127.0.0.1:9/v1', max_tokens: 10}}
  g2: {{provider: openai, model: j2, base_url: 'http://127.0.0.1:9/v1', max_tokens: 20,
        system: "Be strict."}}
arms:
  a: {{provider: openai, model: m, base_url: 'http://127.0.0.1:9/v1', max_tokens: 100}}
pricing:
  a: {{input: 1.0, output: 2.0}}
  g1: {{input: 3.0, output: 5.0}}
{g2_price}"""
G2_PRICE = "  g2: {input: 4.0, output: 6.0}\n"


def write(tmp_path: Path, g2_price: str = G2_PRICE) -> Path:
    path = tmp_path / "demo.yaml"
    path.write_text(SPEC.format(template=TEMPLATE, g2_price=g2_price))
    return path


def estimate(path: Path, capsys: pytest.CaptureFixture[str], fmt: str = "json") -> Any:
    capsys.readouterr()
    assert main(["estimate", str(path), "--format", fmt, "--cache", "off"]) == 0
    out = capsys.readouterr().out
    return json.loads(out) if fmt == "json" else out


def tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def judge_text(question: str) -> str:
    return f"Q: {question}\nA: \nGrade it 1-10."


def test_judge_calls_are_counted_and_priced_apart(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    data = estimate(write(tmp_path), capsys)
    g1_low = [tokens(judge_text(q)) for q in QUESTIONS]
    g2_low = [t + tokens("Be strict.") for t in g1_low]  # g2 sends its own system text
    g1 = data["judges"]["g1"]
    assert (g1["items"], g1["calls"]) == (3, 3)
    assert g1["prompt_tokens"] == {"low": sum(g1_low), "high": sum(g1_low) + 3 * 100}
    assert g1["completion_tokens"] == {"low": 0, "high": 30}
    g1_cost = (round(sum(t * 3.0 for t in g1_low) / 1e6, 6),
               round(sum((t + 100) * 3.0 + 10 * 5.0 for t in g1_low) / 1e6, 6))
    assert (g1["cost_usd"]["low"], g1["cost_usd"]["high"]) == g1_cost
    g2 = data["judges"]["g2"]
    g2_cost = (round(sum(t * 4.0 for t in g2_low) / 1e6, 6),
               round(sum((t + 100) * 4.0 + 20 * 6.0 for t in g2_low) / 1e6, 6))
    assert (g2["cost_usd"]["low"], g2["cost_usd"]["high"]) == g2_cost
    arm_high = sum(tokens(q) * 1.0 + 100 * 2.0 for q in QUESTIONS) / 1e6
    arm_low = sum(tokens(q) * 1.0 for q in QUESTIONS) / 1e6
    assert data["arms"]["a"]["cost_usd"] == {"low": round(arm_low, 6), "high": round(arm_high, 6)}
    judges_low = sum(t * 3.0 for t in g1_low) / 1e6 + sum(t * 4.0 for t in g2_low) / 1e6
    judges_high = (sum((t + 100) * 3.0 + 50.0 for t in g1_low)
                   + sum((t + 100) * 4.0 + 120.0 for t in g2_low)) / 1e6
    assert data["split"] == {
        "arms": {"calls_max": 3, "cost_usd": {"low": round(arm_low, 6),
                                              "high": round(arm_high, 6)}},
        "judges": {"calls": 6, "cost_usd": {"low": round(judges_low, 6),
                                            "high": round(judges_high, 6)}},
    }
    assert data["calls_max"] == 3 + 6 and data["items"] == 3
    assert data["cost_usd"] == {"low": round(arm_low + judges_low, 6),
                                "high": round(arm_high + judges_high, 6)}
    assert data["benchmarks"]["demo"]["split"] == data["split"]


def test_the_text_has_a_line_per_judge_and_arms_against_judges(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path)
    data = estimate(path, capsys)
    text = estimate(path, capsys, "text")
    g1 = data["judges"]["g1"]
    low, high = g1["prompt_tokens"]["low"], g1["prompt_tokens"]["high"]
    line = next(x for x in text.splitlines() if x.startswith("g1 "))
    cost = g1["cost_usd"]
    assert line.split() == ["g1", "3", "3", "0", f"{low}-{high}", f"${usd(cost['low'])}",
                            f"${usd(cost['high'])}"]
    split = data["split"]
    arms, judges = split["arms"]["cost_usd"], split["judges"]["cost_usd"]
    assert (f"arms: at most 3 calls, cost ${usd(arms['low'])} to ${usd(arms['high'])}; "
            f"judges: 6 calls, cost ${usd(judges['low'])} to ${usd(judges['high'])}") in text
    assert "total: 3 items, at most 9 calls" in text


def test_a_judge_without_prices_is_unknown_not_free(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    data = estimate(write(tmp_path, g2_price=""), capsys)
    assert data["judges"]["g2"]["cost_usd"] == {"low": None, "high": None}
    assert not data["judges"]["g2"]["priced"] and data["judges"]["g1"]["priced"]
    assert data["split"]["judges"]["cost_usd"] == {"low": None, "high": None}
    assert data["cost_usd"] == {"low": None, "high": None}
    assert data["split"]["arms"]["cost_usd"]["high"] is not None  # the arms' stay known
    text = estimate(write(tmp_path, g2_price=""), capsys, "text")
    assert "judges: 6 calls, cost unknown" in text


def test_a_spec_without_judges_has_no_judge_lines(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "plain.yaml"
    path.write_text("benchmark: plain\ndataset:\n  loader: inline\n  items:\n"
                    "    - {id: q1, input: x, target: x}\nscorer: exact\narms:\n"
                    "  a: {provider: sim, accuracy: 1.0}\n")
    data = estimate(path, capsys)
    assert data["judges"] == {} and data["split"]["judges"]["calls"] == 0
    text = estimate(path, capsys, "text")
    assert "judge" not in text.split("prompt tokens estimated")[0]


def test_low_takes_the_answers_and_judge_replies_seen_in_earlier_results(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An earlier run's rows: the arm answered in 40 tokens, g1 replied in 6 and g2 in 8 (a
    judgment without usage, a malformed one and one of no judge teach nothing)."""
    judgments = [{"judge": "g1", "usage": {"prompt_tokens": 30, "completion_tokens": 6}},
                 {"judge": "g2", "usage": {"completion_tokens": 8}}, {"judge": "g2"},
                 {"judge": 3, "usage": {"completion_tokens": 999}}, "not a judgment"]
    earlier = results_files.write(tmp_path / "earlier.jsonl", [
        results_files.row("q1", "a", usage={"completion_tokens": 40}, judgments=judgments),
        results_files.row("q2", "a", usage={"completion_tokens": 40}, judgments="nonsense"),
    ], meta=results_files.meta(arms=("a",)))
    capsys.readouterr()
    assert main(["estimate", str(write(tmp_path)), "--format", "json", "--cache", "off",
                 "--results", str(earlier)]) == 0
    data = json.loads(capsys.readouterr().out)
    g1_text = [tokens(judge_text(q)) for q in QUESTIONS]
    g1, g2 = data["judges"]["g1"], data["judges"]["g2"]
    assert g1["prompt_tokens"]["low"] == sum(g1_text) + 3 * 40
    assert g1["completion_tokens"]["low"] == 3 * 6 and g2["completion_tokens"]["low"] == 3 * 8
    low = sum((t + 40) * 3.0 + 6 * 5.0 for t in g1_text) / 1e6
    assert g1["cost_usd"]["low"] == round(low, 6)


def test_judge_calls_the_cache_answers_after_a_real_sweep_are_not_sent(
        pytester: pytest.Pytester, sweep: Sweep, api_key: None) -> None:
    """A model_graded sweep against two loopback servers fills the response cache; the estimate
    then finds every arm's answer and every judge's grade of it there, keyed as the run keys them
    (the system text apart): nothing would be sent, nothing costs."""
    with FakeOpenAI(answer=lambda prompt: "4") as arms, \
            FakeOpenAI(answer=lambda prompt: "Verdict: correct") as judge:
        served = "base_url: '{}', api_key_env: TEST_OPENAI_KEY"
        spec = SPEC.format(template=TEMPLATE, g2_price=G2_PRICE).replace(
            "base_url: 'http://127.0.0.1:9/v1'", "SERVED")
        spec = spec.replace("  judge: [g1, g2]\n", "  judge: [g1, g2]\n  system: Be fair.\n")
        spec = spec.replace("model: m, SERVED", "model: m, " + served.format(arms.base_url))
        spec = spec.replace("SERVED", served.format(judge.base_url))
        path = pytester.path / "demo.yaml"
        path.write_text(spec)
        result, _, rows = sweep.run()
        assert result.ret == 0 and len(rows) == 3, result.stdout.str()
        assert all(r["passed"] for r in rows), [r["detail"] for r in rows]
        assert len(judge.requests) == 6
        assert {r["body"]["messages"][0]["content"] for r in judge.requests} == {"Be fair."}
    cache = pytester.path / "bench_results" / "cache" / "cache.sqlite"
    assert cache.is_file()
    capsys_out = io.StringIO()
    with contextlib.redirect_stdout(capsys_out):
        assert main(["estimate", str(path), "--format", "json", "--cache", str(cache)]) == 0
    data = json.loads(capsys_out.getvalue())
    assert data["arms"]["a"]["cached_calls"] == 3 and data["arms"]["a"]["calls_max"] == 0
    for name in ("g1", "g2"):
        judged = data["judges"][name]
        assert (judged["calls"], judged["cached_calls"], judged["items"]) == (0, 3, 3)
        assert judged["cost_usd"] == {"low": 0.0, "high": 0.0}
    assert data["split"]["judges"] == {"calls": 0, "cost_usd": {"low": 0.0, "high": 0.0}}
    assert data["calls_max"] == 0
