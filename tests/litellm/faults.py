"""A pre-call hook the LiteLLM proxy loads from ``proxy.yaml``: which prompt gets
which of LiteLLM's mock errors.

It runs inside the proxy, not in pytest. A ``mock_response`` in the config fails every call of a
model the same way; a test needs one item of an arm to fail while the others answer, and a rate
limit or 5xx that passes after a retry. So the hook reads a marker in the prompt and sets the
request's ``mock_response`` to one of LiteLLM's own mock error strings: the status and body the
client sees are LiteLLM's, not ours. Each call past the key check, and each refusal (the key
check's included: LiteLLM calls the failure hook for those too), is appended to
``$ECHO_BENCH_LITELLM_LOG`` so the test can count what the proxy received.
"""

from __future__ import annotations

import json
import os
from typing import Any

from litellm.integrations.custom_logger import CustomLogger

# Prompt marker -> LiteLLM's mock string for it (see
# _handle_mock_potential_exceptions in litellm/main.py).
ERRORS = {
    "[429]": "litellm.RateLimitError",
    "[500]": "litellm.InternalServerError",
    "[400]": "litellm.ContextWindowExceededError",
}
# "[429-once]": the error on the first call of this prompt only, then the model's answer
ONCE = "-once]"


def _prompt(data: dict[str, Any]) -> str:
    messages = data.get("messages") or [{}]
    return str(messages[-1].get("content", ""))


def _log(event: str, data: dict[str, Any], **more: str) -> None:
    log = os.environ.get("ECHO_BENCH_LITELLM_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(
                json.dumps(
                    {
                        "event": event,
                        "model": str(data.get("model")),
                        "prompt": _prompt(data),
                        **more,
                    }
                )
                + "\n"
            )


class Faults(CustomLogger):
    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()  # prompts whose one "-once" failure has been served

    def _mock_error(self, prompt: str) -> str | None:
        for marker, mock in ERRORS.items():
            if marker in prompt:
                return mock
            once = marker[:-1] + ONCE
            if once in prompt and prompt not in self.seen:
                self.seen.add(prompt)
                return mock
        return None

    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: Any
    ) -> dict[str, Any]:
        _log("call", data)
        mock = self._mock_error(_prompt(data))
        if mock is not None:
            data["mock_response"] = mock
        return data

    async def async_post_call_failure_hook(
        self,
        request_data: dict[str, Any],
        original_exception: Exception,
        user_api_key_dict: Any,
        traceback_str: str | None = None,
    ) -> None:
        _log(
            "failure",
            request_data,
            error=str(getattr(original_exception, "message", original_exception))[:200],
        )


faults = Faults()
