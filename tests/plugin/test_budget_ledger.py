"""The ledger beside the results is a cache of the budget, not its source: an edit of
the file mid-run cannot raise the limit, and a value no run writes (NaN, a negative,
text) is refused naming the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from billing_server import bill_the_most
from openai_server import FakeOpenAI

from conftest import Sweep, make_spec, read_rows, sim_spec

# 10 tokens of output at $1000 a million: what each call is billed, and its worst case
PER_CALL = 0.01


pytestmark = pytest.mark.usefixtures("api_key")


def priced(server: FakeOpenAI, n: int) -> str:
    arm = (f"  a:\n    provider: openai\n    model: m-a\n    base_url: {server.base_url}\n"
           "    api_key_env: TEST_OPENAI_KEY\n    max_tokens: 10\n")
    return sim_spec(
        n, arms=arm, extra="retries: {attempts: 1}\npricing:\n  a: {input: 0, output: 1000}\n"
    )


def edit_ledger(path: Path, change: Any) -> None:
    """Rewrite the ledger file in place as a person with an editor would (no lock taken)."""
    data = json.loads(path.read_text())
    change(data)
    text = json.dumps(data)
    path.write_text(text.ljust(len(path.read_text())))


def edit_on_call(server: FakeOpenAI, ledger: Path, call: int, change: Any) -> None:
    """The server edits the ledger while it answers its ``call``-th
    request (the run is mid-flight)."""
    billing = server.fault_for
    assert billing is not None
    calls = []

    def reply(body: dict[str, Any]) -> tuple[str, Any]:
        calls.append(1)
        if len(calls) == call:
            edit_ledger(ledger, change)
        return billing(body)  # type: ignore[return-value]

    server.fault_for = reply


def test_a_limit_raised_in_the_file_mid_run_does_not_raise_the_budget(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI) -> None:
    bill_the_most(openai_server)
    make_spec(pytester, priced(openai_server, 20))
    ledger = Path(f"{sweep.out}.budget")
    edit_on_call(
        openai_server, ledger, 2, lambda data: data["accounts"]["run"].update(limit=1000.0)
    )
    budget = 5.5 * PER_CALL
    result, _, rows = sweep.run("--bench-concurrency", "1", "--bench-budget-usd", repr(budget))
    assert result.ret == 2, result.stdout.str()
    assert len(openai_server.requests) == 5 and len(rows) == 5  # before: all 20, $0.20 on $0.055
    result.stdout.fnmatch_lines(["*budget: spent $0.0500 of $0.0550*"])
    # written back
    assert json.loads(ledger.read_text())["accounts"]["run"]["limit"] == pytest.approx(budget)


@pytest.mark.parametrize("field, value, said", [
    ("spent", float("nan"), "accounts.run.spent is nan, not an amount of US dollars"),
    ("spent", -1.0, "accounts.run.spent is -1.0, not an amount of US dollars"),
    ("held", float("inf"), "accounts.run.held is inf, not an amount"),
    ("spent", "0.5", 'accounts.run.spent is "0.5", not an amount'),
    ("spent", True, "accounts.run.spent is true, not an amount"),
    # Room made by lowering what was spent: refused mid-run (a resume
    # counts the rows, not this figure).
    ("spent", 0.0, "accounts.run.spent went down from 0.01 to 0.0, which no run does"),
])
def test_a_value_no_run_writes_stops_the_run_naming_the_file(
    pytester: pytest.Pytester,
    sweep: Sweep,
    openai_server: FakeOpenAI,
    field: str,
    value: Any,
    said: str,
) -> None:
    bill_the_most(openai_server)
    make_spec(pytester, priced(openai_server, 10))
    ledger = Path(f"{sweep.out}.budget")
    edit_on_call(
        openai_server, ledger, 2, lambda data: data["accounts"]["run"].update({field: value})
    )
    result, _, rows = sweep.run("--bench-concurrency", "1", "--bench-budget-usd", "1")
    out = result.stdout.str() + result.stderr.str()
    # before: a traceback at the end
    assert "Traceback" not in out and "INTERNALERROR" not in out, out
    assert result.ret not in (0, 1, 3), out
    assert f"the budget ledger {ledger} is damaged: {said}" in out
    # the item that read it ends; nothing more is sent
    assert len(openai_server.requests) == 2 and len(rows) == 2

    if value == 0.0:
        return
    # The resume reads the ledger for what an earlier run lost: a damaged
    # one is a usage error, at once.
    resumed = pytester.runpytest(
        "-p", "no:cacheprovider", "--bench-resume", str(sweep.out), "--bench-budget-usd", "1"
    )
    assert resumed.ret == pytest.ExitCode.USAGE_ERROR
    resumed.stderr.fnmatch_lines(
        [f"*the budget ledger {ledger} is damaged: {said}*restore it, or remove it*"]
    )
    assert len(openai_server.requests) == 2
    ledger.unlink()  # as the message says: the resume then counts the rows alone
    resumed = pytester.runpytest(
        "-p", "no:cacheprovider", "--bench-resume", str(sweep.out), "--bench-budget-usd", "1"
    )
    assert resumed.ret == 0, resumed.stdout.str()
    assert len(read_rows(sweep.out)[1]) == 10
