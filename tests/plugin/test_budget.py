"""--bench-budget-usd and ``budget:`` in a spec, against the real loopback OpenAI server.

The server's usage counts words: an answer of exactly ``max_tokens`` words with prices only on
output makes every call cost exactly its reservation, so a run that overshot its budget by one
call would show it in the rows' ``cost_usd``.
"""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import time

import pytest
from openai_server import FakeOpenAI

from conftest import Sweep, make_spec, read_rows, sim_spec

WORDS = 4  # max_tokens of every arm, and the words of every answer
PER_CALL = WORDS * 1000.0 / 1e6  # output at 1000 USD per million tokens: 0.004 a call


pytestmark = pytest.mark.usefixtures("api_key")


def arm(server: FakeOpenAI, name: str, extra: str = "") -> str:
    return (
        f"  {name}:\n    provider: openai\n    model: m-{name}\n    base_url: {server.base_url}\n"
        f"    api_key_env: TEST_OPENAI_KEY\n    max_tokens: {WORDS}\n{extra}"
    )


def priced_spec(
    server: FakeOpenAI, n: int, arms: tuple[str, ...] = ("a", "b"), extra: str = ""
) -> str:
    prices = "".join(f"  {a}: {{input: 0, output: 1000}}\n" for a in arms)
    return sim_spec(n, arms="".join(arm(server, a) for a in arms),
                    extra=f"retries: {{attempts: 2, backoff_s: 0.01}}\npricing:\n{prices}{extra}")


def exact_answers(server: FakeOpenAI, delay: float = 0.0) -> None:
    def answer(prompt: str) -> str:
        if delay:
            # calls overlap: many reservations are taken while others are in flight
            time.sleep(delay)
        return " ".join(["w"] * WORDS)

    server.answer = answer


def spent(rows: list[dict[str, object]]) -> float:
    costs = [r["cost_usd"] for r in rows if r.get("cost_usd") is not None]
    return sum(float(c) for c in costs)  # type: ignore[arg-type]


def pairs_whole(rows: list[dict[str, object]], arms: tuple[str, ...] = ("a", "b")) -> bool:
    by_task: dict[object, set[object]] = {}
    for r in rows:
        by_task.setdefault(r["task_id"], set()).add(r["arm"])
    return all(found == set(arms) for found in by_task.values())


def test_two_workers_32_in_flight_each_never_overshoot_and_keep_pairs_whole(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI) -> None:
    exact_answers(openai_server, delay=0.02)
    make_spec(pytester, priced_spec(openai_server, 120))
    budget = 100.5 * PER_CALL  # room for 100 calls, not 101: 50 whole pairs
    result, _, rows = sweep.run(
        "-n", "2", "--bench-concurrency", "32", "--bench-budget-usd", repr(budget)
    )
    assert result.ret == 2, result.stdout.str()
    assert spent(rows) <= budget + 1e-9
    # everything that fitted was sent: the budget stops the run, not the first refusal
    assert len(rows) == 100
    assert pairs_whole(rows)
    # the reservations were taken by calls in flight together
    assert openai_server.max_in_flight > 8
    marker = json.loads((pytester.path / "results.jsonl.stop.json").read_text())
    assert marker["reason"] == "budget" and marker["items_complete"] == 50


def test_holds_of_calls_in_flight_come_back_so_the_budget_is_spent_not_just_held(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI) -> None:
    exact_answers(openai_server, delay=0.01)
    # Priced on input: a prompt's worst case is its bytes and framing (26 tokens), what the server
    # counts its words (2): 16 calls in flight hold twice the budget at first.
    prices = "pricing:\n  a: {input: 1000, output: 0}\n  b: {input: 1000, output: 0}\n"
    make_spec(
        pytester, sim_spec(60, arms=arm(openai_server, "a") + arm(openai_server, "b"), extra=prices)
    )
    result, _, rows = sweep.run("--bench-concurrency", "16", "--bench-budget-usd", "0.2")
    assert result.ret == 2
    assert spent(rows) <= 0.2 + 1e-9
    # Refusing what does not fit at once would close the run after 3 pairs (6 rows): 0.2 holds 3
    # pairs' worst cases. Waiting for the holds to settle, pairs start until what is spent and
    # pledged to started pairs leaves no room for one more (66 rows measured; 74 at most).
    assert len(rows) >= 50 and pairs_whole(rows)


