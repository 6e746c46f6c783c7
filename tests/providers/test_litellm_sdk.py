"""The litellm provider: LiteLLM's SDK in process, with its ``mock_response`` answers and mocked
exceptions, and against the loopback OpenAI server through LiteLLM's own client.

LiteLLM's SDK is about 290 MB in 57 distributions (its own openai SDK, tokenizers, boto3...), so
it stays out of the project's test environment: each sweep here runs in ``.venv-litellm`` (made by
``.ci/litellm`` for the proxy's test), with this package on ``PYTHONPATH`` and pytest's own
modules linked in from this environment. Without LiteLLM, an arm skips saying what to install.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from first_time import built
from openai_server import QUOTA, FakeOpenAI

from conftest import OPENAI_KEY, Sweep, make_spec, read_rows

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(pytest.__file__).resolve().parents[1]  # where this environment's pytest lives
SHARED = ("pytest", "_pytest", "pluggy", "iniconfig", "msgspec", "py.py")
NOT_INSTALLED = ("LiteLLM is not installed: run `bash .ci/litellm` (it makes .venv-litellm), or "
                 "point ECHO_BENCH_LITELLM at the litellm executable of a venv that has it")
RUN_TIMEOUT_S = 300.0  # a sweep here takes about 8 s (LiteLLM's import); far more when busy
RETRIES = "retries: {attempts: 2, backoff_s: 0.01, max_backoff_s: 0.02, max_wait_s: 2}\n"
POLICY = ("Exception: content_filter_policy: Your request was rejected as a result of the safety "
          "system.")

pytestmark = pytest.mark.usefixtures("api_key", "no_network_variables")


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the python of LiteLLM's venv, a directory linking this environment's pytest into it)."""
    exe = built("litellm", ROOT / ".venv-litellm" / "bin" / "litellm", NOT_INSTALLED)
    shim = tmp_path_factory.mktemp("pytest-for-litellm")
    for name in SHARED:
        if (SITE / name).exists():
            (shim / name).symlink_to(SITE / name)
    # and their metadata: pluggy 1.6 and later read their version from it
    for found in SITE.glob("*.dist-info"):
        if found.name.split("-")[0].lower() in SHARED:
            (shim / found.name).symlink_to(found)
    # the package alone, not the checkout's root: an editable install leaves its egg-info there,
    # whose entry point would register the plugin a second time beside ``-p``
    (shim / "pytest_echo_bench").symlink_to(ROOT / "pytest_echo_bench")
    return exe.with_name("python"), shim


