"""A sweep whose judge is of an arm's model family says so as it starts, and the report of its
results names the judge too. The arm and the judge are served by one OpenAI-compatible server on
127.0.0.1; the arm answers "4" and the judge says "VERDICT: right"."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from openai_server import FakeOpenAI

from conftest import Sweep, inline_items, make_spec
from pytest_echo_bench.cli.main import main

KEY = "sk-test-self-pref-7c2a"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    monkeypatch.setenv("ECHO_SELF_KEY", KEY)
    with FakeOpenAI(answer=lambda p: "VERDICT: right" if p.startswith("Is") else "4") as fake:
        yield fake


def spec(base_url: str, judge_model: str) -> str:
    served = (f"provider: openai, client: http, base_url: '{base_url}', "
              "api_key_env: ECHO_SELF_KEY, max_tokens: 8")
    return (f"benchmark: demo\ndataset:\n  loader: inline\n  items:\n{inline_items(2)}\n"
            "scorer:\n  name: model_graded\n  judge: grader\n  template: 'Is {answer} right?'\n"
            "  grade: {labels: {right: pass, wrong: fail}}\n"
            f"judges:\n  grader: {{{served}, model: {judge_model}}}\n"
            f"arms:\n  mini: {{{served}, model: gpt-4o-mini}}\n")


def test_a_judge_of_the_arms_family_is_named_at_the_start_and_in_the_report(
        pytester: pytest.Pytester, sweep: Sweep, server: FakeOpenAI,
        capsys: pytest.CaptureFixture[str]) -> None:
    make_spec(pytester, spec(server.base_url, "gpt-4o"))
    result, _, rows = sweep.run()
    assert result.ret == 0, result.stdout.str()
    assert len(rows) == 2 and all(r["judgments"][0]["label"] == "right" for r in rows)
    result.stdout.fnmatch_lines(["echo-bench: warning: demo: self-preference: judge grader "
                                 "(gpt-4o) is of the family openai/gpt of arm(s) mini "
                                 "(gpt-4o-mini)*"])
    capsys.readouterr()
    assert main(["report", str(sweep.out), "--format", "json"]) == 0  # the spec found here
    [warning] = json.loads(capsys.readouterr().out)["judging"]["warnings"]
    assert warning.startswith("self-preference: judge grader (") and "arm(s) mini" in warning
    assert "not found" not in warning


def test_a_judge_of_another_family_gives_no_warning(
        pytester: pytest.Pytester, sweep: Sweep, server: FakeOpenAI) -> None:
    make_spec(pytester, spec(server.base_url, "claude-3-5-sonnet"))
    result, _, rows = sweep.run()
    assert result.ret == 0 and len(rows) == 2, result.stdout.str()
    assert "self-preference" not in result.stdout.str()