def test_the_budget_stop_resumes_with_a_larger_budget_exactly_once(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI) -> None:
    exact_answers(openai_server)
    make_spec(pytester, priced_spec(openai_server, 10))
    budget = 8.5 * PER_CALL
    page = pytester.path / "page.html"
    result, _, rows = sweep.run("--bench-concurrency", "4", "--bench-budget-usd", repr(budget),
                                "--bench-progress-every", "0.001", "--bench-html", str(page))
    assert result.ret == 2
    # the progress line
    result.stdout.fnmatch_lines(["echo-bench: */20 done*spent $0.0*of $0.0340*"])
    assert "Budget:</strong> spent $0.0320 of $0.0340" in page.read_text()
    assert len(rows) == 8 and pairs_whole(rows) and spent(rows) <= budget + 1e-9
    marker = json.loads((pytester.path / "results.jsonl.stop.json").read_text())
    assert marker["reason"] == "budget"
    assert marker["spent_usd"] == pytest.approx(8 * PER_CALL)
    # the 12 calls not sent, at their worst case
    assert marker["needed_usd"] == pytest.approx(12 * PER_CALL)
    assert marker["suggested_usd"] == pytest.approx(0.08)  # spent + needed, up to the cent
    out = result.stdout.str()
    # the end table
    result.stdout.fnmatch_lines(
        ["*mean wall s  spend $", "demo *a *4 *0.0160", "demo *b *4 *0.0160"]
    )
    assert (
        "4 of 10 items complete for all arms (4 started)" in out
        and "stopped early (budget: spent $0.0320 of $0.0340" in out
    )
    command = next(
        line.strip()
        for line in out.splitlines()
        if line.strip().startswith("pytest --bench-resume")
    )
    assert "--bench-budget-usd 0.08" in command
    summary = json.loads((pytester.path / "results.jsonl.summary.json").read_text())
    assert (
        summary["budget"]["spent_usd"] == pytest.approx(8 * PER_CALL)
        and summary["budget"]["refused_calls"] == 12
    )

    resumed = pytester.runpytest("-p", "no:cacheprovider", *shlex.split(command)[1:])
    assert resumed.ret == 0, resumed.stdout.str()
    _, rows = read_rows(sweep.out)
    keys = [(r["task_id"], r["arm"]) for r in rows]
    # every item once: the file's spend counted, nothing twice
    assert len(keys) == 20 and len(set(keys)) == 20
    assert spent(rows) <= 0.08 + 1e-9
    assert len(openai_server.requests) == 20


def test_a_resume_counts_what_the_file_already_spent(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI) -> None:
    exact_answers(openai_server)
    make_spec(pytester, priced_spec(openai_server, 6))
    sweep.run("--bench-concurrency", "1", "--bench-budget-usd", repr(4.5 * PER_CALL))
    # The same ceiling again: the file's 4 calls are spent already, so nothing more fits.
    result = pytester.runpytest("-p", "no:cacheprovider", "--bench-resume", str(sweep.out),
                                "--bench-budget-usd", repr(4.5 * PER_CALL))
    assert result.ret == 2
    _, rows = read_rows(sweep.out)
    assert len(rows) == 4 and len(openai_server.requests) == 4


def test_replies_without_usage_are_charged_their_worst_case_and_a_resume_counts_it(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI) -> None:
    exact_answers(openai_server)
    # cost_usd is null in every row: only the charge says what was spent
    openai_server.with_usage = False
    make_spec(pytester, priced_spec(openai_server, 20))
    budget = repr(10.5 * PER_CALL)
    result, _, rows = sweep.run("--bench-concurrency", "1", "--bench-budget-usd", budget)
    assert result.ret == 2 and len(rows) == 10
    assert all(r.get("cost_usd") is None for r in rows)
    # the worst case each call held
    assert [r["charged_usd"] for r in rows] == pytest.approx([PER_CALL] * 10)
    sent = len(openai_server.requests)
    # The same ceiling again: the file's charges spent it, so nothing more is sent.
    resumed = pytester.runpytest("-p", "no:cacheprovider", "--bench-resume", str(sweep.out),
                                 "--bench-budget-usd", budget)
    assert resumed.ret == 2, resumed.stdout.str()
    _, rows = read_rows(sweep.out)
    assert len(rows) == 10 and len(openai_server.requests) == sent
    resumed.stdout.fnmatch_lines(["*budget: spent $0.0400 of $0.0420*"])


