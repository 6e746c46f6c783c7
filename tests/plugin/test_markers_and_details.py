"""Every mark an item carries is registered (``--strict-markers`` works, no unknown-mark warnings),
and an error detail says "error" and the HTTP status once."""

from __future__ import annotations

import pytest

from conftest import Sweep, make_spec, sim_spec
from pytest_echo_bench.providers.http_json import status_message

SPEC = """\
benchmark: subs
dataset:
  loader: inline
  items:
    - {id: a1, input: x, target: '1', subtask: boolean_expressions}
    - {id: b1, input: y, target: '1', subtask: word.sorting}
scorer: exact
arms:
  a: {provider: sim, accuracy: 1.0}
"""


def test_strict_markers_accept_arm_and_subtask_marks(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, SPEC)
    result, _, rows = sweep.run("--strict-markers", "-W", "error::pytest.PytestUnknownMarkWarning",
                                "-m", "subtask_word_sorting and arm_a")
    assert result.ret == 0, result.stdout.str()
    assert [r["task_id"] for r in rows] == ["b1"]
    assert "PytestUnknownMarkWarning" not in result.stdout.str()


@pytest.mark.parametrize(("status", "code", "text", "expected"), [
    (400, "400", "error: bad request", "HTTP 400: bad request"),
    (400, "invalid_request_error", "400: too long", "HTTP 400 invalid_request_error: too long"),
    (500, "", "HTTP 500: upstream died", "HTTP 500: upstream died"),
    (429, "rate_limit_exceeded", "", "HTTP 429 rate_limit_exceeded"),
])
def test_status_and_prefix_appear_once(status: int, code: str, text: str, expected: str) -> None:
    assert status_message(status, code, text) == expected


def test_an_error_row_says_error_once(pytester: pytest.Pytester, sweep: Sweep) -> None:
    pytester.makeconftest("""
        from pytest_echo_bench import arm

        @arm("refuses")
        def refuses(ctx):
            raise ValueError("the prompt was refused")
    """)
    make_spec(
        pytester,
        SPEC.replace(
            "a: {provider: sim, accuracy: 1.0}", "a: {provider: python, function: refuses}"
        ),
    )
    result, _, rows = sweep.run()
    assert result.ret == 0
    assert {r["detail"] for r in rows} == {"error: ValueError: the prompt was refused"}
    out = result.stdout.str()
    assert "error: ValueError: the prompt was refused" in out and "error: error:" not in out


def test_a_skip_reason_reads_as_the_outcome_at_the_arms_line(
    pytester: pytest.Pytester, sweep: Sweep, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not 'pytest_echo_bench.plugin.collect.NotRecorded:
    unavailable: ...' at a line of our source."""
    monkeypatch.delenv("NO_SUCH_KEY_FOR_SKIPS", raising=False)
    arms = (
        "  good: {provider: sim, accuracy: 1.0}\n"
        "  gpt:\n    provider: openai\n    model: m\n    api_key_env: "
        "NO_SUCH_KEY_FOR_SKIPS\n    optional: true"
    )
    make_spec(pytester, sim_spec(2, arms=arms))
    result, _, rows = sweep.run("-rs")
    assert result.ret == 0 and len(rows) == 2
    gpt_line = 1 + sim_spec(2, arms=arms).splitlines().index("  gpt:")
    result.stdout.fnmatch_lines(
        [f"SKIPPED [[]2[]] demo.yaml:{gpt_line}: unavailable: arm 'gpt' needs an API key: *"]
    )
    assert "NotRecorded" not in result.stdout.str()
