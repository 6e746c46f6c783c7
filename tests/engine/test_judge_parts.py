"""A judge's quota running out mid-sweep, with real parts: the arm and the judge are two real
OpenAI-compatible servers on 127.0.0.1, so each sees only its own calls.

The run stops with status 2 and the resume command; the resume (the quota back) finishes the
sweep, and the arm's server never sees a second call for an answer it already gave: the
response cache (on by default) answers the arm again for an item whose judge ran out.
"""

from __future__ import annotations

import json
import shlex
from collections import Counter
from collections.abc import Iterator

import pytest
from openai_server import FakeOpenAI

from conftest import Sweep, make_spec

GRADE = r"{pattern: '\[\[(\d+)\]\]', scale: [1, 10], pass_at: 7}"


@pytest.fixture(autouse=True)
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARM_KEY", "sk-test-arm-0c41")
    monkeypatch.setenv("JUDGE_KEY", "sk-test-judge-77d0")


@pytest.fixture
def arm_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(answer=lambda prompt: "4") as fake:
        yield fake


@pytest.fixture
def judge_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(answer=lambda prompt: "Right. [[9]]") as fake:
        yield fake


def openai(base_url: str, model: str, key: str) -> str:
    return (f"{{provider: openai, model: {model}, client: http, base_url: '{base_url}', "
            f"api_key_env: {key}, max_tokens: 16}}")


def quota_spec(arm_url: str, judge_url: str, n: int) -> str:
    items = "\n".join(f'    - {{id: q{i}, input: "What is 2+2? ({i})", target: "4"}}'
                      for i in range(n))
    return (f"benchmark: quota\ndataset:\n  loader: inline\n  items:\n{items}\n"
            "scorer: {name: model_graded, judge: grader, template: 'Q: {question} A: {answer}', "
            f"grade: {GRADE}}}\n"
            f"arms:\n  asked: {openai(arm_url, 'arm-1', 'ARM_KEY')}\n"
            f"judges:\n  grader: {openai(judge_url, 'judge-1', 'JUDGE_KEY')}\n"
            "retries: {attempts: 2, backoff_s: 0.01, max_backoff_s: 0.02}\n")


def resume_args(out: str) -> list[str]:
    """The arguments of the one resume command the run printed (after ``pytest``)."""
    lines = out.splitlines()
    [at] = [i for i, line in enumerate(lines) if line.rstrip().endswith("resume with:")]
    command = shlex.split(lines[at + 1])
    assert command[0] == "pytest"
    return command[1:]


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_judge_out_of_quota_stops_the_sweep_and_the_resume_asks_no_arm_again(
        pytester: pytest.Pytester, sweep: Sweep, arm_server: FakeOpenAI,
        judge_server: FakeOpenAI, workers: list[str]) -> None:
    n = 8
    make_spec(pytester, quota_spec(arm_server.base_url, judge_server.base_url, n))
    judge_server.quota_after = 3
    result, _, rows = sweep.run(*workers, "--bench-concurrency", "1")
    out = result.stdout.str()
    assert result.ret == 2, out
    assert 1 <= len(rows) <= 3 and all(r["status"] == "correct" for r in rows)  # no judge's failure
    marker = json.loads((pytester.path / "results.jsonl.stop.json").read_text())
    assert marker["reason"] == "exhausted" and marker["arm"] == "grader"
    answered = len(arm_server.requests)
    assert answered > len(rows)  # an answer was obtained for an item its judge could not grade

    judge_server.quota_after = None  # the quota is back
    args = resume_args(out)
    assert args[:2] == ["--bench-resume", str(sweep.out)]
    result, _, rows = sweep.run(*workers, *args)
    assert result.ret == 0, result.stdout.str()
    keys = Counter((r["task_id"], r["arm"]) for r in rows)
    assert len(keys) == n and set(keys.values()) == {1}  # every key in the file, once
    assert all(r["status"] == "correct" and r["score"] == 9.0 for r in rows)
    asked = Counter(r["body"]["messages"][-1]["content"] for r in arm_server.requests)
    assert len(asked) == n and set(asked.values()) == {1}, asked  # no item's answer asked twice
    assert judge_server.served == n  # each item graded once: the quota's refusals aside


def test_a_reply_without_a_grade_leaves_the_response_cache(
        pytester: pytest.Pytester, sweep: Sweep, arm_server: FakeOpenAI,
        judge_server: FakeOpenAI) -> None:
    """The cache answers the arm again, and the judges that graded, but not a judge whose reply
    held no grade: it is asked again, else its item could never be graded."""
    n = 4
    make_spec(pytester, quota_spec(arm_server.base_url, judge_server.base_url, n))
    judge_server.answer = lambda prompt: ("I cannot say." if "(1)" in prompt or "(3)" in prompt
                                          else "Right. [[9]]")
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 0, result.stdout.str()
    status = {r["task_id"]: r["status"] for r in rows}
    assert status == {"q0": "correct", "q1": "unjudged", "q2": "correct", "q3": "unjudged"}
    assert len(judge_server.requests) == n

    judge_server.answer = lambda prompt: "Better now. [[8]]"
    sweep.out = pytester.path / "again.jsonl"  # a new sweep, the same response cache
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 0, result.stdout.str()
    assert {r["task_id"]: r["score"] for r in rows} == {"q0": 9.0, "q1": 8.0, "q2": 9.0, "q3": 8.0}
    cached = {r["task_id"]: r["judgments"][0].get("cached", False) for r in rows}
    assert cached == {"q0": True, "q1": False, "q2": True, "q3": False}
    assert len(judge_server.requests) == n + 2  # only the two ungraded items asked again
    assert len(arm_server.requests) == n  # every answer from the cache


def test_retry_errors_grades_the_unjudged_rows_again_without_asking_the_arm(
        pytester: pytest.Pytester, sweep: Sweep, arm_server: FakeOpenAI,
        judge_server: FakeOpenAI) -> None:
    """A reply without a grade leaves its item unjudged; a resume with --bench-retry-errors
    grades it again, asking the judge anew (the response cache answers the arm), and leaves the
    graded ones alone."""
    n = 4
    make_spec(pytester, quota_spec(arm_server.base_url, judge_server.base_url, n))
    judge_server.answer = lambda prompt: ("I cannot say." if "(1)" in prompt or "(3)" in prompt
                                          else "Right. [[9]]")
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 0, result.stdout.str()
    status = {r["task_id"]: r["status"] for r in rows}
    assert status == {"q0": "correct", "q1": "unjudged", "q2": "correct", "q3": "unjudged"}

    judge_server.answer = lambda prompt: "Better now. [[8]]"
    result, _, rows = sweep.run("--bench-resume", str(sweep.out), "--bench-retry-errors")
    assert result.ret == 0, result.stdout.str()
    newest = {r["task_id"]: r for r in rows}  # the newest row of each key
    assert {k: (r["status"], r.get("score")) for k, r in newest.items()} == {
        "q0": ("correct", 9.0), "q1": ("correct", 8.0), "q2": ("correct", 9.0),
        "q3": ("correct", 8.0)}
    assert len(rows) == n + 2  # two items graded again, the others left alone
    assert len(judge_server.requests) == n + 2
    asked = Counter(r["body"]["messages"][-1]["content"] for r in arm_server.requests)
    assert len(asked) == n and set(asked.values()) == {1}  # the answers came from the cache
