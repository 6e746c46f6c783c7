"""A real Azure OpenAI server on 127.0.0.1: OpenAI's chat completions at a deployment's URL.

It answers ``POST /openai/deployments/{deployment}/chat/completions?api-version=...`` for the
deployments it has and the API versions it takes (Azure's 404 otherwise), with the key in the
``api-key`` header (401 otherwise, Azure's words), and its content filter: a prompt holding
``filter_word`` is refused with Azure's 400 ``content_filter`` error, and a reply holding it is cut
(``finish_reason: content_filter``). Replies carry ``prompt_filter_results`` and
``content_filter_results`` as Azure's do. Faults and the rate limit are ``fake_server``'s.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

from openai_server import FakeOpenAI, OpenAIHandler

API_VERSIONS = ("2024-10-21", "2024-06-01", "2025-01-01-preview")
ACCESS_DENIED = {"code": "401", "message": "Access denied due to invalid subscription key or wrong "
                 "API endpoint. Make sure to provide a valid key for an active subscription and "
                 "use a correct regional API endpoint for your resource."}
RATE_LIMIT = {"code": "429", "message": "Requests to the ChatCompletions_Create Operation under "
              "Azure OpenAI API version 2024-10-21 have exceeded token rate limit of your current "
              "OpenAI S0 pricing tier. Please retry after 1 second."}
_SAFE = {category: {"filtered": False, "severity": "safe"}
         for category in ("hate", "self_harm", "sexual", "violence")}


def content_filter_error() -> dict[str, Any]:
    """Azure's 400 for a prompt its content filter refused."""
    return {"message": "The response was filtered due to the prompt triggering Azure OpenAI's "
            "content management policy. Please modify your prompt and retry.",
            "type": None, "param": "prompt", "code": "content_filter", "status": 400,
            "innererror": {"code": "ResponsibleAIPolicyViolation", "content_filter_result": {
                **_SAFE, "violence": {"filtered": True, "severity": "high"}}}}


class AzureHandler(OpenAIHandler):
    def do_POST(self) -> None:  # noqa: N802 - the stdlib's naming
        fake = self.fake
        assert isinstance(fake, FakeAzure)
        if self.headers.get("api-key") != fake.key:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            with fake.lock:
                fake.requests.append({"path": self.path, "key": self.headers.get("api-key"),
                                      "body": None})
            return self._send(401, fake.error_payload(ACCESS_DENIED))
        return super().do_POST()


class FakeAzure(FakeOpenAI):
    path_prefix = ""  # the endpoint: https://RESOURCE.openai.azure.com
    rate_limit_error = RATE_LIMIT
    handler = AzureHandler

    def __init__(self, key: str, deployments: tuple[str, ...] = ("gpt4o-prod",)) -> None:
        super().__init__(lambda prompt: "4")
        self.key = key
        self.deployments = deployments
        self.filter_word: str | None = None  # a prompt or a reply holding it is filtered
        self.served_model = "gpt-4o-2024-11-20"  # what Azure names in a reply

    def record(self, request: Any, body: dict[str, Any]) -> dict[str, Any]:
        return {"body": body, "path": request.path, "key": request.headers.get("api-key"),
                "auth": request.headers.get("authorization")}

    def refuse(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        parts = urlsplit(path)
        route = parts.path.split("/")
        version = parse_qs(parts.query).get("api-version", [""])[0]
        if len(route) != 6 or route[1:3] != ["openai", "deployments"] \
                or route[4:] != ["chat", "completions"] or version not in API_VERSIONS:
            return 404, {"code": "404", "message": "Resource not found"}
        if route[3] not in self.deployments:
            return 404, {"code": "DeploymentNotFound", "message": "The API deployment for this "
                         "resource does not exist. If you created the deployment within the last "
                         "5 minutes, please wait a moment and try again."}
        prompt = str(body["messages"][-1]["content"])
        if self.filter_word and self.filter_word in prompt and "(cut)" not in prompt:
            return 400, content_filter_error()
        return None

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        reply = super().reply(body)
        reply["prompt_filter_results"] = [{"prompt_index": 0, "content_filter_results": _SAFE}]
        choice = reply["choices"][0]
        choice["content_filter_results"] = _SAFE
        if self.filter_word and self.filter_word in body["messages"][-1]["content"]:
            choice["finish_reason"] = "content_filter"
            choice["message"]["content"] = "The answer is"  # what came before the cut
            choice["content_filter_results"] = {
                **_SAFE, "violence": {"filtered": True, "severity": "medium"}}
        return reply
