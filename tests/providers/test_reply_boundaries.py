"""The provider reply boundary: a reply is an answer, a transient or an item error, never a crash.

Generated replies (every field's type, usage values, content shapes, encodings, framings and
truncation points) are served as exact bytes by a real socket server on 127.0.0.1 and read by
the providers' ``complete``; sweeps through the OpenAI-compatible test server show a run goes on.
"""

from __future__ import annotations

import gzip
import json
import math
import socket
import threading
import zlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai_server import FakeOpenAI

from conftest import Sweep, make_spec, sim_spec
from pytest_echo_bench.engine.scope import Classifier
from pytest_echo_bench.errors import (
    ArmError,
    EchoBenchError,
    ExhaustedError,
    LocalError,
    PermanentError,
    ProviderError,
    TransientError,
)
from pytest_echo_bench.providers import anthropic_messages, openai_chat
from pytest_echo_bench.providers.answer import MAX_COUNT, NOTE, checked, finite_cost
from pytest_echo_bench.providers.base import Completion, Request
from pytest_echo_bench.spec.load import Spec
from pytest_echo_bench.spec.pricing import Price

REQUEST = Request(None, "gpt", "2+2")  # type: ignore[arg-type]
PROFILE = settings(max_examples=150, deadline=None, derandomize=True, database=None)
PRICED = SimpleNamespace(pricing={"gpt": Price(2.5, 10.0)})  # what Spec.cost reads


class ByteServer:
    """Answers each request on 127.0.0.1 with the bytes in ``reply``, then closes the connection."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(60)
        self.port = self.listener.getsockname()[1]
        self.reply = b""
        self.heads: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def url(self, path: str = "/v1") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def _serve(self) -> None:
        for _ in range(20000):  # bounded: far more than the examples of this module
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.settimeout(5)
                    self._answer(conn)
                except OSError:
                    continue

    def _answer(self, conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data and len(data) < 65536:
            chunk = conn.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(int(v) for k, _, v in (line.partition(b":") for line in head.split(b"\r\n"))
                      if k.strip().lower() == b"content-length")
        for _ in range(1000):
            if len(body) >= length:
                break
            body += conn.recv(65536)
        self.heads.append(head)
        conn.sendall(self.reply)
        conn.shutdown(socket.SHUT_WR)  # the close a read-to-close body ends at

    def close(self) -> None:
        self.listener.close()


@pytest.fixture(scope="module")
def server() -> Iterator[ByteServer]:
    byte_server = ByteServer()
    yield byte_server
    byte_server.close()


# -- building a reply's bytes
# -----------------------------------------------------------------------

def encode(body: bytes, coding: str) -> bytes:
    if coding == "gzip":
        return gzip.compress(body, mtime=0)
    if coding == "deflate":
        return zlib.compress(body)
    if coding == "raw-deflate":  # "deflate" without the zlib header, as some servers send it
        packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        return packer.compress(body) + packer.flush()
    return body


def on_the_wire(
    body: bytes,
    *,
    status: int = 200,
    coding: str = "identity",
    framing: str = "length",
    chunk: int = 7,
    cut: int | None = None,
) -> bytes:
    """The reply's bytes; ``cut``: only that many bytes of the body as sent, then the close."""
    payload = encode(body, coding)
    headers = [f"HTTP/1.1 {status} X", "content-type: application/json"]
    if coding != "identity":
        headers.append(f"content-encoding: {'deflate' if coding == 'raw-deflate' else coding}")
    if framing == "length":
        headers.append(f"content-length: {len(payload)}")
    elif framing == "chunked":
        headers.append("transfer-encoding: chunked")
        parts = [payload[i:i + chunk] for i in range(0, len(payload), chunk)]
        payload = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
    if cut is not None:
        payload = payload[: cut % len(payload)]
    return "\r\n".join(headers).encode() + b"\r\n\r\n" + payload


def dumps(value: Any) -> bytes:
    return json.dumps(value).encode()  # NaN and Infinity as Python writes them: servers do too


