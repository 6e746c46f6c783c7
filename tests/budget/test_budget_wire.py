"""Generated arm options against the request the provider really builds: the budget's worst case
covers the most that request lets a server bill, and the spend never passes the limit by more than
what replies reported beyond their bound (the documented overshoot)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from billing_server import allowed
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pytest_echo_bench.budget.hold import Budget
from pytest_echo_bench.budget.ledger import EPSILON_USD, Ledger
from pytest_echo_bench.budget.worst import call_worst, unbounded
from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.errors import BudgetError
from pytest_echo_bench.plugin.budget import Spend
from pytest_echo_bench.providers import openai_chat
from pytest_echo_bench.providers.base import Completion, Request
from pytest_echo_bench.spec.load import Spec, load_spec

PRICES = (100.0, 1000.0)  # USD per million input and output tokens
PROMPTS = ["2+2=?", "héllo wörld " * 20, "x"]


class Recorder:
    """A transport that keeps the payload it is handed and answers with the usage it is told."""

    def __init__(self) -> None:
        self.payload: dict[str, Any] = {}
        self.usage: dict[str, int] = {}

    def post(self, payload: dict[str, Any]) -> Completion:
        self.payload = payload
        return Completion("4", dict(self.usage))

    def close(self) -> None:
        pass


def billed_input(payload: dict[str, Any]) -> int:
    """The most input tokens a server may bill: the bytes of the
    messages' texts and of any tools."""
    texts = [m.get("content") for m in payload.get("messages", []) if isinstance(m, dict)]
    tools = payload.get("tools")
    return (sum(len(t.encode()) for t in texts if isinstance(t, str))
            + (len(json.dumps(tools, ensure_ascii=False).encode()) if tools is not None else 0))


def spec_of(tmp_path: Path, options: dict[str, Any]) -> Spec:
    arm = {"provider": "openai", "model": "m", "api_key_env": None, **options}
    path = tmp_path / "wire.yaml"
    path.write_text(
        "benchmark: wire\ndataset: {loader: inline, items: [{id: q, input: x, target: x}]}\n"
        f"scorer: exact\narms:\n  a: {json.dumps(arm, ensure_ascii=False)}\n"
        f"pricing:\n  a: {{input: {PRICES[0]}, output: {PRICES[1]}}}\n"
    )
    return load_spec(path)


# what a spec's YAML holds as written
text = st.text(st.characters(categories=("L", "N", "P", "Zs")), max_size=40)
cap = st.one_of(st.none(), st.integers(-2, 60), st.sampled_from(["10", 2.5, True]))
extra_body = st.fixed_dictionaries(
    {},
    optional={
        "max_tokens": cap,
        "max_completion_tokens": cap,
        "n": st.one_of(st.integers(-1, 5), st.none(), st.just("2")),
        "temperature": st.floats(0, 2),
        "tools": st.lists(text, max_size=3),
        "messages": st.lists(
            st.fixed_dictionaries({"role": st.just("user"), "content": text}),
            min_size=1,
            max_size=3,
        ),
    },
)
options = st.fixed_dictionaries(
    {}, optional={"max_tokens": st.integers(1, 60), "extra_body": extra_body, "system": text}
)


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
# The two that billed past their budget before: the option said 10, the request carried more.
@example(opts={"max_tokens": 10, "extra_body": {"max_tokens": 1000}}, over=[0, 0, 0], limit=0.5)
@example(opts={"max_tokens": 10, "extra_body": {"n": 4}}, over=[0, 0, 0], limit=0.05)
@given(
    opts=options,
    over=st.lists(st.integers(0, 30), min_size=1, max_size=12),
    limit=st.floats(0.001, 0.2),
)
def test_the_hold_covers_what_the_request_allows_and_overshoot_is_what_replies_reported_beyond_it(
        tmp_path: Path, opts: dict[str, Any], over: list[int], limit: float) -> None:
    spec = spec_of(tmp_path, opts)
    if unbounded(spec, "a") is not None:
        return  # refused before any call (a usage error: tests/plugin/test_budget_sent.py)
    provider = openai_chat.build(spec.arms["a"], spec, lambda arm, request: Completion(""))
    wire = provider.transport = Recorder()
    ledger = Ledger(tmp_path / "r.jsonl", {"run": limit})
    ledger.create({"run": limit}, {})
    budget, spent, beyond = Budget(ledger), 0.0, 0.0
    budget.max_wait_s = 0.0  # one thread: nothing in flight settles while a call would wait
    for i, extra in enumerate(over):
        prompt = PROMPTS[i % len(PROMPTS)]
        try:
            with (
                budget.item(spec, "a", prompt, ("wire", f"q{i}", 1)),
                budget.call(spec, "a", prompt) as settle,
            ):
                wire.usage = {"input_tokens": 0, "output_tokens": 0}
                provider.complete(Request(Example(f"q{i}", prompt, "4"), "a", prompt))
                worst = call_worst(spec, "a", prompt)
                most = (
                    billed_input(wire.payload) * PRICES[0] + allowed(wire.payload) * PRICES[1]
                ) / 1e6
                # the bound sent is held
                assert worst is not None and most <= worst + EPSILON_USD, (wire.payload, worst)
                # the server bills the most, and ``extra`` tokens beyond
                cost = most + extra * PRICES[1] / 1e6
                settle(cost)
                spent += cost
                beyond += max(0.0, cost - worst)
        except BudgetError:
            break
    state = ledger.change(lambda found: found)
    ledger.close()
    run = state.accounts["run"]
    assert run.spent == pytest.approx(spent, abs=1e-9)  # what was reported is what is charged
    # the overshoot: replies over their bound, no more
    assert run.spent <= limit + state.over_usd + 1e-9
    assert state.over_usd == pytest.approx(beyond, abs=1e-9)
    figures = [run.spent, run.held, state.needed, state.over_usd]
    assert all(math.isfinite(x) and x >= 0 for x in figures)
    assert "nan" not in Spend.of(state).text().lower()
