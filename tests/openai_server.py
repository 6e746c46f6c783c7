"""A real OpenAI-compatible chat-completions server on 127.0.0.1, with injectable faults.

Tests point ``base_url`` at it. It answers every request with ``answer(prompt)`` unless a
fault is queued (``push``) or the quota is spent (``quota_after``). It speaks the wire format:
JSON bodies, ``{"error": {...}}`` errors with codes, ``retry-after`` headers. With
``rate_per_s`` set it admits at most that many requests in any one second and answers the rest
429 at once, with ``retry-after``, ``retry-after-ms`` and ``x-ratelimit-reset-requests`` saying
when the next one would be admitted (what the throughput benchmark and the limiter tests use).
"""

from __future__ import annotations

import json
import math
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

RATE_LIMIT = {
    "message": "Rate limit reached for requests",
    "type": "requests",
    "code": "rate_limit_exceeded",
}
QUOTA = {"message": "You exceeded your current quota, please check your plan and billing details.",
         "type": "insufficient_quota", "code": "insufficient_quota"}
OVERLOADED = {"message": "Overloaded", "type": "overloaded_error", "code": None}
BAD_REQUEST = {
    "message": "This prompt is not allowed",
    "type": "invalid_request_error",
    "code": "invalid_prompt",
}


class Server(ThreadingHTTPServer):
    """A thread per connection, and a listen backlog for hundreds of them.

    The default backlog is 5: a client opening 32 or 256 connections at once loses SYNs beyond
    it and retries them a second later (or is reset), which looked like a slow client.
    """

    daemon_threads = True
    request_queue_size = 1024


def reset_connection(handler: BaseHTTPRequestHandler) -> None:
    """Drop the handler's connection with a TCP reset, now.

    ``rfile``/``wfile`` hold references to the socket: closing only ``handler.connection`` defers
    the real close until they go, and the keep-alive loop then waits on ``rfile`` for a next
    request the client never sends, so the client saw its own timeout (10 s) instead of a reset.
    SO_LINGER 0 makes the close send RST rather than FIN; ``close_connection`` ends the loop.
    """
    handler.close_connection = True
    handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    handler.rfile.close()
    handler.wfile.close()
    handler.connection.close()


class RateWindow:
    """At most ``per_s`` admissions in any sliding second; the rest get how long to wait."""

    def __init__(self, per_s: int) -> None:
        self.per_s = per_s
        self.admitted: deque[float] = deque()
        self.refused = 0  # requests answered 429

    def admit(self, now: float) -> float | None:
        """None when admitted, else the seconds until the next admission is possible."""
        while self.admitted and now - self.admitted[0] >= 1.0:
            self.admitted.popleft()
        if len(self.admitted) < self.per_s:
            self.admitted.append(now)
            return None
        self.refused += 1
        return max(0.001, 1.0 - (now - self.admitted[0]))

    @staticmethod
    def headers(wait: float) -> dict[str, str]:
        """The headers real APIs send with a 429: whole seconds,
        milliseconds, and OpenAI's reset."""
        return {
            "retry-after": str(max(1, math.ceil(wait))),
            "retry-after-ms": str(math.ceil(wait * 1000)),
            "x-ratelimit-remaining-requests": "0",
            "x-ratelimit-reset-requests": f"{math.ceil(wait * 1000)}ms",
        }