# -- what is generated
# ------------------------------------------------------------------------------

GOOD_COUNTS = st.one_of(st.integers(0, 10**6), st.sampled_from([0, MAX_COUNT, 12.0]))
BAD_COUNTS = st.one_of(
    st.sampled_from(
        [
            None,
            math.nan,
            math.inf,
            -math.inf,
            -1,
            -1000,
            10**400,
            MAX_COUNT + 1,
            12.5,
            "12",
            True,
            False,
            [],
            {},
        ]
    ),
    st.integers(max_value=-1),
    st.integers(min_value=MAX_COUNT + 1, max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True).filter(
        lambda x: not (math.isfinite(x) and x.is_integer() and x >= 0)
    ),
)
TEXT_PART = st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=20))
OTHER_PART = st.builds(
    lambda k, v: {"type": k, "data": v},
    st.sampled_from(["image_url", "refusal", "tool_use", "thinking"]),
    st.text(max_size=5),
)
GOOD_CONTENT = st.one_of(
    st.text(max_size=30), st.none(), st.lists(st.one_of(TEXT_PART, OTHER_PART), max_size=5)
)
BAD_CONTENT = st.one_of(
    st.integers(),
    st.floats(allow_nan=False),
    st.booleans(),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.lists(st.one_of(st.integers(), st.text(max_size=3), st.none()), min_size=1, max_size=3),
    st.lists(
        st.builds(
            lambda t: {"type": "text", "text": t},
            st.one_of(st.integers(), st.none(), st.lists(st.text())),
        ),
        min_size=1,
        max_size=2,
    ),
)


def expected_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part["text"] for part in content if part.get("type") == "text")


@st.composite
def usages(draw: st.DrawFn, names: tuple[str, str]) -> tuple[Any, dict[str, int] | None, bool]:
    """(the usage a server sends, the usage kept, whether a note says it is unknown)."""
    shape = draw(st.sampled_from(["absent", "good", "bad", "not-an-object"]))
    if shape == "absent":
        return None, None, False
    if shape == "not-an-object":
        return (
            draw(
                st.one_of(st.text(max_size=8), st.integers(), st.lists(st.integers(), max_size=2))
            ),
            None,
            True,
        )
    present = draw(st.lists(st.sampled_from(names), min_size=1, max_size=2, unique=True))
    sent: dict[str, Any] = {name: draw(GOOD_COUNTS) for name in present}
    if shape == "good":
        return sent, {name: int(value) for name, value in sent.items()}, False
    sent[draw(st.sampled_from(present))] = draw(BAD_COUNTS)
    return sent, None, True


TRANSPORT = st.fixed_dictionaries({
    "coding": st.sampled_from(["identity", "gzip", "deflate", "raw-deflate"]),
    "framing": st.sampled_from(["length", "chunked", "close"]),
    "chunk": st.integers(1, 64),
})


# -- the properties
# -----------------------------------------------------------------------------------

def openai_provider(server: ByteServer) -> openai_chat.OpenAIProvider:
    return openai_chat.OpenAIProvider(
        openai_chat.HTTPTransport(server.url(), "sk-test", 5.0), "m", None, {}
    )


def anthropic_provider(server: ByteServer) -> anthropic_messages.AnthropicProvider:
    return anthropic_messages.AnthropicProvider(
        anthropic_messages.HTTPTransport(server.url(""), "k", 5.0), "m", None, {}
    )


def outcome(
    provider: Any, server: ByteServer, raw: bytes
) -> tuple[Completion | None, ProviderError | LocalError | None]:
    """The answer, or the scope the classifier gives the error; nothing outside the error tree."""
    server.reply = raw
    try:
        return provider.complete(REQUEST), None
    except EchoBenchError as exc:
        return None, Classifier().classify(exc)


