"""The budget and the estimate with every billed token class priced: a worst case assumes no cache
discount (every input token at the dearest of input, cache read and cache write; every output
token at the dearest of output and reasoning), `estimate`'s low end takes the plain prices, and a
budgeted sweep's hold is settled at the reply's cost with its classes priced apart."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from openai_server import FakeOpenAI

from conftest import Sweep, make_spec, sim_spec
from pytest_echo_bench.budget.judged import call_worst as judge_worst
from pytest_echo_bench.budget.worst import call_worst, input_tokens, unbounded
from pytest_echo_bench.cli.main import main
from pytest_echo_bench.spec.load import load_spec

ARM = "  m: {provider: openai, model: m, base_url: 'http://127.0.0.1:9/v1', max_tokens: 100}\n"
PRICES = "{input: 1.0, output: 2.0, cache_read: 0.1, cache_write: 5.0, reasoning: 4.0}"


def spec_file(tmp_path: Path, prices: str = PRICES, extra: str = "") -> Path:
    path = tmp_path / "demo.yaml"
    path.write_text(sim_spec(2, arms=ARM, extra=f"pricing:\n  m: {prices}\n{extra}"))
    return path


def test_a_worst_case_is_every_token_at_its_dearest_class(tmp_path: Path) -> None:
    spec = load_spec(spec_file(tmp_path))
    tokens = input_tokens(spec.arms["m"], "2+2=?")
    assert call_worst(spec, "m", "2+2=?") == pytest.approx((tokens * 5.0 + 100 * 4.0) / 1e6)
    plain = load_spec(spec_file(tmp_path, "{input: 1.0, output: 2.0}"))
    assert call_worst(plain, "m", "2+2=?") == (tokens * 1.0 + 100 * 2.0) / 1e6


def test_a_reasoning_price_alone_needs_a_bound_on_the_reply(tmp_path: Path) -> None:
    path = tmp_path / "demo.yaml"
    path.write_text(sim_spec(2, arms=ARM.replace(", max_tokens: 100", ""),
                             extra="pricing:\n  m: {input: 1.0, output: 0, reasoning: 3.0}\n"))
    assert "has an output price but no max_tokens" in (unbounded(load_spec(path), "m") or "")


def test_a_judges_worst_case_prices_its_dearest_classes(tmp_path: Path) -> None:
    path = tmp_path / "demo.yaml"
    path.write_text(sim_spec(2, arms=ARM, extra=(
        "judges:\n  g: {provider: openai, model: j, base_url: 'http://127.0.0.1:9/v1', "
        f"max_tokens: 10}}\npricing:\n  g: {PRICES}\n")))
    spec = load_spec(path)
    conf = spec.arms["m"].__class__("g", "openai", dict(spec.judges["g"]), 0)
    tokens = input_tokens(conf, "judge this")
    assert judge_worst(spec, "g", conf, "judge this") == pytest.approx(
        (tokens * 5.0 + 10 * 4.0) / 1e6)


def estimate(path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["estimate", str(path), "--format", "json", "--cache", "off"]) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


def test_the_estimate_is_low_at_plain_prices_and_high_at_the_dearest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cost = estimate(spec_file(tmp_path), capsys)["arms"]["m"]["cost_usd"]
    prompts = [math.ceil(len(f"2+2=? ({i})") / 4) for i in range(2)]
    assert cost == {"low": round(sum(prompts) * 1.0 / 1e6, 6),
                    "high": round(sum(t * 5.0 + 100 * 4.0 for t in prompts) / 1e6, 6)}
    plain = estimate(spec_file(tmp_path, "{input: 1.0, output: 2.0}"), capsys)["arms"]["m"]
    assert plain["cost_usd"]["high"] == round(sum(t + 100 * 2.0 for t in prompts) / 1e6, 6)


@pytest.mark.usefixtures("api_key")
def test_a_budgeted_sweep_settles_each_hold_at_the_classes_cost(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI
) -> None:
    openai_server.answer = lambda prompt: "4"
    openai_server.cached_tokens, openai_server.reasoning_tokens = 40, 7
    arms = (f"  m:\n    provider: openai\n    model: m\n    base_url: {openai_server.base_url}\n"
            "    api_key_env: TEST_OPENAI_KEY\n    max_tokens: 100\n")
    make_spec(pytester, sim_spec(3, arms=arms, extra=f"budget: {{usd: 1}}\npricing:\n  m: "
                                                      f"{PRICES}\n"))
    result, _, rows = sweep.run()
    result.assert_outcomes(passed=3)
    # 2 uncached prompt words and 40 cached; 1 answer word and 7 reasoning tokens
    cost = (2 * 1.0 + 40 * 0.1 + 1 * 2.0 + 7 * 4.0) / 1e6
    for row in rows:
        assert row["cost_usd"] == pytest.approx(cost)
        assert row["charged_usd"] == pytest.approx(cost)
        assert "budget_over_usd" not in row.get("extra", {})
