"""A lean JSON-over-HTTP client: one keep-alive connection per thread
(``wire``), standard library only.

The official SDKs cost several times its CPU per call, which limits how many calls one process
keeps in flight on a small machine, so it is the default (see docs/performance.md).
"""

from __future__ import annotations

import contextlib
import datetime
import email.utils
import json
import math
import re
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from pytest_echo_bench.errors import (
    ArmError,
    PermanentError,
    ProviderError,
    TransientError,
    UnavailableError,
)
from pytest_echo_bench.providers.base import Completion
from pytest_echo_bench.providers.network import Network, Proxy, cert_failure, tls_refused
from pytest_echo_bench.providers.reply import UnknownEncoding
from pytest_echo_bench.providers.wire import (
    BadHeader,
    BadURL,
    Connection,
    ProxyRefused,
    Reply,
    Target,
    WireError,
    request_head,
)
from pytest_echo_bench.store.redaction import Secrets, redact

PROXY_HINT = (
    "check the proxy's address and credentials (the arm's proxy:, or HTTP(S)_PROXY), or set "
    "proxy: none"
)
# of a body that is no JSON, the bytes redacted before its first 200 characters are kept
BODY_SHOWN = 1 << 16
# What to do when a server answers, but not in the API's wire format.
WIRE_HINT = (
    "base_url must be the API's address (for example https://host/v1), not a web page, a "
    "redirect or a login"
)


class Transport(Protocol):
    """How a chat provider reaches its API: its ``SDKTransport`` (the official SDK) or its
    ``HTTPTransport`` (over the lean ``JSONClient``, whose own ``post`` answers an ``Exchange``)."""

    def post(self, payload: dict[str, Any]) -> Completion:
        """The model's answer to ``payload``, or the ProviderError that says what went wrong."""
        ...

    def close(self) -> None:
        """Close its connections once the run's calls are done."""



class Exchange(NamedTuple):
    """What the lean client's ``post`` answers, before a provider reads it: the HTTP status, the
    lower-cased headers and the parsed body."""

    status: int
    headers: dict[str, str]
    body: Any


def plain(resp: Any) -> Any:
    """An SDK's reply object as the JSON it was built from. The SDKs build replies without
    validating them (any field may hold any JSON value), so the provider reads the plain data
    with the same rules as the lean client's."""
    if isinstance(resp, Mapping):
        return resp
    to_dict = getattr(resp, "to_dict", None)
    return to_dict(warnings=False) if callable(to_dict) else None


@contextlib.contextmanager
def sdk_errors(
    sdk: Any,
    base_error: type[Exception],
    classify: Callable[[int, Any, Mapping[str, str]], ProviderError],
    url: str = "",
) -> Iterator[None]:
    """An official SDK's exceptions in our terms, as the lean client reports the same failures:
    no connection or a timeout is transient, a certificate that failed verification is the arm's
    (named as the lean client names it: the SDK says only "Connection error."), an HTTP status is
    classified by the provider, and anything else the SDK raises is permanent."""
    try:
        yield
    except sdk.APIConnectionError as exc:  # includes APITimeoutError
        refused = cert_failure(exc)
        if refused is not None:
            target = Target.parse(url)
            raise tls_refused(target.host, target.port, refused) from exc
        raise TransientError(f"{type(exc).__name__}: {exc}") from exc
    except sdk.APIStatusError as exc:
        body = exc.body if isinstance(exc.body, dict) else {"message": exc.message}
        raise classify(exc.status_code, body, exc.response.headers) from exc
    except json.JSONDecodeError as exc:  # the SDK parses a 2xx body itself, and lets this through
        if ends_early(exc.doc):
            raise TransientError(
                f"the reply's body ended before its JSON did ({len(exc.doc)} characters): "
                "cut short by its content-length or the connection"
            ) from None
        raise PermanentError(f"the reply's body is no JSON: {exc.msg}") from None
    except base_error as exc:
        raise PermanentError(f"{type(exc).__name__}: {exc}") from exc