def assert_kept(
    done: Completion | None, error: object, text: str, usage: dict[str, int] | None, noted: bool
) -> None:
    assert error is None and done is not None, error
    assert done.text == text
    assert done.usage == (usage or None)
    assert (NOTE in done.extra) is noted
    # as Runner._call prices it
    cost = finite_cost(Spec.cost(PRICED, "gpt", done.usage))  # type: ignore[arg-type]
    assert (
        cost is None
        if done.usage is None
        else (cost is not None and math.isfinite(cost) and cost >= 0)
    )


@PROFILE
@given(
    content=GOOD_CONTENT, usage=usages(("prompt_tokens", "completion_tokens")), transport=TRANSPORT
)
def test_openai_a_valid_answer_is_kept_whatever_its_usage_and_transport(
    server: ByteServer, content: Any, usage: tuple[Any, Any, bool], transport: dict[str, Any]
) -> None:
    sent, kept, noted = usage
    body: dict[str, Any] = {"choices": [{"message": {"role": "assistant", "content": content}}]}
    if sent is not None:
        body["usage"] = sent
    done, error = outcome(openai_provider(server), server, on_the_wire(dumps(body), **transport))
    assert_kept(done, error, expected_text(content), kept, noted)


@PROFILE
@given(
    content=GOOD_CONTENT.filter(lambda c: c is not None),
    usage=usages(("input_tokens", "output_tokens")),
    transport=TRANSPORT,
)
def test_anthropic_a_valid_answer_is_kept_whatever_its_usage_and_transport(
    server: ByteServer, content: Any, usage: tuple[Any, Any, bool], transport: dict[str, Any]
) -> None:
    sent, kept, noted = usage
    body: dict[str, Any] = {"type": "message", "role": "assistant", "content": content}
    if sent is not None:
        body["usage"] = sent
    ours = {"input_tokens": "prompt_tokens", "output_tokens": "completion_tokens"}
    done, error = outcome(anthropic_provider(server), server, on_the_wire(dumps(body), **transport))
    assert_kept(
        done,
        error,
        expected_text(content),
        {ours[k]: v for k, v in kept.items()} if kept else None,
        noted,
    )


@PROFILE
@given(content=BAD_CONTENT, transport=TRANSPORT, which=st.sampled_from(["openai", "anthropic"]))
def test_content_that_is_no_text_is_the_items_error_with_a_clear_message(
        server: ByteServer, content: Any, transport: dict[str, Any], which: str) -> None:
    if which == "openai":
        provider: Any = openai_provider(server)
        body: dict[str, Any] = {"choices": [{"message": {"content": content}}]}
    else:
        provider, body = anthropic_provider(server), {"content": content}
    done, error = outcome(provider, server, on_the_wire(dumps(body), **transport))
    assert done is None and type(error) is PermanentError, error
    assert "content" in str(error) and ("not text" in str(error) or "not a" in str(error))


@PROFILE
@given(
    body=st.one_of(
        st.builds(
            dumps,
            st.recursive(
                st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                lambda inner: (
                    st.lists(inner, max_size=3)
                    | st.dictionaries(
                        st.sampled_from(["choices", "message", "content", "usage", "text", "type"]),
                        inner,
                        max_size=3,
                    )
                ),
                max_leaves=12,
            ),
        ),
        st.binary(max_size=40),
    ),
    status=st.sampled_from([200, 200, 400, 401, 402, 404, 429, 500, 529]),
    transport=TRANSPORT,
    which=st.sampled_from(["openai", "anthropic"]),
)
def test_any_body_at_any_status_is_an_answer_or_an_error_of_the_tree(
    server: ByteServer, body: bytes, status: int, transport: dict[str, Any], which: str
) -> None:
    provider = openai_provider(server) if which == "openai" else anthropic_provider(server)
    done, error = outcome(provider, server, on_the_wire(body, status=status, **transport))
    assert (done is None) != (error is None)
    if done is not None:
        assert isinstance(done.text, str) and (
            done.usage is None or all(0 <= v <= MAX_COUNT for v in done.usage.values())
        )


