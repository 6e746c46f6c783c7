"""Anthropic Messages API: the official ``anthropic`` SDK, or a lean HTTP client.

``client: http`` (default) POSTs ``{base_url}/v1/messages`` over the lean client of ``http_json``;
``client: sdk`` uses the official SDK, imported lazily, with its own retries off. Both map errors
through one ``classify_status``.
"""

from __future__ import annotations

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
from pytest_echo_bench.providers.answer import (
    ANTHROPIC_USAGE,
    CACHE_APART,
    completion,
    text_of,
)
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
from pytest_echo_bench.providers.batch_anthropic import AnthropicBatch
from pytest_echo_bench.providers.batch_http import Wire
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

_SAMPLING = ("temperature", "top_p", "stop_sequences")
_KNOWN = {
    *NETWORK_OPTIONS,
    "model",
    "base_url",
    "api_key_env",
    "system",
    "max_tokens",
    "client",
    *_SAMPLING,
}
# An account without credit: no retry can help, so the run stops. A refused key (401
# authentication_error, 403 permission_error) is the arm's: it stops, other arms go on.
_EXHAUSTED_TYPES = {"billing_error"}
_TRANSIENT_TYPES = {"rate_limit_error", "overloaded_error", "api_error", "timeout_error"}
API_VERSION = "2023-06-01"
BASE_URL = "https://api.anthropic.com"  # where its calls go when the spec names no base_url
KEY_ENV = "ANTHROPIC_API_KEY"  # where its key is read when the spec names no variable
# The Messages API refuses a request without max_tokens: this is sent when the spec says nothing.
DEFAULT_MAX_TOKENS = 1024

@dataclass
class AnthropicProvider(BaseProvider):
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
        """The body a call of ``request`` sends, live or as a batch request's ``params``."""
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "user", "content": request.prompt}],
            **self.params,
        }
        system = request.system or self.system
        if system:
            payload["system"] = system
        return payload

    def complete(self, request: Request) -> Completion:
        return self.transport.post(self.payload(request))

    def batch_api(self) -> AnthropicBatch:
        """The arm's Message Batches client: the lean client, with the arm's base_url, key and
        network (whatever its ``client:``), sending the bodies ``complete`` sends."""
        client = JSONClient(
            (self.endpoint_url or BASE_URL).rstrip("/"), _headers(self.endpoint_key),
            self.timeout_s, self.network,
            self.secrets | Secrets([self.endpoint_key] if self.endpoint_key else []),
        )
        return AnthropicBatch(client, Wire(self.payload, _reply, error_for))


def classify_status(
    status: int, error: Mapping[str, Any], headers: Mapping[str, str]
) -> ProviderError:
    """Exhausted / transient / permanent from the status *and* the error type and message."""
    kind = str(error.get("type") or "")
    text = str(error.get("message") or "")
    message = status_message(status, kind, text)
    # The credit message arrives as an ordinary 400 invalid_request_error: only the text tells.
    if kind in _EXHAUSTED_TYPES or status == 402 or "credit balance is too low" in text.lower():
        return ExhaustedError(f"{message}; top up the account, then resume", status=status)
    # the key, the model, the base_url or the proxy: this arm's settings
    if status in (401, 403, 404, 407) or 300 <= status < 400:
        return ArmError(message, status=status)
    # 529 is "overloaded"
    if kind in _TRANSIENT_TYPES or status in (408, 409, 429) or status >= 500:
        return TransientError(message, retry_after=retry_after(headers), status=status)
    return PermanentError(message, status=status)


def error_for(
    status: int, body: Any, headers: Mapping[str, str], secrets: Secrets
) -> ProviderError:
    """The error a non-2xx reply with ``body`` means, to a live call and to a batch's result."""
    return classify_status(status, _error_of(body, secrets), headers)


def _headers(key: str | None) -> dict[str, str]:
    return {"anthropic-version": API_VERSION, **({"x-api-key": key} if key else {})}


def _error_of(body: Any, secrets: Secrets | None = None) -> Mapping[str, Any]:
    """The ``error`` object of ``{"type": "error", "error": {...}}``, or what there is."""
    if isinstance(body, dict):
        inner = body.get("error")
        return inner if isinstance(inner, dict) else body
    return {
        "message": redact(str(body), secrets or Secrets(), limit=200) if body is not None else ""
    }


def _reply(data: Any) -> Completion:
    content = data.get("content") if isinstance(data, dict) else None
    if content is None:
        # Not the Messages API's answer (a web page, a proxy's own reply): on an arm's first call
        # the base_url is wrong; once the arm has answered, it is this item's failure.
        text = "the server answered without content: not the Anthropic Messages API's reply"
        raise ArmError(text, hint=WIRE_HINT, fallback=PermanentError(text))
    # Text blocks joined in order; thinking and tool-use blocks are not the answer's text.
    return completion(text_of(content, "content"), data.get("usage"), ANTHROPIC_USAGE,
                      data.get("model"), apart=CACHE_APART)