@dataclass
class JSONClient:
    url: str  # the endpoint, e.g. http://127.0.0.1:8000/v1/chat/completions
    headers: dict[str, str]
    timeout: float
    network: Network = field(default_factory=Network)
    # redacted from a body before it is cut for a message
    secrets: Secrets = field(default_factory=Secrets)
    _local: threading.local = field(default_factory=threading.local)
    # Every thread's connection, for ``close``: a thread's end does not close its socket (nor the
    # server's side of it), which stayed open until the cycle collector ran.
    _opened: list[Connection] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        # identity: a compressed reply would cost CPU to inflate
        # (``reply`` still inflates one, if sent).
        self.headers = {
            "content-type": "application/json",
            "accept-encoding": "identity",
            **self.headers,
        }
        self._head: bytes | None = None
        self._refused: str | None = None  # why the URL or the proxy cannot be used, found once
        self._proxy: Proxy | None = None
        try:
            self._target: Target | None = Target.parse(self.url)
        except BadURL as exc:
            self._target, self._refused = None, f"the base_url cannot be used: {exc}"
        try:
            self._proxy = self.network.proxy_for(self.url) if self._target is not None else None
        except ValueError as exc:  # HTTPS_PROXY=socks5://...: the SDK may reach it, we cannot
            self._target, self._refused = (
                None,
                f"the proxy cannot be used by client: http: {exc}; {PROXY_HINT}",
            )
        self._tls = (
            self.network.tls_context() if self._target is not None and self._target.tls else None
        )

    def _connection(self, target: Target) -> Connection:
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = Connection(target, self.timeout, self._tls, self._proxy)
            with self._lock:
                self._opened.append(conn)
        return conn

    def close(self) -> None:
        """Close every thread's connection (idempotent); a later call opens a new one."""
        with self._lock:
            opened, self._opened = self._opened, []
        for conn in opened:
            conn.close()

    def _request_head(self, target: Target) -> bytes:
        if self._head is None:
            self._head = request_head(target, self.headers, self._proxy)
        return self._head

    def post(self, payload: dict[str, Any]) -> Exchange:
        """The reply's status, headers and parsed body; transport failures are TransientError."""
        target = self._usable()
        try:
            head = self._request_head(target)
        except BadHeader:
            raise _header_refused() from None
        reply = self._send(target, head, json.dumps(payload).encode("utf-8"))
        return Exchange(reply.status, reply.headers, _data(reply, self.secrets))

    def call(
        self, method: str, path: str, body: bytes = b"", content_type: str = "application/json"
    ) -> Reply:
        """``method`` on ``path`` under the URL's own (a batch API's files and batches), the reply
        unparsed; the same headers, proxy, CAs and errors as ``post``. Its head is built per call:
        these calls are few."""
        target = self._usable()
        headers = {**self.headers, "content-type": content_type}
        try:
            head = request_head(
                target, headers, self._proxy, method, target.path.rstrip("/") + path
            )
        except BadHeader:
            raise _header_refused() from None
        except BadURL as exc:
            raise PermanentError(f"the request to {path!r} cannot be sent: {exc}") from None
        return self._send(target, head, body)

    def parsed(self, reply: Reply) -> Any:
        """A reply's body as ``post`` reads it (redacted when it is no JSON)."""
        return _data(reply, self.secrets)

    def _usable(self) -> Target:
        if self._target is None:  # the spec's base_url, refused before anything was sent
            raise UnavailableError(str(self._refused)) from None
        return self._target

    def _send(self, target: Target, head: bytes, body: bytes) -> Reply:
        try:
            reply = self._connection(target).post(head, body)
        except UnknownEncoding as exc:  # the server compresses every reply so: retrying cannot help
            raise PermanentError(str(exc)) from None
        # untrusted, expired, another host's: the same on every try
        except ssl.SSLCertVerificationError as exc:
            raise tls_refused(target.host, target.port, exc) from None
        except ProxyRefused as exc:
            if exc.status in (403, 407):  # the proxy's policy or credentials: this arm's settings
                raise ArmError(str(exc), hint=PROXY_HINT, status=exc.status) from None
            # 502/503: it cannot reach the origin now
            raise TransientError(str(exc), status=exc.status) from None
        except (OSError, WireError) as exc:  # timeouts, resets, refused, torn replies
            via = f" (through the proxy {self._proxy.shown})" if self._proxy is not None else ""
            raise TransientError(f"{type(exc).__name__}: {exc}{via}") from exc
        if reply.status == 407 and self._proxy is not None:
            raise ArmError(
                f"the proxy {self._proxy.shown} asks for credentials (HTTP 407)",
                hint=PROXY_HINT,
                status=407,
            )
        return reply


