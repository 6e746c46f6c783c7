"""The judging stage: a sweep recorded with ``--bench-judge later`` graded by ``echo-bench judge``
from its stored outputs, calling no arm; resumed by key, cached, budgeted, stopped by a judge's
quota, killed and run again.

The arms and the judge are two real OpenAI-compatible servers on 127.0.0.1 (``openai_server``):
the arms' server shows that the stage calls no arm, the judge's what each pass asked.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai_server import FakeOpenAI
from processes import rows_in, wait_for

from conftest import Sweep, inline_items, make_spec, read_rows
from pytest_echo_bench.cli.main import main
from pytest_echo_bench.results.ending import collection
from pytest_echo_bench.store.owner import Ownership

JUDGE_KEY = "sk-test-judge-77c1"
TEMPLATE = "Question: {question} Answer: {answer} Reference: {reference}. Rate it as [[n]]."


@pytest.fixture(autouse=True)
def keys(monkeypatch: pytest.MonkeyPatch, api_key: None) -> None:
    monkeypatch.setenv("ECHO_JUDGE_KEY", JUDGE_KEY)


def answer(prompt: str) -> str:
    """Even items answered right ("4"), odd ones wrong ("5"); arm b (asked "B: ...") says so."""
    return ("5" if int(prompt[-2]) % 2 else "4") + (" (b)" if prompt.startswith("B: ") else "")


@pytest.fixture
def arms() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(answer=answer) as server:
        yield server


@pytest.fixture
def judge() -> Iterator[FakeOpenAI]:
    """A judge that rates a right answer 9 and a wrong one 2."""
    with FakeOpenAI(answer=lambda prompt: "[[9]]" if "Answer: 4 " in prompt else "[[2]]") as srv:
        yield srv


def spec_text(arms_url: str, judge_url: str, n: int = 4, template: str = TEMPLATE,
              extra: str = "") -> str:
    arm = "{{provider: openai, model: {m}, client: http, base_url: '{u}', api_key_env: {k}}}"
    grader = arm.format(m="judge-1", u=judge_url, k="ECHO_JUDGE_KEY")[:-1] + ", max_tokens: 8}"
    return (
        f"benchmark: demo\ndataset:\n  loader: inline\n  items:\n{inline_items(n)}\n"
        f"arms:\n  a: {arm.format(m='arm-a', u=arms_url, k='TEST_OPENAI_KEY')}\n"
        f"  b: {arm.format(m='arm-b', u=arms_url, k='TEST_OPENAI_KEY')[:-1]}, "
        "prompt: 'B: {input}'}\n"
        f"judges:\n  grader: {grader}\n"
        f"scorer:\n  name: model_graded\n  judge: grader\n  template: '{template}'\n"
        "  grade: {pattern: '\\[\\[(\\d+)\\]\\]', scale: [0, 10], pass_at: 5}\n"
        "retries: {attempts: 3, backoff_s: 0.01, max_backoff_s: 0.02}\n" + extra
    )


def deferred(pytester: pytest.Pytester, sweep: Sweep, arms: FakeOpenAI, judge: FakeOpenAI,
             n: int = 4, extra: str = "") -> Path:
    """A sweep recorded with --bench-judge later: its spec."""
    spec = make_spec(pytester, spec_text(arms.base_url, judge.base_url, n, extra=extra))
    result, _, rows = sweep.run("--bench-judge", "later", "--bench-cache", "off")
    assert result.ret == 0, result.stdout.str()
    assert len(rows) == 2 * n and {r["status"] for r in rows} == {"unjudged"}
    assert not judge.requests
    return spec


def judged(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """The newest row of each key of a judged file."""
    return {(r["task_id"], r["arm"]): r for r in read_rows(path)[1]}


def test_a_deferred_sweep_is_judged_from_its_outputs_and_a_second_pass_asks_nothing(
        pytester: pytest.Pytester, sweep: Sweep, arms: FakeOpenAI, judge: FakeOpenAI,
        capsys: pytest.CaptureFixture[str]) -> None:
    spec = deferred(pytester, sweep, arms, judge)
    _, rows = read_rows(sweep.out)
    said = f"judging deferred: echo-bench judge {sweep.out} --spec {spec}"
    assert {r["detail"] for r in rows} == {said}
    arm_calls = len(arms.requests)

    assert main(["judge", str(sweep.out), "--spec", str(spec)]) == 0
    out = pytester.path / "results.judged.jsonl"
    assert len(arms.requests) == arm_calls  # no arm is called
    assert len(judge.requests) == 8
    meta, new = read_rows(out)
    assert meta is not None
    source = read_rows(sweep.out)[0]
    assert source is not None
    assert meta["judged_from"] == [{"file": str(sweep.out), "run_id": source["run_id"],
                                    "fingerprint": source["fingerprint"]}]
    assert set(meta["judge_fingerprint"]) == {"demo"}
    assert len(new) == 8
    for row in new:
        right = int(row["task_id"][1:]) % 2 == 0
        assert (row["status"], row["score"], row["passed"]) == (
            ("correct", 9.0, True) if right else ("wrong", 2.0, False))
        assert [j["judge"] for j in row["judgments"]] == ["grader"]
        assert row["output"] == ("4" if right else "5") + (" (b)" if row["arm"] == "b" else "")
    printed = capsys.readouterr().out
    assert "8 judged, 0 unjudged" in printed

    before = out.read_bytes()
    assert main(["judge", str(sweep.out), "--spec", str(spec)]) == 0
    assert len(judge.requests) == 8 and out.read_bytes() == before  # nothing asked, nothing added
    assert "8 skipped as already judged" in capsys.readouterr().out


def test_a_changed_rubric_is_refused_on_the_same_output_and_judged_into_a_new_one(
        pytester: pytest.Pytester, sweep: Sweep, arms: FakeOpenAI, judge: FakeOpenAI,
        capsys: pytest.CaptureFixture[str]) -> None:
    spec = deferred(pytester, sweep, arms, judge)
    out = pytester.path / "judged.jsonl"
    assert main(["judge", str(sweep.out), "--spec", str(spec), "-o", str(out)]) == 0
    before = out.read_bytes()
    spec.write_text(spec.read_text().replace("Rate it", "Grade it"))
    capsys.readouterr()
    assert main(["judge", str(sweep.out), "--spec", str(spec), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "another scorer or judges" in err and "give a new -o" in err
    assert out.read_bytes() == before
    again = pytester.path / "judged-2.jsonl"
    assert main(["judge", str(sweep.out), "--spec", str(spec), "-o", str(again)]) == 0
    assert len(judge.requests) == 16 and len(judged(again)) == 8


def test_a_spec_whose_arms_differ_from_the_files_is_refused(
        pytester: pytest.Pytester, sweep: Sweep, arms: FakeOpenAI, judge: FakeOpenAI,
        capsys: pytest.CaptureFixture[str]) -> None:
    spec = deferred(pytester, sweep, arms, judge)
    spec.write_text(spec.read_text().replace("model: arm-b", "model: arm-c"))
    assert main(["judge", str(sweep.out), "--spec", str(spec)]) == 2
    assert "came from other models" in capsys.readouterr().err
    assert not (pytester.path / "results.judged.jsonl").exists() and not judge.requests


def test_a_judge_out_of_quota_stops_the_pass_and_the_printed_command_resumes_it(
        pytester: pytest.Pytester, sweep: Sweep, arms: FakeOpenAI, judge: FakeOpenAI,
        capsys: pytest.CaptureFixture[str]) -> None:
    spec = deferred(pytester, sweep, arms, judge)
    judge.quota_after = 3
    assert main(["judge", str(sweep.out), "--spec", str(spec), "-j", "1"]) == 2
    out = pytester.path / "results.judged.jsonl"
    printed = capsys.readouterr()
    assert "provider exhausted" in printed.err and "judge grader" in printed.err
    assert len(read_rows(out)[1]) == 3
    assert collection([out]).reason == "exhausted"  # the report says the judged rows stop short
    command = printed.out.split("resume with: ")[1].strip()
    argv = shlex.split(command)
    assert argv[:2] == ["echo-bench", "judge"] and "-o" in argv and "-j" in argv
    judge.quota_after = None
    asked = len(judge.requests)
    assert main(argv[1:]) == 0
    assert len(judge.requests) == asked + 5  # the three judged before are not asked again
    rows = read_rows(out)[1]
    assert len(rows) == 8 and len(judged(out)) == 8
    assert not collection([out]).early


def test_a_judge_without_its_key_stops_the_pass_at_once_naming_it(
        pytester: pytest.Pytester, sweep: Sweep, arms: FakeOpenAI, judge: FakeOpenAI,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    spec = deferred(pytester, sweep, arms, judge)
    monkeypatch.delenv("ECHO_JUDGE_KEY")
    assert main(["judge", str(sweep.out), "--spec", str(spec)]) == 2
    printed = capsys.readouterr()
    assert "judge 'grader' cannot work here" in printed.err
    assert "ECHO_JUDGE_KEY" in printed.err and "resume with:" in printed.out
    assert not judge.requests and read_rows(pytester.path / "results.judged.jsonl")[1] == []


def test_the_retry_of_unjudged_rows_asks_again_a_judge_whose_reply_held_no_grade(
        pytester: pytest.Pytester, sweep: Sweep, arms: FakeOpenAI, judge: FakeOpenAI,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The response cache is on (its default beside the output), yet a reply that held no grade
    is not read back from it: the retry asks the judge again and grades the row."""
    spec = deferred(pytester, sweep, arms, judge)
    undecided = {"on": True}
    graded = judge.answer
    judge.answer = lambda prompt: ("I cannot decide." if undecided["on"] and "(0)" in prompt
                                   else graded(prompt))
    argv = ["judge", str(sweep.out), "--spec", str(spec)]
    assert main(argv) == 0
    out = pytester.path / "results.judged.jsonl"
    assert {k for k, r in judged(out).items() if r["status"] == "unjudged"} == {
        ("q0", "a"), ("q0", "b")}
    asked = len(judge.requests)
    undecided["on"] = False
    assert main([*argv, "--retry-unjudged"]) == 0
    assert len(judge.requests) == asked + 2  # the two ungraded replies asked anew, no others
    assert {(k, r["status"]) for k, r in judged(out).items() if k[0] == "q0"} == {
        (("q0", "a"), "correct"), (("q0", "b"), "correct")}
    assert "2 judged" in capsys.readouterr().out


