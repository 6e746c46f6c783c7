"""A real Anthropic Messages API server on 127.0.0.1, with injectable faults.

Tests point ``base_url`` at it. It answers ``POST /v1/messages`` with ``answer(prompt)`` unless a
fault is queued (``push``) or the credit is spent (``credit_after``). It speaks the wire format:
``{"type": "error", "error": {"type", "message"}}`` errors, ``retry-after`` headers, usage in
``input_tokens`` / ``output_tokens``; ``limit_rate`` answers 429 beyond N requests a second, as
``openai_server`` does.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from openai_server import RateWindow, Server, reset_connection

RATE_LIMIT = {
    "type": "rate_limit_error",
    "message": "Number of request tokens has exceeded your per-minute rate limit",
}
OVERLOADED = {"type": "overloaded_error", "message": "Overloaded"}
API_ERROR = {"type": "api_error", "message": "Internal server error"}
CREDIT = {
    "type": "invalid_request_error",
    "message": "Your credit balance is too low to access the Anthropic API. Please go to Plans & "
    "Billing to upgrade or purchase credits.",
}
BILLING = {
    "type": "billing_error",
    "message": "There is an issue with your account's payment method.",
}
PERMISSION = {
    "type": "permission_error",
    "message": "Your API key does not have permission to use the specified resource.",
}
AUTHENTICATION = {"type": "authentication_error", "message": "invalid x-api-key"}
BAD_REQUEST = {
    "type": "invalid_request_error",
    "message": "messages: text content blocks must be non-empty",
}


class FakeAnthropic:
    def __init__(self, answer: Callable[[str], str] = lambda prompt: "42") -> None:
        self.answer = answer
        self.faults: deque[tuple[str, Any]] = deque()
        self.credit_after: int | None = None
        self.served = 0
        self.rate: RateWindow | None = None  # set by ``limit_rate``
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.httpd = Server(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> FakeAnthropic:
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
        """Queue a fault: ("error", (status, error, headers)),
        ("hang", seconds) or ("reset", None)."""
        for _ in range(times):
            self.faults.append((kind, value))

    def _next(self) -> tuple[str, Any]:
        with self.lock:
            if self.faults:
                return self.faults.popleft()
            wait = self.rate.admit(time.monotonic()) if self.rate is not None else None
            if wait is not None:
                return ("error", (429, RATE_LIMIT, RateWindow.headers(wait)))
            if self.credit_after is not None and self.served >= self.credit_after:
                return ("error", (400, CREDIT, {}))
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
                # Headers and body go out in separate writes: without NODELAY, Nagle adds ~40 ms.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def do_POST(self) -> None:  # noqa: N802 - the stdlib's naming
                body = json.loads(
                    self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}"
                )
                with server.lock:
                    server.requests.append(
                        {
                            "body": body,
                            "key": self.headers.get("x-api-key"),
                            "auth": self.headers.get("authorization"),
                            "version": self.headers.get("anthropic-version"),
                        }
                    )
                if self.path != "/v1/messages":
                    return self._error(
                        404, {"type": "not_found_error", "message": f"no route {self.path}"}
                    )
                if "max_tokens" not in body:
                    return self._error(
                        400,
                        {"type": "invalid_request_error", "message": "max_tokens: Field required"},
                    )
                kind, value = server._next()
                if kind == "hang":
                    time.sleep(value)
                    return self._send(200, self._message(body))
                if kind == "reset":
                    return reset_connection(self)
                if kind == "error":
                    status, error, headers = value
                    return self._error(status, error, headers)
                return self._send(200, self._message(body))

            def _message(self, body: dict[str, Any]) -> dict[str, Any]:
                prompt = body["messages"][-1]["content"]
                text = server.answer(prompt)
                return {
                    "id": "msg_local",
                    "type": "message",
                    "role": "assistant",
                    "model": body.get("model", "local"),
                    "content": [{"type": "text", "text": text}],
                    "stop_reason": "end_turn",
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": len(prompt.split()),
                        "output_tokens": len(text.split()),
                    },
                }

            def _error(
                self, status: int, error: dict[str, Any], headers: dict[str, str] | None = None
            ) -> None:
                self._send(status, {"type": "error", "error": error}, headers)

            def _send(
                self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
            ) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

        return Handler
