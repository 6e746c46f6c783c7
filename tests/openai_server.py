"""A real OpenAI-compatible chat-completions server on 127.0.0.1, with injectable faults.

Tests point ``base_url`` at it (``fake_server`` holds the server, its faults and its rate limit).
It speaks the wire format: JSON bodies, ``{"error": {...}}`` errors with codes, ``retry-after``
headers. With ``rate_per_s`` set (``limit_rate``) it admits at most that many requests in any one
second and answers the rest 429 at once, with ``retry-after``, ``retry-after-ms`` and
``x-ratelimit-reset-requests`` saying when the next one would be admitted (what the throughput
benchmark and the limiter tests use). Its quota (``quota_after``) comes back ``quota_window_s``
after it ran out, when that is set.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from fake_server import FakeHandler, FakeServer, Fault

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


class OpenAIHandler(FakeHandler):
    def do_GET(self) -> None:  # noqa: N802 - where a redirect to a login leads: a web page
        self._send_raw(200, "text/html", b"<!doctype html><html><body>Sign in</body></html>")


class FakeOpenAI(FakeServer):
    path_prefix = "/v1"
    rate_limit_error = RATE_LIMIT
    handler = OpenAIHandler

    def __init__(self, answer: Callable[[str], str] = lambda prompt: "42") -> None:
        super().__init__(answer)
        self.quota_after: int | None = None
        self.quota_window_s: float | None = None  # the quota comes back this long after it ran out
        self.exhausted_at: float | None = None
        self.with_usage = True  # False: replies carry no usage (some proxies and local servers)
        # the model replies say served them (else the asked): any JSON value, as a server may send
        self.served_model: Any = None
        self.fingerprint: Any = None  # the replies' ``system_fingerprint`` (None: left out)
        # Token classes, as OpenAI details them (None: no details sent): a prompt's tokens read
        # from the cache, and a reply's spent reasoning, each counted in its side's total.
        self.cached_tokens: int | None = None
        self.reasoning_tokens: int | None = None

    def spent(self) -> Fault | None:
        if self.quota_after is None or self.served < self.quota_after:
            return None
        now = time.monotonic()
        self.exhausted_at = self.exhausted_at or now
        if self.quota_window_s is None or now - self.exhausted_at < self.quota_window_s:
            return ("error", (429, QUOTA, {}))
        self.served, self.exhausted_at = 0, None  # a new usage window
        return None

    def record(self, request: BaseHTTPRequestHandler, body: dict[str, Any]) -> dict[str, Any]:
        # The client's port: which process sent it (a test finds the socket in /proc).
        return {"body": body, "auth": request.headers.get("authorization"),
                "port": request.client_address[1]}

    def refuse(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        if not path.endswith("/chat/completions"):
            return 404, {"message": "not found", "type": "invalid_request_error"}
        return None

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = body["messages"][-1]["content"]
        text = self.answer(prompt)
        reply = {
            "id": "chatcmpl-local", "object": "chat.completion", "created": int(time.time()),
            "model": self.served_model or body.get("model", "local"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": self.usage(len(prompt.split()), len(text.split())),
        }
        if not self.with_usage:
            del reply["usage"]
        if self.fingerprint is not None:
            reply["system_fingerprint"] = self.fingerprint
        return reply

    def usage(self, prompt: int, completion: int) -> dict[str, Any]:
        cached, reasoning = self.cached_tokens or 0, self.reasoning_tokens or 0
        prompt, completion = prompt + cached, completion + reasoning
        usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                                 "total_tokens": prompt + completion}
        if self.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": cached, "audio_tokens": 0}
        if self.reasoning_tokens is not None:
            usage["completion_tokens_details"] = {
                "reasoning_tokens": reasoning, "audio_tokens": 0,
                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
        return usage

    def error_payload(self, error: dict[str, Any]) -> dict[str, Any]:
        return {"error": error}
