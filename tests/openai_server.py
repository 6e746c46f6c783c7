"""A real OpenAI-compatible chat-completions server on 127.0.0.1, with injectable faults.

Tests point ``base_url`` at it. It answers every request with ``answer(prompt)`` unless a
fault is queued (``push``) or the quota is spent (``quota_after``). It speaks the wire format:
JSON bodies, ``{"error": {...}}`` errors with codes, ``retry-after`` headers.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

RATE_LIMIT = {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}
QUOTA = {"message": "You exceeded your current quota, please check your plan and billing details.",
         "type": "insufficient_quota", "code": "insufficient_quota"}
OVERLOADED = {"message": "Overloaded", "type": "overloaded_error", "code": None}
BAD_REQUEST = {"message": "This prompt is not allowed", "type": "invalid_request_error", "code": "invalid_prompt"}


class FakeOpenAI:
    def __init__(self, answer: Callable[[str], str] = lambda prompt: "42") -> None:
        self.answer = answer
        self.faults: deque[tuple[str, Any]] = deque()
        self.quota_after: int | None = None
        self.quota_window_s: float | None = None  # the quota comes back this long after it ran out
        # Asked (under the lock) for every request no queued fault claims: a fault or None (answer it).
        self.fault_for: Callable[[dict[str, Any]], tuple[str, Any] | None] | None = None
        self.exhausted_at: float | None = None
        self.served = 0
        self.in_flight = 0
        self.max_in_flight = 0  # the most requests the server was answering at once
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
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

    def push(self, kind: str, value: Any = None, times: int = 1) -> None:
        """Queue a fault: ("error", (status, body, headers)), ("hang", seconds) or ("reset", None)."""
        for _ in range(times):
            self.faults.append((kind, value))

    def _next(self, body: dict[str, Any]) -> tuple[str, Any]:
        with self.lock:
            if self.faults:
                return self.faults.popleft()
            fault = self.fault_for(body) if self.fault_for is not None else None
            if fault is not None:
                return fault
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

            def do_POST(self) -> None:  # noqa: N802 - the stdlib's naming
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                with server.lock:
                    server.requests.append({"body": body, "auth": self.headers.get("authorization")})
                if not self.path.endswith("/chat/completions"):
                    return self._send(404, {"error": {"message": "not found", "type": "invalid_request_error"}})
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
                    # SO_LINGER 0: the client sees a TCP reset, not a clean close.
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.connection.close()
                    return None
                if kind == "error":
                    status, error, headers = value
                    return self._send(status, {"error": error}, headers)
                return self._send(200, self._completion(body))

            def _completion(self, body: dict[str, Any]) -> dict[str, Any]:
                prompt = body["messages"][-1]["content"]
                text = server.answer(prompt)
                return {
                    "id": "chatcmpl-local", "object": "chat.completion", "created": int(time.time()),
                    "model": body.get("model", "local"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}],
                    "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": len(text.split()),
                              "total_tokens": len(prompt.split()) + len(text.split())},
                }

            def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

        return Handler
