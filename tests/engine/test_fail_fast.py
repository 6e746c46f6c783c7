"""Failures scoped to the item, the arm, the run or our machine, against a
real HTTP server on 127.0.0.1.

An arm that cannot work as configured (a refused key, no such model, nothing listening, a server
that is not the API) costs one call per process, records nothing, and leaves the other arms
running; the run then says it is not complete (exit 2) and what to fix.
"""

from __future__ import annotations

import json
import socket
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai_server import FakeOpenAI

from conftest import OPENAI_KEY, Sweep, make_spec, sim_spec, tmpfs

FAST = "retries: {attempts: 4, backoff_s: 0.01, max_backoff_s: 0.05}\ntimeout_s: 10\n"
LOGIN_PAGE = b"<!doctype html><html><body><form action=/login>Sign in</form></body></html>"


pytestmark = pytest.mark.usefixtures("api_key")


@pytest.fixture(params=["sdk", "http"])
def client(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def two_arms(base_url: str, client: str, n: int = 8, extra: str = "", gpt: str = "") -> str:
    """A working sim arm beside an openai arm whose settings a test breaks."""
    arms = ("  good: {provider: sim, accuracy: 1.0}\n"
            f"  gpt:\n    provider: openai\n    model: local-model\n    base_url: {base_url}\n"
            f"    api_key_env: TEST_OPENAI_KEY\n    client: {client}\n{gpt}")
    return sim_spec(n, arms=arms, extra=FAST + extra)


def marker(pytester: pytest.Pytester) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((pytester.path / "results.jsonl.stop.json").read_text())
    return data


def by_arm(rows: list[dict[str, Any]]) -> Counter[str]:
    return Counter(r["arm"] for r in rows)


def always(server: FakeOpenAI, fault: tuple[str, Any]) -> None:
    server.fault_for = lambda body: fault


def assert_arm_stopped(
    pytester: pytest.Pytester,
    result: pytest.RunResult,
    rows: list[dict[str, Any]],
    n: int,
    *said: str,
) -> str:
    """The broken arm recorded nothing and its items were not run;
    the good arm completed; exit 2."""
    text = result.stdout.str()
    assert result.ret == 2, text[-3000:]
    assert by_arm(rows) == {"good": n}
    result.assert_outcomes(passed=n, skipped=n)
    stop = marker(pytester)
    assert stop["reason"] == "arm-unavailable" and stop["arms"] == ["demo/gpt"]
    for words in ("arm 'gpt' cannot work as configured", *said):
        assert words in text, (words, text[-3000:])
    assert "fix that, then resume with:" in text and "--bench-resume" in text
    assert OPENAI_KEY not in text
    return text


@pytest.mark.parametrize(
    "status, body, hint",
    [
        (
            401,
            {
                "message": "Incorrect API key provided",
                "type": "invalid_request_error",
                "code": "invalid_api_key",
            },
            "check the key in TEST_OPENAI_KEY",
        ),
        (
            403,
            {"message": "project has no access to model", "type": "permission_error"},
            "check the key in TEST_OPENAI_KEY",
        ),
        (
            404,
            {"message": "The model `local-model` does not exist", "type": "invalid_request_error"},
            "check the model name and base_url",
        ),
    ],
    ids=["401", "403", "404"],
)
def test_a_refused_key_or_unknown_model_costs_one_call(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI, client: str,
    status: int, body: dict[str, Any], hint: str,
) -> None:
    always(openai_server, ("error", (status, body, {})))
    make_spec(pytester, two_arms(openai_server.base_url, client))
    result, _, rows = sweep.run("--bench-concurrency", "8")
    assert_arm_stopped(pytester, result, rows, 8, f"HTTP {status}", hint, openai_server.base_url)
    # the first call ran alone; the seven others never started
    assert len(openai_server.requests) == 1


@pytest.mark.parametrize(
    "raw",
    [(200, "text/html", LOGIN_PAGE, {}), (302, "text/html", b"", {"location": "/login"})],
    ids=["login-page", "redirect"],
)
def test_a_server_that_is_not_the_api_stops_the_arm(
    pytester: pytest.Pytester,
    sweep: Sweep,
    openai_server: FakeOpenAI,
    client: str,
    raw: tuple[Any, ...],
) -> None:
    always(openai_server, ("raw", raw))
    make_spec(pytester, two_arms(openai_server.base_url, client))
    result, _, rows = sweep.run("--bench-concurrency", "4")
    assert_arm_stopped(pytester, result, rows, 8, "base_url must be the API's address")
    assert len(openai_server.requests) == 1


def test_a_reply_without_choices_after_answers_is_the_items_error(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI, client: str,
) -> None:
    """Once the arm has answered, a stray non-API reply is that item's failure, not the arm's."""
    openai_server.answer = lambda prompt: "x"
    served = iter(range(100))
    openai_server.fault_for = lambda body: (
        ("raw", (200, "text/html", LOGIN_PAGE, {})) if next(served) == 2 else None
    )
    make_spec(pytester, two_arms(openai_server.base_url, client, n=4))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 0, result.stdout.str()[-2000:]
    gpt = [r for r in rows if r["arm"] == "gpt"]
    assert len(gpt) == 4 and [r["status"] for r in gpt].count("error") == 1


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again: nothing listens there


def test_nothing_listening_stops_the_arm_after_a_few_tries(
    pytester: pytest.Pytester, sweep: Sweep, client: str
) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    make_spec(pytester, two_arms(url, client, n=20))
    result, _, rows = sweep.run("--bench-concurrency", "4")
    assert_arm_stopped(pytester, result, rows, 20, url, "check base_url")


def test_the_same_error_on_the_first_calls_stops_the_arm(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI, client: str,
) -> None:
    always(openai_server, ("error", (400, {"message": "unsupported parameter: temperature"}, {})))
    make_spec(pytester, two_arms(openai_server.base_url, client, n=10))
    result, _, rows = sweep.run("--bench-concurrency", "4")
    text = result.stdout.str()
    assert result.ret == 2, text[-2000:]
    assert len(openai_server.requests) == 3  # REPEATS calls, one at a time, then none
    assert "the same error on its first 3 calls" in text and "--bench-retry-errors" in text
    assert marker(pytester)["reason"] == "arm-unavailable"
    gpt = [r for r in rows if r["arm"] == "gpt"]
    # the two before the third told
    assert len(gpt) == 2 and {r["status"] for r in gpt} == {"error"}


def test_different_item_errors_are_item_errors(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI, client: str,
) -> None:
    """A 400 that names the item (its length) is the item's: every item is called and recorded."""
    openai_server.fault_for = lambda body: ("error", (400, {
        "message": f"maximum context length exceeded by {body['messages'][-1]['content']!r}"}, {}))
    make_spec(pytester, two_arms(openai_server.base_url, client, n=6))
    result, _, rows = sweep.run("--bench-concurrency", "3")
    gpt = [r for r in rows if r["arm"] == "gpt"]
    assert {r["status"] for r in gpt} == {"error"} and len(gpt) == 6, result.stdout.str()[-2000:]
    assert result.ret == 0
    assert all(r["detail"].count("error") == 1 for r in gpt)  # one prefix, not "error: error: ..."


def test_litellm_wrong_key_text_stops_the_arm_at_once(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI, client: str,
) -> None:
    """LiteLLM without a database answers a wrong key with 400 "No connected
    db.": the arm's, not the item's."""
    always(
        openai_server,
        (
            "error",
            (400, {"message": "No connected db.", "type": "no_db_connection", "code": "400"}, {}),
        ),
    )
    make_spec(pytester, two_arms(openai_server.base_url, client))
    result, _, rows = sweep.run("--bench-concurrency", "4")
    assert_arm_stopped(pytester, result, rows, 8, "No connected db", "credentials were refused")
    assert len(openai_server.requests) == 1


def test_a_missing_key_is_not_a_complete_sweep_unless_the_arm_is_optional(
    pytester: pytest.Pytester,
    sweep: Sweep,
    openai_server: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TEST_OPENAI_KEY")
    make_spec(pytester, two_arms(openai_server.base_url, "http", n=3))
    result, meta, rows = sweep.run()
    assert result.ret == 2 and by_arm(rows) == {"good": 3}
    assert meta is not None  # the printed results file exists, with its meta line
    assert "needs an API key: set the environment variable TEST_OPENAI_KEY" in result.stdout.str()
    assert marker(pytester)["reason"] == "arm-unavailable"
    assert not openai_server.requests

    make_spec(pytester, two_arms(openai_server.base_url, "http", n=3, gpt="    optional: true\n"))
    result, _, rows = sweep.run("--bench-out", str(pytester.path / "optional.jsonl"))
    assert result.ret == 0, result.stdout.str()[-2000:]
    assert "not run: 3 items of arm gpt" in result.stdout.str()
    assert not (pytester.path / "optional.jsonl.stop.json").exists()


def test_arm_unavailable_under_xdist_costs_one_call_per_worker(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI,
) -> None:
    always(openai_server, ("error", (401, {"message": "Incorrect API key provided"}, {})))
    make_spec(pytester, two_arms(openai_server.base_url, "http", n=12))
    result, _, rows = sweep.run("-n", "2", "--bench-concurrency", "4")
    assert_arm_stopped(pytester, result, rows, 12, "HTTP 401")
    assert 1 <= len(openai_server.requests) <= 2


def test_resume_after_fixing_the_arm_completes_it(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI,
) -> None:
    always(openai_server, ("error", (401, {"message": "Incorrect API key provided"}, {})))
    openai_server.answer = lambda prompt: "x"
    make_spec(pytester, two_arms(openai_server.base_url, "http", n=4))
    first, _, _ = sweep.run()
    assert first.ret == 2
    openai_server.fault_for = None  # the key is fixed
    result, _, rows = sweep.run("--bench-resume", str(sweep.out))
    assert result.ret == 0, result.stdout.str()[-2000:]
    assert by_arm(rows) == {"good": 4, "gpt": 4}


def python_arm_spec(pytester: pytest.Pytester, body: str) -> None:
    pytester.makeconftest(
        "import errno, os\nfrom pytest_echo_bench import arm\n\n@arm('local')\ndef "
        f"local(ctx):\n{body}\n"
    )
    arms = "  good: {provider: sim, accuracy: 1.0}\n  local: {provider: python, function: local}"
    make_spec(pytester, sim_spec(4, arms=arms, extra=FAST))


def test_our_machine_running_out_of_files_stops_the_run_unrecorded(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    python_arm_spec(pytester, "    raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))")
    result, _, rows = sweep.run("--bench-concurrency", "1")
    text = result.stdout.str()
    assert result.ret == 2, text[-2000:]
    assert all(r["arm"] == "good" for r in rows)  # never an error row for our machine's failure
    stop = marker(pytester)
    assert stop["reason"] == "local-error" and "Too many open files" in stop["message"]
    assert "ulimit -n" in text and "fix that, then resume with:" in text


@pytest.fixture
def no_inodes(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs with room for one directory and nothing in it: a real ENOSPC (root only)."""
    with tmpfs(tmp_path / "tmp", "size=64k,nr_inodes=2") as disk:
        yield disk


def test_a_full_tmpdir_under_a_command_arm_stops_the_run(
    pytester: pytest.Pytester, sweep: Sweep, no_inodes: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TMPDIR", str(no_inodes))
    arms = "  cli: {provider: command, argv: [cat]}"
    make_spec(pytester, sim_spec(3, arms=arms, extra=FAST))
    out = pytester.path / "r.jsonl"
    # -s: pytest's own output capture would need a temporary file on the full disk first.
    result, _, rows = sweep.run(
        "--bench-out", str(out), "--bench-concurrency", "1", "-s", subprocess=True
    )
    text = result.stdout.str()
    assert result.ret == 2, text[-2000:]
    assert rows == []
    assert json.loads(Path(f"{out}.stop.json").read_text())["reason"] == "local-error"
    assert "No space left on device" in text


def test_a_scorer_on_a_full_disk_stops_the_run_instead_of_grading(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    """A sandboxed scorer that cannot write its files is our machine's
    failure, not the model's wrong answer."""
    pytester.makeconftest("""
import errno, os
from pytest_echo_bench import scorer

@scorer("full_disk")
def full_disk(output, example, options):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/tmp/sandbox/solution.py")
""")
    make_spec(
        pytester,
        sim_spec(3, arms="  a: {provider: sim, accuracy: 1.0}").replace(
            "scorer: exact", "scorer: full_disk"
        ),
    )
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 2, result.stdout.str()[-2000:]
    assert rows == []
    stop = marker(pytester)
    assert stop["reason"] == "local-error" and "No space left on device" in stop["message"]
    assert "scorer full_disk" in stop["message"] and "crashed" not in result.stdout.str()


@pytest.mark.parametrize("client, wait", [("http", 600), ("sdk", 600), ("http", 30), ("sdk", 30)])
def test_a_retry_after_past_max_wait_leaves_the_arm_for_a_resume_and_holds_up_nothing(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI, client: str, wait: int,
) -> None:
    """A Retry-After past a three-second wait budget is not waited out item by item: the arm's items
    are left incomplete at once (with 30 s, the endpoint's pause held each item 30 s before)."""
    slow_down = {"message": "slow down", "code": "rate_limit_exceeded"}
    always(openai_server, ("error", (429, slow_down, {"retry-after": str(wait)})))
    make_spec(pytester, two_arms(openai_server.base_url, client, n=6).replace(
        "retries: {", "retries: {max_wait_s: 3, "))
    started = time.monotonic()
    result, _, rows = sweep.run("--bench-concurrency", "4")
    text = result.stdout.str()
    assert result.ret == 2, text[-2000:]
    assert by_arm(rows) == {"good": 6}
    assert marker(pytester)["reason"] == "incomplete"
    assert f"asks to wait {wait} s, more than the item's 3 s (retries.max_wait_s)" in text
    # after the first 429s the endpoint is paused: the rest are not sent
    assert len(openai_server.requests) <= 4
    assert time.monotonic() - started < 30  # a hang guard: no item sleeps on the pause


def test_a_python_arm_that_catches_exhaustion_still_stops_the_run(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI,
) -> None:
    """A fallback written as ``except Exception`` must not keep calling an exhausted provider."""
    openai_server.quota_after = 0
    pytester.makeconftest("""
from pytest_echo_bench import arm

@arm("fallback")
def fallback(ctx):
    try:
        return ctx.call("gpt")
    except Exception:
        return ctx.call("good")
""")
    arms = (
        "  good: {provider: sim, accuracy: 1.0}\n  fb: {provider: python, function: fallback}\n"
        f"  gpt: {{provider: openai, model: m, client: http, base_url: '{openai_server.base_url}', "
        "api_key_env: TEST_OPENAI_KEY}"
    )
    make_spec(pytester, sim_spec(6, arms=arms, extra=FAST))
    result, _, _ = sweep.run("--bench-concurrency", "1", "-k", "fb")
    assert result.ret == 2, result.stdout.str()[-2000:]
    assert marker(pytester)["reason"] == "exhausted"
    assert len(openai_server.requests) == 1  # one 429 insufficient_quota, then no call anywhere


def test_routing_arms_that_route_back_to_each_other_are_refused(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    arms = (
        "  good: {provider: sim, accuracy: 1.0}\n  one: {provider: cascade, cheap: two, "
        "strong: good}\n"
        "  two: {provider: cascade, cheap: one, strong: good}"
    )
    make_spec(pytester, sim_spec(2, arms=arms))
    result, _, rows = sweep.run()
    assert result.ret != 0 and rows == []
    result.stdout.fnmatch_lines(
        ["*cheap names 'two', which routes back to 'one': routing arms cannot form a cycle*"]
    )


def test_a_python_arm_may_ask_its_own_arm_again(pytester: pytest.Pytester, sweep: Sweep) -> None:
    """The arm's first call holds its turn; asking the same arm again from
    inside it must not wait on itself."""
    pytester.makeconftest("""
import threading
from pytest_echo_bench import arm

depth = threading.local()

@arm("again")
def again(ctx):
    if getattr(depth, "n", 0):
        return "4"
    depth.n = 1
    try:
        return ctx.call("selfish")
    finally:
        depth.n = 0
""")
    make_spec(
        pytester, sim_spec(2, arms="  selfish: {provider: python, function: again}", extra=FAST)
    )
    result, _, rows = sweep.run("--bench-concurrency", "2")
    assert result.ret == 0, result.stdout.str()[-2000:]
    assert len(rows) == 2 and all(r["passed"] for r in rows)


def test_an_optional_arm_whose_key_is_refused_still_makes_the_sweep_incomplete(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI,
) -> None:
    """optional: the arm may not run here (no key); a key that is there
    and refused is a mistake to fix."""
    always(openai_server, ("error", (401, {"message": "Incorrect API key provided"}, {})))
    make_spec(pytester, two_arms(openai_server.base_url, "http", n=3, gpt="    optional: true\n"))
    result, _, rows = sweep.run()
    assert result.ret == 2 and by_arm(rows) == {"good": 3}
    assert marker(pytester)["arms"] == ["demo/gpt"]


def test_after_fixing_an_arms_base_url_the_printed_advice_resumes_it(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI,
) -> None:
    openai_server.answer = lambda prompt: "4"
    make_spec(pytester, two_arms(f"http://127.0.0.1:{closed_port()}/v1", "http", n=3))
    first, _, _ = sweep.run()
    assert first.ret == 2
    assert (
        "after changing its settings in the spec, resume with --bench-allow-mismatch"
        in first.stdout.str()
    )
    make_spec(pytester, two_arms(openai_server.base_url, "http", n=3))  # the fix
    result, _, rows = sweep.run("--bench-resume", str(sweep.out), "--bench-allow-mismatch")
    assert result.ret == 0, result.stdout.str()[-2000:]
    assert by_arm(rows) == {"good": 3, "gpt": 3}
