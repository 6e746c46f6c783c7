"""A tight budget under ``-n 2``: holds still settling do not close the benchmark.

The server answers 4 words where each call may bill 40: a worst case is 10 times a cost, as a
real model's short answer under a generous ``max_tokens``.
"""
from __future__ import annotations

import json

import pytest
from openai_server import FakeOpenAI

from conftest import Sweep, make_spec, sim_spec

MAX_TOKENS = 40  # what each call holds; the server answers 4 words: a hold is 10x what a call costs


pytestmark = pytest.mark.usefixtures("api_key")


def arm(server: FakeOpenAI, name: str) -> str:
    return (
        f"  {name}:\n    provider: openai\n    model: m-{name}\n    base_url: {server.base_url}\n"
        f"    api_key_env: TEST_OPENAI_KEY\n    max_tokens: {MAX_TOKENS}\n"
    )


def test_a_tight_budget_under_two_workers_spends_until_the_next_item_cannot_fit(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI) -> None:
    openai_server.answer = lambda prompt: "w w w w"
    prices = "pricing:\n  a: {input: 0, output: 1000}\n  b: {input: 0, output: 1000}\n"
    make_spec(
        pytester, sim_spec(30, arms=arm(openai_server, "a") + arm(openai_server, "b"), extra=prices)
    )
    # an item's hold ($0.08) and cost ($0.008)
    worst, cost = 2 * MAX_TOKENS * 1000 / 1e6, 2 * 4 * 1000 / 1e6
    result, _, rows = sweep.run("-n", "2", "--bench-budget-usd", "0.12")
    assert result.ret == 2, result.stdout.str()
    spent = sum(r["cost_usd"] for r in rows)
    assert spent <= 0.12 + 1e-9
    # Counting the other worker's pledge as spent closed the benchmark after one item ($0.008 of
    # $0.12): now new items start while what is spent leaves room for one more's worst case.
    assert spent + worst > 0.12 - 1e-9 and len(rows) >= 2 * 5
    marker = json.loads((pytester.path / "results.jsonl.stop.json").read_text())
    assert (
        marker["closed_spent_usd"] + worst > 0.12 and marker["closed_spent_usd"] >= 5 * cost - 1e-9
    )
    items = len(rows) // 2
    result.stdout.fnmatch_lines(
        [
            f"echo-bench: budget: spent $0.*of $0.1200; new items stopped with $0.* spent and "
            f"$0.* held for calls in flight and started items; {items} of 30 items complete for "
            # was "1 of 1 items complete": as if all were
            f"all arms ({items} started)"
        ]
    )
    assert (marker["items_complete"], marker["items_started"], marker["items"]) == (
        items,
        items,
        30,
    )
