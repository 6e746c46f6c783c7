"""Amazon Bedrock's Converse API over the lean client, each request signed (SigV4) by botocore.

``POST {base_url}/model/{modelId}/converse``, the base URL ``https://bedrock-runtime.{region}
.amazonaws.com`` unless the arm names one. Credentials come from botocore's own chain (the
``AWS_*`` variables, the shared files, the arm's ``profile:``, a container's or an instance's role)
and go into the signature only: never into a row, a message or a traceback. botocore is the only
dependency (the ``bedrock`` extra), imported when a spec names the provider.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from pytest_echo_bench.errors import (
    ArmError,
    ExhaustedError,
    PermanentError,
    ProviderError,
    TransientError,
    UnavailableError,
)
from pytest_echo_bench.providers.answer import MAX_COUNT, NOTE, completion, kind
from pytest_echo_bench.providers.base import (
    BaseProvider,
    Caller,
    Completion,
    ProviderInfo,
    Request,
    check_options,
    option,
)
from pytest_echo_bench.providers.http_json import (
    WIRE_HINT,
    JSONClient,
    retry_after,
    status_message,
    success,
)
from pytest_echo_bench.providers.network import NETWORK_OPTIONS, network_of
from pytest_echo_bench.providers.secrets import spec_secrets
from pytest_echo_bench.providers.wire import BadURL, Target
from pytest_echo_bench.spec.load import ArmSpec, Spec
from pytest_echo_bench.store.redaction import Secrets, redact

# The arm's sampling keys (the Anthropic arm's names) -> Converse's ``inferenceConfig`` fields.
_SAMPLING: dict[str, tuple[str, type | tuple[type, ...]]] = {
    "max_tokens": ("maxTokens", int),
    "temperature": ("temperature", (int, float)),
    "top_p": ("topP", (int, float)),
    "stop_sequences": ("stopSequences", list),
}
_KNOWN = {*NETWORK_OPTIONS, "model", "region", "profile", "base_url", "system", *_SAMPLING}
SERVICE = "bedrock"  # the signing name of bedrock-runtime
KEY_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
USAGE = {"inputTokens": "prompt_tokens", "outputTokens": "completion_tokens",
         "cacheReadInputTokens": "cache_read_tokens", "cacheWriteInputTokens": "cache_write_tokens"}
# A stop that is the provider's refusal: an answer recorded as one, graded, never retried.
REFUSALS = frozenset({"guardrail_intervened", "content_filtered"})
CREDENTIALS_HINT = (
    "check the AWS credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN for "
    "temporary ones, or the arm's profile:) and that they may invoke this model in this region"
)
MODEL_HINT = "check the arm's model (a Bedrock model id or inference profile) and region"
# Each error type AWS documents for Converse, by what the run does about it.
_TRANSIENT = frozenset({"ThrottlingException", "ServiceUnavailableException",
                        "InternalServerException", "ModelNotReadyException",
                        "ModelTimeoutException", "InternalFailure", "ServiceUnavailable"})
_CREDENTIALS = frozenset({"AccessDeniedException", "UnrecognizedClientException",
                          "InvalidSignatureException", "ExpiredTokenException",
                          "IncompleteSignatureException", "MissingAuthenticationTokenException"})
# An AWS region's name (us-east-1, us-gov-west-1, eu-central-2): what goes into the host and the
# signature, so anything else is a typo or a value read with its line ending.
# Lower-case only: the signature's scope names the region as written, and AWS's is lower-case.
_REGION = re.compile(r"[a-z0-9]+(-[a-z0-9]+)+")
# ValidationException is a bad request, unless it is about the model id (an arm's setting).
_BAD_MODEL = ("model identifier is invalid", "on-demand throughput isn", "model is not supported")


@dataclass
class BedrockProvider(BaseProvider):
    client: JSONClient
    model: str
    system: str | None
    config: dict[str, Any]
    endpoint_url: str | None = None
    endpoint_key: str | None = None  # the access key id: one limit per account and endpoint

    def close(self) -> None:
        self.client.close()

    def complete(self, request: Request) -> Completion:
        payload: dict[str, Any] = {
            "messages": [{"role": "user", "content": [{"text": request.prompt}]}]}
        system = request.system or self.system
        if system:
            payload["system"] = [{"text": system}]
        if self.config:
            payload["inferenceConfig"] = self.config
        status, headers, data = self.client.post(payload)
        if not success(status):
            raise classify(status, data, headers, self.client.secrets)
        return reply(data, self.model)


def error_type(body: Any, headers: Mapping[str, str]) -> str:
    """The AWS error type: ``x-amzn-errortype`` ("ThrottlingException:http://..."), else the
    body's ``__type`` ("com.amazon.coral.service#ThrottlingException")."""
    raw = headers.get("x-amzn-errortype") or (
        body.get("__type") if isinstance(body, dict) else None)
    if not isinstance(raw, str):
        return ""
    return raw.split(":", 1)[0].rsplit("#", 1)[-1].strip()


