"""A real Anthropic Messages API server on 127.0.0.1, with injectable faults.

Tests point ``base_url`` at it (``fake_server`` holds the server, its faults and its rate limit).
It answers ``POST /v1/messages`` and speaks the wire format: ``{"type": "error", "error": {"type",
"message"}}`` errors, ``retry-after`` headers, usage in ``input_tokens`` / ``output_tokens``, a 400
for a request without ``max_tokens``; past ``credit_after`` requests the credit is spent.
"""

from __future__ import annotations

from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from fake_server import FakeServer, Fault

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


class FakeAnthropic(FakeServer):
    rate_limit_error = RATE_LIMIT

    def __init__(self, answer: Callable[[str], str] = lambda prompt: "42") -> None:
        super().__init__(answer)
        self.credit_after: int | None = None
        self.served_model: Any = None  # the model replies say served them (else the asked)
        # The cache's reads and writes of each prompt, as the Messages API reports them apart
        # from input_tokens (None: the field left out).
        self.cache_read: int | None = None
        self.cache_write: int | None = None

    def spent(self) -> Fault | None:
        if self.credit_after is not None and self.served >= self.credit_after:
            return ("error", (400, CREDIT, {}))
        return None

    def record(self, request: BaseHTTPRequestHandler, body: dict[str, Any]) -> dict[str, Any]:
        headers = request.headers
        return {"body": body, "key": headers.get("x-api-key"), "auth": headers.get("authorization"),
                "version": headers.get("anthropic-version")}

    def refuse(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        if path != "/v1/messages":
            return 404, {"type": "not_found_error", "message": f"no route {path}"}
        if "max_tokens" not in body:
            return 400, {"type": "invalid_request_error", "message": "max_tokens: Field required"}
        return None

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = body["messages"][-1]["content"]
        text = self.answer(prompt)
        return {
            "id": "msg_local", "type": "message", "role": "assistant",
            "model": self.served_model or body.get("model", "local"),
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": len(prompt.split()), "output_tokens": len(text.split()),
                      **self.cache_usage()},
        }

    def cache_usage(self) -> dict[str, int]:
        names = {"cache_read_input_tokens": self.cache_read,
                 "cache_creation_input_tokens": self.cache_write}
        return {name: tokens for name, tokens in names.items() if tokens is not None}

    def error_payload(self, error: dict[str, Any]) -> dict[str, Any]:
        return {"type": "error", "error": error}