def _header_refused() -> UnavailableError:
    # Nothing about this prompt is wrong, so the arm cannot run; the message names the header,
    # never its value (the whole key). Raised ``from None``: a printed chain would show it again.
    return UnavailableError(
        "a request header was refused before sending (a control character such as a "
        "newline, or one no HTTP header can carry); check the API key variable"
    )


def _data(reply: Reply, secrets: Secrets) -> Any:
    """The reply's parsed body; ``{"message": <its start>}`` when it is no JSON."""
    if not reply.body and (not success(reply.status) or reply.status in NO_CONTENT):
        return {}
    try:
        # an empty 200 read to the close fails here: cut before its first byte
        return loads(reply.body)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        if (
            success(reply.status)
            and reply.delimited
            and ends_early(reply.body.decode("utf-8", "replace"))
        ):
            # A content-length (or chunks) shorter than the JSON, or 0: what came is the start of
            # an answer, not the server's answer. Retried, as any reply cut short is.
            raise TransientError(
                "the reply's body ended before its JSON did: its framing (content-length or "
                f"chunks) cut it short at {len(reply.body)} bytes"
            ) from None
        if (
            success(reply.status)
            and not reply.delimited
            and reply.body.lstrip()[:1] in (b"", b"{", b"[")
        ):
            # Read to the close, nothing says where the body ends: a JSON text the close cut
            # short is a torn transfer, not the server's answer. A framed one is a WireError.
            raise TransientError(
                "the reply's body ended before its JSON did: the connection closed in the middle "
                f"of it ({len(reply.body)} bytes, no content-length)"
            ) from None
        # Redacted before it is cut to its start: cut first, a key
        # across the cut kept its near piece.
        return {
            "message": redact(
                reply.body[:BODY_SHOWN].decode("utf-8", "replace"), secrets, limit=200
            )
        }


NO_CONTENT = (204, 205)  # statuses that carry no body by definition: an empty one is what they say


def success(status: int) -> bool:
    """Any 2xx carries the answer: the SDKs accept them all (a gateway
    may say 203 for a cached one)."""
    return 200 <= status < 300


# What may follow the point where the parser stopped, when the text was cut inside a literal or a
# number: "tr" of true, "-" of a negative number, ".", "e+" of a fraction or an exponent.
_LITERALS = ("true", "false", "null", "NaN", "Infinity", "-Infinity")
_NUMBER_TAIL = re.compile(r"\.?\d*(?:[eE][+-]?\d*)?")
# "\ud83d\ude" of a surrogate pair
_ESCAPE_TAIL = re.compile(r"u[0-9a-fA-F]{0,4}(?:\\(?:u[0-9a-fA-F]{0,4})?)?")


def ends_early(text: str) -> bool:
    """A text that ended before its JSON did: nothing at all, or the start of an object or array.

    Python's parser stops where the text went wrong; a cut text goes wrong only at its end, in an
    unterminated string or escape, or inside a literal or number that the cut shortened. Any other
    stop is a malformed text (the server's answer, not a torn transfer).
    """
    text = text.rstrip(" \t\r\n")
    if not text:
        # a 2xx with nothing in it: no API answers so, a transfer cut before the first byte
        return True
    if text[:1] not in ("{", "["):
        return False
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        rest = text[exc.pos:]
        if not rest or exc.msg.startswith("Unterminated string"):
            return True
        if exc.msg.startswith("Invalid \\uXXXX escape"):
            return _ESCAPE_TAIL.fullmatch(rest) is not None  # the parser points past the backslash
        if exc.msg == "Expecting value":
            return any(word.startswith(rest) for word in _LITERALS)
        if exc.msg.endswith("delimiter") and text[exc.pos - 1:exc.pos].isdigit():
            return _NUMBER_TAIL.fullmatch(rest) is not None
        return False
    except (ValueError, RecursionError):
        return False
    return False


