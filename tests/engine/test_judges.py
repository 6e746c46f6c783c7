"""A scorer that grades with a model: its judge's calls take an arm's path (retries, the response
cache, the run's stop), and a judge's failure is never a wrong answer.

The judge is a real OpenAI-compatible server on 127.0.0.1 (``openai_server``); the arms are the
offline simulator, so every request the server sees is a judge's.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pytest
from openai_server import OVERLOADED, FakeOpenAI

from conftest import Sweep, make_spec, sim_spec

KEY = "sk-test-judge-5be1"
FAST = "retries: {attempts: 3, backoff_s: 0.01, max_backoff_s: 0.02}\n"
# The judge sees the output and says "yes" when it holds the item's target: the "bad" arm's
# answers are wrong by the text, but the judge decides.
GRADED = """
    from pytest_echo_bench import judge, scorer

    @scorer("graded", judges=True)
    def graded(output, example, options, *, judges):
        reply = judges.ask("grader", f"Target {example.target}. Answer: {output}. Right?")
        return judge(output, example.target, reply.text.strip() == "yes")
"""


@pytest.fixture(autouse=True)
def judge_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ECHO_JUDGE_KEY", KEY)


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(answer=lambda prompt: "yes") as fake:
        yield fake


def judged_spec(base_url: str, n: int = 4, scorer: str = "graded") -> str:
    grader = (f"{{provider: openai, model: judge-1, client: http, base_url: '{base_url}', "
              "api_key_env: ECHO_JUDGE_KEY, max_tokens: 4}")
    text = sim_spec(n, extra=FAST)
    declared = f"scorer:\n  name: {scorer}\n  judges:\n    grader: {grader}\n"
    return text.replace("scorer: exact\n", declared)


def test_the_judges_reply_decides_and_a_rerun_asks_the_cache(
        pytester: pytest.Pytester, sweep: Sweep, server: FakeOpenAI) -> None:
    pytester.makeconftest(GRADED)
    make_spec(pytester, judged_spec(server.base_url))
    result, _, rows = sweep.run()
    assert result.ret == 0, result.stdout.str()
    assert len(rows) == 8 and all(r["passed"] for r in rows)  # the "bad" arm's too: judged "yes"
    asked = [r["body"] for r in server.requests]
    assert len(asked) == 8 and {b["model"] for b in asked} == {"judge-1"}
    assert all(b["max_tokens"] == 4 for b in asked)
    outputs = {r["output"] for r in rows}
    prompts = [b["messages"][-1]["content"] for b in asked]
    assert {p.split("Answer: ")[1].removesuffix(". Right?") for p in prompts} == outputs

    sweep.out = pytester.path / "again.jsonl"  # a new sweep, the same response cache
    result, _, again = sweep.run()
    assert result.ret == 0 and len(again) == 8 and all(r["passed"] for r in again)
    assert len(server.requests) == 8  # every judge call answered from the cache


def test_a_transient_error_on_the_judge_is_retried(
        pytester: pytest.Pytester, sweep: Sweep, server: FakeOpenAI) -> None:
    pytester.makeconftest(GRADED)
    make_spec(pytester, judged_spec(server.base_url, n=2))
    server.push("error", (529, OVERLOADED, {}), times=2)
    result, _, rows = sweep.run("--bench-cache", "off", "--bench-concurrency", "1")
    assert result.ret == 0, result.stdout.str()
    assert len(rows) == 4 and all(r["passed"] for r in rows)
    assert len(server.requests) == 4 + 2


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_quota_error_on_the_judge_stops_the_run_with_status_2(
        pytester: pytest.Pytester, sweep: Sweep, server: FakeOpenAI, workers: list[str]) -> None:
    pytester.makeconftest(GRADED)
    make_spec(pytester, judged_spec(server.base_url, n=6))
    server.quota_after = 2
    result, _, rows = sweep.run(*workers, "--bench-cache", "off", "--bench-concurrency", "1")
    out = result.stdout.str()
    assert result.ret == 2, out
    assert len(rows) == 2 and all(r["passed"] for r in rows)  # no row grades the judge's failure
    assert out.count("resume with:") == 1
    marker = json.loads((pytester.path / "results.jsonl.stop.json").read_text())
    assert marker["reason"] == "exhausted" and "quota" in marker["message"]
    assert marker["arm"] == "grader"


def test_a_scorer_that_swallows_the_judges_failure_does_not_grade_the_item(
        pytester: pytest.Pytester, sweep: Sweep, server: FakeOpenAI) -> None:
    """A refused judge prompt leaves the item unjudged (its answer kept, never wrong), and a quota
    error stops the run, even when the scorer catches them and says "wrong". The judge's key,
    quoted back, is never shown."""
    pytester.makeconftest("""
        from pytest_echo_bench import Verdict, scorer

        @scorer("careless", judges=True)
        def careless(output, example, options, *, judges):
            try:
                judges.ask("grader", output)
            except Exception:
                return Verdict("wrong", output, "the judge could not say")
            return Verdict("correct", output, "passed")
    """)
    make_spec(pytester, judged_spec(server.base_url, n=3, scorer="careless"))
    quoted = {"message": f"The key {KEY} may not send this", "type": "invalid_request_error",
              "code": "invalid_prompt"}
    server.push("error", (400, quoted, {}))
    result, _, rows = sweep.run("--bench-cache", "off", "--bench-concurrency", "1")
    assert result.ret == 0, result.stdout.str()  # the sweep is complete; the unjudged test fails
    result.assert_outcomes(passed=5, failed=1)
    unjudged = [r for r in rows if r["status"] == "unjudged"]
    assert len(rows) == 6 and len(unjudged) == 1 and not any(r["status"] == "wrong" for r in rows)
    assert unjudged[0]["detail"].startswith("unjudged: judge grader: HTTP 400 ")
    assert unjudged[0]["output"] and unjudged[0]["passed"] is False
    assert KEY[4:12] not in sweep.out.read_text() + result.stdout.str()

    server.quota_after = 0
    sweep.out = pytester.path / "quota.jsonl"
    result, _, rows = sweep.run("--bench-cache", "off", "--bench-concurrency", "1")
    assert result.ret == 2 and rows == []


def test_a_judge_that_cannot_work_here_stops_the_arms_it_grades(
        pytester: pytest.Pytester, sweep: Sweep, server: FakeOpenAI,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ECHO_JUDGE_KEY")
    pytester.makeconftest(GRADED)
    make_spec(pytester, judged_spec(server.base_url, n=3))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 2 and rows == [] and server.requests == []
    result.stdout.fnmatch_lines(["*needs an API key: set the environment variable ECHO_JUDGE_KEY*"])


def test_judges_are_checked_with_the_spec(pytester: pytest.Pytester, sweep: Sweep) -> None:
    pytester.makeconftest(GRADED)
    nowhere = "http://127.0.0.1:9/v1"
    make_spec(pytester, judged_spec(nowhere).replace("max_tokens: 4", "max_tokns: 4"))
    result, _, rows = sweep.run()
    assert result.ret != 0 and rows == []
    result.stdout.fnmatch_lines(["*unknown openai option 'max_tokns'*"])
    make_spec(pytester, judged_spec(nowhere).replace("grader:", "good:"))
    result, _, _ = sweep.run()
    result.stdout.fnmatch_lines(["*judge 'good' has the name of an arm*"])


def test_a_scorer_without_judges_keeps_its_three_arguments() -> None:
    from pytest_echo_bench.scoring.registry import get_scorer, scorer, takes_judges
    from pytest_echo_bench.scoring.verdict import Verdict

    @scorer("plain-three")
    def plain(output: str, example: object, options: dict[str, object]) -> Verdict:
        return Verdict("correct", output, "passed")

    assert get_scorer("plain-three") is plain and not takes_judges("plain-three")
    assert not takes_judges("exact")
    scorer("plain-three", judges=True)(plain)
    assert takes_judges("plain-three")
    scorer("plain-three")(plain)  # registered again without judges: called without them
    assert not takes_judges("plain-three")


def test_regrade_refuses_a_scorer_that_asks_a_judge(
        pytester: pytest.Pytester, sweep: Sweep, server: FakeOpenAI) -> None:
    """Regrading calls no model: a judged scorer would raise a TypeError there, shown as a bug."""
    pytester.makeconftest(GRADED)
    make_spec(pytester, judged_spec(server.base_url, n=2))
    result, _, rows = sweep.run()
    assert result.ret == 0 and len(rows) == 4
    out = pytester.path / "regraded.jsonl"
    done = pytester.run(
        sys.executable,
        "-c",
        "import sys; from pytest_echo_bench.cli.main import main; "
        f"sys.exit(main(['regrade', {str(sweep.out)!r}, '-o', {str(out)!r}]))",
    )
    text = done.stdout.str() + done.stderr.str()
    assert done.ret != 0 and "internal error" not in text and not out.exists()
    assert "asks a judge model, and echo-bench regrade calls none" in text


def test_a_python_arm_cannot_extract_an_answer_with_a_judged_scorer(
        pytester: pytest.Pytester, sweep: Sweep, server: FakeOpenAI) -> None:
    pytester.makeconftest(GRADED + """
    from pytest_echo_bench import arm

    @arm("extracts")
    def extracts(ctx):
        return str(ctx.answer("4"))
