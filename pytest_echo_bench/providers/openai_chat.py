"""OpenAI-compatible chat completions through the official ``openai`` SDK (imported lazily)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..errors import ExhaustedError, PermanentError, ProviderError, TransientError, UnavailableError
from ..spec import ArmSpec, Spec
from .base import Caller, Completion, Request, option

_SAMPLING = ("temperature", "top_p", "max_tokens", "seed", "stop", "presence_penalty", "frequency_penalty")
_KNOWN = {"model", "base_url", "api_key_env", "system", "extra_body", *_SAMPLING}
_EXHAUSTED_CODES = {"insufficient_quota", "billing_hard_limit_reached", "billing_not_active", "credit_balance_exhausted"}


@dataclass
class OpenAIProvider:
    client: Any
    model: str
    system: str | None
    params: dict[str, Any]
    sdk: Any

    def complete(self, request: Request) -> Completion:
        messages = [{"role": "system", "content": self.system}] if self.system else []
        messages.append({"role": "user", "content": request.prompt})
        try:
            resp = self.client.chat.completions.create(model=self.model, messages=messages, **self.params)
        except self.sdk.OpenAIError as exc:
            raise map_error(exc, self.sdk) from exc
        if not getattr(resp, "choices", None):
            raise PermanentError("the server answered without choices")
        text = resp.choices[0].message.content or ""
        usage = getattr(resp, "usage", None)
        tokens = {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens} if usage else None
        return Completion(text, tokens)


def map_error(exc: Exception, sdk: Any) -> ProviderError:
    """Map an SDK error to exhausted / transient / permanent by status *and* the code in the body."""
    if isinstance(exc, sdk.APIConnectionError):  # includes APITimeoutError
        return TransientError(f"{type(exc).__name__}: {exc}")
    if not isinstance(exc, sdk.APIStatusError):
        return PermanentError(f"{type(exc).__name__}: {exc}")
    status = exc.status_code
    body = exc.body if isinstance(exc.body, dict) else {}
    code = str(body.get("code") or body.get("type") or "")
    message = f"HTTP {status} {code}: {body.get('message') or exc.message}".strip()
    if code in _EXHAUSTED_CODES:
        return ExhaustedError(message, status=status)
    if status in (401, 403):
        return ExhaustedError(f"the API key was refused ({message}); fix the key, then resume", status=status)
    if status in (408, 409, 429) or status >= 500:
        return TransientError(message, retry_after=_retry_after(exc), status=status)
    return PermanentError(message, status=status)


def _retry_after(exc: Any) -> float | None:
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is not None:
            try:
                return max(0.0, float(value) * scale)
            except ValueError:
                return None  # an HTTP date: fall back to our own backoff
    return None


def build(arm: ArmSpec, spec: Spec, caller: Caller) -> OpenAIProvider:
    unknown = sorted(set(arm.options) - _KNOWN)
    if unknown:
        raise spec.error(f"unknown openai option {unknown[0]!r}; known: {', '.join(sorted(_KNOWN))}", "arms", arm.name, unknown[0])
    model = option(arm, "model", str, None, spec)
    if not model:
        raise spec.error("an openai arm needs a 'model'", "arms", arm.name)
    key_env = option(arm, "api_key_env", (str, type(None)), "OPENAI_API_KEY", spec)
    try:
        import openai
    except ImportError as exc:
        raise UnavailableError("the openai SDK is not installed: pip install 'pytest-echo-bench[openai]'") from exc
    # Local servers (vLLM, llama.cpp, Ollama) take any key: "api_key_env: null" says so explicitly.
    key = os.environ.get(key_env) if key_env else "unused"
    if not key:
        raise UnavailableError(f"arm {arm.name!r} needs an API key: set the environment variable {key_env}")
    client = openai.OpenAI(
        api_key=key,
        base_url=option(arm, "base_url", str, None, spec),
        max_retries=0,  # the SDK would retry every 429, quota exhaustion included; we classify first
        timeout=spec.timeout_s,
    )
    params = {k: arm.options[k] for k in _SAMPLING if k in arm.options}
    if "extra_body" in arm.options:
        params["extra_body"] = option(arm, "extra_body", dict, None, spec)
    return OpenAIProvider(client, model, option(arm, "system", str, None, spec), params, openai)