PRICED = "pricing:\n  grader: {input: 1000, output: 1000}\n"


def test_the_budget_stops_the_pass_and_the_suggested_budget_judges_the_rest(
        pytester: pytest.Pytester, sweep: Sweep, arms: FakeOpenAI, judge: FakeOpenAI,
        capsys: pytest.CaptureFixture[str]) -> None:
    spec = deferred(pytester, sweep, arms, judge, extra=PRICED)
    out = pytester.path / "results.judged.jsonl"
    assert main(["judge", str(sweep.out), "--spec", str(spec), "-j", "1",
                 "--budget-usd", "0.13"]) == 2
    printed = capsys.readouterr().out
    rows = read_rows(out)[1]
    assert 0 < len(rows) < 8, printed
    assert "stopped (budget)" in printed and "judge calls not sent" in printed
    spent = sum(r["judge_cost_usd"] for r in rows)
    assert spent <= 0.13
    argv = shlex.split(printed.split("resume with: ")[1].strip())
    assert "--budget-usd" in argv
    assert main(argv[1:]) == 0
    assert len(judged(out)) == 8


def test_a_judge_without_prices_is_refused_under_a_budget_before_any_call(
        pytester: pytest.Pytester, sweep: Sweep, arms: FakeOpenAI, judge: FakeOpenAI,
        capsys: pytest.CaptureFixture[str]) -> None:
    spec = deferred(pytester, sweep, arms, judge)
    argv = ["judge", str(sweep.out), "--spec", str(spec), "--budget-usd", "1"]
    assert main(argv) == 2
    assert "judge 'grader' has no worst case" in capsys.readouterr().err and not judge.requests
    assert not (pytester.path / "results.judged.jsonl").exists()
    spec.write_text(spec.read_text().rstrip() + "\nbudget_unpriced: allow\n")
    assert main(argv) == 0 and len(judged(pytester.path / "results.judged.jsonl")) == 8