@PROFILE
@given(content=st.text(max_size=30), transport=TRANSPORT, cut=st.integers(0, 10**6),
       which=st.sampled_from(["openai", "anthropic"]))
def test_a_reply_cut_anywhere_is_transient(
    server: ByteServer, content: str, transport: dict[str, Any], cut: int, which: str
) -> None:
    if which == "openai":
        provider: Any = openai_provider(server)
        body: dict[str, Any] = {
            "choices": [{"message": {"content": content}}],
            "usage": {"prompt_tokens": 3},
        }
    else:
        provider, body = (
            anthropic_provider(server),
            {"content": [{"type": "text", "text": content}]},
        )
    done, error = outcome(provider, server, on_the_wire(dumps(body), cut=cut, **transport))
    assert done is None and type(error) is TransientError, error


@PROFILE
@given(
    message=st.text(max_size=40),
    status=st.sampled_from([400, 403, 404, 422, 429, 500]),
    code=st.sampled_from(
        ["invalid_request_error", "invalid_prompt", "", "400", "rate_limit_exceeded"]
    ),
)
def test_the_word_billing_in_an_error_message_never_stops_the_run(
    server: ByteServer, message: str, status: int, code: str
) -> None:
    error_body = {"error": {"message": f"{message} billing {message}", "type": code, "code": code}}
    for provider in (openai_provider(server), anthropic_provider(server)):
        _, error = outcome(provider, server, on_the_wire(dumps(error_body), status=status))
        assert error is not None and not isinstance(error, ExhaustedError), error


# -- the same examples, explicit (each found a bug on main)
# -------------------------------------------

@pytest.mark.parametrize(
    "content, text",
    [
        (
            [
                {"type": "text", "text": "The answer is "},
                {"type": "image_url", "image_url": {}},
                {"type": "text", "text": "4"},
            ],
            "The answer is 4",
        ),
        (None, ""),
        ([], ""),
    ],
)
def test_openai_content_parts_are_joined_text_parts_only_in_order(
    server: ByteServer, content: Any, text: str
) -> None:
    done, error = outcome(
        openai_provider(server),
        server,
        on_the_wire(dumps({"choices": [{"message": {"content": content}}]})),
    )
    assert error is None and done is not None and done.text == text


def test_openai_content_that_is_a_number_is_the_items_error(server: ByteServer) -> None:
    _, error = outcome(
        openai_provider(server),
        server,
        on_the_wire(b'{"choices": [{"message": {"content": 12345}}]}'),
    )
    assert type(error) is PermanentError
    assert (
        str(error)
        == "the reply's choices[0].message.content is a number, not text or a list of content parts"
    )


@pytest.mark.parametrize(
    "usage, note",
    [
        ('{"prompt_tokens": null, "completion_tokens": 1}', "usage.prompt_tokens was null"),
        ('{"prompt_tokens": NaN, "completion_tokens": 1}', "usage.prompt_tokens was NaN"),
        ('"lots"', 'usage was "lots", not an object'),
        ('{"prompt_tokens": -1000, "completion_tokens": 1}', "usage.prompt_tokens was -1000"),
        (
            '{"prompt_tokens": 1' + "0" * 400 + ', "completion_tokens": 1}',
            "usage.prompt_tokens was 1000000",
        ),
        (
            '{"prompt_tokens": 1' + "0" * 5000 + ', "completion_tokens": 1}',
            "usage.prompt_tokens was Infinity",
        ),
        ('{"prompt_tokens": true, "completion_tokens": 1}', "usage.prompt_tokens was true"),
    ],
)
def test_openai_usage_that_is_no_count_keeps_the_answer_with_a_note(
    server: ByteServer, usage: str, note: str
) -> None:
    body = b'{"choices": [{"message": {"content": "4"}}], "usage": ' + usage.encode() + b"}"
    done, error = outcome(openai_provider(server), server, on_the_wire(body))
    assert error is None and done is not None and done.text == "4" and done.usage is None
    assert done.extra[NOTE].startswith(note) and done.extra[NOTE].endswith(
        "usage recorded as unknown"
    )


