"""What the fake API servers share: a real HTTP server on 127.0.0.1 in a thread, queued faults, a
rate limit, and the record of every request. Each provider's server (``openai_server``,
``anthropic_server``) says only what is its own: the wire format of replies and errors, what a
request records, what it refuses, and how its quota runs out.

A request is answered with ``answer(prompt)`` unless a fault is queued (``push``), ``fault_for``
returns one, the rate limit (``limit_rate``) refuses it, or the quota is spent (``spent``).
"""

from __future__ import annotations

import abc
import json
import math
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self

Fault = tuple[str, Any]  # what ``push`` queues: ("error", ...), ("hang", ...), ("reset", None), ...


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
        """The headers real APIs send with a 429: whole seconds, milliseconds, OpenAI's reset."""
        ms = math.ceil(wait * 1000)
        return {"retry-after": str(max(1, math.ceil(wait))), "retry-after-ms": str(ms),
                "x-ratelimit-remaining-requests": "0",
                "x-ratelimit-reset-requests": f"{ms}ms"}


class FakeHandler(BaseHTTPRequestHandler):
    """One connection's requests: recorded, refused, faulted or answered, as ``fake`` says."""

    protocol_version = "HTTP/1.1"
    fake: ClassVar[FakeServer]

    def log_message(self, *args: object) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes; without NODELAY, Nagle's algorithm
        # and the client's delayed ACK add ~40 ms to every response.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's naming
        fake = self.fake
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        with fake.lock:
            fake.requests.append(fake.record(self, body))
        refused = fake.refuse(self.path, body)
        if refused is not None:
            status, error = refused
            return self._send(status, fake.error_payload(error))
        with fake.lock:
            fake.in_flight += 1
            fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
        try:
            return self._answer(body)
        finally:
            with fake.lock:
                fake.in_flight -= 1

    def _answer(self, body: dict[str, Any]) -> None:
        kind, value = self.fake._next(body)
        if kind == "hang":
            time.sleep(value)
        elif kind == "reset":
            return reset_connection(self)
        elif kind == "error":
            status, error, headers = value
            return self._send(status, self.fake.error_payload(error), headers)
        elif kind == "raw":
            return self._send_raw(*value)
        return self._send(200, self.fake.reply(body))

    def _send(self, status: int, payload: dict[str, Any],
              headers: dict[str, str] | None = None) -> None:
        self._send_raw(status, "application/json", json.dumps(payload).encode(), headers)

    def _send_raw(self, status: int, content_type: str, data: bytes,
                  headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


class FakeServer(abc.ABC):
    """The server, its faults and its records; a subclass gives the wire format."""

    path_prefix: ClassVar[str] = ""  # what ``base_url`` ends with
    rate_limit_error: ClassVar[dict[str, Any]] = {}  # the error a 429 of ``limit_rate`` carries
    handler: ClassVar[type[FakeHandler]] = FakeHandler  # a subclass adds its own methods (a GET)

    def __init__(self, answer: Callable[[str], str] = lambda prompt: "42") -> None:
        self.answer = answer
        self.faults: deque[Fault] = deque()
        # Asked (under the lock) for every request no queued fault claims: a fault, or None to
        # answer it.
        self.fault_for: Callable[[dict[str, Any]], Fault | None] | None = None
        self.rate: RateWindow | None = None  # set by ``limit_rate``
        self.served = 0
        self.in_flight = 0
        self.max_in_flight = 0  # the most requests the server was answering at once
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.httpd = Server(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{self.path_prefix}"

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def limit_rate(self, per_s: int) -> None:
        """Admit at most ``per_s`` requests in any second; answer the others 429, retry-after."""
        self.rate = RateWindow(per_s)

    def push(self, kind: str, value: Any = None, times: int = 1) -> None:
        """Queue a fault: ("error", (status, error, headers)), ("hang", seconds), ("reset", None)
        or ("raw", (status, content_type, body bytes, headers)): a reply that is not the API's (a
        login page)."""
        for _ in range(times):
            self.faults.append((kind, value))

    def _next(self, body: dict[str, Any]) -> Fault:
        with self.lock:
            if self.faults:
                return self.faults.popleft()
            fault = self.fault_for(body) if self.fault_for is not None else None
            if fault is not None:
                return fault
            wait = self.rate.admit(time.monotonic()) if self.rate is not None else None
            if wait is not None:
                return ("error", (429, self.rate_limit_error, RateWindow.headers(wait)))
            spent = self.spent()
            if spent is not None:
                return spent
            self.served += 1
            return ("ok", None)

    def _handler(self) -> type[FakeHandler]:
        """The handler class of this server (a rebound ``httpd`` takes it too)."""
        return type("Handler", (self.handler,), {"fake": self})

    # What each provider's server says: its wire format.
    def spent(self) -> Fault | None:
        """The fault of a spent quota, or None; called under the lock, before ``served`` counts."""
        return None

    @abc.abstractmethod
    def record(self, request: BaseHTTPRequestHandler, body: dict[str, Any]) -> dict[str, Any]:
        """What ``requests`` keeps of a request."""

    @abc.abstractmethod
    def refuse(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        """The status and error of a request the API refuses before any fault (a wrong route)."""

    @abc.abstractmethod
    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        """The API's answer to ``body``, its text from ``answer``."""

    @abc.abstractmethod
    def error_payload(self, error: dict[str, Any]) -> dict[str, Any]:
        """The body of an error reply carrying ``error``."""