def test_a_pass_killed_mid_way_and_run_again_judges_every_key_once_as_an_unbroken_pass(
        pytester: pytest.Pytester, sweep: Sweep, arms: FakeOpenAI, judge: FakeOpenAI) -> None:
    spec = deferred(pytester, sweep, arms, judge, n=10)
    whole = pytester.path / "whole.jsonl"
    assert main(["judge", str(sweep.out), "--spec", str(spec), "-o", str(whole)]) == 0
    judge.requests.clear()

    judge.fault_for = lambda body: ("hang", 0.3)  # each reply late: the kill lands mid-pass
    out = pytester.path / "killed.jsonl"
    cache = pytester.path / "judge-cache.sqlite"
    argv = [sys.executable, "-m", "pytest_echo_bench.cli.main", "judge", str(sweep.out),
            "--spec", str(spec), "-o", str(out), "--cache", str(cache), "-j", "2"]
    proc = subprocess.Popen(argv, cwd=pytester.path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True, env=os.environ)
    try:
        wait_for(lambda: rows_in(out) >= 4, seconds=60)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    kept = rows_in(out)
    assert kept < 20
    judge.fault_for = None
    sent = len(judge.requests)
    assert main(["judge", str(sweep.out), "--spec", str(spec), "-o", str(out),
                 "--cache", str(cache)]) == 0
    rows = read_rows(out)[1]
    assert len(rows) == 20 == len(judged(out))  # every key once
    # the rows recorded are not judged again; at most the two calls in flight are asked twice
    assert len(judge.requests) - sent <= 20 - kept + 2
    fields = ("status", "score", "passed", "answer")
    assert {k: [r[f] for f in fields] for k, r in judged(out).items()} == {
        k: [r[f] for f in fields] for k, r in judged(whole).items()}