def test_a_run_without_a_budget_writes_no_charge(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI) -> None:
    exact_answers(openai_server)
    make_spec(pytester, priced_spec(openai_server, 2))
    result, _, rows = sweep.run()
    assert result.ret == 0 and rows and all("charged_usd" not in r for r in rows)


def test_a_routing_arm_reserves_every_call_it_may_make(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI) -> None:
    exact_answers(openai_server)
    casc = "  casc:\n    provider: cascade\n    cheap: cheap\n    n: 2\n    strong: strong\n"
    spec = sim_spec(
        6,
        arms=arm(openai_server, "cheap") + arm(openai_server, "strong") + casc,
        extra="pricing:\n  cheap: {input: 0, output: 1000}\n  strong: {input: 0, output: 10000}\n",
    )
    make_spec(pytester, spec)
    # An item's worst case is two cheap calls and the strong one: 0.008 + 0.04. The cheap answers
    # agree, so each item spends 0.008; a reservation of the cheap calls alone would start 6 items.
    result, _, rows = sweep.run(
        "-k", "casc", "--bench-concurrency", "1", "--bench-budget-usd", "0.06"
    )
    assert result.ret == 2
    # 0 + 0.048 fits, 0.008 + 0.048 fits, 0.016 + 0.048 does not
    assert [r["arm"] for r in rows] == ["casc", "casc"]
    assert spent(rows) == pytest.approx(4 * PER_CALL)


def test_cached_replies_cost_nothing_against_the_budget(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI) -> None:
    exact_answers(openai_server)
    make_spec(pytester, priced_spec(openai_server, 5))
    cache = str(pytester.path / "cache.sqlite")
    first, _, _ = sweep.run("--bench-cache", cache)
    assert first.ret == 0 and len(openai_server.requests) == 10
    again = pytester.path / "again.jsonl"
    result = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "--bench-cache",
        cache,
        "--bench-out",
        str(again),
        # not even one call's worst case
        "--bench-budget-usd",
        repr(PER_CALL / 2),
    )
    assert result.ret == 0, result.stdout.str()
    _, rows = read_rows(again)
    assert len(rows) == 10 and all(r["cache_hits"] == 1 for r in rows)
    assert len(openai_server.requests) == 10  # nothing sent
    result.stdout.fnmatch_lines(
        [
            "echo-bench: budget: spent $0.0000 of $0.0020; 5 of 5 items complete for all "
            "arms (5 started)"
        ]
    )
    # the end table: cached rows cost 0, not "-"
    result.stdout.fnmatch_lines(["demo *a *5 *0", "demo *b *5 *0"])
    assert "unknown" not in result.stdout.str()


def test_the_end_table_counts_an_arm_without_a_known_cost_as_unknown(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, sim_spec(3))
    result, _, _ = sweep.run()
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*mean wall s*spend $", "demo *good *3 *3 unknown"])


def test_arms_without_a_worst_case_are_refused_before_any_call(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI) -> None:
    exact_answers(openai_server)
    unpriced = sim_spec(3, arms=arm(openai_server, "a") + arm(openai_server, "free"),
                        extra="pricing:\n  a: {input: 0, output: 1000}\n")
    make_spec(pytester, unpriced)
    result, _, rows = sweep.run("--bench-budget-usd", "1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*arm 'free' has no worst case*no prices*budget_unpriced: allow*"])
    assert rows == [] and openai_server.requests == []

    make_spec(pytester, unpriced + "budget_unpriced: allow\n")
    result, _, rows = sweep.run("--bench-budget-usd", "1")
    assert result.ret == 0 and len(rows) == 6


def test_an_output_price_without_max_tokens_has_no_worst_case(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI) -> None:
    uncapped = arm(openai_server, "a").replace(f"    max_tokens: {WORDS}\n", "")
    make_spec(
        pytester, sim_spec(2, arms=uncapped, extra="pricing:\n  a: {input: 1, output: 1000}\n")
    )
    result, _, _ = sweep.run("--bench-budget-usd", "1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*arm 'a' has no worst case*no max_tokens*"])
    assert openai_server.requests == []


