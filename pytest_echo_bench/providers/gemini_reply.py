"""What a Gemini ``generateContent`` reply says: its answer, its usage, a refusal, or its error.

Both clients of ``gemini`` read the same JSON with these rules:

- the answer is ``candidates[0].content.parts[*].text`` joined in order; thought parts
  (``"thought": true``) and parts without text (a function call) are not the answer's;
- a candidate finished for ``SAFETY``, ``RECITATION``, ``PROHIBITED_CONTENT``, ``BLOCKLIST``,
  ``SPII`` or ``IMAGE_SAFETY``, or a prompt blocked (``promptFeedback.blockReason``, no candidate),
  is a refusal: an answer (the text sent, often none) with ``extra={"refusal": reason}``, graded
  as any answer and never retried (the same prompt is refused again);
- usage: ``promptTokenCount``, ``candidatesTokenCount + thoughtsTokenCount`` (both billed as
  output), ``thoughtsTokenCount`` and ``cachedContentTokenCount`` as the rows name them;
- errors, ``{"error": {"code", "message", "status", "details"}}``: a ``RESOURCE_EXHAUSTED``
  whose quota cannot come back by waiting (a per-day quota, a limit of 0, spent credits) stops
  the run; any other 429 is a rate limit, waited as its ``RetryInfo.retryDelay`` (else
  ``retry-after``) says; a refused key (a 400 ``API_KEY_INVALID``, as Google sends it),
  401/403/404 and ``FAILED_PRECONDITION`` (a region or plan the API is not offered in) are the
  arm's; 5xx, ``UNAVAILABLE`` and ``DEADLINE_EXCEEDED`` are transient; other 4xx the item's.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from pytest_echo_bench.errors import (
    ArmError,
    ExhaustedError,
    PermanentError,
    ProviderError,
    TransientError,
)
from pytest_echo_bench.providers.answer import MAX_COUNT, NOTE, kind, read_usage, served_text
from pytest_echo_bench.providers.base import Completion
from pytest_echo_bench.providers.http_json import (
    LONGEST_RETRY_AFTER_S,
    WIRE_HINT,
    ends_early,
    retry_after,
    status_message,
)
from pytest_echo_bench.providers.network import cert_failure, tls_refused
from pytest_echo_bench.providers.wire import Target
from pytest_echo_bench.store.redaction import Secrets, redact

REFUSALS = frozenset(
    {"SAFETY", "RECITATION", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII", "IMAGE_SAFETY"}
)
# theirs -> ours; "candidates" is summed with the thoughts into completion_tokens below
USAGE = {"promptTokenCount": "prompt_tokens", "candidatesTokenCount": "candidates",
         "cachedContentTokenCount": "cache_read_tokens", "thoughtsTokenCount": "reasoning_tokens"}
_ARM_STATES = {"UNAUTHENTICATED", "PERMISSION_DENIED", "NOT_FOUND", "FAILED_PRECONDITION"}
_TRANSIENT_STATES = {"UNAVAILABLE", "DEADLINE_EXCEEDED", "INTERNAL", "ABORTED"}
# ErrorInfo reasons of a key Google refused; it answers a wrong key 400 INVALID_ARGUMENT.
_KEY_REASONS = {"API_KEY_INVALID", "API_KEY_EXPIRED", "API_KEY_SERVICE_BLOCKED"}
_KEY_TEXT = re.compile(r"API key (?:not valid|expired)", re.IGNORECASE)
KEY_HINT = ("the key was refused: check the key in GEMINI_API_KEY or GOOGLE_API_KEY (the "
            "latter when both are set), or the arm's api_key_env, then resume")
NOT_FOUND_HINT = ("check the model (gemini-2.5-flash, as the API's model list names it) and "
                  "base_url (it ends in the API version, /v1beta), then resume")
PRECONDITION_HINT = ("the Gemini API refuses this project as it is (a region it is not offered "
                     "in, or a model the plan lacks): change the key's project or plan, then "
                     "resume")
# A quota that waiting does not bring back within a run: a day's, or none at all (a free tier's
# "limit: 0" for a model), or money spent. A minute's quota says "PerMinute" and is a rate limit.
_LASTING = re.compile(r"per.?day|daily|credits? (?:are |is )?depleted|prepay", re.IGNORECASE)
_LIMIT_ZERO = re.compile(r"\blimit: 0\b")
_DURATION = re.compile(r"\s*(\d{1,12}(?:\.\d{1,9})?)s\s*")
EXHAUSTED_HINT = "the Gemini quota is spent until it resets (or billing is enabled); then resume"


def error_of(body: Any, secrets: Secrets | None = None) -> Mapping[str, Any]:
    """The ``error`` object of ``{"error": {...}}`` (Google's APIs also wrap it in a list of one),
    the body itself, or its text (``null``, a number)."""
    if isinstance(body, list) and len(body) == 1:
        body = body[0]
    if isinstance(body, dict):
        inner = body.get("error")
        return inner if isinstance(inner, dict) else body
    shown = json.dumps(body) if not isinstance(body, str) else body
    return {"message": redact(shown, secrets or Secrets(), limit=200)}


def details(error: Mapping[str, Any], type_suffix: str) -> list[Mapping[str, Any]]:
    """The ``details`` entries of one ``@type`` (``google.rpc.RetryInfo``...)."""
    found = error.get("details")
    if not isinstance(found, list):
        return []
    return [d for d in found if isinstance(d, Mapping)
            and str(d.get("@type", "")).endswith(type_suffix)]


def retry_delay(error: Mapping[str, Any]) -> float | None:
    """``RetryInfo.retryDelay`` ("43s", "0.5s") in seconds, if the error says."""
    for info in details(error, "google.rpc.RetryInfo"):
        delay = info.get("retryDelay")
        matched = _DURATION.fullmatch(delay) if isinstance(delay, str) else None
        if matched:
            return min(float(matched.group(1)), LONGEST_RETRY_AFTER_S)
    return None


def _violations(error: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    out: list[Mapping[str, Any]] = []
    for failure in details(error, "google.rpc.QuotaFailure"):
        found = failure.get("violations")
        out += [v for v in found if isinstance(v, Mapping)] if isinstance(found, list) else []
    return out


def lasting(error: Mapping[str, Any], text: str) -> bool:
    """The quota a 429 names does not come back by waiting within a run (see ``_LASTING``)."""
    for violation in _violations(error):
        named = " ".join(str(violation.get(k, "")) for k in ("quotaId", "quotaMetric"))
        if _LASTING.search(named) or str(violation.get("quotaValue", "")).strip() == "0":
            return True
    return bool(_LASTING.search(text) or _LIMIT_ZERO.search(text))


def _key_refused(error: Mapping[str, Any], text: str) -> bool:
    reasons = {str(info.get("reason", "")) for info in details(error, "google.rpc.ErrorInfo")}
    return bool(reasons & _KEY_REASONS) or bool(_KEY_TEXT.search(text))


def _arm_error(status: int, state: str, error: Mapping[str, Any], message: str) -> ArmError | None:
    """The arm's settings, the same for every item: its key, its model, its region or plan."""
    if _key_refused(error, message):
        return ArmError(message, hint=KEY_HINT, status=status)
    if status == 404 or state == "NOT_FOUND":
        return ArmError(message, hint=NOT_FOUND_HINT, status=status)
    if state == "FAILED_PRECONDITION":
        return ArmError(message, hint=PRECONDITION_HINT, status=status)
    if status in (401, 403, 407) or 300 <= status < 400 or state in _ARM_STATES:
        return ArmError(message, status=status)
    return None


def classify_status(status: int, error: Mapping[str, Any], headers: Mapping[str, str],
                    now: Callable[[], float] = time.time) -> ProviderError:
    """Exhausted / arm / transient / permanent from the status, the error's ``status`` name and
    its ``details`` (see the module's docstring)."""
    state = str(error.get("status") or "")
    text = str(error.get("message") or "")
    message = status_message(status, state, text)
    wait = retry_delay(error)
    wait = wait if wait is not None else retry_after(headers)
    spent = status == 429 or state == "RESOURCE_EXHAUSTED"
    if status == 402 or (spent and lasting(error, text)):
        return ExhaustedError(f"{message}; {EXHAUSTED_HINT}", status=status,
                              resume_at=now() + wait if wait is not None else None)
    arm = _arm_error(status, state, error, message)
    if arm is not None:
        return arm
    if spent or status in (408, 409) or status >= 500 or state in _TRANSIENT_STATES:
        return TransientError(message, retry_after=wait, status=status)
    return PermanentError(message, status=status)


def reply(data: Any) -> Completion:
    """The answer a 2xx reply's JSON holds (see the module's docstring)."""
    if not isinstance(data, dict):
        data = {}
    usage, note = usage_of(data.get("usageMetadata"))
    candidates = data.get("candidates")
    first = candidates[0] if isinstance(candidates, list) and candidates else None
    refusal: str | None
    if first is None:
        refusal = _blocked(data.get("promptFeedback"))
        if refusal is None:
            # Not the Gemini API's answer (a web page, a proxy's own reply): on an arm's first
            # call the base_url is wrong; once the arm has answered, it is this item's failure.
            why = "the server answered without candidates: not a Gemini generateContent reply"
            raise ArmError(why, hint=WIRE_HINT, fallback=PermanentError(why))
        text = ""
    elif not isinstance(first, Mapping):
        raise PermanentError(f"the reply's candidates[0] is {kind(first)}, not an object")
    else:
        text = _text(first.get("content"))
        finish = first.get("finishReason")
        refusal = finish if isinstance(finish, str) and finish in REFUSALS else None
    extra: dict[str, Any] = {NOTE: note} if note else {}
    if refusal is not None:
        extra["refusal"] = refusal
    return Completion(text, usage, extra=extra, model=served_text(data.get("modelVersion")))


def _blocked(feedback: Any) -> str | None:
    """``prompt SAFETY`` when the prompt was blocked (``promptFeedback.blockReason``), else None."""
    reason = feedback.get("blockReason") if isinstance(feedback, Mapping) else None
    if reason in (None, "", "BLOCK_REASON_UNSPECIFIED"):
        return None
    return f"prompt {served_text(reason, 40) or 'OTHER'}"


def _text(content: Any) -> str:
    """The text parts of ``candidates[0].content`` joined in order, thoughts left out."""
    if content is None:
        return ""  # a candidate cut before any part (MAX_TOKENS spent thinking, a refusal)
    if not isinstance(content, Mapping):
        raise PermanentError(f"the reply's candidates[0].content is {kind(content)}, not an object")
    parts = content.get("parts")
    if parts is None:
        return ""
    if not isinstance(parts, list):
        raise PermanentError(
            f"the reply's candidates[0].content.parts is {kind(parts)}, not a list")
    texts = []
    for i, part in enumerate(parts):
        where = f"candidates[0].content.parts[{i}]"
        if not isinstance(part, Mapping):
            raise PermanentError(f"the reply's {where} is {kind(part)}, not a part")
        text = part.get("text")
        if part.get("thought") is True or text is None:
            continue  # a thought, a function call, inline data: not the answer's text
        if not isinstance(text, str):
            raise PermanentError(f"the reply's {where}.text is {kind(text)}, not a string")
        texts.append(text)
    return "".join(texts)


def usage_of(raw: Any) -> tuple[dict[str, int] | None, str | None]:
    """(the usage in the rows' names, a note when it is unknown) of ``usageMetadata``."""
    counts, note = read_usage(raw, USAGE)
    if counts is None:
        return None, note
    usage: dict[str, int] = {}
    if "prompt_tokens" in counts:
        usage["prompt_tokens"] = counts["prompt_tokens"]
    if "candidates" in counts or "reasoning_tokens" in counts:
        billed = counts.get("candidates", 0) + counts.get("reasoning_tokens", 0)
        if billed > MAX_COUNT:
            return None, ("usage.candidatesTokenCount + thoughtsTokenCount is past any token "
                          "count: usage recorded as unknown")
        usage["completion_tokens"] = billed
    for ours in ("cache_read_tokens", "reasoning_tokens"):
        if ours in counts:
            usage[ours] = counts[ours]
    return usage or None, None


@contextlib.contextmanager
def sdk_errors(sdk: Any, url: str = "") -> Iterator[None]:
    """The ``google-genai`` SDK's exceptions in our terms, as the lean client reports the same
    failures: an API error classified as above, no connection or a timeout transient, a
    certificate that failed verification the arm's."""
    try:
        yield
    except sdk.errors.APIError as exc:
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None) or {}
        raise classify_status(int(exc.code or 0), error_of(exc.details), headers) from exc
    except tuple(m.TransportError for m in http_libraries()) as exc:  # timeouts included
        refused = cert_failure(exc)
        if refused is not None:
            target = Target.parse(url)
            raise tls_refused(target.host, target.port, refused) from exc
        raise TransientError(f"{type(exc).__name__}: {exc}") from exc
    except UnicodeDecodeError:
        # The SDK decodes an error's body as JSON text and lets this through for bytes that are
        # no UTF-8; its status is lost with it, so the item's error (the lean client's says more).
        raise PermanentError("the error reply's body is not UTF-8 text (client: sdk)") from None


def http_libraries() -> list[Any]:
    """The HTTP libraries the SDK may use: ``httpx2`` (httpx's fork under its own name, which
    the SDK prefers) and ``httpx``, those installed."""
    import importlib

    found = []
    for name in ("httpx2", "httpx"):
        try:
            found.append(importlib.import_module(name))
        except ImportError:
            continue
    return found


def raw_reply(body: Any) -> Any:
    """The SDK's raw reply body parsed as the lean client parses one: a body cut short is
    transient, one that is no JSON reads as no reply."""
    if not isinstance(body, str):
        return None
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        if ends_early(body):
            raise TransientError(
                f"the reply's body ended before its JSON did ({len(body)} characters)"
            ) from None
        return None
