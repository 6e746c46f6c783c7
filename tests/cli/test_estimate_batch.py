"""``echo-bench estimate`` shows what the sweep costs with its calls sent in batches beside what
it costs live: an arm whose provider has a batch API at its prices' ``batch_discount``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_echo_bench.cli.main import main

SPEC = """benchmark: demo
dataset:
  loader: inline
  items:
    - {id: q1, input: "What is 2+2?", target: "4"}
    - {id: q2, input: "What is 3+3?", target: "6"}
scorer: numeric
arms:
  gpt: {provider: openai, model: m, base_url: 'http://127.0.0.1:9/v1', max_tokens: 100}
  claude: {provider: anthropic, model: c, base_url: 'http://127.0.0.1:9', max_tokens: 50}
pricing:
  gpt: {input: 1.0, output: 2.0, batch_discount: 0.5}
  claude: {input: 3.0, output: 15.0}
"""


def test_batch_and_live_cost_side_by_side(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "demo.yaml"
    spec.write_text(SPEC)
    assert main(["estimate", str(spec), "--format", "json", "--cache", "off"]) == 0
    data = json.loads(capsys.readouterr().out)
    gpt, claude = data["arms"]["gpt"], data["arms"]["claude"]
    assert gpt["batch_cost_usd"]["high"] == pytest.approx(gpt["cost_usd"]["high"] / 2, abs=1e-6)
    assert claude["batch_cost_usd"] == claude["cost_usd"]  # no discount said: the same
    assert data["batch_cost_usd"]["high"] == pytest.approx(
        gpt["cost_usd"]["high"] / 2 + claude["cost_usd"]["high"], abs=1e-6)
    assert main(["estimate", str(spec), "--cache", "off"]) == 0
    text = capsys.readouterr().out
    assert "sent in batches (batch: true, --bench-batch): cost $" in text
    assert " live" in text