def sweep_in_venv(venv: tuple[Path, Path], where: Path, arms: str
                  ) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """A sweep of three items over ``arms`` in LiteLLM's venv: (the process, the rows)."""
    items = "\n".join(f'    - {{id: q{i}, input: "2+2=? ({i})", target: "4"}}' for i in range(3))
    (where / "demo.yaml").write_text(
        f"benchmark: demo\ndataset:\n  loader: inline\n  items:\n{items}\nscorer: exact\n"
        f"arms:\n{arms}{RETRIES}timeout_s: 20\n", encoding="utf-8")
    python, shim = venv
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHON"))}
    env |= {"PYTHONPATH": str(shim), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "HOME": str(where)}
    out = where / "results.jsonl"
    done = subprocess.run(
        [str(python), "-m", "pytest", "-p", "pytest_echo_bench.plugin", "-p", "no:cacheprovider",
         "-W", "ignore::UserWarning", "demo.yaml", "--bench-out", str(out),
         "--bench-concurrency", "1", "--bench-order", "file"],
        cwd=where, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    rows = read_rows(out)[1] if out.exists() else []
    return done, rows


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(answer=lambda prompt: "4") as fake:
        yield fake


def by_arm(rows: list[dict[str, Any]], arm: str) -> list[dict[str, Any]]:
    return sorted((r for r in rows if r["arm"] == arm), key=lambda r: r["task_id"])


def test_mock_answers_refusals_and_errors_in_one_sweep(
    venv: tuple[Path, Path], tmp_path: Path
) -> None:
    """An answer, a content-policy refusal (recorded once, graded wrong), a bad request (an error
    row, until the same error on an arm's first calls stops the arm), a rate limit and a server
    error (retried, never recorded)."""
    arms = "".join(f"  {name}: {{provider: litellm, model: gpt-4o-mini, mock_response: {mock!r}}}\n"
                   for name, mock in [("ok", "4"), ("refused", POLICY),
                                      ("long", "litellm.ContextWindowExceededError"),
                                      ("limited", "litellm.RateLimitError"),
                                      ("broken", "litellm.InternalServerError")])
    done, rows = sweep_in_venv(venv, tmp_path, arms)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    ok = by_arm(rows, "ok")
    assert [r["status"] for r in ok] == ["correct"] * 3
    assert ok[0]["usage"] == {"prompt_tokens": 10, "completion_tokens": 20}
    assert ok[0]["served_model"] == "gpt-4o-mini"
    refused = by_arm(rows, "refused")
    # an empty answer has no answer to grade: not correct, and never retried
    assert [(r["passed"], r["output"], r["attempts"]) for r in refused] == [(False, "", 1)] * 3
    assert refused[0]["extra"]["refusal"] == "content_policy_violation"
    long = by_arm(rows, "long")
    assert long and {(r["status"], r["attempts"]) for r in long} == {("error", 1)}
    assert "ContextWindowExceededError" in long[0]["detail"]
    assert "arm 'long' cannot work as configured" in done.stdout
    assert by_arm(rows, "limited") == [] and by_arm(rows, "broken") == []
    assert "q0[limited]: not completed" in done.stdout
    assert "q0[broken]: not completed" in done.stdout


def test_through_a_real_server_a_rate_limit_waits_and_a_refused_key_stops_its_arm(
    venv: tuple[Path, Path], tmp_path: Path, server: FakeOpenAI
) -> None:
    server.push("error", (429, {"message": "Rate limit reached", "type": "requests",
                                "code": "rate_limit_exceeded"}, {"retry-after": "0.6"}))
    with FakeOpenAI() as refusing:
        refusing.push("error", (401, {"message": "Incorrect API key provided",
                                      "type": "invalid_request_error",
                                      "code": "invalid_api_key"}, {}), times=5)
        arms = "".join(
            f"  {name}:\n    provider: litellm\n    model: openai/local-model\n"
            f"    base_url: {url}\n    api_key_env: TEST_OPENAI_KEY\n"
            for name, url in [("live", server.base_url), ("denied", refusing.base_url)])
        done, rows = sweep_in_venv(venv, tmp_path, arms)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    live = by_arm(rows, "live")
    assert [r["status"] for r in live] == ["correct"] * 3 and by_arm(rows, "denied") == []
    waited = [r for r in live if r["attempts"] == 2]
    assert len(waited) == 1 and waited[0]["wall_seconds"] >= 0.6
    assert {r["auth"] for r in server.requests} == {f"Bearer {OPENAI_KEY}"}
    assert "AuthenticationError" in done.stdout
    for text in (done.stdout, done.stderr, (tmp_path / "results.jsonl").read_text()):
        assert OPENAI_KEY not in text


def test_quota_stops_the_run_with_the_resume_command(
    venv: tuple[Path, Path], tmp_path: Path, server: FakeOpenAI
) -> None:
    server.quota_after = 1
    arms = (f"  live:\n    provider: litellm\n    model: openai/local-model\n"
            f"    base_url: {server.base_url}\n    api_key_env: TEST_OPENAI_KEY\n")
    done, rows = sweep_in_venv(venv, tmp_path, arms)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert [r["task_id"] for r in rows] == ["q0"] and len(server.requests) == 2  # never retried
    marker = json.loads((tmp_path / "results.jsonl.stop.json").read_text())
    assert marker["reason"] == "exhausted" and QUOTA["message"][:30] in marker["message"]
    assert f"pytest --bench-resume {tmp_path / 'results.jsonl'}" in done.stdout


def test_without_litellm_the_arm_skips_saying_what_to_install(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    """(``tests/litellm`` is on the path here: a namespace package named litellm, no SDK.)"""
    try:
        import litellm
    except ImportError:
        pass
    else:
        if hasattr(litellm, "completion"):
            pytest.skip("LiteLLM is installed in this environment")
    make_spec(pytester, "benchmark: demo\ndataset:\n  loader: inline\n  items:\n"
              '    - {id: q0, input: "2+2", target: "4"}\nscorer: exact\n'
              "arms:\n  lite: {provider: litellm, model: gpt-4o-mini}\n")
    result, _, rows = sweep.run("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*LiteLLM is not installed: pip install*[[]litellm[]]*"])
    assert rows == []