def classify(status: int, body: Any, headers: Mapping[str, str],
             secrets: Secrets | None = None) -> ProviderError:
    """Exhausted / arm / transient / permanent, from the error type AWS names, else the status;
    the message redacted of the credentials (a server or a gateway may echo them)."""
    kind_ = error_type(body, headers)
    message = status_message(status, kind_, _message(body, secrets or Secrets()))
    if kind_ == "ServiceQuotaExceededException":
        return ExhaustedError(f"{message}; raise the quota (Service Quotas) or wait, then resume",
                              status=status)
    if kind_ in _CREDENTIALS:
        return ArmError(message, hint=CREDENTIALS_HINT, status=status)
    if kind_ == "ResourceNotFoundException" or (
            kind_ == "ValidationException" and any(s in message.lower() for s in _BAD_MODEL)):
        return ArmError(message, hint=MODEL_HINT, status=status)
    if kind_ in _TRANSIENT or status in (408, 429) or status >= 500:
        return TransientError(message, retry_after=retry_after(headers), status=status)
    if status in (401, 403, 404, 407) or 300 <= status < 400:
        return ArmError(message, status=status)
    return PermanentError(message, status=status)


def _message(body: Any, secrets: Secrets) -> str:
    """The error body's ``message`` (``Message`` in some of AWS's protocols), redacted."""
    text = body.get("message") or body.get("Message") if isinstance(body, dict) else None
    return redact(text, secrets, limit=1000) if isinstance(text, str) else ""


def reply(data: Any, model: str) -> Completion:
    """The Converse reply's text, usage and refusal; the served model is the model id asked (the
    reply names none)."""
    output = data.get("output") if isinstance(data, dict) else None
    message = output.get("message") if isinstance(output, dict) else None
    if not isinstance(message, dict):
        # Not Converse's answer (a web page, a proxy's own reply): on an arm's first call the
        # base_url is wrong; once the arm has answered, it is this item's failure.
        text = "the server answered without output.message: not the Bedrock Converse API's reply"
        raise ArmError(text, hint=WIRE_HINT, fallback=PermanentError(text))
    done = completion(_text(message.get("content")), data.get("usage"), USAGE, model)
    done.usage = _with_cache(done.usage, done.extra)
    stop = data.get("stopReason")
    if isinstance(stop, str) and stop in REFUSALS:
        done.extra["refusal"] = stop
    return done


def _text(content: Any) -> str:
    """The text blocks of ``output.message.content``, in order: a block is an object with one key
    (``text``, ``reasoningContent``, ``toolUse``...), only ``text`` being the answer's."""
    if content is None:
        return ""
    if not isinstance(content, list):
        raise PermanentError(f"the reply's output.message.content is {kind(content)}, not a list")
    parts = []
    for i, block in enumerate(content):
        if not isinstance(block, Mapping):
            raise PermanentError(f"the reply's output.message.content[{i}] is {kind(block)}, "
                                 "not a content block")
        if "text" in block:
            if not isinstance(block["text"], str):
                raise PermanentError(f"the reply's output.message.content[{i}].text is "
                                     f"{kind(block['text'])}, not a string")
            parts.append(block["text"])
    return "".join(parts)


