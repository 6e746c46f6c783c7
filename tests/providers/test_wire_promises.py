"""What the docs promise at the wire, held with both clients against real loopback servers.

A server's wait (``retry-after`` in seconds or as an HTTP-date) is honoured; a body its
``content-length`` cuts short is a transient, retried and never recorded; any 2xx carries the
answer; a ``SSL_CERT_FILE`` the SDK cannot load stops that arm with a message, not the collection.
The servers speak the providers' wire format byte by byte, so a lying ``content-length`` is sent
exactly as a broken gateway sends it.
"""

from __future__ import annotations

import email.utils
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai_server import RATE_LIMIT, FakeOpenAI

from conftest import Sweep, make_spec, sim_spec
from pytest_echo_bench.engine.calls import call_with_retries
from pytest_echo_bench.engine.scope import Classifier
from pytest_echo_bench.errors import ArmError, IncompleteError, PermanentError, TransientError
from pytest_echo_bench.providers import anthropic_messages, openai_chat
from pytest_echo_bench.providers.base import Request
from pytest_echo_bench.providers.http_json import ends_early
from pytest_echo_bench.spec.load import RetryPolicy

KEY = "sk-test-wire-7c21"
FAST = "retries: {attempts: 3, backoff_s: 0.01, max_backoff_s: 0.2, max_wait_s: 5}\ntimeout_s: 10\n"
REQUEST = Request(None, "gpt", "2+2")  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_OPENAI_KEY", KEY)
    monkeypatch.setenv("TEST_ANTHROPIC_KEY", KEY)
    for name in (
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(params=["http", "sdk"])
def client(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def answer_of(api: str, request: dict[str, Any], text: str = "42") -> dict[str, Any]:
    if api == "anthropic":
        return {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": request.get("model", "m"),
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 3, "output_tokens": 1},
        }
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": request.get("model", "m"),
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }


