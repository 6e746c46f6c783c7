"""Google's Gemini API (``generateContent``): a lean HTTP client, or the official ``google-genai``.

``client: http`` (default) POSTs ``{base_url}/models/{model}:generateContent`` over the lean client
of ``http_json``, the key in the ``x-goog-api-key`` header (never in the URL, where logs keep it).
``client: sdk`` sends the same request through the official SDK (its retries off) and reads the
raw reply it hands back, so both clients read a reply with the same rules. Errors and replies
are read in ``gemini_reply``.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

from pytest_echo_bench.errors import PermanentError, UnavailableError
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
from pytest_echo_bench.providers.gemini_reply import (
    classify_status,
    error_of,
    http_libraries,
    raw_reply,
    reply,
    sdk_errors,
)
from pytest_echo_bench.providers.http_json import JSONClient, Transport, success
from pytest_echo_bench.providers.network import NETWORK_OPTIONS, Network, network_of, sdk_client
from pytest_echo_bench.providers.secrets import spec_secrets
from pytest_echo_bench.spec.load import ArmSpec, Spec
from pytest_echo_bench.store.redaction import Secrets

BASE_URL = "https://generativelanguage.googleapis.com/v1beta"
# Read as google-genai reads them: GOOGLE_API_KEY when it is set, else GEMINI_API_KEY.
KEY_ENV = ("GOOGLE_API_KEY", "GEMINI_API_KEY")
# Set once the choice between them was said: xdist's workers start after the controller has
# built each arm (its check of the specs) and inherit it, so the run says it once.
SAID_ENV = "ECHO_BENCH_GEMINI_KEY_SAID"
# An arm's sampling keys, named as the other providers name them, and their generationConfig names.
_SAMPLING = {
    "temperature": "temperature",
    "top_p": "topP",
    "top_k": "topK",
    "max_tokens": "maxOutputTokens",
    "seed": "seed",
    "stop": "stopSequences",
    "presence_penalty": "presencePenalty",
    "frequency_penalty": "frequencyPenalty",
}
_KINDS: dict[str, type | tuple[type, ...]] = {
    "temperature": (int, float), "top_p": (int, float), "top_k": int, "max_tokens": int,
    "seed": int, "stop": (str, list), "presence_penalty": (int, float),
    "frequency_penalty": (int, float),
}
_KNOWN = {
    *NETWORK_OPTIONS, *_SAMPLING, "model", "base_url", "api_key_env", "system", "client",
    "generation_config", "safety_settings",
}


@dataclass
class GeminiProvider(BaseProvider):
    transport: Transport
    model: str
    system: str | None
    params: dict[str, Any]  # the request's fields beside contents and systemInstruction
    # with the key, what engine.limiter keeps one adaptive limit for
    endpoint_url: str | None = None
    endpoint_key: str | None = None

    def close(self) -> None:
        self.transport.close()

    def complete(self, request: Request) -> Completion:
        payload: dict[str, Any] = {
            "contents": [{"role": "user", "parts": [{"text": request.prompt}]}],
            **self.params,
        }
        system = request.system or self.system
        if system:
            payload["systemInstruction"] = {"parts": [{"text": system}]}
        return self.transport.post(payload)


@dataclass
class HTTPTransport:
    base_url: str
    model: str
    key: str
    timeout: float
    network: Network = field(default_factory=Network)
    secrets: Secrets = field(default_factory=Secrets)

    def __post_init__(self) -> None:
        url = f"{self.base_url.rstrip('/')}/models/{quote(self.model, safe='')}:generateContent"
        self.client = JSONClient(url, {"x-goog-api-key": self.key}, self.timeout, self.network,
                                 self.secrets | Secrets([self.key]))

    def close(self) -> None:
        self.client.close()

    def post(self, payload: dict[str, Any]) -> Completion:
        status, headers, data = self.client.post(payload)
        if not success(status):  # any 2xx, as the SDK takes it
            raise classify_status(status, error_of(data, self.client.secrets), headers)
        return reply(data)


@dataclass
class SDKTransport:
    client: Any
    sdk: Any  # the ``google.genai`` module
    model: str
    url: str = ""  # the base_url, to name the host when its certificate is refused

    def close(self) -> None:
        self.client.close()  # the SDK's connection pool

    def post(self, payload: dict[str, Any]) -> Completion:
        # The request goes out as the lean client sends it (``extra_body``, merged over the SDK's
        # own fields), and the reply comes back as the server sent it: the SDK's objects would
        # validate, rename and drop fields, and a hostile value would fail inside it.
        config = {"http_options": {"extra_body": {k: v for k, v in payload.items()
                                                  if k != "contents"}},
                  "should_return_http_response": True}
        try:
            with sdk_errors(self.sdk, self.url):
                resp = self.client.models.generate_content(
                    model=self.model, contents=payload["contents"], config=config)
        except PermanentError as exc:
            # The SDK takes 200 alone for an answer and raises for a 201 or 203 (a gateway's
            # cached reply) with the body parsed: any 2xx is the answer, as the lean client reads.
            code = getattr(exc.__cause__, "code", None)
            if isinstance(code, int) and success(code):
                return reply(getattr(exc.__cause__, "details", None))
            raise
        raw = getattr(resp, "sdk_http_response", None)
        return reply(raw_reply(getattr(raw, "body", None)))


def _model(arm: ArmSpec, spec: Spec, given: str) -> str:
    """The model's id: ``models/gemini-2.5-flash`` as the API names it is ``gemini-2.5-flash``."""
    model = given.removeprefix("models/")
    if not model or "/" in model:
        raise spec.error(f"model must be a Gemini model id such as gemini-2.5-flash, got {given!r}",
                         "arms", arm.name, "model")
    return model


