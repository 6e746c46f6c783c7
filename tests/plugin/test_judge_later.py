"""``--bench-judge later``: a sweep records the outputs of a judged scorer's items and calls no
judge (each row ``unjudged``, saying how to judge it); a scorer that asks no judge grades as
always; the option's value is checked wherever it comes from."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from openai_server import FakeOpenAI

from conftest import Sweep, inline_items, make_spec, sim_spec

JUDGED = """benchmark: demo
dataset:
  loader: inline
  items:
{items}
arms:
  good: {{provider: sim, accuracy: 1.0}}
  bad: {{provider: sim, accuracy: 0.0}}
judges:
  grader: {{provider: openai, model: judge-1, client: http, base_url: '{url}',
            api_key_env: ECHO_JUDGE_KEY, max_tokens: 8}}
scorer:
  name: model_graded
  judge: grader
  template: 'Q: {{question}} A: {{answer}} Rate it as [[n]].'
  grade: {{pattern: '\\[\\[(\\d+)\\]\\]', scale: [0, 10], pass_at: 5}}
"""


@pytest.fixture
def judge(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    monkeypatch.setenv("ECHO_JUDGE_KEY", "sk-test-judge-3a9e")
    with FakeOpenAI(answer=lambda prompt: "[[8]]") as server:
        yield server


@pytest.mark.parametrize("how", ["flag", "env", "ini"])
def test_later_records_the_outputs_unjudged_and_calls_no_judge(
        pytester: pytest.Pytester, sweep: Sweep, judge: FakeOpenAI,
        monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    spec = make_spec(pytester, JUDGED.format(items=inline_items(3), url=judge.base_url))
    args = ["--bench-judge", "later"] if how == "flag" else []
    if how == "env":
        monkeypatch.setenv("ECHO_BENCH_JUDGE", "later")
    if how == "ini":
        pytester.makeini("[pytest]\nbench_judge = later\n")
    result, _, rows = sweep.run(*args)
    out = result.stdout.str()
    assert "judging deferred (--bench-judge later)" in out
    assert f"echo-bench judge {sweep.out} --spec {spec}" in out
    assert not judge.requests
    assert len(rows) == 6 and {r["status"] for r in rows} == {"unjudged"}
    assert {r["detail"] for r in rows} == {f"judging deferred: echo-bench judge {sweep.out} "
                                           f"--spec {spec}"}
    assert all(r["output"] and "score" not in r and "judgments" not in r for r in rows)


def test_now_is_the_default_and_judges_as_the_sweep_goes(
        pytester: pytest.Pytester, sweep: Sweep, judge: FakeOpenAI) -> None:
    make_spec(pytester, JUDGED.format(items=inline_items(3), url=judge.base_url))
    result, _, rows = sweep.run()
    assert "judging deferred" not in result.stdout.str()
    assert len(judge.requests) == 6 and {r["status"] for r in rows} == {"correct"}


def test_a_scorer_that_asks_no_judge_grades_as_always(
        pytester: pytest.Pytester, sweep: Sweep) -> None:
    make_spec(pytester, sim_spec(3))
    result, _, now = sweep.run("--bench-cache", "off")
    sweep.out = pytester.path / "later.jsonl"
    result, _, later = sweep.run("--bench-judge", "later", "--bench-cache", "off")
    assert "no scorer of this run asks a judge" in result.stdout.str()
    fields = ("task_id", "arm", "passed", "detail", "status", "answer", "output")
    assert [[r[f] for f in fields] for r in later] == [[r[f] for f in fields] for r in now]


@pytest.mark.parametrize(("args", "env", "said"), [
    (["--bench-judge", "never"], None, "argument --bench-judge: invalid choice: 'never'"),
    ([], "sometimes", "ECHO_BENCH_JUDGE must be one of now, later, got 'sometimes'"),
])
def test_a_value_other_than_now_or_later_is_refused_naming_where_it_came_from(
        pytester: pytest.Pytester, sweep: Sweep, monkeypatch: pytest.MonkeyPatch,
        args: list[str], env: str | None, said: str) -> None:
    make_spec(pytester, sim_spec(2))
    if env is not None:
        monkeypatch.setenv("ECHO_BENCH_JUDGE", env)
    result, _, _ = sweep.run(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert said in result.stderr.str()


def test_a_deferred_sweep_records_it_and_its_resume_keeps_judging_deferred(
        pytester: pytest.Pytester, sweep: Sweep, judge: FakeOpenAI, api_key: None) -> None:
    with FakeOpenAI(answer=lambda prompt: "4") as arms:
        arm = (f"{{provider: openai, model: m, client: http, base_url: '{arms.base_url}', "
               "api_key_env: TEST_OPENAI_KEY}")
        text = JUDGED.format(items=inline_items(4), url=judge.base_url)
        make_spec(pytester, text.replace("{provider: sim, accuracy: 1.0}", arm))
        arms.quota_after = 2
        result, meta, rows = sweep.run("--bench-judge", "later", "--bench-cache", "off",
                                       "--bench-concurrency", "1")
        assert result.ret == 2 and not judge.requests
        assert meta is not None and meta["options"]["judge"] == "later"
        command = result.stdout.str().split("resume with:")[1].split("\n", 2)[1]
        # the meta line holds it: the printed command needs no flag for it
        assert command.strip().startswith("pytest --bench-resume")
        assert "--bench-judge" not in command
        arms.quota_after = None
        # a resume typed by hand, without the flag: the outputs stay deferred, no judge asked
        result, _, rows = sweep.run("--bench-resume", str(sweep.out))
        assert result.ret == 0, result.stdout.str()[-2000:]
        assert "judging deferred (--bench-judge later)" in result.stdout.str()
        assert not judge.requests and len(rows) == 8
        assert {r["status"] for r in rows} == {"unjudged"}


def test_a_resume_that_asks_to_judge_now_judges_and_says_it_overrides_the_record(
        pytester: pytest.Pytester, sweep: Sweep, judge: FakeOpenAI) -> None:
    make_spec(pytester, JUDGED.format(items=inline_items(3), url=judge.base_url))
    result, _, _ = sweep.run("--bench-judge", "later")
    assert result.ret == 0 and not judge.requests
    result, _, rows = sweep.run("--bench-resume", str(sweep.out), "--bench-retry-errors",
                                "--bench-judge", "now")
    assert result.ret == 0, result.stdout.str()[-2000:]
    assert "--bench-judge now overrides the later this sweep's meta line records" in \
        result.stdout.str()
    assert len(judge.requests) == 6  # each deferred row run again and judged
    assert sorted(r["status"] for r in rows) == ["correct"] * 6 + ["unjudged"] * 6


def test_a_meta_line_whose_judge_option_no_run_writes_is_refused_on_resume(
        pytester: pytest.Pytester, sweep: Sweep) -> None:
    make_spec(pytester, sim_spec(2))
    sweep.run("-k", "q0")
    lines = sweep.out.read_text().splitlines()
    meta = json.loads(lines[0])
    meta["options"]["judge"] = "sometime"
    sweep.out.write_text("\n".join([json.dumps(meta), *lines[1:]]) + "\n")
    result, _, _ = sweep.run("--bench-resume", str(sweep.out))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "give judge 'sometime', not \"now\" or \"later\"" in result.stderr.str()