def loads(body: bytes) -> Any:
    """A JSON text as a reply's body is read (a count of thousands of digits: infinity)."""
    try:
        return json.loads(body)
    except ValueError as exc:
        if "digits" not in str(exc):
            raise
    # An integer of more than 4300 digits (a usage count gone wrong) is refused by int(): read as
    # infinity, which no count is, so the answer is kept and its usage is unknown.
    return json.loads(
        body, parse_int=lambda digits: int(digits) if len(digits) <= 4000 else math.inf
    )


# The wait headers, first found wins: the standard one, its millisecond form (OpenAI, Anthropic),
# and LiteLLM's, the only one its router sends when every deployment is at its rpm.
RETRY_HEADERS = (("retry-after-ms", 0.001), ("retry-after", 1.0), ("llm_provider-retry-after", 1.0))


# The longest wait a header is read as (a year): "retry-after: 1e300" or a date in the year 9999
# stays a number every reader prints and compares; the item gives up on it (retries.max_wait_s).
LONGEST_RETRY_AFTER_S = 365 * 86400.0


def retry_after(headers: Mapping[str, str], now: Callable[[], float] = time.time) -> float | None:
    """Seconds the server asks us to wait (``retry-after-ms``, ``retry-after`` in seconds or as an
    HTTP-date, ``llm_provider-retry-after``, else OpenAI's ``x-ratelimit-reset-*`` of the limit that
    ran out), if it says; a header that says nothing usable is skipped."""
    for name, scale in RETRY_HEADERS:
        value = headers.get(name)
        seconds = _wait(value, scale, headers, now) if value is not None else None
        if seconds is not None:
            return seconds
    reset = _reset(headers)
    return min(reset, LONGEST_RETRY_AFTER_S) if reset is not None else None


def _wait(
    value: str, scale: float, headers: Mapping[str, str], now: Callable[[], float]
) -> float | None:
    try:
        seconds = float(value) * scale
    except ValueError:
        seconds = _until(value, headers, now) if scale == 1.0 else None
    # "inf" or "nan" would pause the endpoint for good (and are no JSON in a stop marker).
    if seconds is None or not math.isfinite(seconds):
        return None
    return min(max(0.0, seconds), LONGEST_RETRY_AFTER_S)


def _until(value: str, headers: Mapping[str, str], now: Callable[[], float]) -> float | None:
    """An HTTP-date's distance (RFC 9110 10.2.3) from the reply's own ``Date``, so neither clock's
    error counts; from ours when the server sent none (or none that reads)."""
    at = _date(value)
    if at is None:
        return None
    sent = _date(headers.get("date", ""))
    return at - (sent if sent is not None else now())


def _date(value: str) -> float | None:
    try:
        moment = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if moment.tzinfo is None:  # "-0000" or an obsolete form without a zone: HTTP dates are GMT
        moment = moment.replace(tzinfo=datetime.UTC)
    try:
        return moment.timestamp()
    except (OverflowError, OSError, ValueError):
        return None


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _reset(headers: Mapping[str, str]) -> float | None:
    """``x-ratelimit-reset-requests`` / ``-tokens`` ("20ms", "1.5s", "6m0s") of the limits whose
    ``x-ratelimit-remaining-*`` is 0, the longest. OpenAI sends them on every answer; a limit not
    spent says nothing about this failure (a 500 must not wait for a daily window)."""
    waits: dict[str, float] = {}
    for kind in ("requests", "tokens"):
        value = headers.get(f"x-ratelimit-reset-{kind}", "").strip()
        parts = _DURATION.findall(value)
        if parts and "".join(n + u for n, u in parts) == value:
            waits[kind] = sum(float(n) * _UNIT_S[u] for n, u in parts)
    spent = [
        w
        for kind, w in waits.items()
        if headers.get(f"x-ratelimit-remaining-{kind}", "").strip() == "0"
    ]
    return max(spent, default=None)


def status_message(status: int, code: str, text: str) -> str:
    """``HTTP 400 invalid_request_error: ...``, each part once: proxies often repeat the status as
    the error code ("HTTP 400 400") and start the text with "error:" or the status again."""
    label = f" {code}" if code and code != str(status) else ""
    text = text.strip()
    for prefix in ("error:", f"{status}:", f"HTTP {status}:"):
        if text.lower().startswith(prefix.lower()):
            text = text[len(prefix):].strip()
    return f"HTTP {status}{label}: {text}" if text else f"HTTP {status}{label}"
