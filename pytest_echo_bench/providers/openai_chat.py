"""OpenAI-compatible chat completions: the official ``openai`` SDK, or a lean HTTP client.

``client: http`` (default) speaks the wire format over the lean client of ``http_json``: about a
fortieth of the SDK's CPU per call (one call after another), which is what lets one process keep
hundreds of calls in flight on a small machine (docs/performance.md). ``client: sdk`` uses the
official SDK, imported lazily, with its own retries off. Both map errors the same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_echo_bench.errors import (
    ArmError,
    ExhaustedError,
    PermanentError,
    ProviderError,
    TransientError,
    UnavailableError,
)
from pytest_echo_bench.providers.answer import OPENAI_USAGE, completion, kind, text_of
from pytest_echo_bench.providers.base import (
    BaseProvider,
    Caller,
    Completion,
    ProviderInfo,
    Request,
    chat_options,
    check_options,
    option,
    read_key,
)
from pytest_echo_bench.providers.batch_http import Wire
from pytest_echo_bench.providers.batch_openai import OpenAIBatch
from pytest_echo_bench.providers.http_json import (
    WIRE_HINT,
    JSONClient,
    Transport,
    plain,
    retry_after,
    sdk_errors,
    status_message,
    success,
)
from pytest_echo_bench.providers.network import NETWORK_OPTIONS, Network, network_of, sdk_client
from pytest_echo_bench.providers.secrets import spec_secrets
from pytest_echo_bench.spec.load import ArmSpec, Spec
from pytest_echo_bench.store.redaction import Secrets, redact

_SAMPLING = (
    "temperature",
    "top_p",
    "max_tokens",
    "seed",
    "stop",
    "presence_penalty",
    "frequency_penalty",
)
_KNOWN = {
    *NETWORK_OPTIONS,
    "model",
    "base_url",
    "api_key_env",
    "system",
    "extra_body",
    "client",
    *_SAMPLING,
}
_EXHAUSTED_CODES = {
    "insufficient_quota",
    "billing_hard_limit_reached",
    "billing_not_active",
    "credit_balance_exhausted",
}
_QUOTA_TEXT = "you exceeded your current quota"
BASE_URL = "https://api.openai.com/v1"  # where its calls go when the spec names no base_url
KEY_ENV = "OPENAI_API_KEY"  # where its key is read when the spec names no variable

@dataclass
class OpenAIProvider(BaseProvider):
    transport: Transport
    model: str
    system: str | None
    params: dict[str, Any]
    # with the key, what engine.limiter keeps one adaptive limit for
    endpoint_url: str | None = None
    endpoint_key: str | None = None
    # what its batch client shares with the live calls: the arm's proxy, CAs, timeout, secrets
    network: Network = field(default_factory=Network)
    timeout_s: float = 180.0
    secrets: Secrets = field(default_factory=Secrets)

    def close(self) -> None:
        self.transport.close()

    def payload(self, request: Request) -> dict[str, Any]:
        """The body a call of ``request`` sends, live or as a batch's line."""
        system = request.system or self.system
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": request.prompt})
        return {"model": self.model, "messages": messages, **self.params}

    def complete(self, request: Request) -> Completion:
        return self.transport.post(self.payload(request))

    def batch_api(self) -> OpenAIBatch:
        """The arm's Batch API client: the lean client, with the arm's base_url, key and network
        (whatever its ``client:``), sending the bodies ``complete`` sends."""
        key = self.endpoint_key or "unused"
        client = JSONClient(
            (self.endpoint_url or BASE_URL).rstrip("/"), {"authorization": f"Bearer {key}"},
            self.timeout_s, self.network, self.secrets | Secrets([key]),
        )
        return OpenAIBatch(client, Wire(self.payload, _reply, error_for))


def classify_status(
    status: int, error: Mapping[str, Any], headers: Mapping[str, str]
) -> ProviderError:
    """Exhausted / transient / permanent from the status *and* the error code in the body."""
    code = str(error.get("code") or error.get("type") or "")
    message = status_message(status, code, str(error.get("message") or ""))
    # By the code OpenAI documents, 402 Payment Required, or OpenAI's own sentence, which LiteLLM
    # keeps when it rewrites the code to "429" (docs: PROVIDER-FACTS); never by a bare word.
    if code in _EXHAUSTED_CODES or status == 402 or _QUOTA_TEXT in message.lower():
        return ExhaustedError(message, status=status)
    # the key, the model, the base_url or the proxy: this arm's settings
    if status in (401, 403, 404, 407) or 300 <= status < 400:
        return ArmError(message, status=status)
    if status in (408, 409, 429) or status >= 500:
        return TransientError(message, retry_after=retry_after(headers), status=status)
    return PermanentError(message, status=status)


def error_for(
    status: int, body: Any, headers: Mapping[str, str], secrets: Secrets
) -> ProviderError:
    """The error a non-2xx reply with ``body`` means, as a live call and a batch's line read it."""
    return classify_status(status, _error_of(body, secrets), headers)


