"""A real Amazon Bedrock Converse server on 127.0.0.1, which checks every request's SigV4 signature.

It answers ``POST /model/{modelId}/converse`` as AWS documents Converse: ``output.message.content``
blocks, ``stopReason``, ``usage`` in ``inputTokens``/``outputTokens`` (and the cache's counts when
``cache`` is set), errors as ``{"message"}`` bodies with their type in ``x-amzn-ErrorType``. The
signature is recomputed from the request as received with botocore's own signer and the test
credentials it was made with: a wrong one is a 403 ``InvalidSignatureException``, an unknown key
a 403 ``UnrecognizedClientException``. ``fake_server`` holds the faults and the rate limit; past
``quota_after`` requests the account's quota is spent; a prompt holding ``GUARDRAIL`` is stopped
by a guardrail.
"""

from __future__ import annotations

import datetime
import hmac
import io
import re
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import unquote

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from fake_server import FakeHandler, FakeServer, Fault

ACCESS_KEY = "AKIAECHOBENCHTEST0001"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYechobenchKEY"  # planted: must never show anywhere
SESSION_TOKEN = "IQoJb3JpZ2luX2VjEchoBenchPlantedSessionToken0123456789"
REGION = "us-east-1"
MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
BLOCKED = "Sorry, your request was blocked by the guardrail."
GUARDRAIL = "GUARDRAIL"  # in a prompt: the guardrail intervenes
# Each error type Converse documents, and its status.
STATUS = {
    "ThrottlingException": 429,
    "ServiceQuotaExceededException": 400,
    "ValidationException": 400,
    "AccessDeniedException": 403,
    "ResourceNotFoundException": 404,
    "ModelNotReadyException": 429,
    "ModelTimeoutException": 408,
    "ModelErrorException": 424,
    "ServiceUnavailableException": 503,
    "InternalServerException": 500,
    "InvalidSignatureException": 403,
    "UnrecognizedClientException": 403,
}
MESSAGES = {
    "ThrottlingException": "Too many requests, please wait before trying again.",
    "ServiceQuotaExceededException": "Your request exceeds the service quota for your account.",
    "ValidationException": "The provided model identifier is invalid.",
    "AccessDeniedException": "You don't have access to the model with the specified model ID.",
    "ResourceNotFoundException": "Model not found.",
    "ServiceUnavailableException": "Bedrock is unable to process your request.",
    "InternalServerException": "The server encountered an internal error.",
}
_AUTH = re.compile(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
                   r"SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})")
SKEW = datetime.timedelta(minutes=5)  # AWS refuses a request signed further from its clock


def error(kind: str, message: str | None = None, headers: dict[str, str] | None = None) -> Fault:
    """A fault for ``push``: the error ``kind`` as AWS sends it (its type in the header)."""
    text = message or MESSAGES.get(kind, kind)
    return ("error", (STATUS.get(kind, 400), {"type": kind, "message": text},
                      {"x-amzn-ErrorType": f"{kind}:http://internal.amazon.com/coral/",
                       **(headers or {})}))


class BedrockHandler(FakeHandler):
    def do_POST(self) -> None:  # noqa: N802 - the stdlib's naming
        raw = self.rfile.read(int(self.headers.get("content-length", 0)))
        refused = self.fake.check_signature(self.path, self.headers, raw)
        if refused is not None:
            with self.fake.lock:
                self.fake.refused_signatures += 1
            kind, text = refused
            return self._send(STATUS[kind], {"message": text}, {"x-amzn-ErrorType": kind})
        # The shared handler reads the body again: from this copy, its socket's reader put back.
        socket_reader, self.rfile = self.rfile, io.BytesIO(raw)
        try:
            super().do_POST()
        finally:
            self.rfile = socket_reader