def test_a_spec_budget_per_arm_holds_that_arm_and_keeps_pairs_whole(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI) -> None:
    exact_answers(openai_server)
    arms = arm(openai_server, "a", f"    budget: {{usd: {3.5 * PER_CALL!r}}}\n") + arm(
        openai_server, "b"
    )
    make_spec(pytester, sim_spec(6, arms=arms, extra="pricing:\n  a: {input: 0, output: 1000}\n"
                                                     "  b: {input: 0, output: 1000}\n"))
    result, _, rows = sweep.run("--bench-concurrency", "3")
    assert result.ret == 2
    assert len([r for r in rows if r["arm"] == "a"]) == 3 and pairs_whole(rows)


def test_a_spec_budget_that_binds_says_to_raise_it_in_the_spec_not_the_run_budget(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI) -> None:
    exact_answers(openai_server)
    arms = arm(openai_server, "a", f"    budget: {{usd: {2.5 * PER_CALL!r}}}\n") + arm(
        openai_server, "b"
    )
    spec = make_spec(
        pytester,
        sim_spec(
            6,
            arms=arms,
            extra="pricing:\n  a: {input: 0, output: 1000}\n  b: {input: 0, output: 1000}\n",
        ),
    )
    line = next(n for n, text in enumerate(spec.read_text().splitlines(), 1) if "budget:" in text)
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 2 and len(rows) == 4
    out = result.stdout.str()
    where = f"{spec}:{line}"
    # Only a's own worst case counts against a's budget, and the budget is named with its line.
    assert (
        "this item's worst case ($0.004000) does not fit what the budget of arm demo/a "
        f"({where}) has left" in out
    )
    assert "worst case of all its arms" not in out
    result.stdout.fnmatch_lines(
        [
            f"*budget: spent $0.0160 (no run budget); arm demo/a spent $0.0080 of $0.0100;*"
            f"raise budget: usd in the spec ({where}): a larger --bench-budget-usd does not help*"
        ]
    )
    command = next(
        line.strip()
        for line in out.splitlines()
        if line.strip().startswith("pytest --bench-resume")
    )
    assert "--bench-budget-usd" not in command  # a run budget would change nothing
    marker = json.loads((pytester.path / "results.jsonl.stop.json").read_text())
    assert marker["suggested_usd"] is None and marker["binding"][0]["where"] == where


