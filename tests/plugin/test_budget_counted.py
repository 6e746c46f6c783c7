"""What a budget counts beside this run's own calls: rows whose cost is unknown, and a spec's budget
split between shards."""

from __future__ import annotations

import json

import pytest
from openai_server import FakeOpenAI

from conftest import Sweep, make_spec, read_rows, sim_spec

WORST = 0.01  # 10 tokens of output at $1000 a million, input free: every call's worst case


pytestmark = pytest.mark.usefixtures("api_key")


def priced(server: FakeOpenAI, n: int, extra: str = "") -> str:
    arm = (f"  a:\n    provider: openai\n    model: m-a\n    base_url: {server.base_url}\n"
           "    api_key_env: TEST_OPENAI_KEY\n    max_tokens: 10\n")
    return sim_spec(
        n,
        arms=arm,
        extra=f"retries: {{attempts: 1}}\npricing:\n  a: {{input: 0, output: 1000}}\n{extra}",
    )


def test_rows_of_unknown_cost_count_their_worst_case_in_a_budgeted_resume(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI) -> None:
    openai_server.with_usage = False  # the rows' cost is unknown, and no budget ran to charge them
    openai_server.quota_after = 5
    make_spec(pytester, priced(openai_server, 10))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 2 and len(rows) == 5
    assert all(r["cost_usd"] is None and "charged_usd" not in r for r in rows)
    openai_server.quota_after = None
    resumed = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "--bench-resume",
        str(sweep.out),
        "--bench-concurrency",
        "1",
        "--bench-budget-usd",
        repr(7.5 * WORST),
    )
    assert resumed.ret == 2, resumed.stdout.str()
    # the 5 rows at their worst case, and 2 calls more: before, all 10
    assert len(read_rows(sweep.out)[1]) == 7
    resumed.stdout.fnmatch_lines(["*budget: spent $0.0700 of $0.0750*"])


def test_a_row_whose_cost_is_known_counts_its_cost_and_a_cached_one_nothing(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI) -> None:
    openai_server.quota_after = 5  # with usage: each row's cost is one word of output, $0.001
    make_spec(pytester, priced(openai_server, 10))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 2 and [r["cost_usd"] for r in rows] == pytest.approx([0.001] * 5)
    openai_server.quota_after = None
    resumed = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "--bench-resume",
        str(sweep.out),
        "--bench-concurrency",
        "1",
        "--bench-budget-usd",
        repr(5 * WORST + 0.005),
    )
    assert resumed.ret == 0, resumed.stdout.str()
    assert len(read_rows(sweep.out)[1]) == 10


def test_a_spec_budget_is_split_evenly_between_shards_and_says_so(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI) -> None:
    openai_server.answer = lambda prompt: " ".join(["w"] * 10)  # each call costs its worst case
    spec = make_spec(
        pytester, priced(openai_server, 20, extra=f"budget: {{usd: {10.5 * WORST!r}}}\n")
    )
    line = next(
        n for n, text in enumerate(spec.read_text().splitlines(), 1) if text.startswith("budget:")
    )
    spent = 0.0
    for k in (1, 2):
        out = pytester.path / f"shard{k}.jsonl"
        result = pytester.runpytest(
            "-p",
            "no:cacheprovider",
            "--bench-out",
            str(out),
            "--bench-shard",
            f"{k}/2",
            "--bench-concurrency",
            "1",
        )
        assert result.ret == 2, result.stdout.str()
        result.stdout.fnmatch_lines(
            [
                f"echo-bench: budget: shard {k}/2: a spec's budget is the whole sweep's, split "
                f"evenly between the 2 shards (--bench-budget-usd is each shard's own): "
                f"benchmark demo $0.1050 ({spec}:{line}): $0.0525 here"
            ]
        )
        rows = read_rows(out)[1]
        assert len(rows) == 5  # $0.0525 holds 5 calls: before, each shard spent the whole $0.105
        spent += sum(r["cost_usd"] for r in rows)
        marker = json.loads((pytester.path / f"shard{k}.jsonl.stop.json").read_text())
        assert marker["binding"][0]["budget_usd"] == pytest.approx(5.25 * WORST)
    assert spent <= 10.5 * WORST + 1e-9 and len(openai_server.requests) == 10


def test_the_ledger_of_another_sweep_carries_nothing_into_a_resume(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI) -> None:
    openai_server.answer = lambda prompt: "4"
    make_spec(pytester, priced(openai_server, 6))
    result, _, _ = sweep.run("--bench-budget-usd", "1", "--bench-cache", "off")
    assert result.ret == 0
    ledger = pytester.path / "results.jsonl.budget"
    data = json.loads(ledger.read_text())
    data["lost"] = {"run": 0.9}  # calls that sweep lost in a crash: its own resume would count them
    ledger.write_text(json.dumps(data))
    sweep.out.unlink()  # the results removed, the ledger left beside them
    # a new sweep without a budget, stopped early
    openai_server.quota_after = len(openai_server.requests) + 2
    result, _, rows = sweep.run("--bench-cache", "off")
    assert result.ret == 2 and len(rows) == 2
    openai_server.quota_after = None
    resumed = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "--bench-resume",
        str(sweep.out),
        "--bench-budget-usd",
        "0.5",
        "--bench-cache",
        "off",
    )
    assert resumed.ret == 0, resumed.stdout.str()  # the other sweep's $0.90 is not this one's
    assert len(read_rows(sweep.out)[1]) == 6
