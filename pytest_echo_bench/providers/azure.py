"""Azure OpenAI: an ``openai`` arm with ``azure: {endpoint, deployment, api_version}``.

The chat completions wire format is OpenAI's (``openai_chat`` hands its readers in as a ``Wire``,
so this module does not import it); what differs is Azure's: the deployment's URL,
``{endpoint}/openai/deployments/{deployment}/chat/completions?api-version={api_version}``, the key
in the ``api-key`` header (``AZURE_OPENAI_API_KEY`` unless ``api_key_env``), and the content
filter. A prompt the filter refuses (400, ``code: content_filter``) and a reply it cut
(``finish_reason: content_filter``) are refusals: answers recorded with
``extra={"refusal": "content_filter"}``, graded as any answer, never retried (the same prompt is
filtered again). ``client: sdk`` goes through the SDK's ``openai.AzureOpenAI``.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import quote, urlsplit

from pytest_echo_bench.errors import ArmError, PermanentError, ProviderError, UnavailableError
from pytest_echo_bench.providers.base import Completion, read_key
from pytest_echo_bench.providers.http_json import JSONClient, Transport, plain, sdk_errors, success
from pytest_echo_bench.providers.network import Network, sdk_client
from pytest_echo_bench.store.redaction import Secrets

if TYPE_CHECKING:
    from pytest_echo_bench.spec.load import ArmSpec, Spec

KEY_ENV = "AZURE_OPENAI_API_KEY"  # where its key is read when the arm names no api_key_env
FILTERED = "content_filter"
_KEYS = ("endpoint", "deployment", "api_version")
# The innererror code Azure gives a prompt its content filter refused.
_POLICY = "ResponsibleAIPolicyViolation"
# The characters Azure allows in a deployment's name. A "/" in one would be sent as %2F by the
# lean client and as a path separator by the SDK: two different URLs for one arm.
_DEPLOYMENT = re.compile(r"[A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Azure:
    """An arm's ``azure:`` settings."""

    endpoint: str  # https://RESOURCE.openai.azure.com
    deployment: str
    api_version: str

    @property
    def base_url(self) -> str:
        """``{endpoint}/openai/deployments/{deployment}``, the SDK's ``azure_deployment`` address:
        the name is one path segment of letters, digits, ``.``, ``_`` and ``-`` (``azure_of``
        refuses any other), so quoting it changes nothing."""
        return f"{self.endpoint.rstrip('/')}/openai/deployments/{quote(self.deployment, safe='')}"

    @property
    def url(self) -> str:
        return (f"{self.base_url}/chat/completions?api-version="
                f"{quote(self.api_version, safe='')}")


class Wire(NamedTuple):
    """How the OpenAI wire format is read (``openai_chat``'s): an error's scope, the error object
    of a body, and the answer of a 2xx reply."""

    classify: Callable[[int, Mapping[str, Any], Mapping[str, str]], ProviderError]
    error_of: Callable[[Any, Secrets], Mapping[str, Any]]
    reply: Callable[[Any], Completion]


def azure_of(arm: ArmSpec, spec: Spec) -> Azure | None:
    """The arm's ``azure:`` checked (None: it has none), each mistake named with its line."""
    raw = arm.options.get("azure")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise spec.error("azure must be a mapping: {endpoint, deployment, api_version}", "arms",
                         arm.name, "azure")
    unknown = sorted(set(raw) - set(_KEYS))
    if unknown:
        raise spec.error(f"unknown azure key {unknown[0]!r}; known: {', '.join(_KEYS)}", "arms",
                         arm.name, "azure")
    if "base_url" in arm.options:
        raise spec.error("an azure arm takes its address from azure.endpoint, not base_url",
                         "arms", arm.name, "base_url")
    values = []
    for key in _KEYS:
        value = raw.get(key)
        if isinstance(value, datetime.date):  # YAML reads api_version: 2024-10-21 as a date
            value = value.isoformat()
        if not isinstance(value, str) or not value.strip():
            raise spec.error(f"azure needs {key} (a text), got {value!r}", "arms", arm.name,
                             "azure")
        values.append(value.strip())
    if not _DEPLOYMENT.fullmatch(values[1]):
        raise spec.error(f"azure.deployment must be an Azure deployment name (letters, digits, "
                         f"'.', '_' and '-'), got {values[1]!r}: copy the deployment's name as "
                         "the Azure portal shows it", "arms", arm.name, "azure", "deployment")
    if urlsplit(values[0]).scheme not in ("http", "https"):
        raise spec.error(f"azure.endpoint must be an https:// URL, got {values[0]!r}", "arms",
                         arm.name, "azure")
    return Azure(*values)