def _error_of(body: Any, secrets: Secrets) -> Mapping[str, Any]:
    """The ``error`` object of ``{"error": {...}}``, the body itself, or
    its text (``null``, a number)."""
    inner = body.get("error") if isinstance(body, dict) else None
    if isinstance(inner, dict):
        return inner
    return (
        body
        if isinstance(body, dict)
        else {"message": redact(json.dumps(body), secrets, limit=200)}
    )


def _reply(data: Any) -> Completion:
    choices = data.get("choices") if isinstance(data, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    if not isinstance(first, dict):
        # Not the chat completions API's answer (a login page, a proxy's own reply): on an arm's
        # first call the base_url is wrong; once the arm has answered, it is this item's failure.
        text = (
            "the server answered without choices: not an OpenAI-compatible chat completions reply"
        )
        raise ArmError(text, hint=WIRE_HINT, fallback=PermanentError(text))
    message = first.get("message")
    if message is not None and not isinstance(message, dict):
        raise PermanentError(f"the reply's choices[0].message is {kind(message)}, not an object")
    # Gateways send content parts where OpenAI sends a string: both are the answer's text.
    text = text_of((message or {}).get("content"), "choices[0].message.content")
    return completion(text, data.get("usage"), OPENAI_USAGE, data.get("model"),
                      data.get("system_fingerprint"))


@dataclass
class SDKTransport:
    client: Any
    sdk: Any
    url: str = ""  # the base_url, to name the host when its certificate is refused

    def close(self) -> None:
        self.client.close()  # the SDK's connection pool

    def post(self, payload: dict[str, Any]) -> Completion:
        with sdk_errors(self.sdk, self.sdk.OpenAIError, classify_status, self.url):
            resp = self.client.chat.completions.create(**payload)
        if not hasattr(resp, "choices"):  # the SDK hands back a page that is not JSON as a str
            return _reply(None)
        # The SDK builds its objects without validating them: any field may hold any JSON value.
        return _reply(plain(resp))


@dataclass
class HTTPTransport:
    base_url: str
    key: str
    timeout: float
    network: Network = field(default_factory=Network)
    secrets: Secrets = field(default_factory=Secrets)

    def __post_init__(self) -> None:
        url = self.base_url.rstrip("/") + "/chat/completions"
        secrets = self.secrets | Secrets([self.key])
        self.client = JSONClient(
            url, {"authorization": f"Bearer {self.key}"}, self.timeout, self.network, secrets
        )

    def close(self) -> None:
        self.client.close()

    def post(self, payload: dict[str, Any]) -> Completion:
        status, headers, data = self.client.post(payload)
        if not success(status):  # any 2xx, as the SDK takes it
            raise error_for(status, data, headers, self.client.secrets)
        return _reply(data)


def request_params(options: Mapping[str, Any], extra_body: Mapping[str, Any]) -> dict[str, Any]:
    """What a request carries beside ``model`` and ``messages``, as sent: the sampling options, then
    ``extra_body`` over them (and over ``messages`` too). The budget's worst case reads the same."""
    return {**{k: options[k] for k in _SAMPLING if k in options}, **extra_body}


def sent(arm: ArmSpec) -> dict[str, Any]:
    """What a call of ``arm`` sends beside its model and prompt (``extra_body`` merged, as sent)."""
    extra = arm.options.get("extra_body")
    return request_params(arm.options, extra if isinstance(extra, dict) else {})


def build(arm: ArmSpec, spec: Spec, caller: Caller) -> OpenAIProvider:
    check_options(arm, spec, "openai", _KNOWN)
    model, client, key_env, base_url = chat_options(arm, spec, "openai", KEY_ENV, BASE_URL)
    params = request_params(arm.options, option(arm, "extra_body", dict, {}, spec))
    system = option(arm, "system", str, None, spec)
    # Local servers (vLLM, llama.cpp, Ollama) take any key: "api_key_env: null" says so explicitly.
    key = read_key(arm.name, key_env) if key_env else "unused"
    network = network_of(arm, spec)
    if client == "http":
        return OpenAIProvider(
            HTTPTransport(base_url, key, spec.timeout_s, network, spec_secrets(spec)),
            model,
            system,
            params,
            base_url,
            key,
            network,
            spec.timeout_s,
            spec_secrets(spec),
        )
    try:
        import openai
    except ImportError as exc:
        raise UnavailableError(
            "the openai SDK is not installed: pip install 'pytest-echo-bench[openai]' "
            "(or set client: http)"
        ) from exc
    # max_retries=0: the SDK would retry every 429, quota exhaustion included; we classify first.
    made = sdk_client(arm.name, network, lambda: openai.OpenAI(
        api_key=key, base_url=base_url, max_retries=0, timeout=spec.timeout_s,
        http_client=network.sdk_http_client(openai.DefaultHttpxClient, spec.timeout_s)))
    return OpenAIProvider(
        SDKTransport(made, openai, base_url), model, system, params, base_url, key, network,
        spec.timeout_s, spec_secrets(spec),
    )


PROVIDER = ProviderInfo(build, cacheable=True, base_url=BASE_URL, key_env=(KEY_ENV,), sent=sent,
                        system=True, batch=True)