def _with_cache(usage: dict[str, int] | None, extra: dict[str, Any]) -> dict[str, int] | None:
    """``prompt_tokens`` as every input token billed: Converse's ``inputTokens`` leaves out those
    read from and written to the cache (docs/providers.md)."""
    if usage is None or "prompt_tokens" not in usage:
        return usage
    total = usage["prompt_tokens"] + usage.get("cache_read_tokens", 0) + usage.get(
        "cache_write_tokens", 0)
    if total > MAX_COUNT:
        extra[NOTE] = "usage's input counts add up past any count: usage recorded as unknown"
        return None
    return {**usage, "prompt_tokens": total}


@dataclass(frozen=True)
class Signer:
    """Signs each request's body and headers with SigV4, the credentials read as they stand then
    (botocore refreshes a role's or an SSO login's)."""

    credentials: Any  # botocore.credentials.Credentials
    region: str
    url: str
    host: str  # the host header the wire sends, signed as sent

    def __call__(self, body: bytes, headers: dict[str, str]) -> dict[str, str]:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.exceptions import BotoCoreError

        try:
            frozen = self.credentials.get_frozen_credentials()
        except BotoCoreError as exc:  # an expired SSO login, a role that cannot be assumed
            raise ArmError(f"the AWS credentials could not be refreshed: {type(exc).__name__}",
                           hint=CREDENTIALS_HINT) from None
        request = AWSRequest("POST", self.url, data=body, headers={"host": self.host, **headers})
        SigV4Auth(_stripped(frozen), SERVICE, self.region).add_auth(request)
        signed = {"x-amz-date": request.headers["X-Amz-Date"],
                  "authorization": request.headers["Authorization"]}
        if frozen.token:
            signed["x-amz-security-token"] = request.headers["X-Amz-Security-Token"]
        return signed


def _stripped(frozen: Any) -> Any:
    """The credentials without the white space around them: a value read from a secret file or a
    CRLF ``.env`` ends in a newline, which would sign wrong (and the server says only that)."""
    from botocore.credentials import ReadOnlyCredentials

    token = frozen.token.strip() if frozen.token else None
    return ReadOnlyCredentials(frozen.access_key.strip(), frozen.secret_key.strip(), token)


def _credentials(arm: ArmSpec, spec: Spec) -> tuple[Any, str | None]:
    """(botocore's credentials, the region its chain names) for ``arm``: unavailable without."""
    try:
        import botocore.session
        from botocore.exceptions import BotoCoreError, ProfileNotFound
    except ImportError as exc:
        raise UnavailableError(
            "botocore is not installed: pip install 'pytest-echo-bench[bedrock]'") from exc
    profile = option(arm, "profile", str, None, spec)
    try:
        session = botocore.session.Session(profile=profile)
        found = session.get_credentials()
        region = session.get_config_variable("region")
    except ProfileNotFound:
        raise UnavailableError(f"arm {arm.name!r}: the AWS profile {profile!r} is in no shared "
                               "config or credentials file", misconfigured=True) from None
    except BotoCoreError as exc:  # a malformed config file, a credential process that failed
        raise UnavailableError(f"arm {arm.name!r}: the AWS credentials could not be read "
                               f"({type(exc).__name__})", misconfigured=True) from None
    if found is None:
        raise UnavailableError(
            f"arm {arm.name!r} needs AWS credentials: set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary ones), or a profile:")
    return found, region