def test_anthropic_blocks_of_type_text_are_joined_and_bad_usage_is_unknown(
    server: ByteServer,
) -> None:
    body = {
        "content": [
            {"type": "thinking", "thinking": "hm"},
            {"type": "text", "text": "4"},
            {"type": "text", "text": "!"},
        ],
        "usage": {"input_tokens": -3, "output_tokens": 2},
    }
    done, error = outcome(anthropic_provider(server), server, on_the_wire(dumps(body)))
    assert (
        error is None
        and done is not None
        and done.text == "4!"
        and done.usage is None
        and NOTE in done.extra
    )


def test_a_json_body_cut_at_the_close_is_transient_and_a_web_page_there_is_not(
    server: ByteServer,
) -> None:
    whole = dumps({"choices": [{"message": {"content": "4"}}]})
    _, error = outcome(
        openai_provider(server), server, on_the_wire(whole, framing="close", cut=len(whole) // 2)
    )
    assert type(error) is TransientError and "ended before its JSON did" in str(error)
    _, error = outcome(openai_provider(server), server, on_the_wire(whole, framing="close", cut=0))
    assert type(error) is TransientError
    _, error = outcome(
        openai_provider(server), server, on_the_wire(b"<html>Sign in</html>", framing="close")
    )
    assert type(error) is ArmError  # a login page: the base_url is wrong, as with any framing


def test_a_gzip_reply_is_inflated_and_identity_is_asked_for(server: ByteServer) -> None:
    body = dumps(
        {
            "choices": [{"message": {"content": "4"}}],
            "usage": {"prompt_tokens": 2, "completion_tokens": 1},
        }
    )
    done, error = outcome(openai_provider(server), server, on_the_wire(body, coding="gzip"))
    assert (
        error is None
        and done is not None
        and done.text == "4"
        and done.usage == {"prompt_tokens": 2, "completion_tokens": 1}
    )
    assert b"accept-encoding: identity" in server.heads[-1].lower()


def test_inflating_is_bounded_and_an_unknown_encoding_is_the_items_error(
    server: ByteServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("pytest_echo_bench.providers.reply.MAX_BODY", 10_000)
    bomb = on_the_wire(
        b'{"choices": [{"message": {"content": "' + b" " * 50_000 + b'"}}]}', coding="gzip"
    )
    _, error = outcome(openai_provider(server), server, bomb)
    assert type(error) is TransientError and "larger than 10000 bytes once inflated" in str(error)
    brotli = on_the_wire(b"\x1b\x00", framing="length").replace(
        b"content-type", b"content-encoding: br\r\ncontent-type"
    )
    _, error = outcome(openai_provider(server), server, brotli)
    assert type(error) is PermanentError and "content-encoding 'br'" in str(error)


@pytest.mark.parametrize("body", [b"null", b"12", b"[1]", b'"text"', b'{"error": null}'])
def test_an_error_body_that_is_no_object_is_classified_by_its_status(
    server: ByteServer, body: bytes
) -> None:
    """Found by the generated replies: a 400 with the body ``null`` raised AttributeError."""
    for provider in (openai_provider(server), anthropic_provider(server)):
        _, error = outcome(provider, server, on_the_wire(body, status=400))
        assert type(error) is PermanentError and str(error).startswith("HTTP 400"), error


@pytest.mark.parametrize(
    "status, error, scope",
    [
        (
            400,
            {"message": "Your billing address is not valid", "type": "invalid_request_error"},
            PermanentError,
        ),
        (
            429,
            {
                "message": "You exceeded your current quota, please check your plan and billing "
                "details.",
                "type": "insufficient_quota",
                "code": "insufficient_quota",
            },
            ExhaustedError,
        ),
        (
            429,
            {
                "message": "litellm.RateLimitError: You exceeded your current quota, please check "
                "your plan",
                "type": "throttling_error",
                "code": "429",
            },
            ExhaustedError,
        ),
        (402, {"message": "Insufficient credits"}, ExhaustedError),
        (
            400,
            {"message": "billing_hard_limit_reached", "code": "billing_hard_limit_reached"},
            ExhaustedError,
        ),
    ],
    ids=["billing-word-400", "insufficient-quota", "litellm-rewritten", "402", "billing-code"],
)
def test_openai_quota_is_told_by_the_error_code_not_a_word(
    server: ByteServer, status: int, error: dict[str, Any], scope: type[Exception]
) -> None:
    _, got = outcome(
        openai_provider(server), server, on_the_wire(dumps({"error": error}), status=status)
    )
    assert type(got) is scope, got


@pytest.mark.parametrize(
    "status, error, scope",
    [
        (
            400,
            {
                "type": "invalid_request_error",
                "message": "billing period in the prompt is unsupported",
            },
            PermanentError,
        ),
        (
            400,
            {
                "type": "billing_error",
                "message": "There is an issue with your account's payment method.",
            },
            ExhaustedError,
        ),
        (
            400,
            {
                "type": "invalid_request_error",
                "message": "Your credit balance is too low to access the API.",
            },
            ExhaustedError,
        ),
        (402, {"type": "invalid_request_error", "message": "payment required"}, ExhaustedError),
    ],
    ids=["billing-word-400", "billing-error", "credit-balance", "402"],
)
def test_anthropic_quota_is_told_by_the_error_type_not_a_word(
    server: ByteServer, status: int, error: dict[str, Any], scope: type[Exception]
) -> None:
    _, got = outcome(
        anthropic_provider(server),
        server,
        on_the_wire(dumps({"type": "error", "error": error}), status=status),
    )
    assert type(got) is scope, got


def test_a_bare_text_without_a_status_stops_on_quota_words_and_the_specs_patterns_apply() -> None:
    assert (
        type(
            Classifier().classify(
                TransientError("cli exited with status 1: Claude AI usage limit reached")
            )
        )
        is ExhaustedError
    )
    assert (
        type(Classifier().classify(PermanentError("HTTP 400: billing", status=400)))
        is PermanentError
    )
    mine = Classifier(exhaustion=(r"billing",))
    assert type(mine.classify(PermanentError("HTTP 400: billing", status=400))) is ExhaustedError


def test_a_memory_error_is_a_local_stop_not_a_verdict() -> None:
    error = Classifier().classify(MemoryError())
    assert type(error) is LocalError and str(error).startswith(
        "MemoryError: out of memory; free the resource"
    )


@pytest.mark.parametrize("done, usage, cost", [
    (Completion("4", {"prompt_tokens": -5}, cost_usd=-1000.0), None, None),
    (Completion("4", {"prompt_tokens": 10**400}, cost_usd=math.inf), None, None),
    (Completion("4", {"prompt_tokens": 3}, cost_usd=math.nan), {"prompt_tokens": 3}, None),
    (Completion("4", "many", cost_usd=0.5), None, 0.5),  # type: ignore[arg-type]
])
def test_any_providers_completion_is_held_to_the_usage_and_cost_rules(
    done: Completion, usage: Any, cost: Any
) -> None:
    held = checked(done)
    assert held.usage == usage and held.cost_usd == cost and (NOTE in held.extra) is (usage is None)


def test_a_completion_whose_text_is_no_string_is_the_items_error() -> None:
    with pytest.raises(PermanentError, match="the arm answered a list, not text"):
        checked(Completion(["4"]))  # type: ignore[arg-type]


# -- through the SDKs
# ------------------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["openai", "anthropic"])
def test_the_sdk_clients_read_content_parts_and_odd_usage_by_the_same_rules(
    server: ByteServer, which: str
) -> None:
    if which == "openai":
        import openai
        client = openai.OpenAI(api_key="k", base_url=server.url(), max_retries=0, timeout=30)
        provider: Any = openai_chat.OpenAIProvider(
            openai_chat.SDKTransport(client, openai), "m", None, {}
        )
        body: dict[str, Any] = {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": [{"type": "text", "text": "4"}]},
                }
            ],
            "usage": {"prompt_tokens": None, "completion_tokens": 1},
        }
    else:
        import anthropic

        client = anthropic.Anthropic(
            api_key="k", base_url=server.url(""), max_retries=0, timeout=30
        )
        provider = anthropic_messages.AnthropicProvider(
            anthropic_messages.SDKTransport(client, anthropic), "m", None, {"max_tokens": 10}
        )
        body = {
            "id": "m",
            "type": "message",
            "role": "assistant",
            "model": "m",
            "stop_reason": "end_turn",
            "content": [{"type": "text", "text": "4"}],
            "usage": {"input_tokens": 10**400, "output_tokens": 1},
        }
    done, error = outcome(provider, server, on_the_wire(dumps(body)))
    assert (
        error is None
        and done is not None
        and done.text == "4"
        and done.usage is None
        and NOTE in done.extra
    )
    body_bad = json.loads(dumps(body))
    if which == "openai":
        body_bad["choices"][0]["message"]["content"] = 12345
    else:
        body_bad["content"] = 12345
    _, error = outcome(provider, server, on_the_wire(dumps(body_bad)))
    assert type(error) is PermanentError and "content" in str(error)