class WireServer:
    """Answers each request with the API's reply, one connection per request; ``script`` replaces
    the next replies: (status, body's text, content-length sent, or None for the body's own), and
    ``headers`` (name, value) adds to the next reply's headers."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.script: deque[tuple[int, str | None, int | None]] = deque()
        self.headers: deque[list[tuple[str, str]]] = deque()
        self.served = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}" + ("/v1" if self.api == "openai" else "")

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.settimeout(10)
                    self._answer(conn)
                except (OSError, ValueError):
                    continue

    def _answer(self, conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(int(v) for k, _, v in (line.partition(b":") for line in head.split(b"\r\n"))
                      if k.strip().lower() == b"content-length")
        while len(body) < length:
            body += conn.recv(65536)
        status, text, sent_length = self.script.popleft() if self.script else (200, None, None)
        payload = (
            text if text is not None else json.dumps(answer_of(self.api, json.loads(body)))
        ).encode()
        extra = "".join(
            f"{name}: {value}\r\n"
            for name, value in (self.headers.popleft() if self.headers else [])
        )
        self.served += 1
        length = len(payload) if sent_length is None else sent_length
        conn.sendall(
            f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\nconnection: close\r\n{extra}"
            f"content-length: {length}\r\n\r\n".encode("latin-1")
            + payload
        )
        conn.shutdown(socket.SHUT_WR)
        conn.recv(1)  # until the client closes: a close with unread bytes would reset what was sent

    def close(self) -> None:
        """Stop serving before the socket is closed: a thread still in ``accept`` would take the
        connections of the next server given the same descriptor number."""
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept
        except OSError:
            pass
        self.thread.join(10)
        self.listener.close()


@pytest.fixture(params=["openai", "anthropic"])
def wire(request: pytest.FixtureRequest) -> Iterator[WireServer]:
    server = WireServer(str(request.param))
    yield server
    server.close()


def arm_spec(api: str, url: str, client: str, n: int = 3, extra: str = FAST) -> str:
    if api == "anthropic":
        arm = (f"  gpt:\n    provider: anthropic\n    model: claude-test\n    base_url: {url}\n"
               f"    api_key_env: TEST_ANTHROPIC_KEY\n    client: {client}\n")
    else:
        arm = (f"  gpt:\n    provider: openai\n    model: local-model\n    base_url: {url}\n"
               f"    api_key_env: TEST_OPENAI_KEY\n    client: {client}\n")
    return sim_spec(n, arms=arm, extra=extra).replace('target: "4"', 'target: "42"')


def run(
    pytester: pytest.Pytester, sweep: Sweep, body: str
) -> tuple[pytest.RunResult, list[dict[str, Any]]]:
    make_spec(pytester, body)
    result, _, rows = sweep.run("--bench-concurrency", "1", "--bench-cache", "off")
    return result, rows


# -- waits the server asks for ---------------------------------------------------------------------

def timed_429s(server: FakeOpenAI, headers: dict[str, str] | Any, times: int = 1) -> list[float]:
    """The first ``times`` calls get a 429 with ``headers`` (or ``headers()``, made as it is sent);
    returns the list the arrival time of every call is appended to."""
    arrivals: list[float] = []
    left = [times]

    def fault(body: dict[str, Any]) -> tuple[str, Any] | None:
        arrivals.append(time.monotonic())
        if left[0] > 0:
            left[0] -= 1
            return ("error", (429, RATE_LIMIT, headers() if callable(headers) else headers))
        return None

    server.fault_for = fault
    return arrivals


@pytest.mark.parametrize("header", ["seconds", "http-date"])
def test_a_servers_wait_past_max_backoff_is_honoured(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI, client: str, header: str
) -> None:
    """``max_backoff_s: 0.2`` bounds our own backoff, not the server's word: a
    retry-after of 2 s, or an HTTP-date 3 s after the moment it is sent (2 to 3 s after
    the reply's Date, which has whole seconds). The date was ignored: the call came again
    after the endpoint's default 1 s pause."""
    def later() -> dict[str, str]:
        return {"retry-after": email.utils.formatdate(time.time() + 3, usegmt=True)}

    arrivals = timed_429s(openai_server, {"retry-after": "2"} if header == "seconds" else later)
    result, rows = run(pytester, sweep, arm_spec("openai", openai_server.base_url, client, n=1))
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert [r["status"] for r in rows] == ["correct"] and rows[0]["attempts"] == 2
    assert arrivals[1] - arrivals[0] >= 1.9


def test_an_http_date_past_max_wait_leaves_the_item_for_a_resume(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI, client: str
) -> None:
    timed_429s(
        openai_server,
        lambda: {"retry-after": email.utils.formatdate(time.time() + 60, usegmt=True)},
        times=5,
    )
    result, rows = run(pytester, sweep, arm_spec("openai", openai_server.base_url, client, n=1))
    text = result.stdout.str()
    assert result.ret == 2 and rows == [], text[-3000:]
    assert "more than the item's 5 s (retries.max_wait_s)" in text


# -- a body its framing cuts short, and 2xx
# ---------------------------------------------------------

def test_a_content_length_shorter_than_the_json_is_retried_never_recorded(
        pytester: pytest.Pytester, sweep: Sweep, wire: WireServer, client: str) -> None:
    whole = json.dumps(answer_of(wire.api, {"model": "m"}))
    wire.script.append((200, whole, len(whole) - 9))
    result, rows = run(pytester, sweep, arm_spec(wire.api, wire.base_url, client))
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert sorted(r["status"] for r in rows) == ["correct"] * 3
    # one retry, for the cut reply
    assert sum(r["attempts"] for r in rows) == 4 and wire.served == 4


def test_a_content_length_that_always_cuts_leaves_the_items_incomplete(
        pytester: pytest.Pytester, sweep: Sweep, wire: WireServer, client: str) -> None:
    whole = json.dumps(answer_of(wire.api, {"model": "m"}))
    wire.script.extend([(200, whole, len(whole) // 2)] * 30)
    result, rows = run(pytester, sweep, arm_spec(wire.api, wire.base_url, client, n=2))
    text = result.stdout.str()
    # never an error row: nothing wrong was answered
    assert result.ret == 2 and rows == [], text[-3000:]
    assert "ended before its JSON did" in text


@pytest.mark.parametrize("status", [201, 203])
def test_any_2xx_with_the_answer_is_the_answer(
    pytester: pytest.Pytester, sweep: Sweep, wire: WireServer, client: str, status: int
) -> None:
    wire.script.extend([(status, None, None)] * 3)
    result, rows = run(pytester, sweep, arm_spec(wire.api, wire.base_url, client))
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert sorted(r["status"] for r in rows) == ["correct"] * 3


@pytest.mark.parametrize("sent", [0, 1], ids=["content-length-0", "content-length-1"])
def test_a_2xx_body_cut_to_nothing_is_transient_with_either_client(
    servers: dict[str, WireServer], client: str, sent: int
) -> None:
    """Found by the generated mismatches below: ``content-length: 0`` before a whole JSON body was
    the arm's end on the lean client (no ``choices``) and an item error on the SDK."""
    server = servers["openai"]
    server.script.append((200, json.dumps(answer_of("openai", {"model": "m"})), sent))
    used = transport("openai", server.base_url, client)
    try:
        with pytest.raises(TransientError, match="ended before its JSON did"):
            used.post({"model": "m", "messages": [{"role": "user", "content": "q"}]})
    finally:
        used.close()


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(value=JSON_VALUES, ascii_only=st.booleans())
def test_every_cut_of_a_json_reply_ends_early_and_the_whole_does_not(
    value: Any, ascii_only: bool
) -> None:
    """Cut at any character or any byte (a UTF-8 sequence split), a
    reply's JSON is seen as cut short."""
    whole = json.dumps({"choices": value}, ensure_ascii=ascii_only)
    assert not ends_early(whole)
    assert all(ends_early(whole[:k]) for k in range(len(whole)))
    raw = whole.encode()
    assert all(ends_early(raw[:k].decode("utf-8", "replace")) for k in range(len(raw)))


@pytest.mark.parametrize("text", [
    '{"k": "\\u001f',  # found by the property above: a whole escape at the cut read as a bad escape
    '{"k": "\\ud83d\\ude',  # half of a surrogate pair's second escape
    '{"k": tr', '{"k": -', '{"k": 1.', '{"k": 1.5e+', '{"k": nul',
])
def test_cuts_inside_escapes_literals_and_numbers_end_early(text: str) -> None:
    assert ends_early(text)


@pytest.mark.parametrize(
    "text", ['{"k": x}', "<html>", '{"k": 1} trailing', '{"k": "a\x01"}', "null", "12"]
)
def test_malformed_or_whole_texts_do_not_end_early(text: str) -> None:
    assert not ends_early(text)


def transport(api: str, url: str, client: str) -> Any:
    if api == "anthropic":
        if client == "sdk":
            import anthropic
            made = anthropic.Anthropic(api_key=KEY, base_url=url, max_retries=0)
            return anthropic_messages.SDKTransport(made, anthropic, url)
        return anthropic_messages.HTTPTransport(url, KEY, 10.0)
    if client == "sdk":
        import openai

        return openai_chat.SDKTransport(
            openai.OpenAI(api_key=KEY, base_url=url, max_retries=0), openai, url
        )
    return openai_chat.HTTPTransport(url, KEY, 10.0)


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, WireServer]]:
    made = {api: WireServer(api) for api in ("openai", "anthropic")}
    yield made
    for server in made.values():
        server.close()


@settings(max_examples=80, derandomize=True, database=None, deadline=None)
@given(
    api=st.sampled_from(["openai", "anthropic"]),
    client=st.sampled_from(["http", "sdk"]),
    text=st.text(max_size=30),
    delta=st.integers(-400, 40),
    status=st.sampled_from([200, 201, 203]),
)
def test_generated_content_length_mismatches_are_the_answer_or_a_transient(
    servers: dict[str, WireServer], api: str, client: str, text: str, delta: int, status: int
) -> None:
    """A framing that matches the body reads the answer; one that does not is transient: never
    another text, never an error that would be recorded, never a crash."""
    server = servers[api]
    whole = json.dumps(answer_of(api, {"model": "m"}, text))
    sent = max(0, len(whole.encode()) + delta)
    server.script.append((status, whole, sent))
    used = transport(api, server.base_url, client)
    try:
        done = used.post(
            {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "q"}]}
        )
    except TransientError:
        assert sent != len(whole.encode())
    except (ArmError, PermanentError) as exc:
        pytest.fail(
            f"content-length {sent} of {len(whole.encode())} bytes: {type(exc).__name__}: {exc}"
        )
    else:
        assert sent == len(whole.encode()) and done.text == text
    finally:
        used.close()