def test_the_env_variable_sets_the_budget_and_bad_values_are_usage_errors(
    pytester: pytest.Pytester,
    sweep: Sweep,
    openai_server: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exact_answers(openai_server)
    make_spec(pytester, priced_spec(openai_server, 4))
    monkeypatch.setenv("ECHO_BENCH_BUDGET_USD", repr(2.5 * PER_CALL))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 2 and len(rows) == 2
    # U+0665: an Arabic-Indic 5
    for bad in ("0", "-1", "nan", "inf", "five", "\u0665", "1e300", "1e12"):
        result, _, _ = sweep.run(
            "--bench-budget-usd", bad, "--bench-out", str(pytester.path / f"x{len(bad)}.jsonl")
        )
        assert result.ret == pytest.ExitCode.USAGE_ERROR, bad
        result.stderr.fnmatch_lines(
            ["*--bench-budget-usd must be an amount of US dollars > 0 and below 10^12*"]
        )
    monkeypatch.setenv("ECHO_BENCH_BUDGET_USD", "five")
    result, _, _ = sweep.run("--bench-out", str(pytester.path / "env.jsonl"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ECHO_BENCH_BUDGET_USD must be an amount of US dollars*'five'*"])


def test_a_tiny_budget_is_shown_with_the_digits_it_needs(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI) -> None:
    exact_answers(openai_server)
    make_spec(pytester, priced_spec(openai_server, 2))
    result, _, rows = sweep.run("--bench-budget-usd", "0.0000001")
    assert result.ret == 2 and rows == []
    result.stdout.fnmatch_lines(["*budget: spent $0.0000 of $0.00000010;*"])


@pytest.mark.parametrize("body, message", [
    ("budget: 5\n", "budget must be a mapping with one key, usd"),
    ("budget: {usd: 0}\n", "must be > 0"),
    ("budget: {usd: 1, eur: 2}\n", "budget must be a mapping with one key, usd"),
    ("budget_unpriced: yes\n", "budget_unpriced must be 'allow'"),
])
def test_budget_keys_in_a_spec_are_checked(
    pytester: pytest.Pytester, sweep: Sweep, body: str, message: str
) -> None:
    make_spec(pytester, sim_spec(2, extra=body))
    result, _, _ = sweep.run()
    assert result.ret != 0
    result.stdout.fnmatch_lines([f"*{message}*"])


def test_a_python_arm_allowed_unpriced_still_holds_each_priced_call_it_makes(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI) -> None:
    exact_answers(openai_server)
    pytester.makeconftest("""
        from pytest_echo_bench import arm

        @arm("twice")
        def twice(ctx):
            return ctx.call("a") + ctx.call("a", ctx.prompt + " again")
    """)
    spec = sim_spec(5, arms=arm(openai_server, "a") + "  py: {provider: python, function: twice}\n",
                    extra="pricing:\n  a: {input: 0, output: 1000}\nbudget_unpriced: allow\n")
    make_spec(pytester, spec)
    # Its item has no worst case, but each call it makes holds its own: 3.5 calls' worth lets one
    # item (two calls) through, and the next item's second call does not fit.
    result, _, rows = sweep.run(
        "-k", "py", "--bench-concurrency", "1", "--bench-budget-usd", repr(3.5 * PER_CALL)
    )
    assert result.ret == 2
    assert len(openai_server.requests) == 3 and [r["arm"] for r in rows] == ["py"]
    assert spent(rows) == pytest.approx(2 * PER_CALL)
    marker = json.loads((pytester.path / "results.jsonl.stop.json").read_text())
    # the half item's call was paid for all the same
    assert marker["spent_usd"] == pytest.approx(3 * PER_CALL)
    # A resume runs the half item whole again (2 calls), and the 3 items after it need at least
    # their first calls (a Python arm has no worst case: only the calls refused are known).
    assert marker["needed_usd"] == pytest.approx(5 * PER_CALL)


def test_a_shards_budget_is_its_own(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI
) -> None:
    exact_answers(openai_server)
    make_spec(pytester, priced_spec(openai_server, 20))
    budget = 6.5 * PER_CALL
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
            "4",
            "--bench-budget-usd",
            repr(budget),
        )
        assert result.ret == 2
        _, rows = read_rows(out)
        # each shard spends its own
        assert len(rows) == 6 and spent(rows) <= budget + 1e-9 and pairs_whole(rows)
    assert len(openai_server.requests) == 12


def test_the_report_shows_each_arms_spend_and_the_budget_the_stop_recorded(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI) -> None:
    from pytest_echo_bench.cli.main import main

    exact_answers(openai_server)
    make_spec(pytester, priced_spec(openai_server, 6))
    result, _, rows = sweep.run(
        "--bench-concurrency", "2", "--bench-budget-usd", repr(4.5 * PER_CALL)
    )
    assert result.ret == 2 and len(rows) == 4
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["report", str(sweep.out), "--format", "json"]) == 0
    data = json.loads(out.getvalue())
    assert {arm: data["arms"][arm]["spend_usd"] for arm in ("a", "b")} == {
        "a": pytest.approx(2 * PER_CALL),
        "b": pytest.approx(2 * PER_CALL),
    }
    assert sum(data["arms"][arm]["spend_usd"] for arm in ("a", "b")) == pytest.approx(spent(rows))
    [recorded] = data["budgets"]
    assert recorded["source"] == "stop marker" and recorded["budget_usd"] == pytest.approx(
        4.5 * PER_CALL
    )
    assert recorded["spent_usd"] == pytest.approx(4 * PER_CALL)
    # what was spent and the 8 calls not sent, up to the cent
    assert recorded["suggested_usd"] == pytest.approx(0.05)


def test_a_ledger_that_cannot_be_made_leaves_no_meta_only_file(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI) -> None:
    exact_answers(openai_server)
    make_spec(pytester, priced_spec(openai_server, 2))
    (pytester.path / "results.jsonl.budget").mkdir()  # the ledger's path is a directory
    result, _, _ = sweep.run("--bench-budget-usd", "1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--bench-budget-usd: cannot write the budget ledger*"])
    assert not sweep.out.exists() or sweep.out.stat().st_size == 0
    (pytester.path / "results.jsonl.budget").rmdir()
    # the same command, once the path is free
    result, _, rows = sweep.run("--bench-budget-usd", "1")
    assert result.ret == 0 and len(rows) == 4