""")
    sims = "  good: {provider: sim, accuracy: 1.0}\n  bad: {provider: sim, accuracy: 0.0}\n"
    spec = judged_spec(server.base_url, n=2)
    assert sims in spec
    make_spec(pytester, spec.replace(sims, "  py: {provider: python, function: extracts}\n"))
    result, _, rows = sweep.run()
    assert len(rows) == 2 and all(r["status"] == "error" for r in rows), result.stdout.str()
    assert all("cannot grade with a scorer that asks a judge model" in r["detail"] for r in rows)
    assert server.requests == []  # nothing was asked behind the arm's back


def test_a_routing_arm_that_grades_with_the_scorer_refuses_a_judged_one(
        pytester: pytest.Pytester, sweep: Sweep) -> None:
    """An oracle grades each cheap answer with the scorer: a judged scorer is refused at once,
    naming the arm, instead of failing every item."""
    rubric = ("scorer:\n  name: model_graded\n  judge: grader\n"
              "  template: 'Rate {answer} as [[n]]'\n"
              "  grade: {pattern: '\\[\\[(\\d+)\\]\\]', scale: [1, 10], pass_at: 7}\n")
    arms = ("  cheap: {provider: sim, accuracy: 0.5}\n  strong: {provider: sim, accuracy: 1.0}\n"
            "  oracle: {provider: oracle, cheap: [cheap], strong: strong}")
    spec = sim_spec(2, arms=arms).replace("scorer: exact\n", rubric)
    make_spec(pytester, spec + "judges:\n  grader: {provider: sim, accuracy: 1.0}\n")
    result, _, rows = sweep.run()
    assert result.ret != 0 and rows == []
    result.stdout.fnmatch_lines(["*arm 'oracle' grades each cheap answer with the scorer, and "
                                 "model_graded asks a judge model*"])