class FakeClock:
    """Time that passes only when the call waits: nothing here sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def is_set(self) -> bool:
        return False

    def wait(self, timeout: float) -> bool:
        self.now += timeout
        return False


WAIT_HEADER = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(10**20), 10**20).map(str),
    st.floats(0, 30).map(lambda s: email.utils.formatdate(time.time() + s, usegmt=True)),
    st.datetimes(timezones=st.none()).map(lambda d: d.strftime("%a, %d %b %Y %H:%M:%S GMT")),
    st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=30).map(
        str.strip
    ),
)


@settings(max_examples=60, derandomize=True, database=None, deadline=None)
@given(
    api=st.sampled_from(["openai", "anthropic"]),
    client=st.sampled_from(["http", "sdk"]),
    waits=st.lists(
        st.tuples(
            st.sampled_from(["retry-after", "retry-after-ms", "llm_provider-retry-after"]),
            WAIT_HEADER,
        ),
        min_size=1,
        max_size=3,
    ),
    status=st.sampled_from([429, 503, 529]),
    budget=st.sampled_from([0.0, 3.0, 600.0]),
)
def test_generated_wait_headers_on_the_wire_end_in_the_answer_or_a_resume_within_max_wait(
    servers: dict[str, WireServer],
    api: str,
    client: str,
    waits: list[tuple[str, str]],
    status: int,
    budget: float,
) -> None:
    """Refused with whatever wait header, then answered: the item ends with the server's answer or
    is left for a resume, its waits within retries.max_wait_s; never an
    error to record, never a crash."""
    server = servers[api]
    error = json.dumps(
        {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
        if api == "anthropic"
        else {"error": {"message": "slow down", "code": "rate_limit_exceeded"}}
    )
    for name, value in waits:
        server.script.append((status, error, None))
        server.headers.append([(name, value)])
    provider = (
        anthropic_messages.AnthropicProvider if api == "anthropic" else openai_chat.OpenAIProvider
    )(
        transport(api, server.base_url, client),
        "m",
        None,
        {"max_tokens": 5} if api == "anthropic" else {},
    )
    clock = FakeClock()
    policy = RetryPolicy(
        attempts=len(waits) + 1, backoff_s=0.01, max_backoff_s=0.02, max_wait_s=budget
    )
    try:
        done = call_with_retries(provider, REQUEST, policy, Classifier(), clock, clock=clock)
    except IncompleteError:
        pass  # left for a resume
    else:
        assert done.completion.text == "42" and done.attempts == len(waits) + 1
    finally:
        provider.close()
        server.script.clear()
        server.headers.clear()
    # The server's waits within the budget; our own backoff (no usable
    # wait) bounded by the attempts.
    assert clock.now <= budget + policy.attempts * policy.max_backoff_s + 1e-6


# -- CAs the SDK cannot load
# --------------------------------------------------------------------------

@pytest.mark.parametrize(
    "content", [b"garbage, no certificate here\n", None], ids=["garbage", "missing"]
)
@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_an_ssl_cert_file_the_sdk_cannot_load_stops_that_arm_with_a_message(
        pytester: pytest.Pytester, sweep: Sweep, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        content: bytes | None, api: str) -> None:
    """It was a collection traceback (ssl.SSLError, FileNotFoundError) that stopped every arm."""
    bundle = tmp_path / "bundle.pem"
    if content is not None:
        bundle.write_bytes(content)
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    body = arm_spec(api, "http://127.0.0.1:9/v1", "sdk", extra=FAST).replace(
        "arms:\n", "arms:\n  good: {provider: sim, accuracy: 1.0}\n")
    make_spec(pytester, body)
    result, _, rows = sweep.run("--bench-concurrency", "1")
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == 2, text[-3000:]
    assert sorted(r["arm"] for r in rows) == ["good"] * 3  # the other arm ran
    assert "Traceback" not in text and "INTERNALERROR" not in text, text[-3000:]
    assert (
        f"arm 'gpt': the SDK cannot load the CAs SSL_CERT_FILE names ({str(bundle)!r})" in text
    ), text[-3000:]
