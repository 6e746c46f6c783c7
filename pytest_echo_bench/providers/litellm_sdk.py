"""Any model LiteLLM's SDK speaks, called in process: ``litellm.completion(model=..., ...)``.

The long tail: a provider this package does not speak natively (``model: mistral/...``,
``vertex_ai/...``, ``ollama/...``) goes through LiteLLM, which reads that provider's own key from
its usual variable unless the arm names one. LiteLLM's own retries are off; its exceptions are
mapped onto the same kinds as every provider's (docs/providers.md). The ``litellm`` extra is
heavy (about 290 MB in 57 distributions), so it is imported only when a spec names the provider.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_echo_bench.errors import (
    ArmError,
    ExhaustedError,
    PermanentError,
    ProviderError,
    TransientError,
    UnavailableError,
)
from pytest_echo_bench.providers.answer import OPENAI_USAGE, completion, count, text_of
from pytest_echo_bench.providers.base import (
    BaseProvider,
    Caller,
    Completion,
    ProviderInfo,
    Request,
    check_options,
    option,
    read_key,
)
from pytest_echo_bench.providers.http_json import retry_after
from pytest_echo_bench.providers.secrets import spec_secrets
from pytest_echo_bench.spec.load import ArmSpec, Spec
from pytest_echo_bench.store.redaction import Secrets, redact

_SAMPLING = ("temperature", "top_p", "max_tokens", "stop", "seed")
_KNOWN = {"model", "system", "api_key_env", "base_url", "mock_response", *_SAMPLING}
# What says an account is out of money, not out of its rate: OpenAI's code and sentence, Anthropic's
# credit message. A bare "quota" is not enough: Gemini's per-minute limits say "Quota exceeded".
_EXHAUSTED_TEXT = ("insufficient_quota", "exceeded your current quota",
                   "credit balance is too low", "billing_hard_limit_reached")
# LiteLLM's exception classes by what the run does (looked up by name: releases add and move them).
_ARM = ("AuthenticationError", "PermissionDeniedError", "NotFoundError")
_TRANSIENT = ("APIConnectionError", "Timeout", "ServiceUnavailableError", "InternalServerError",
              "BadGatewayError")
_PERMANENT = ("BadRequestError", "UnprocessableEntityError", "APIResponseValidationError")
# The variables LiteLLM reads keys from (``OPENAI_API_KEY``, ``AWS_SECRET_ACCESS_KEY``, ...):
# their values are redacted from every message, whichever one the model's provider used.
_KEY_NAME = re.compile(r"(API_KEY|SECRET|TOKEN|PASSWORD)", re.IGNORECASE)
REFUSAL_FINISH = "content_filter"  # OpenAI's finish_reason for an answer its filter cut


@dataclass
class LiteLLMProvider(BaseProvider):
    sdk: Any  # the litellm module
    model: str
    system: str | None
    params: dict[str, Any]
    secrets: Secrets
    endpoint_url: str | None = None
    endpoint_key: str | None = None

    def complete(self, request: Request) -> Completion:
        system = request.system or self.system
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": request.prompt})
        try:
            resp = self.sdk.completion(model=self.model, messages=messages, **self.params)
        except MemoryError:
            raise  # our machine's, not the call's: the engine stops the run resumably
        except Exception as exc:  # noqa: BLE001 - every exception is classified below
            refused = _refusal(self.sdk, exc)
            if refused is not None:
                return refused
            raise classify(self.sdk, exc, self.secrets) from None  # no chain: it may hold a key
        dump = getattr(resp, "model_dump", None)
        return reply(dump() if callable(dump) else resp)


def _named(sdk: Any, names: tuple[str, ...]) -> tuple[type[BaseException], ...]:
    return tuple(c for n in names if isinstance(c := getattr(sdk, n, None), type))


def _refusal(sdk: Any, exc: Exception) -> Completion | None:
    """A content-policy refusal as an answer (empty, recorded as refused), else None."""
    if _named(sdk, ("ContentPolicyViolationError",)) and isinstance(
            exc, _named(sdk, ("ContentPolicyViolationError",))):
        return Completion("", extra={"refusal": "content_policy_violation"})
    return None


def classify(sdk: Any, exc: Exception, secrets: Secrets) -> ProviderError:
    """LiteLLM's exception as one of the kinds, its text redacted (a key may be quoted in it)."""
    message = redact(f"{type(exc).__name__}: {exc}", secrets, limit=500)
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    wait = retry_after(headers) if isinstance(headers, Mapping) else None
    quota = any(text in message.lower() for text in _EXHAUSTED_TEXT)
    if isinstance(exc, _named(sdk, ("BudgetExceededError",))) or quota:
        return ExhaustedError(message, status=status)
    if isinstance(exc, _named(sdk, ("RateLimitError",))):
        return TransientError(message, retry_after=wait, status=status)
    if isinstance(exc, _named(sdk, _ARM)):
        return ArmError(message, status=status)
    if isinstance(exc, _named(sdk, _TRANSIENT)):
        return TransientError(message, retry_after=wait, status=status)
    if isinstance(exc, _named(sdk, _PERMANENT)):
        return PermanentError(message, status=status)
    if status in (408, 409, 429) or (status is not None and status >= 500):
        return TransientError(message, retry_after=wait, status=status)
    return PermanentError(message, status=status)