class BytesJudge(FakeOpenAI):
    """A judge that bills a token per prompt byte and 8 out: about what the budget holds a call
    at, so calls lost in a kill cost about what their holds said."""

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        reply = super().reply(body)
        prompt = len(body["messages"][-1]["content"].encode())
        reply["usage"] = {"prompt_tokens": prompt, "completion_tokens": 8,
                          "total_tokens": prompt + 8}
        return reply


def billed(server: FakeOpenAI) -> float:
    """What every request the judge received bills (those of a killed pass are answered too)."""
    return sum((len(r["body"]["messages"][-1]["content"].encode()) + 8) * 1000 / 1e6
               for r in server.requests)


def test_a_budgeted_pass_killed_mid_call_and_run_again_spends_no_more_than_the_budget(
        pytester: pytest.Pytester, sweep: Sweep, arms: FakeOpenAI,
        capsys: pytest.CaptureFixture[str]) -> None:
    with BytesJudge(answer=lambda prompt: "[[9]]") as judge:
        judge.httpd.handle_error = lambda *a: None  # the killed client's broken pipes
        spec = deferred(pytester, sweep, arms, judge, extra=PRICED)
        # the first call answered at once, the rest late: the kill lands with calls in flight
        judge.fault_for = lambda body: ("hang", 2.0) if judge.served >= 1 else None
        out = pytester.path / "killed.jsonl"
        argv = ["judge", str(sweep.out), "--spec", str(spec), "-o", str(out), "--cache", "off",
                "--budget-usd", "0.3"]
        proc = subprocess.Popen([sys.executable, "-m", "pytest_echo_bench.cli.main", *argv,
                                 "-j", "4"], cwd=pytester.path, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True, env=os.environ)
        try:
            wait_for(lambda: rows_in(out) >= 1 and len(judge.requests) >= 3, seconds=60)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        lost = len(judge.requests) - rows_in(out)
        assert rows_in(out) == 1 and lost >= 2
        judge.fault_for = None
        assert main([*argv, "-j", "1"]) == 2  # the calls the kill lost are spent: no room left
        # The calls the killed pass sent are billed though no row holds them: with the ones this
        # pass sends again, the judge bills no more than the budget.
        assert billed(judge) <= 0.3
        printed = capsys.readouterr().out
        assert "stopped (budget)" in printed
        ledger = json.loads(out.with_name(out.name + ".budget").read_text())
        assert ledger["lost"]["run"] > 0 and ledger["accounts"]["run"]["spent"] <= 0.3


VERSUS = """
    from pytest_echo_bench import Verdict, scorer

    @scorer("versus", judges=True)
    def versus(output, example, options, *, judges):
        other = judges.answer_of(options["against"])
        reply = judges.ask("grader", f"Answer: {output} Other: {other}")
        return Verdict("correct" if reply.text == "[[9]]" else "wrong", output, reply.text)
"""


def test_a_pairwise_scorer_is_given_the_stored_output_of_the_other_arm(
        pytester: pytest.Pytester, sweep: Sweep, arms: FakeOpenAI, judge: FakeOpenAI) -> None:
    pytester.makeconftest(VERSUS)
    text = spec_text(arms.base_url, judge.base_url)
    scorer = text[text.index("scorer:"):text.index("retries:")]
    spec = make_spec(pytester, text.replace(scorer, "scorer: {name: versus, against: b}\n"))
    result, _, rows = sweep.run("--bench-judge", "later", "--bench-cache", "off")
    assert result.ret == 0 and {r["status"] for r in rows} == {"unjudged"}
    assert main(["judge", str(sweep.out), "--spec", str(spec)]) == 0
    asked = sorted(r["body"]["messages"][-1]["content"] for r in judge.requests)
    outputs = {(r["task_id"], r["arm"]): r["output"] for r in rows}
    assert asked == sorted(f"Answer: {outputs[t, a]} Other: {outputs[t, 'b']}"
                           for t, a in outputs)