def _sdk_arguments(payload: dict[str, Any]) -> dict[str, Any]:
    """Required fields as arguments, the rest as ``extra_body``: SDK releases differ in which
    sampling parameters they accept as arguments (newer ones dropped temperature and top_p),
    while the wire format takes them all."""
    required = {k: payload[k] for k in ("model", "max_tokens", "messages")}
    rest = {k: v for k, v in payload.items() if k not in required}
    return {**required, "extra_body": rest} if rest else required


@dataclass
class SDKTransport:
    client: Any
    sdk: Any
    url: str = ""  # the base_url, to name the host when its certificate is refused

    def close(self) -> None:
        self.client.close()  # the SDK's connection pool

    def post(self, payload: dict[str, Any]) -> Completion:
        with sdk_errors(
            self.sdk,
            self.sdk.AnthropicError,
            lambda status, body, headers: classify_status(status, _error_of(body), headers),
            self.url,
        ):
            resp = self.client.messages.create(**_sdk_arguments(payload))
        if not hasattr(resp, "content"):  # the SDK hands back a page that is not JSON as a str
            return _reply(None)
        # The SDK builds its objects without validating them: any field may hold any JSON value.
        return _reply(plain(resp))


@dataclass
class HTTPTransport:
    base_url: str
    key: str | None
    timeout: float
    network: Network = field(default_factory=Network)
    secrets: Secrets = field(default_factory=Secrets)

    def __post_init__(self) -> None:
        secrets = self.secrets | Secrets([self.key] if self.key else [])
        self.client = JSONClient(
            self.base_url.rstrip("/") + "/v1/messages", _headers(self.key), self.timeout,
            self.network, secrets,
        )

    def close(self) -> None:
        self.client.close()

    def post(self, payload: dict[str, Any]) -> Completion:
        status, headers, data = self.client.post(payload)
        if not success(status):  # any 2xx, as the SDK takes it
            raise error_for(status, data, headers, self.client.secrets)
        return _reply(data)


def _params(arm: ArmSpec, spec: Spec) -> dict[str, Any]:
    max_tokens = option(arm, "max_tokens", int, DEFAULT_MAX_TOKENS, spec)
    if max_tokens < 1:
        raise spec.error(
            f"max_tokens must be positive, got {max_tokens}", "arms", arm.name, "max_tokens"
        )
    params: dict[str, Any] = {"max_tokens": max_tokens}
    for key, kind in (
        ("temperature", (int, float)),
        ("top_p", (int, float)),
        ("stop_sequences", list),
    ):
        value = option(arm, key, kind, None, spec)
        if value is not None:
            params[key] = value
    return params


def sent(arm: ArmSpec) -> dict[str, Any]:
    """What a call of ``arm`` sends beside its model and prompt that bounds its cost: max_tokens
    alone (it sends no extra_body)."""
    return {"max_tokens": arm.options.get("max_tokens", DEFAULT_MAX_TOKENS)}


def build(arm: ArmSpec, spec: Spec, caller: Caller) -> AnthropicProvider:
    check_options(arm, spec, "anthropic", _KNOWN)
    model, client, key_env, base_url = chat_options(arm, spec, "anthropic", KEY_ENV, BASE_URL)
    system = option(arm, "system", str, None, spec)
    params = _params(arm, spec)
    # "api_key_env: null" is for local proxies that take no key; then none is sent.
    key = read_key(arm.name, key_env) if key_env else None
    network = network_of(arm, spec)
    if client == "http":
        return AnthropicProvider(
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
        import anthropic
    except ImportError as exc:
        raise UnavailableError(
            "the anthropic SDK is not installed: pip install 'pytest-echo-bench[anthropic]' "
            "(or set client: http)"
        ) from exc
    # max_retries=0: the SDK would retry 429s and 5xx itself, out of sight of our classifier and
    # backoff. The SDK insists on some credential, so a keyless arm sends a placeholder.
    made = sdk_client(arm.name, network, lambda: anthropic.Anthropic(
        api_key=key or "unused", base_url=base_url, max_retries=0, timeout=spec.timeout_s,
        http_client=network.sdk_http_client(anthropic.DefaultHttpxClient, spec.timeout_s)))
    return AnthropicProvider(
        SDKTransport(made, anthropic, base_url), model, system, params, base_url, key, network,
        spec.timeout_s, spec_secrets(spec),
    )


PROVIDER = ProviderInfo(build, cacheable=True, base_url=BASE_URL, key_env=(KEY_ENV,), sent=sent,
                        system=True, batch=True)