def reply(data: Any) -> Completion:
    """The answer of LiteLLM's OpenAI-shaped response: text, usage with its details, the model
    the response names, a content filter's stop as a refusal."""
    choices = data.get("choices") if isinstance(data, Mapping) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    if not isinstance(first, Mapping):
        raise PermanentError("LiteLLM answered without choices")
    message = first.get("message")
    content = message.get("content") if isinstance(message, Mapping) else None
    raw = data.get("usage")
    done = completion(text_of(content, "choices[0].message.content"), raw, OPENAI_USAGE,
                      data.get("model"))
    if done.usage is not None and isinstance(raw, Mapping):
        done.usage.update(_details(raw))
    if first.get("finish_reason") == REFUSAL_FINISH:
        done.extra["refusal"] = REFUSAL_FINISH
    return done


def _details(raw: Mapping[str, Any]) -> dict[str, int]:
    """The token classes LiteLLM reports beside the two counts, each kept when it is a count."""
    prompt = raw.get("prompt_tokens_details")
    output = raw.get("completion_tokens_details")
    found = {
        "cache_read_tokens": prompt.get("cached_tokens") if isinstance(prompt, Mapping) else None,
        "cache_write_tokens": raw.get("cache_creation_input_tokens"),
        "reasoning_tokens": output.get("reasoning_tokens") if isinstance(output, Mapping) else None,
    }
    return {name: n for name, value in found.items() if (n := count(value)) is not None}


def _params(arm: ArmSpec, spec: Spec) -> dict[str, Any]:
    """What each call passes beside the model and messages: sampling keys, the key, the base URL,
    a mock answer, and LiteLLM's own retries off (ours classify first)."""
    params: dict[str, Any] = {k: arm.options[k] for k in _SAMPLING if k in arm.options}
    params |= {"num_retries": 0, "max_retries": 0, "timeout": spec.timeout_s}
    key_env = option(arm, "api_key_env", str, None, spec)
    if key_env:
        params["api_key"] = read_key(arm.name, key_env)
    base_url = option(arm, "base_url", str, None, spec)
    if base_url:
        params["api_base"] = base_url
    mock = option(arm, "mock_response", str, None, spec)
    if mock is not None:
        params["mock_response"] = mock
    return params


def _key_values() -> Secrets:
    return Secrets(v for k, v in os.environ.items() if _KEY_NAME.search(k))


def sent(arm: ArmSpec) -> dict[str, Any]:
    """What bounds a call's cost beside its prompt: its sampling keys (``max_tokens``)."""
    return {k: arm.options[k] for k in _SAMPLING if k in arm.options}


def describe(arm: ArmSpec) -> str:
    return str(arm.options.get("base_url") or f"LiteLLM model {arm.options.get('model')}")


def _sdk() -> Any:
    """The ``litellm`` module, or unavailable: not installed, or a directory of that name on the
    path (a namespace package without the SDK's ``completion``)."""
    missing = UnavailableError("LiteLLM is not installed: pip install 'pytest-echo-bench[litellm]'")
    try:
        import litellm
    except ImportError as exc:
        raise missing from exc
    if not callable(getattr(litellm, "completion", None)):
        raise missing
    return litellm


def build(arm: ArmSpec, spec: Spec, caller: Caller) -> LiteLLMProvider:
    check_options(arm, spec, "litellm", _KNOWN)
    model = option(arm, "model", str, None, spec)
    if not model:
        raise spec.error("a litellm arm needs a 'model' (LiteLLM's provider/model name)", "arms",
                         arm.name)
    params = _params(arm, spec)
    system = option(arm, "system", str, None, spec)
    litellm = _sdk()
    litellm.suppress_debug_info = True  # its "Give Feedback" banner on every exception
    secrets = spec_secrets(spec) | _key_values()
    where = params.get("api_base") or f"litellm:{model}"
    return LiteLLMProvider(litellm, model, system, params, secrets, where,
                           params.get("api_key"))


PROVIDER = ProviderInfo(build, cacheable=True, sent=sent, describe=describe, system=True)