def test_the_shards_of_a_sweep_are_judged_into_one_file_and_a_key_twice_is_refused(
        pytester: pytest.Pytester, sweep: Sweep, arms: FakeOpenAI, judge: FakeOpenAI,
        capsys: pytest.CaptureFixture[str]) -> None:
    spec = make_spec(pytester, spec_text(arms.base_url, judge.base_url, n=6))
    files = []
    for k in (1, 2):
        sweep.out = pytester.path / f"shard{k}.jsonl"
        result, _, _ = sweep.run("--bench-judge", "later", "--bench-shard", f"{k}/2")
        assert result.ret == 0, result.stdout.str()
        files.append(sweep.out)
    out = pytester.path / "all.jsonl"
    assert main(["judge", *map(str, files), "--spec", str(spec), "-o", str(out)]) == 0
    meta, rows = read_rows(out)
    assert meta is not None and [f["file"] for f in meta["judged_from"]] == list(map(str, files))
    assert len(rows) == 12 and {r["status"] for r in rows} == {"correct", "wrong"}
    capsys.readouterr()
    again = ["judge", str(files[0]), str(files[0]), "--spec", str(spec), "-o", "twice.jsonl"]
    assert main(again) == 2
    assert "merge the files first" in capsys.readouterr().err


def test_an_error_row_without_output_is_carried_over_as_it_is(
        pytester: pytest.Pytester, sweep: Sweep, arms: FakeOpenAI, judge: FakeOpenAI,
        capsys: pytest.CaptureFixture[str]) -> None:
    spec = make_spec(pytester, spec_text(arms.base_url, judge.base_url))
    refused = {"message": "this prompt is refused", "type": "invalid_request_error",
               "code": "invalid_prompt"}
    arms.push("error", (400, refused, {}))
    result, _, rows = sweep.run("--bench-judge", "later", "--bench-cache", "off",
                                "--bench-concurrency", "1")
    errors = [r for r in rows if r["status"] == "error"]
    assert result.ret == 0 and len(errors) == 1 and not errors[0]["output"]
    assert main(["judge", str(sweep.out), "--spec", str(spec), "-j", "1"]) == 0
    printed = capsys.readouterr().out
    assert "7 judged" in printed and "1 error rows carried over" in printed
    carried = judged(pytester.path / "results.judged.jsonl")[errors[0]["task_id"], errors[0]["arm"]]
    assert carried == errors[0] and len(judge.requests) == 7


