"""The report's spend per billed token class, end to end: a sweep against the loopback OpenAI
server with cached and reasoning tokens, then `echo-bench report` in every format shows each
arm's tokens and cost per class at the spec's prices, and the progress page the classes' tokens;
a report of rows without classes shows none of it (its output is what it was)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from openai_server import FakeOpenAI

from conftest import Sweep, make_spec, sim_spec
from pytest_echo_bench.cli.main import main
from pytest_echo_bench.report.page.html import render_progress
from pytest_echo_bench.report.page.state import progress_state

pytestmark = pytest.mark.usefixtures("api_key")
PRICES = "{input: 2.0, output: 8.0, cache_read: 0.5, reasoning: 10.0}"


def swept(pytester: pytest.Pytester, sweep: Sweep, server: FakeOpenAI, classes: bool) -> str:
    server.answer = lambda prompt: "4"
    if classes:
        server.cached_tokens, server.reasoning_tokens = 1000, 50
    arms = (f"  gpt:\n    provider: openai\n    model: m\n    base_url: {server.base_url}\n"
            "    api_key_env: TEST_OPENAI_KEY\n  plain: {provider: sim, accuracy: 1.0}\n")
    make_spec(pytester, sim_spec(3, arms=arms, extra=f"pricing:\n  gpt: {PRICES}\n"))
    result, _, _ = sweep.run()
    result.assert_outcomes(passed=6)
    return str(sweep.out)


def report(path: str, fmt: str, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(["report", path, "--format", fmt]) == 0
    return capsys.readouterr().out


def test_every_format_splits_the_spend_by_class(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = swept(pytester, sweep, openai_server, classes=True)
    # three rows of 2 uncached prompt words, 1000 cached, 1 answer word and 50 reasoning tokens
    tokens = {"input": 6, "cache_read": 3000, "cache_write": 0, "output": 3, "reasoning": 150}
    usd = {"input": 6 * 2.0 / 1e6, "cache_read": 3000 * 0.5 / 1e6, "cache_write": 0.0,
           "output": 3 * 8.0 / 1e6, "reasoning": 150 * 10.0 / 1e6}
    data = json.loads(report(path, "json", capsys))
    assert list(data["token_classes"]) == ["gpt"]  # the sim arm keeps no class apart
    split = data["token_classes"]["gpt"]
    assert split["tokens"] == tokens and split["rows"] == 3
    assert split["cost_usd"] == pytest.approx(usd)
    # the classes' costs add up to the rows' cost_usd
    assert sum(split["cost_usd"].values()) == pytest.approx(data["arms"]["gpt"]["cost_usd"])
    lines = [r for r in csv.DictReader(io.StringIO(report(path, "csv", capsys)))
             if r["kind"] == "token_class"]
    assert [(r["arm"], r["token_class"], r["tokens"]) for r in lines] == [
        ("gpt", name, str(count)) for name, count in tokens.items()]
    assert float(lines[1]["cost_usd"]) == pytest.approx(usd["cache_read"])
    table = report(path, "table", capsys)
    assert "spend per token class" in table and "3,000" in table and "0.0015" in table
    assert "### spend per token class" in report(path, "markdown", capsys)
    assert '<section id="token-classes">' in report(path, "html", capsys)
    state = progress_state(Path(path))
    assert state.token_classes == {"cache_read_tokens": 3000, "reasoning_tokens": 150}
    assert "<strong>Of which:</strong> 3,000 cache read, 150 reasoning" in render_progress(state)


def test_without_the_spec_the_tokens_show_and_the_costs_are_unknown(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = swept(pytester, sweep, openai_server, classes=True)
    for spec in pytester.path.glob("*.yaml"):
        spec.unlink()
    split = json.loads(report(path, "json", capsys))["token_classes"]["gpt"]
    assert split["tokens"]["cache_read"] == 3000 and split["cost_usd"] is None


def test_rows_without_classes_report_as_before(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = swept(pytester, sweep, openai_server, classes=False)
    assert "token_classes" not in json.loads(report(path, "json", capsys))
    assert "token class" not in report(path, "table", capsys)
    assert "token_class" not in report(path, "csv", capsys)
    assert "token-classes" not in report(path, "html", capsys)
    assert "Of which" not in render_progress(progress_state(Path(path)))

