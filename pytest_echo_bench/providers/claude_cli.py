"""What the real ``claude`` CLI prints, and what each message means for the run.

Checked against Claude Code 2.1.332 (npm ``@anthropic-ai/claude-code``, the version pinned in
package.json), run with ``--print --output-format json``: without a login, against a local
server answering with the API's errors, and with the wordings users reported for older ones.
It answers one JSON object, ``{"type": "result", "subtype": ..., "is_error": ..., "result":
text, "api_error_status": HTTP status or null, "usage": {...}, "total_cost_usd": ...}``, on
stdout, with exit status 1 when ``is_error`` and 0 otherwise; but API errors have also come with
``"subtype": "success"`` and exit status 0 (anthropics/claude-code#79500), and older versions
printed ``Claude AI usage limit reached|<epoch>`` as if it were the answer. So the status code and
``is_error`` decide nothing alone: every text is read, and one that is the CLI's own message is
never returned as an answer (it would be cached and graded).
"""

from __future__ import annotations

import json
import re
from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pytest_echo_bench.errors import (
    ArmError,
    ExhaustedError,
    PermanentError,
    ProviderError,
    TransientError,
)
from pytest_echo_bench.providers.answer import ANTHROPIC_USAGE, CACHE_APART, count, read_usage
from pytest_echo_bench.providers.base import Completion
from pytest_echo_bench.store.redaction import Secrets, redact

CHECKED_VERSION = "2.1.332"
LOGIN_HINT = (
    "run `claude` and log in, or set ANTHROPIC_API_KEY (or CLAUDE_CODE_OAUTH_TOKEN) and list "
    "it under env: "
    "(a login made with `claude` is kept in your home directory: the arm reads it only with "
    "keep_home: true)"
)
MODEL_HINT = (
    "check the arm's model: (an alias such as sonnet or opus, or a full model id the account can "
    "use)"
)
NETWORK_HINT = (
    "the CLI cannot reach the API: check the network and any proxy (or ANTHROPIC_BASE_URL, if "
    "the arm passes it)"
)

_APOS = "['\u2019]"  # the CLI has printed both apostrophes
# The usage window of a subscription (or a spend limit): the whole run stops until it resets.
_USAGE_LIMIT = re.compile(
    r"Claude(?: AI)? usage limit reached|usage limit reached|\b5-hour limit reached|spend "
    r"limit reached"
    rf"|You{_APOS}ve hit your (?:[\w-]+ )*limit|limit will reset at|out of usage credits",
    re.IGNORECASE,
)
# Money, not a window: also a stop of the run, with no time to resume at.
_CREDIT = re.compile(
    r"credit balance (?:is )?too low|issue with your account's payment method|billing_error",
    re.IGNORECASE,
)
_LOGIN = re.compile(
    r"Not logged in|Please run /login|Invalid API key|Fix external API key|OAuth token "
    r"(?:has expired|revoked)"
    r"|Failed to authenticate|authentication_error|authentication_failed",
    re.IGNORECASE,
)
_MODEL = re.compile(r"issue with the selected model|not_found_error", re.IGNORECASE)
_UNREACHABLE = re.compile(r"ECONNREFUSED|Connection refused|ENOTFOUND|getaddrinfo", re.IGNORECASE)
_PROMPT = re.compile(r"Prompt is too long|context length", re.IGNORECASE)
_TRANSIENT = re.compile(
    r"overloaded|API Error: (?:5\d\d|529)|Request rejected \(429\)|rate limit|Rate limited"
    r"|Connection error|ETIMEDOUT|ECONNRESET|timed out|socket hang up",
    re.IGNORECASE,
)
# What the CLI prints instead of an answer: an exit status of 0 does not make these answers.
_OWN_MESSAGE = re.compile(
    r"\s*(?:Claude(?: AI)? usage limit reached|You['\u2019]ve hit your|5-hour limit reached"
    r"|Not logged in|Invalid API key|Please run /login|Credit balance|API Error:|Failed to "
    r"authenticate"
    r"|OAuth token|Your limit will reset)",
    re.IGNORECASE,
)
_OWN_MESSAGE_MAX = 600  # the CLI's messages are one short line; an answer that long is the model's

_EPOCH = re.compile(r"usage limit reached\|(\d{9,11})\b", re.IGNORECASE)
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_RESETS = re.compile(
    r"\breset(?:s)?(?: at)? (?:(?P<month>[A-Za-z]{3})[a-z]* (?P<day>\d{1,2}),? )?"
    r"(?P<hour>\d{1,2})(?::(?P<minute>\d{2}))?\s*(?P<half>am|pm)"
    r"(?: \((?P<zone>[A-Za-z_]+(?:/[A-Za-z0-9_+-]+)*)\))?", re.IGNORECASE)
# A reset shown as 1pm may be seen at 1:02pm (the shown time is rounded, clocks differ): that
# window has just reset, it is not tomorrow's.
_GRACE = timedelta(minutes=5)


def read(name: str, rc: int, out: str, err: str, secrets: Secrets | None = None) -> Completion:
    """The answer in the CLI's output, or the error its messages mean, whatever its exit status.
    ``secrets`` are redacted from a message before its output is cut to a tail."""
    result = _result_object(out)
    if result is None:
        return _read_text(name, rc, out, err, secrets or Secrets())
    text = result.get("result")
    text = text if isinstance(text, str) else ""
    status = result.get("api_error_status")
    status = status if isinstance(status, int) and not isinstance(status, bool) else None
    if result.get("is_error") is True or result.get("subtype") != "success" or rc != 0:
        detail = text or f"{result.get('subtype')} (no result text)"
        raise classify(f"{name} {_how(rc)}: {detail}", detail, status)
    if _is_own_message(text):
        raise classify(
            f"{name} answered with its own message (exit status 0): {text.strip()}", text, status
        )
    return Completion(text.strip(), _usage(result.get("usage")))