def inference_config(arm: ArmSpec, spec: Spec) -> dict[str, Any]:
    """Converse's ``inferenceConfig`` from the arm's sampling keys, as sent."""
    config = {}
    for key, (field, kinds) in _SAMPLING.items():
        value = option(arm, key, kinds, None, spec)
        if value is not None:
            config[field] = value
    if config.get("maxTokens", 1) < 1:
        raise spec.error(f"max_tokens must be positive, got {config['maxTokens']}", "arms",
                         arm.name, "max_tokens")
    return config


def sent(arm: ArmSpec) -> dict[str, Any]:
    """What bounds a call's cost beside its prompt: ``max_tokens`` when the arm sets it (else the
    model's own default, which no worst case knows)."""
    return {"max_tokens": arm.options["max_tokens"]} if "max_tokens" in arm.options else {}


def default_url(region: str) -> str:
    return f"https://bedrock-runtime.{region}.amazonaws.com"


def describe(arm: ArmSpec) -> str:
    """Where an arm's calls go, for a message."""
    given = arm.options.get("region")
    region = (given.strip() if isinstance(given, str) else given) or os.environ.get(
        "AWS_REGION", "").strip() or "<region>"
    return str(arm.options.get("base_url") or default_url(str(region)))


def _region(arm: ArmSpec, spec: Spec, chained: str | None) -> str:
    """The arm's ``region:``, else AWS_REGION, else the region botocore's chain names
    (AWS_DEFAULT_REGION, the profile's), stripped of white space around it as the credentials
    are; a value that is no region's name is refused, naming where it was read."""
    given = option(arm, "region", str, None, spec)
    if given is not None and given.strip():
        region = given.strip()
        if not _REGION.fullmatch(region):
            raise spec.error(f"region must be an AWS region such as us-east-1 (lower-case letters "
                             f"and digits joined by hyphens), got {given!r}", "arms", arm.name,
                             "region")
        return region
    where = "AWS_REGION"
    region = os.environ.get("AWS_REGION", "").strip()
    if not region and chained:
        region = chained.strip()
        where = ("AWS_DEFAULT_REGION" if os.environ.get("AWS_DEFAULT_REGION", "").strip()
                 else "the profile's region (the AWS config file)")
    if not region:
        raise UnavailableError(f"arm {arm.name!r} needs an AWS region: set region: in the arm, "
                               "or AWS_REGION", misconfigured=True)
    if not _REGION.fullmatch(region):
        raise UnavailableError(f"arm {arm.name!r}: {where} holds {region!r}, not an AWS region "
                               "such as us-east-1 (lower-case letters and digits joined by "
                               "hyphens): fix it, or set region: in the arm",
                               misconfigured=True)
    return region


def build(arm: ArmSpec, spec: Spec, caller: Caller) -> BedrockProvider:
    check_options(arm, spec, "bedrock", _KNOWN)
    model = option(arm, "model", str, None, spec)
    if not model:
        raise spec.error("a bedrock arm needs a 'model' (a model id or inference profile)",
                         "arms", arm.name)
    config = inference_config(arm, spec)
    system = option(arm, "system", str, None, spec)
    found, chained = _credentials(arm, spec)
    region = _region(arm, spec, chained)
    base = option(arm, "base_url", str, default_url(region), spec).rstrip("/")
    url = f"{base}/model/{quote(model, safe='')}/converse"
    try:
        host = Target.parse(url).host_header
    except BadURL as exc:
        raise spec.error(f"base_url cannot be used: {exc}", "arms", arm.name, "base_url") from None
    frozen = found.get_frozen_credentials()
    secrets = spec_secrets(spec) | Secrets(
        v for v in (frozen.secret_key, frozen.token, frozen.access_key) if v)
    client = JSONClient(url, {}, spec.timeout_s, network_of(arm, spec), secrets,
                        sign=Signer(found, region, url, host))
    return BedrockProvider(client, model, system, config, base, frozen.access_key.strip())


PROVIDER = ProviderInfo(build, cacheable=True, key_env=KEY_ENV, sent=sent, describe=describe,
                        system=True)
