"""The fake API servers' faults are what they say: a queued reset is a TCP reset, at once.

Closing only the handler's socket left its ``rfile``/``wfile`` open, so the client waited out its
own timeout instead; the "connection reset" cases then tested a timeout twice (20-30 s each).
"""

from __future__ import annotations

import json
import re
import socket
import time
from typing import Any

import pytest
from anthropic_server import FakeAnthropic
from openai_server import FakeOpenAI

BODY = json.dumps(
    {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "2+2=?"}]}
).encode()


def post(port: int, path: str) -> bytes:
    request = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
               f"content-length: {len(BODY)}\r\n\r\n").encode() + BODY
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        return sock.recv(65536)


def exchange(port: int, path: str) -> tuple[bytes, bytes]:
    """A request's reply: its head and its whole body (which may come in a write of its own)."""
    request = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
               f"content-length: {len(BODY)}\r\n\r\n").encode() + BODY
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        head, body = data.split(b"\r\n\r\n", 1)
        length = int(re.search(rb"content-length: (\d+)", head, re.I)[1])  # type: ignore[index]
        while len(body) < length:
            body += sock.recv(65536)
        return head, body


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_queued_reset_resets_the_connection_at_once(kind: str) -> None:
    server: Any = FakeOpenAI() if kind == "openai" else FakeAnthropic()
    path = "/v1/chat/completions" if kind == "openai" else "/v1/messages"
    with server:
        port = server.httpd.server_address[1]
        server.push("reset")
        start = time.monotonic()
        with pytest.raises(ConnectionResetError):
            post(port, path)
        # a reset, not a reply held until the client's 30 s timeout
        assert time.monotonic() - start < 10
        assert post(port, path).startswith(b"HTTP/1.1 200")  # the next request is served as usual


@pytest.mark.parametrize(("kind", "wrapped"), [
    ("openai", lambda error: {"error": error}),
    ("anthropic", lambda error: {"type": "error", "error": error}),
])
def test_each_server_refuses_a_wrong_route_and_faults_in_its_own_wire_format(kind: str,
                                                                             wrapped: Any) -> None:
    """The shared base holds the faults; each server's errors stay its API's shape."""
    server: Any = FakeOpenAI() if kind == "openai" else FakeAnthropic()
    path = "/v1/chat/completions" if kind == "openai" else "/v1/messages"
    with server:
        port = server.httpd.server_address[1]
        head, body = exchange(port, "/v1/nowhere")
        assert head.startswith(b"HTTP/1.1 404") and json.loads(body)["error"]
        overloaded = {"type": "overloaded_error", "message": "Overloaded"}
        server.push("error", (529, overloaded, {"retry-after": "2"}))
        head, body = exchange(port, path)
        assert head.startswith(b"HTTP/1.1 529") and b"retry-after: 2" in head
        assert json.loads(body) == wrapped(overloaded)
        assert len(server.requests) == 2 and server.requests[1]["body"]["model"] == "m"