class FakeBedrock(FakeServer):
    handler = BedrockHandler
    rate_limit_error = {"type": "ThrottlingException", "message": MESSAGES["ThrottlingException"]}

    def __init__(self, answer: Callable[[str], str] = lambda prompt: "42",
                 token: str | None = None) -> None:
        super().__init__(answer)
        self.token = token  # the session token the credentials carry (None: long-term keys)
        self.quota_after: int | None = None
        self.cache: tuple[int, int] | None = None  # (read, write) tokens each reply reports
        self.refused_signatures = 0

    def check_signature(self, path: str, headers: Any, raw: bytes) -> tuple[str, str] | None:
        """None when the request is signed by the test credentials, else (error type, message)."""
        found = _AUTH.fullmatch(headers.get("authorization", ""))
        if found is None:
            return "InvalidSignatureException", "Authorization header is missing or malformed."
        key, day, region, service, signed, signature = found.groups()
        if key != ACCESS_KEY:
            return ("UnrecognizedClientException",
                    "The security token included in the request is invalid.")
        stamp = headers.get("x-amz-date", "")
        if region != REGION or service != "bedrock" or not stamp.startswith(day):
            return "InvalidSignatureException", "Credential should be scoped correctly."
        try:
            at = datetime.datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.UTC)
        except ValueError:
            return "InvalidSignatureException", "X-Amz-Date is malformed."
        if abs(datetime.datetime.now(datetime.UTC) - at) > SKEW:
            return "InvalidSignatureException", "Signature expired."
        names = signed.split(";")
        if self.token is not None and (headers.get("x-amz-security-token") != self.token
                                       or "x-amz-security-token" not in names):
            return "UnrecognizedClientException", "The security token is invalid."
        request = AWSRequest("POST", f"http://{headers.get('host', '')}{path}", data=raw,
                             headers={name: headers.get(name, "") for name in names})
        request.context["timestamp"] = stamp
        signer = SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY, self.token), "bedrock", REGION)
        expected = signer.signature(
            signer.string_to_sign(request, signer.canonical_request(request)), request)
        if not hmac.compare_digest(expected, signature):
            return ("InvalidSignatureException", "The request signature we calculated does not "
                    "match the signature you provided.")
        return None

    def spent(self) -> Fault | None:
        if self.quota_after is not None and self.served >= self.quota_after:
            return error("ServiceQuotaExceededException")
        return None

    def record(self, request: BaseHTTPRequestHandler, body: dict[str, Any]) -> dict[str, Any]:
        return {"body": body, "path": request.path, "auth": request.headers.get("authorization"),
                "token": request.headers.get("x-amz-security-token"),
                "model": unquote(request.path.split("/")[2]) if request.path.count("/") > 2
                else None}

    def refuse(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        parts = path.split("/")
        if len(parts) != 4 or parts[1] != "model" or parts[3] != "converse":
            return 404, {"type": "UnknownOperationException", "message": f"no operation {path}"}
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return 400, {"type": "ValidationException", "message": "messages must not be empty"}
        config = body.get("inferenceConfig", {})
        unknown = set(config) - {"maxTokens", "temperature", "topP", "stopSequences"}
        if unknown or config.get("maxTokens", 1) < 1:
            return 400, {"type": "ValidationException",
                         "message": f"inferenceConfig is invalid: {sorted(unknown)}"}
        return None

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = body["messages"][-1]["content"][0]["text"]
        refused = GUARDRAIL in prompt
        text = BLOCKED if refused else self.answer(prompt)
        usage = {"inputTokens": len(prompt.split()), "outputTokens": len(text.split())}
        if self.cache is not None:
            usage |= {"cacheReadInputTokens": self.cache[0], "cacheWriteInputTokens": self.cache[1]}
        usage["totalTokens"] = sum(usage.values())
        return {
            "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
            "stopReason": "guardrail_intervened" if refused else "end_turn",
            "usage": usage,
            "metrics": {"latencyMs": 1},
        }

    def error_payload(self, error: dict[str, Any]) -> dict[str, Any]:
        # the body's own ``__type``, as AWS's JSON protocols also say it
        return {"message": error["message"],
                "__type": f"com.amazon.bedrock#{error['type']}"}