def _read_text(name: str, rc: int, out: str, err: str, secrets: Secrets) -> Completion:
    """Output that is not the JSON result (another binary, an older CLI): the text is the answer."""
    text = "\n".join(s for s in (err.strip(), out.strip()) if s)
    if rc != 0:
        raise classify(
            f"{name} {_how(rc)}: {redact(text, secrets, limit=2000, tail=True) or '(no output)'}",
            text,
            None,
        )
    if _is_own_message(out):
        raise classify(
            f"{name} answered with its own message (exit status 0): {out.strip()}", out, None
        )
    return Completion(out.strip())


def classify(message: str, text: str, status: int | None) -> ProviderError:
    """The scope of one failed call from the CLI's text (and the API's status, when it says)."""
    if _USAGE_LIMIT.search(text):
        return ExhaustedError(message, status=status, resume_at=resume_at(text))
    if _CREDIT.search(text):
        return ExhaustedError(message, status=status)
    if _LOGIN.search(text) or status in (401, 403):
        absent = status is None and re.search(r"Not logged in", text, re.IGNORECASE) is not None
        return ArmError(message, hint=LOGIN_HINT, status=status, absent=absent)
    if _MODEL.search(text) or status == 404:
        return ArmError(message, hint=MODEL_HINT, status=status)
    if _UNREACHABLE.search(text):
        # Refused before the arm has answered: nothing can get
        # through. Once it has answered, a blip.
        return ArmError(message, hint=NETWORK_HINT, fallback=TransientError(message))
    if _PROMPT.search(text) or status == 400:
        return PermanentError(message, status=status)  # this prompt, not the arm: an error row
    # Overloaded, 5xx, rate limited, and what this version does not say: may pass, so retried.
    # A CLI that fails every call the same unknown way is stopped by the retries running out.
    return TransientError(message, status=status)


def resume_at(text: str, now: datetime | None = None) -> float | None:
    """When the usage window resets (Unix time), from the CLI's text; None when it does not say."""
    epoch = _EPOCH.search(text)
    if epoch is not None:
        return float(epoch.group(1))
    shown = _RESETS.search(text)
    return None if shown is None else _next_wall_clock(shown, now)


def _next_wall_clock(shown: re.Match[str], now: datetime | None) -> float | None:
    """The next moment the clock in the named zone (local time without one) shows that time."""
    try:
        zone = ZoneInfo(shown["zone"]) if shown["zone"] else None
    except (ZoneInfoNotFoundError, ValueError):
        return None  # a zone we cannot place: a guess could be hours off
    hour, minute = int(shown["hour"]), int(shown["minute"] or 0)
    if not 1 <= hour <= 12 or minute > 59:
        return None
    at = time(hour % 12 + (12 if shown["half"].lower() == "pm" else 0), minute)
    current = (now or datetime.now().astimezone()).astimezone(zone)
    if shown["month"]:
        return _next_date(shown["month"], int(shown["day"]), at, current)
    today = datetime.combine(current.date(), at, tzinfo=current.tzinfo)
    if today < current - _GRACE:
        # Combine, not add 24 hours: across a DST change the wall-clock time is what the CLI named.
        today = datetime.combine(current.date() + timedelta(days=1), at, tzinfo=current.tzinfo)
    return today.timestamp()


def _next_date(month_name: str, day: int, at: time, current: datetime) -> float | None:
    month = month_name[:3].lower()
    if month not in _MONTHS:
        return None
    for year in (current.year, current.year + 1):
        try:
            moment = datetime.combine(
                date(year, _MONTHS.index(month) + 1, day), at, tzinfo=current.tzinfo
            )
        except ValueError:
            return None  # Feb 30
        if moment >= current - _GRACE:
            return moment.timestamp()
    return None


def _result_object(out: str) -> dict[str, Any] | None:
    """The CLI's result object: all of stdout, or its last line (``stream-json`` ends with it)."""
    stripped = out.strip()
    for candidate in (stripped, stripped.rsplit("\n", 1)[-1]):
        try:
            data = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("type") == "result":
            return data
    return None


_CACHE = ("cache_read_input_tokens", "cache_creation_input_tokens")


def _usage(raw: Any) -> dict[str, int] | None:
    """The API's token counts under our names (``answer.ANTHROPIC_USAGE``): the cache's reads and
    writes kept apart and counted in ``prompt_tokens``, as the Messages API's rows count them."""
    if not isinstance(raw, dict):
        return None
    # The CLI reports every count on every call, the cache's as 0 when it was not used: rows stay
    # as small as they were when no cache was used. A value that is no count is left out.
    counted = {k: v for k, v in raw.items() if k in ANTHROPIC_USAGE and count(v) is not None
               and (v or k not in _CACHE)}
    return read_usage(counted, ANTHROPIC_USAGE, CACHE_APART)[0]


def _is_own_message(text: str) -> bool:
    return len(text) <= _OWN_MESSAGE_MAX and _OWN_MESSAGE.match(text) is not None


def _how(rc: int) -> str:
    return f"was killed by signal {-rc}" if rc < 0 else f"exited with status {rc}"