class FakeOpenAI:
    def __init__(self, answer: Callable[[str], str] = lambda prompt: "42") -> None:
        self.answer = answer
        self.faults: deque[tuple[str, Any]] = deque()
        self.quota_after: int | None = None
        self.quota_window_s: float | None = None  # the quota comes back this long after it ran out
        # Asked (under the lock) for every request no queued fault
        # claims: a fault or None (answer it).
        self.fault_for: Callable[[dict[str, Any]], tuple[str, Any] | None] | None = None
        self.exhausted_at: float | None = None
        self.rate: RateWindow | None = None  # set by ``limit_rate``
        self.served = 0
        self.with_usage = True  # False: replies carry no usage (some proxies and local servers)
        self.in_flight = 0
        self.max_in_flight = 0  # the most requests the server was answering at once
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.httpd = Server(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def limit_rate(self, per_s: int) -> None:
        """Admit at most ``per_s`` requests in any second; answer
        the others 429 with retry-after."""
        self.rate = RateWindow(per_s)

    def push(self, kind: str, value: Any = None, times: int = 1) -> None:
        """Queue a fault: ("error", (status, body, headers)), ("hang", seconds), ("reset", None) or
        ("raw", (status, content_type, body bytes, headers)): a reply that
        is not the API's (a login page)."""
        for _ in range(times):
            self.faults.append((kind, value))

    def _next(self, body: dict[str, Any]) -> tuple[str, Any]:
        with self.lock:
            if self.faults:
                return self.faults.popleft()
            fault = self.fault_for(body) if self.fault_for is not None else None
            if fault is not None:
                return fault
            wait = self.rate.admit(time.monotonic()) if self.rate is not None else None
            if wait is not None:
                return ("error", (429, RATE_LIMIT, RateWindow.headers(wait)))
            if self.quota_after is not None and self.served >= self.quota_after:
                now = time.monotonic()
                self.exhausted_at = self.exhausted_at or now
                if self.quota_window_s is None or now - self.exhausted_at < self.quota_window_s:
                    return ("error", (429, QUOTA, {}))
                self.served, self.exhausted_at = 0, None  # a new usage window

            self.served += 1
            return ("ok", None)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                # Headers and body go out in separate writes; without NODELAY, Nagle's algorithm
                # and the client's delayed ACK add ~40 ms to every response.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def do_GET(self) -> None:  # noqa: N802 - where a redirect to a login leads: a web page
                self._send_raw(
                    200, "text/html", b"<!doctype html><html><body>Sign in</body></html>"
                )

            def do_POST(self) -> None:  # noqa: N802 - the stdlib's naming
                body = json.loads(
                    self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}"
                )
                with server.lock:
                    # The client's port: which process sent it (a test finds the socket in /proc).
                    server.requests.append({"body": body, "auth": self.headers.get("authorization"),
                                            "port": self.client_address[1]})
                if not self.path.endswith("/chat/completions"):
                    return self._send(
                        404, {"error": {"message": "not found", "type": "invalid_request_error"}}
                    )
                with server.lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    return self._answer(body)
                finally:
                    with server.lock:
                        server.in_flight -= 1

            def _answer(self, body: dict[str, Any]) -> None:
                kind, value = server._next(body)
                if kind == "hang":
                    time.sleep(value)
                    return self._send(200, self._completion(body))
                if kind == "reset":
                    return reset_connection(self)
                if kind == "error":
                    status, error, headers = value
                    return self._send(status, {"error": error}, headers)
                if kind == "raw":
                    return self._send_raw(*value)
                return self._send(200, self._completion(body))

            def _completion(self, body: dict[str, Any]) -> dict[str, Any]:
                prompt = body["messages"][-1]["content"]
                text = server.answer(prompt)
                reply = {
                    "id": "chatcmpl-local",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", "local"),
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "stop",
                            "message": {"role": "assistant", "content": text},
                        }
                    ],
                    "usage": {
                        "prompt_tokens": len(prompt.split()),
                        "completion_tokens": len(text.split()),
                        "total_tokens": len(prompt.split()) + len(text.split()),
                    },
                }
                if not server.with_usage:
                    del reply["usage"]
                return reply

            def _send(
                self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
            ) -> None:
                self._send_raw(status, "application/json", json.dumps(payload).encode(), headers)

            def _send_raw(
                self,
                status: int,
                content_type: str,
                data: bytes,
                headers: dict[str, str] | None = None,
            ) -> None:
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

        return Handler
