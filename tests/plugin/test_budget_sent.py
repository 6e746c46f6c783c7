"""The budget holds what the request sent allows, against a loopback server that bills the most.

``billing_server.bill_the_most`` makes every reply report as many completion tokens as its request
permits (its ``max_tokens`` or ``max_completion_tokens``, times its ``n``), so what the server
billed is what a real provider could bill; the run's spend must stay within the budget.
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest
from billing_server import allowed, bill_the_most
from openai_server import FakeOpenAI

from conftest import Sweep, make_spec, sim_spec
from pytest_echo_bench.cli.main import main

# USD per million output tokens; input is free: the server's bill is its completion tokens
OUTPUT_PRICE = 1000.0


pytestmark = pytest.mark.usefixtures("api_key")


def spec_with(server: FakeOpenAI, n: int, options: str) -> str:
    arm = (f"  a:\n    provider: openai\n    model: m-a\n    base_url: {server.base_url}\n"
           f"    api_key_env: TEST_OPENAI_KEY\n{options}")
    return sim_spec(
        n,
        arms=arm,
        extra=f"retries: {{attempts: 1}}\npricing:\n  a: {{input: 0, output: {OUTPUT_PRICE}}}\n",
    )


def billed(server: FakeOpenAI) -> float:
    """What the server billed, from the requests it answered: the most each allowed."""
    return sum(allowed(r["body"]) for r in server.requests) * OUTPUT_PRICE / 1e6


@pytest.mark.parametrize("options, per_call", [
    # The option says 10, the wire carries 1000: before, each call held $0.01 and was billed $1.
    ("    max_tokens: 10\n    extra_body: {max_tokens: 1000}\n", 1.0),
    ("    max_tokens: 10\n    extra_body: {n: 4}\n", 0.04),  # four replies of 10 tokens each
    # the larger bound: a server keeps one
    ("    max_tokens: 10\n    extra_body: {max_completion_tokens: 300}\n", 0.3),
])
def test_the_hold_is_the_bound_the_request_carries(
    pytester: pytest.Pytester,
    sweep: Sweep,
    openai_server: FakeOpenAI,
    options: str,
    per_call: float,
) -> None:
    bill_the_most(openai_server)
    make_spec(pytester, spec_with(openai_server, 20, options))
    budget = 3.5 * per_call
    result, _, rows = sweep.run("--bench-concurrency", "2", "--bench-budget-usd", repr(budget))
    assert result.ret == 2, result.stdout.str()
    assert billed(openai_server) <= budget + 1e-9  # before: $4.15 billed on $0.50, and so on
    assert len(rows) == 3 and sum(r["cost_usd"] for r in rows) == pytest.approx(3 * per_call)
    assert all("budget_over_usd" not in r.get("extra", {}) for r in rows)


@pytest.mark.parametrize(
    "options, why",
    [
        (
            "    max_tokens: 10\n    extra_body: {max_tokens: null}\n",
            "max_tokens: null (from extra_body)",
        ),
        ("    max_tokens: 10\n    extra_body: {n: 0}\n", "n: 0 (from extra_body)"),
        (
            '    extra_body: {max_completion_tokens: "lots"}\n',
            'max_completion_tokens: "lots" (from extra_body)',
        ),
    ],
)
def test_a_request_without_a_bound_is_refused_before_any_call(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI, options: str, why: str
) -> None:
    bill_the_most(openai_server)
    make_spec(pytester, spec_with(openai_server, 3, options))
    result, _, rows = sweep.run("--bench-budget-usd", "1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*arm 'a' has no worst case*{why}*"])
    assert rows == [] and openai_server.requests == []


def test_extra_body_messages_are_what_the_hold_counts(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI) -> None:
    bill_the_most(openai_server)
    long = "x" * 4000  # sent in place of the item's prompt: 4,000 bytes of input on every call
    options = (
        f"    max_tokens: 1\n    extra_body: {{messages: [{{role: user, content: {long}}}]}}\n"
    )
    spec = (
        spec_with(openai_server, 20, options)
        .replace(f"output: {OUTPUT_PRICE}", "output: 0")
        .replace("input: 0", "input: 100")
    )
    make_spec(pytester, spec)
    # 4,000 bytes at $100 a million: $0.4 a call; the item's own prompt
    # (a dozen bytes) would be $0.003.
    result, _, rows = sweep.run("--bench-concurrency", "1", "--bench-budget-usd", "1")
    assert result.ret == 2, result.stdout.str()
    assert len(openai_server.requests) == 2 and sum(r["cost_usd"] for r in rows) <= 1.0


def test_a_reply_over_its_bound_is_charged_as_reported_and_said_at_once(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI) -> None:
    bill_the_most(openai_server, over=6)  # 16 tokens where the request allows 10
    make_spec(pytester, spec_with(openai_server, 4, "    max_tokens: 10\n"))
    result, _, rows = sweep.run("--bench-concurrency", "1", "--bench-budget-usd", "1")
    assert result.ret == 0, result.stdout.str()
    out = result.stdout.str()
    warnings = [
        line
        for line in out.splitlines()
        if "echo-bench: warning: budget: arm demo/a, item q" in line
    ]
    assert (
        len(warnings) == 4
        and "usage worth $0.016000, more than its request allows ($0.010000 at most)" in warnings[0]
    )
    # what was spent, not the hold
    assert [r["charged_usd"] for r in rows] == pytest.approx([0.016] * 4)
    assert [r["extra"]["budget_over_usd"] for r in rows] == pytest.approx([0.006] * 4)
    result.stdout.fnmatch_lines(
        [
            "*budget: spent $0.0640 of $1.0000; 4 replies over their bound, charged $0.0240 "
            "beyond their holds*"
        ]
    )
    ledger = json.loads((pytester.path / "results.jsonl.budget").read_text())
    assert ledger["over"] == 4 and ledger["accounts"]["run"]["spent"] == pytest.approx(0.064)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):  # the report says so too
        assert main(["report", str(sweep.out), "--format", "json"]) == 0
    [recorded] = json.loads(out.getvalue())["budgets"]
    assert recorded["over_bound_replies"] == 4 and recorded["over_bound_usd"] == pytest.approx(
        0.024
    )