def refused(error: Mapping[str, Any]) -> bool:
    """The content filter refused the prompt: ``code: content_filter`` (or its inner code)."""
    inner = error.get("innererror")
    inner_code = inner.get("code") if isinstance(inner, Mapping) else None
    return error.get("code") == FILTERED or inner_code == _POLICY


def refusal(done: Completion | None = None) -> Completion:
    """``done`` (or an empty answer) recorded as the content filter's refusal."""
    done = done if done is not None else Completion("")
    done.extra = {**done.extra, "refusal": FILTERED}
    return done


def _cut(done: Completion, data: Any) -> Completion:
    """The answer, a refusal when the filter cut it (``finish_reason: content_filter``)."""
    choices = data.get("choices") if isinstance(data, Mapping) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    if isinstance(first, Mapping) and first.get("finish_reason") == FILTERED:
        return refusal(done)
    return done


def _hinted(error: ProviderError, key_env: str) -> ProviderError:
    """A refused key names the variable it was read from, a 404 the deployment (the hints of an
    openai arm name OPENAI_API_KEY and base_url)."""
    if isinstance(error, ArmError) and error.status in (401, 403) and not error.hint:
        error.hint = (f"the key was refused: check the key in {key_env} (and that it may use this "
                      "deployment), then resume")
    elif isinstance(error, ArmError) and error.status == 404 and not error.hint:
        error.hint = ("check azure.deployment (a deployment of the resource at azure.endpoint) "
                      "and azure.api_version, then resume")
    return error


@dataclass
class HTTPTransport:
    azure: Azure
    key: str
    key_env: str
    timeout: float
    wire: Wire
    network: Network = field(default_factory=Network)
    secrets: Secrets = field(default_factory=Secrets)

    def __post_init__(self) -> None:
        self.client = JSONClient(self.azure.url, {"api-key": self.key}, self.timeout,
                                 self.network, self.secrets | Secrets([self.key]))

    def close(self) -> None:
        self.client.close()

    def post(self, payload: dict[str, Any]) -> Completion:
        status, headers, data = self.client.post(payload)
        if not success(status):
            error = self.wire.error_of(data, self.client.secrets)
            if status == 400 and refused(error):
                return refusal()
            raise _hinted(self.wire.classify(status, error, headers), self.key_env)
        return _cut(self.wire.reply(data), data)


@dataclass
class SDKTransport:
    client: Any  # openai.AzureOpenAI
    sdk: Any
    key_env: str
    wire: Wire
    url: str = ""

    def close(self) -> None:
        self.client.close()

    def post(self, payload: dict[str, Any]) -> Completion:
        try:
            with sdk_errors(self.sdk, self.sdk.OpenAIError,
                            lambda s, e, h: _hinted(self.wire.classify(s, e, h), self.key_env),
                            self.url):
                resp = self.client.chat.completions.create(**payload)
        except PermanentError as exc:
            cause = exc.__cause__
            body = getattr(cause, "body", None)
            if getattr(cause, "status_code", None) == 400 and isinstance(body, Mapping) \
                    and refused(body):
                return refusal()
            raise
        data = plain(resp) if hasattr(resp, "choices") else None
        return _cut(self.wire.reply(data), data)


def transport(arm: ArmSpec, spec: Spec, azure: Azure, client: str, key_env: str | None,
              wire: Wire, network: Network, secrets: Secrets) -> tuple[Transport, str]:
    """(the arm's transport, its key) through the lean client or ``openai.AzureOpenAI``; the key
    from ``key_env`` (the arm's ``api_key_env``), else ``AZURE_OPENAI_API_KEY``."""
    key_env = key_env or KEY_ENV
    key = read_key(arm.name, key_env)
    if client == "http":
        return HTTPTransport(azure, key, key_env, spec.timeout_s, wire, network, secrets), key
    try:
        import openai
    except ImportError as exc:
        raise UnavailableError(
            "the openai SDK is not installed: pip install 'pytest-echo-bench[openai]' "
            "(or set client: http)"
        ) from exc
    # max_retries=0: the SDK would retry every 429 and 5xx out of sight of our classifier.
    made = sdk_client(arm.name, network, lambda: openai.AzureOpenAI(
        api_key=key, azure_endpoint=azure.endpoint, azure_deployment=azure.deployment,
        api_version=azure.api_version, max_retries=0, timeout=spec.timeout_s,
        http_client=network.sdk_http_client(openai.DefaultHttpxClient, spec.timeout_s)))
    return SDKTransport(made, openai, key_env, wire, azure.base_url), key