# -- whole sweeps
# ---------------------------------------------------------------------------------------

pytestmark = pytest.mark.usefixtures("api_key")


def sweep_spec(server: FakeOpenAI, n: int, client: str) -> str:
    arms = (f"  gpt:\n    provider: openai\n    model: m\n    base_url: {server.base_url}\n"
            f"    api_key_env: TEST_OPENAI_KEY\n    client: {client}\n")
    return sim_spec(
        n,
        arms=arms,
        extra="retries: {attempts: 3, backoff_s: 0.01, max_backoff_s: 0.02}\n"
        "pricing:\n  gpt: {input: 2.5, output: 10.0}\n",
    )


def per_item(server: FakeOpenAI, replies: dict[str, tuple[int, bytes]]) -> None:
    """The raw reply for each item whose prompt names it ("(1)" is q1); the others answer "4"."""
    def fault_for(body: dict[str, Any]) -> tuple[str, Any] | None:
        prompt = body["messages"][-1]["content"]
        for item, (status, data) in replies.items():
            if prompt.endswith(f"({item})"):
                return ("raw", (status, "application/json", data, {}))
        return None

    server.answer = lambda prompt: "4"
    server.fault_for = fault_for


def reply_with(content: Any, usage: str = '{"prompt_tokens": 3, "completion_tokens": 1}') -> bytes:
    return (
        b'{"choices": [{"message": {"role": "assistant", "content": '
        + dumps(content)
        + b'}}], "usage": '
        + usage.encode()
        + b"}"
    )