def generation_config(arm: ArmSpec, spec: Spec) -> dict[str, Any]:
    """The request's ``generationConfig``: the sampling keys, then ``generation_config`` over
    them (its keys as the API spells them: ``thinkingConfig``, ``responseMimeType``)."""
    config: dict[str, Any] = {}
    for key, wire in _SAMPLING.items():
        value = option(arm, key, _KINDS[key], None, spec)
        if value is None:
            continue
        if key == "max_tokens" and value < 1:
            raise spec.error(f"max_tokens must be positive, got {value}", "arms", arm.name, key)
        if key == "stop":
            value = [value] if isinstance(value, str) else value
            if not all(isinstance(s, str) for s in value):
                raise spec.error("stop must be a text or a list of texts", "arms", arm.name, key)
        config[wire] = value
    return {**config, **option(arm, "generation_config", dict, {}, spec)}


def request_params(arm: ArmSpec, spec: Spec) -> dict[str, Any]:
    """What a request carries beside ``contents`` and ``systemInstruction``."""
    params: dict[str, Any] = {}
    config = generation_config(arm, spec)
    if config:
        params["generationConfig"] = config
    safety = option(arm, "safety_settings", list, None, spec)
    if safety is not None:
        params["safetySettings"] = safety
    return params


def sent(arm: ArmSpec) -> dict[str, Any]:
    """What a call of ``arm`` sends, in the budget's names: its sampling keys, and as
    ``max_tokens`` the ``maxOutputTokens`` it sends (``generation_config``'s, when it sets one).
    The thoughts of a thinking model count within ``maxOutputTokens``."""
    wire = {key: arm.options[key] for key in ("temperature", "top_p", "seed", "stop", "max_tokens")
            if key in arm.options}
    config = arm.options.get("generation_config")
    if isinstance(config, Mapping) and "maxOutputTokens" in config:
        wire["max_tokens"] = config["maxOutputTokens"]
    return wire


def _key(arm: ArmSpec, key_env: str | None) -> str:
    """The key in the arm's ``api_key_env``, else GOOGLE_API_KEY when it is set, else
    GEMINI_API_KEY, as the SDK reads them (a missing key names both). Both set to different keys:
    said once, naming the one used (never a value)."""
    if key_env is not None:
        return read_key(arm.name, key_env)
    values = {name: os.environ.get(name, "").strip() for name in KEY_ENV}
    chosen = next((name for name in KEY_ENV if values[name]), None)
    if chosen is None:
        raise UnavailableError(f"arm {arm.name!r} needs an API key: set the environment variable "
                               f"{KEY_ENV[1]} (or {KEY_ENV[0]})")
    if all(values.values()) and len(set(values.values())) > 1 and os.environ.get(SAID_ENV) != "1":
        os.environ[SAID_ENV] = "1"
        warnings.warn(f"arm {arm.name!r}: GOOGLE_API_KEY and GEMINI_API_KEY are both set, to "
                      "different keys; GOOGLE_API_KEY is used, as the google-genai SDK does "
                      "(unset the other, or name one in the arm's api_key_env)", UserWarning,
                      stacklevel=2)
    return read_key(arm.name, chosen)


def _sdk_client(
    arm: ArmSpec, spec: Spec, key: str, base_url: str, network: Network
) -> tuple[Any, Any]:
    """(the ``google.genai`` module, its client for this arm)."""
    try:
        from google import genai
    except ImportError as exc:
        raise UnavailableError(
            "the google-genai SDK is not installed: pip install 'pytest-echo-bench[gemini]' "
            "(or set client: http)"
        ) from exc
    # The SDK joins its base_url and api_version; ours ends in the version, as the URL shows it
    # (a base_url without a path has none: a gateway's root).
    root, version = base_url.rstrip("/"), ""
    if urlsplit(root).path:
        root, _, version = root.rpartition("/")
    options: dict[str, Any] = {"base_url": root + "/", "api_version": version,
                               "timeout": int(spec.timeout_s * 1000)}
    made = network.sdk_http_client(http_libraries()[0].Client, spec.timeout_s)
    if made is not None:
        options["httpx_client"] = made
    # No retry_options: the SDK then tries each call once; our classifier decides what is retried.
    return genai, sdk_client(arm.name, network, lambda: genai.Client(
        api_key=key, vertexai=False, http_options=genai.types.HttpOptions(**options)))


def build(arm: ArmSpec, spec: Spec, caller: Caller) -> GeminiProvider:
    check_options(arm, spec, "gemini", _KNOWN)
    given, client, key_env, base_url = chat_options(arm, spec, "gemini", KEY_ENV[0], BASE_URL)
    model = _model(arm, spec, given)
    params = request_params(arm, spec)
    system = option(arm, "system", str, None, spec)
    key = _key(arm, key_env if isinstance(arm.options.get("api_key_env"), str) else None)
    network = network_of(arm, spec)
    if client == "http":
        transport: Transport = HTTPTransport(base_url, model, key, spec.timeout_s, network,
                                             spec_secrets(spec))
    else:
        genai, made = _sdk_client(arm, spec, key, base_url, network)
        transport = SDKTransport(made, genai, model, base_url)
    return GeminiProvider(transport, model, system, params, base_url, key)


PROVIDER = ProviderInfo(build, cacheable=True, base_url=BASE_URL, key_env=KEY_ENV, sent=sent,
                        system=True)