def test_a_key_whose_source_row_changed_since_it_was_judged_is_judged_again(
        pytester: pytest.Pytester, sweep: Sweep, arms: FakeOpenAI, judge: FakeOpenAI,
        capsys: pytest.CaptureFixture[str]) -> None:
    spec = make_spec(pytester, spec_text(arms.base_url, judge.base_url))
    refused = {"message": "backend down", "type": "server_error", "code": None}
    arms.push("error", (400, refused, {}))
    sweep.run("--bench-judge", "later", "--bench-cache", "off", "--bench-concurrency", "1")
    argv = ["judge", str(sweep.out), "--spec", str(spec), "-j", "1"]
    out = pytester.path / "results.judged.jsonl"
    assert main(argv) == 0 and len(judge.requests) == 7
    error = next(k for k, r in judged(out).items() if r["status"] == "error")
    assert main(argv) == 0 and len(judge.requests) == 7
    printed = capsys.readouterr().out
    # the error row was carried over, never judged: it is not counted as judged before
    assert "7 skipped as already judged, 1 error rows carried over before" in printed

    # the sweep resumed with --bench-retry-errors records new rows, the error key's with an output
    result, _, _ = sweep.run("--bench-resume", str(sweep.out), "--bench-retry-errors",
                             "--bench-judge", "later", "--bench-cache", "off")
    assert result.ret == 0, result.stdout.str()
    source = {(r["task_id"], r["arm"]): r for r in read_rows(sweep.out)[1]}
    assert source[error]["output"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "8 judged (8 judged again: their source rows changed since)" in printed
    # only the error key's output is new to the judge: the response cache answers the others
    assert "0 skipped as already judged" in printed and len(judge.requests) == 8
    now = judged(out)  # the newest row of each key: the new source row's, graded
    assert now[error]["status"] in ("correct", "wrong")
    assert {k: (r["started_at"], r["output"]) for k, r in now.items()} == {
        k: (r["started_at"], r["output"]) for k, r in source.items()}
    assert main(argv) == 0 and len(judge.requests) == 8  # now each key is judged: skipped
    assert "8 skipped as already judged" in capsys.readouterr().out


def test_an_output_another_pass_owns_or_a_source_as_output_is_refused(
        pytester: pytest.Pytester, sweep: Sweep, arms: FakeOpenAI, judge: FakeOpenAI,
        capsys: pytest.CaptureFixture[str]) -> None:
    spec = deferred(pytester, sweep, arms, judge)
    source = sweep.out.read_bytes()
    assert main(["judge", str(sweep.out), "--spec", str(spec), "-o", str(sweep.out)]) == 2
    assert "is a source file" in capsys.readouterr().err and sweep.out.read_bytes() == source
    out = pytester.path / "owned.jsonl"
    other = Ownership(out, rewrite="run echo-bench judge")
    other.acquire()
    try:
        assert main(["judge", str(sweep.out), "--spec", str(spec), "-o", str(out)]) == 2
    finally:
        other.release()
    assert "echo-bench judge" in capsys.readouterr().err and not judge.requests


def test_a_judged_row_keeps_what_served_the_arm_and_the_items_digest(
        pytester: pytest.Pytester, sweep: Sweep, arms: FakeOpenAI, judge: FakeOpenAI) -> None:
    arms.fingerprint = "fp_arms"
    spec = deferred(pytester, sweep, arms, judge, n=2)
    kept = ("served_model", "served_fingerprint", "item_sha256")
    source = {(r["task_id"], r["arm"]): [r[name] for name in kept]
              for r in read_rows(sweep.out)[1]}
    assert {tuple(v[:2]) for v in source.values()} == {("arm-a", "fp_arms"), ("arm-b", "fp_arms")}
    assert main(["judge", str(sweep.out), "--spec", str(spec)]) == 0
    new = judged(pytester.path / "results.judged.jsonl")
    assert {key: [row[name] for name in kept] for key, row in new.items()} == source
    assert {j["model"] for row in new.values() for j in row["judgments"]} == {"judge-1"}


def test_a_key_judged_again_counts_its_new_judging_and_a_copy_of_a_judged_row_counts_once(
        pytester: pytest.Pytester, sweep: Sweep, arms: FakeOpenAI,
        capsys: pytest.CaptureFixture[str]) -> None:
    # The first pass leaves q1 without a grade; --retry-unjudged judges it again. Its new row
    # keeps the arm call's run id and times: the report must still count the second judging.
    state = {"grade": False}

    def grader(prompt: str) -> str:
        if "(1)" in prompt and not state["grade"]:
            return "I cannot decide."
        return "[[9]]" if "Answer: 4 " in prompt else "[[2]]"

    with FakeOpenAI(answer=grader) as judge:
        spec = deferred(pytester, sweep, arms, judge, n=2,
                        extra="pricing:\n  grader: {input: 1000, output: 1000}\n")
        assert main(["judge", str(sweep.out), "--spec", str(spec)]) == 0
        state["grade"] = True
        assert main(["judge", str(sweep.out), "--spec", str(spec), "--retry-unjudged"]) == 0
        assert len(judge.requests) == 6  # 4 keys, the 2 of q1 twice
    out = pytester.path / "results.judged.jsonl"
    rows = read_rows(out)[1]
    assert len(rows) == 6 and all(r.get("judged_at") for r in rows)
    paid = sum(r["judge_cost_usd"] for r in rows)
    first = sum(r["judge_cost_usd"] for r in rows[:4])
    assert paid > first > 0

    def judge_usd(*paths: Path) -> float:
        capsys.readouterr()
        assert main(["report", *map(str, paths), "--format", "json"]) == 0
        return float(json.loads(capsys.readouterr().out)["judging"]["total"]["judge_usd"])

    assert judge_usd(out) == pytest.approx(paid)
    # the same rows again, or merged with themselves: each judging counted once still
    merged = pytester.path / "merged.jsonl"
    assert main(["merge", str(out), str(out), "-o", str(merged)]) == 0
    assert judge_usd(out, out) == judge_usd(merged) == judge_usd(merged, out) == pytest.approx(paid)
