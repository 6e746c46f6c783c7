"""A judged sweep under --bench-budget-usd, against two real loopback OpenAI servers: one serves the
arms, the other the judge a user's scorer asks.

Both servers count words as tokens: with prices on output only, an answer of exactly
``max_tokens`` words costs exactly its call's worst case, so a run that spent one call beyond its
budget would show it in the rows' charges.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from openai_server import FakeOpenAI

from conftest import Sweep, make_spec, sim_spec

WORDS = 4  # the judge's max_tokens, and the words of each of its replies
PER_JUDGE_CALL = WORDS * 1000.0 / 1e6  # output at 1000 USD per million tokens
# The judge's reply starts with its verdict; the arms' answers say "4", the target.
GRADED = """
    from pytest_echo_bench import judge, scorer

    @scorer("graded", judges=True)
    def graded(output, example, options, *, judges):
        reply = judges.ask("grader", f"Target {example.target}. Answer: {output}. Right?")
        return judge(output, example.target, reply.text.startswith("yes"))
"""

pytestmark = pytest.mark.usefixtures("api_key")


@pytest.fixture
def judge_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(answer=lambda prompt: " ".join(["yes"] * WORDS)) as fake:
        yield fake


def judged_spec(arms: FakeOpenAI, judge: FakeOpenAI, n: int, judge_prices: str | None,
                judge_cap: str = f"max_tokens: {WORDS}, ") -> str:
    """Two free arms on ``arms``' server (their calls cost nothing: the judge's spend is the
    run's) and a judge ``grader`` on ``judge``'s."""
    arm = ("{{provider: openai, model: m-{0}, base_url: '" + arms.base_url + "', "
           "api_key_env: TEST_OPENAI_KEY, max_tokens: 2}}")
    grader = (f"{{provider: openai, model: judge-1, base_url: '{judge.base_url}', "
              f"{judge_cap}api_key_env: TEST_OPENAI_KEY}}")
    prices = "  a: {input: 0, output: 0}\n  b: {input: 0, output: 0}\n"
    if judge_prices is not None:
        prices += f"  grader: {judge_prices}\n"
    text = sim_spec(n, arms=f"  a: {arm.format('a')}\n  b: {arm.format('b')}",
                    extra=f"retries: {{attempts: 2, backoff_s: 0.01}}\npricing:\n{prices}")
    return text.replace("scorer: exact\n", f"scorer: graded\njudges:\n  grader: {grader}\n")


def test_a_judge_without_prices_is_refused_before_any_call(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI,
        judge_server: FakeOpenAI) -> None:
    pytester.makeconftest(GRADED)
    make_spec(pytester, judged_spec(openai_server, judge_server, 3, None))
    result, _, rows = sweep.run("--bench-budget-usd", "1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*judge 'grader' has no worst case*no prices*add pricing: "
                                 "{grader: {input: .., output: ..}}*budget_unpriced: allow*"])
    assert rows == [] and openai_server.requests == [] and judge_server.requests == []
    # Without a budget, or with its calls allowed unreserved, it runs.
    result, _, rows = sweep.run()
    assert result.ret == 0 and len(rows) == 6
    spec = judged_spec(openai_server, judge_server, 3, None) + "budget_unpriced: allow\n"
    make_spec(pytester, spec)
    sweep.out = pytester.path / "allowed.jsonl"
    result, _, rows = sweep.run("--bench-budget-usd", "1")
    assert result.ret == 0 and len(rows) == 6


def test_a_judge_priced_on_output_without_max_tokens_is_refused(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI,
        judge_server: FakeOpenAI) -> None:
    pytester.makeconftest(GRADED)
    spec = judged_spec(openai_server, judge_server, 2, "{input: 0, output: 1000}", judge_cap="")
    make_spec(pytester, spec)
    result, _, rows = sweep.run("--bench-budget-usd", "1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*judge 'grader' has no worst case*no max_tokens*"
                                 "add max_tokens to judge 'grader'*"])
    assert rows == [] and judge_server.requests == []


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_judged_sweep_stops_at_its_budget_with_the_judges_spend_counted(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI,
        judge_server: FakeOpenAI, workers: list[str]) -> None:
    """Each item's hold is its judge's worst case (its arm is free): the budget fits 4.5 judge
    calls, so four items run, the fifth is refused before its arm is asked, and the run stops."""
    pytester.makeconftest(GRADED)
    make_spec(pytester, judged_spec(openai_server, judge_server, 6, "{input: 0, output: 1000}"))
    budget = 4.5 * PER_JUDGE_CALL
    result, _, rows = sweep.run(*workers, "--bench-budget-usd", repr(budget),
                                "--bench-cache", "off", "--bench-concurrency", "1")
    out = result.stdout.str()
    assert result.ret == 2, out
    assert len(rows) == 4 and all(r["passed"] for r in rows)
    # Every item the budget let start was judged: no arm answered for an item left unjudged.
    assert len(openai_server.requests) == len(judge_server.requests) == 4
    charged = [r["charged_usd"] for r in rows]
    assert charged == [pytest.approx(PER_JUDGE_CALL)] * 4  # the judge's call, the arm's free
    assert all(r["cost_usd"] == 0 for r in rows)  # the arm's own cost stays apart
    assert sum(charged) <= budget
    result.stdout.fnmatch_lines(["*budget: spent $0.0160 of $0.0180*"])
    assert "resume with:" in out


def test_judges_asked_later_hold_nothing_of_the_sweep_s_budget(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI,
        judge_server: FakeOpenAI) -> None:
    """Under ``--bench-judge later`` no judge is asked in the sweep: its items hold only their
    arms' worst cases (free here), so a budget smaller than one judge call runs every item, each
    recorded unjudged, and spends nothing."""
    pytester.makeconftest(GRADED)
    make_spec(pytester, judged_spec(openai_server, judge_server, 3, "{input: 0, output: 1000}"))
    result, _, rows = sweep.run("--bench-budget-usd", repr(PER_JUDGE_CALL / 2),
                                "--bench-judge", "later", "--bench-cache", "off")
    out = result.stdout.str()
    assert len(rows) == 6 and {r["status"] for r in rows} == {"unjudged"}, out
    assert judge_server.requests == [] and len(openai_server.requests) == 6
    assert "resume with:" not in out


@pytest.mark.parametrize("scorer", ["graded", "{name: pairwise, judge: grader, against: a}"])
def test_a_judge_not_asked_in_the_sweep_needs_no_prices_there(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI,
        judge_server: FakeOpenAI, scorer: str) -> None:
    """A judge without prices blocks a budgeted sweep only when the sweep asks it: deferred, or
    ``pairwise``, it is checked when ``echo-bench judge`` asks it."""
    pytester.makeconftest(GRADED)
    spec = judged_spec(openai_server, judge_server, 2, None)
    make_spec(pytester, spec.replace("scorer: graded\n", f"scorer: {scorer}\n"))
    later = ["--bench-judge", "later"] if scorer == "graded" else []
    result, _, rows = sweep.run("--bench-budget-usd", "1", *later)
    assert len(rows) == 4 and {r["status"] for r in rows} == {"unjudged"}, result.stdout.str()
    assert judge_server.requests == []


def test_a_live_pairwise_item_holds_no_judge_call(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI,
        judge_server: FakeOpenAI) -> None:
    """``pairwise`` is judged from a results file (``echo-bench judge``), never in the sweep: its
    two judge calls per item are not held there either."""
    spec = judged_spec(openai_server, judge_server, 3, "{input: 0, output: 1000}")
    make_spec(pytester, spec.replace("scorer: graded\n", "scorer: {name: pairwise, judge: grader, "
                                                         "against: a}\n"))
    result, _, rows = sweep.run("--bench-budget-usd", repr(PER_JUDGE_CALL / 2),
                                "--bench-cache", "off")
    out = result.stdout.str()
    assert len(rows) == 6 and {r["status"] for r in rows} == {"unjudged"}, out
    assert judge_server.requests == []