@pytest.mark.parametrize("client", ["http", "sdk"])
def test_a_sweep_with_content_parts_completes_and_grades_every_item(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI, client: str) -> None:
    per_item(openai_server, {"1": (200, reply_with([{"type": "text", "text": "4"}])),
                             "2": (200, reply_with([{"type": "text", "text": "5"}])),
                             "3": (200, reply_with(12345))})
    make_spec(pytester, sweep_spec(openai_server, 5, client))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 0, result.stdout.str()[-2000:]
    by_id = {r["task_id"]: r for r in rows}
    assert [by_id[f"q{i}"]["status"] for i in range(5)] == [
        "correct",
        "correct",
        "wrong",
        "error",
        "correct",
    ]
    assert "message.content is a number" in by_id["q3"]["detail"]
    assert not (pytester.path / "results.jsonl.stop.json").exists()


def test_a_sweep_with_negative_huge_and_null_usage_keeps_every_answer(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI) -> None:
    usages = [
        '{"prompt_tokens": -1000, "completion_tokens": 1}',
        '{"prompt_tokens": 1' + "0" * 400 + "}",
        '{"prompt_tokens": NaN}',
        '{"prompt_tokens": null}',
        '"lots"',
    ]
    per_item(openai_server, {str(i + 1): (200, reply_with("4", u)) for i, u in enumerate(usages)})
    make_spec(pytester, sweep_spec(openai_server, 7, "http"))
    result, _, rows = sweep.run("--bench-concurrency", "2")
    assert result.ret == 0, result.stdout.str()[-2000:]
    by_id = {r["task_id"]: r for r in rows}
    assert len(rows) == 7 and all(r["status"] == "correct" for r in rows)
    for i in range(1, 6):
        assert by_id[f"q{i}"].get("usage") is None and by_id[f"q{i}"].get("cost_usd") is None
        assert "usage recorded as unknown" in by_id[f"q{i}"]["extra"][NOTE]
    assert by_id["q0"]["cost_usd"] > 0 and by_id["q6"]["usage"]["prompt_tokens"] >= 0


