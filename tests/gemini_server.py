"""A real Gemini API server on 127.0.0.1 (``generateContent``), with injectable faults.

Tests point ``base_url`` at it (``fake_server`` holds the server, its faults and its rate limit).
It speaks the wire format as Google documents it: ``POST /v1beta/models/{model}:generateContent``
with the key in ``x-goog-api-key`` (a key in the URL's query, or a wrong one, is refused with
the 400 ``API_KEY_INVALID`` Google sends), ``contents`` / ``systemInstruction`` /
``generationConfig``, replies with ``candidates``, ``usageMetadata`` and ``modelVersion``, thought
parts when ``thoughts`` is set, a candidate finished for ``SAFETY`` (``block``) or a prompt
blocked (``prompt_block``), and errors as ``{"error": {"code", "message", "status", "details"}}``
with ``QuotaFailure`` and ``RetryInfo`` details. Past ``quota_after`` requests the day's quota is
spent.
"""

from __future__ import annotations

from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

from fake_server import FakeHandler, FakeServer, Fault

QUOTA_TEXT = ("You exceeded your current quota, please check your plan and billing details. For "
              "more information on this error, head to: "
              "https://ai.google.dev/gemini-api/docs/rate-limits.")


def quota_error(
    quota_id: str, retry_delay: str | None = "26s", value: str = "10"
) -> dict[str, Any]:
    """A 429 ``RESOURCE_EXHAUSTED`` as the API sends it: which quota ran out, and when to retry."""
    found: list[dict[str, Any]] = [
        {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{
            "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
            "quotaId": quota_id, "quotaDimensions": {"location": "global", "model": "gemini"},
            "quotaValue": value}]},
        {"@type": "type.googleapis.com/google.rpc.Help", "links": [{
            "description": "Learn more about Gemini API quotas",
            "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}]},
    ]
    if retry_delay is not None:
        found.append({"@type": "type.googleapis.com/google.rpc.RetryInfo",
                      "retryDelay": retry_delay})
    return {"code": 429, "message": QUOTA_TEXT, "status": "RESOURCE_EXHAUSTED", "details": found}


RATE_LIMIT = quota_error("GenerateRequestsPerMinutePerProjectPerModel-FreeTier", "0.05s")
DAILY_QUOTA = quota_error("GenerateRequestsPerDayPerProjectPerModel-FreeTier", "43s", "200")
KEY_INVALID = {"code": 400, "message": "API key not valid. Please pass a valid API key.",
               "status": "INVALID_ARGUMENT", "details": [{
                   "@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
                   "domain": "googleapis.com",
                   "metadata": {"service": "generativelanguage.googleapis.com"}}]}
UNAVAILABLE = {"code": 503, "message": "The model is overloaded. Please try again later.",
               "status": "UNAVAILABLE"}
BAD_REQUEST = {"code": 400, "message": "* GenerateContentRequest.contents: contents is not "
               "specified", "status": "INVALID_ARGUMENT"}
LOCATION = {"code": 400, "message": "User location is not supported for the API use.",
            "status": "FAILED_PRECONDITION"}


class GeminiHandler(FakeHandler):
    def do_POST(self) -> None:  # noqa: N802 - the stdlib's naming
        fake = self.fake
        assert isinstance(fake, FakeGemini)
        given = self.headers.get("x-goog-api-key")
        if fake.key is not None and (given != fake.key or "key=" in urlsplit(self.path).query):
            self.rfile.read(int(self.headers.get("content-length", 0)))
            with fake.lock:
                fake.requests.append({"path": self.path, "key": given, "body": None})
            return self._send(400, fake.error_payload(KEY_INVALID))
        return super().do_POST()


class FakeGemini(FakeServer):
    path_prefix = "/v1beta"
    rate_limit_error = RATE_LIMIT
    handler = GeminiHandler

    def __init__(self, answer: Callable[[str], str] = lambda prompt: "42",
                 key: str | None = None) -> None:
        super().__init__(answer)
        self.key = key  # the key it takes (None: any)
        self.quota_after: int | None = None
        self.thoughts: str | None = None  # a thought part before the answer, counted apart
        self.cached_tokens: int | None = None  # cachedContentTokenCount, when set
        self.block: str | None = None  # every candidate finishes so ("SAFETY", "RECITATION")
        self.prompt_block: str | None = None  # every prompt is blocked so
        self.model_version = "gemini-2.5-flash-001"

    def spent(self) -> Fault | None:
        if self.quota_after is not None and self.served >= self.quota_after:
            return ("error", (429, DAILY_QUOTA, {}))
        return None

    def record(self, request: BaseHTTPRequestHandler, body: dict[str, Any]) -> dict[str, Any]:
        return {"body": body, "path": request.path, "key": request.headers.get("x-goog-api-key"),
                "auth": request.headers.get("authorization")}

    def refuse(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        route = urlsplit(path).path
        model = route.removeprefix("/v1beta/models/").removesuffix(":generateContent")
        if not route.startswith("/v1beta/models/") or not route.endswith(":generateContent") \
                or not model or "/" in model:
            return 404, {"code": 404, "message": f"no route {route}", "status": "NOT_FOUND"}
        if not isinstance(body.get("contents"), list) or not body["contents"]:
            return 400, BAD_REQUEST
        return None

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = "".join(part.get("text", "") for part in body["contents"][-1]["parts"])
        usage: dict[str, Any] = {"promptTokenCount": len(prompt.split())}
        if self.prompt_block:
            return {"promptFeedback": {"blockReason": self.prompt_block},
                    "usageMetadata": usage, "modelVersion": self.model_version}
        text = self.answer(prompt)
        parts: list[dict[str, Any]] = [{"text": text}]
        if self.thoughts is not None:
            parts.insert(0, {"text": self.thoughts, "thought": True})
            usage["thoughtsTokenCount"] = len(self.thoughts.split())
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"},
                                     "finishReason": "STOP", "index": 0}
        if self.block:
            candidate = {"finishReason": self.block, "index": 0, "safetyRatings": [
                {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH",
                 "blocked": True}]}
        else:
            usage["candidatesTokenCount"] = len(text.split())
        if self.cached_tokens is not None:
            usage["cachedContentTokenCount"] = self.cached_tokens
        usage["totalTokenCount"] = sum(usage.values())
        return {"candidates": [candidate], "usageMetadata": usage,
                "modelVersion": self.model_version, "responseId": "local"}

    def error_payload(self, error: dict[str, Any]) -> dict[str, Any]:
        return {"error": error}