def test_a_400_that_says_billing_is_the_items_error_and_the_sweep_goes_on(
        pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI) -> None:
    error = dumps({"error": {"message": "The billing field of this prompt is not supported",
                             "type": "invalid_request_error", "code": "invalid_prompt"}})
    per_item(openai_server, {"1": (400, error)})
    make_spec(pytester, sweep_spec(openai_server, 4, "http"))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 0, result.stdout.str()[-2000:]
    assert sorted((r["task_id"], r["status"]) for r in rows) == [
        ("q0", "correct"), ("q1", "error"), ("q2", "correct"), ("q3", "correct")]
    assert not (pytester.path / "results.jsonl.stop.json").exists()


def test_a_memory_error_in_a_python_arm_stops_the_run_resumably_and_records_nothing(
        pytester: pytest.Pytester, sweep: Sweep, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeconftest(
        "import os\nfrom pytest_echo_bench import arm\n\n"
        "@arm('hungry')\ndef hungry(ctx):\n"
        "    if ctx.example.id == 'q1' and not os.environ.get('FED'):\n        raise MemoryError\n"
        "    return '4'\n")
    make_spec(pytester, sim_spec(3, arms="  py: {provider: python, function: hungry}"))
    result, _, rows = sweep.run()
    assert result.ret == 2, result.stdout.str()[-2000:]
    marker = json.loads((pytester.path / "results.jsonl.stop.json").read_text())
    assert marker["reason"] == "local-error" and "MemoryError: out of memory" in marker["message"]
    assert "q1" not in {r["task_id"] for r in rows} and all(r["status"] == "correct" for r in rows)
    result.stdout.fnmatch_lines(["*resume with:*"])
    monkeypatch.setenv("FED", "1")  # memory freed
    result, _, rows = sweep.run("--bench-resume", str(sweep.out))
    assert result.ret == 0 and sorted(r["task_id"] for r in rows) == ["q0", "q1", "q2"]


def test_a_python_arm_answering_no_text_is_the_items_error_and_the_sweep_goes_on(
        pytester: pytest.Pytester, sweep: Sweep) -> None:
    pytester.makeconftest(
        "from pytest_echo_bench import Completion, arm\n\n"
        "@arm('odd')\ndef odd(ctx):\n"
        "    return Completion(['4']) if ctx.example.id == 'q1' else Completion('4', "
        "{'prompt_tokens': -5})\n"
    )
    make_spec(pytester, sim_spec(3, arms="  py: {provider: python, function: odd}"))
    result, _, rows = sweep.run()
    assert result.ret == 0, result.stdout.str()[-2000:]
    by_id = {r["task_id"]: r for r in rows}
    assert (
        by_id["q1"]["status"] == "error"
        and "the arm answered a list, not text" in by_id["q1"]["detail"]
    )
    assert by_id["q0"]["status"] == by_id["q2"]["status"] == "correct"
    assert by_id["q0"].get("usage") is None and NOTE in by_id["q0"]["extra"]
