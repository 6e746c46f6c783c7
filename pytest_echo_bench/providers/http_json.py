"""A lean JSON-over-HTTP client: one keep-alive connection per thread (``wire``), standard library only.

The official SDKs cost several times its CPU per call, which limits how many calls one process
keeps in flight on a small machine, so it is the default (see docs/performance.md).
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import ssl
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pytest_echo_bench.errors import ArmError, PermanentError, ProviderError, TransientError, UnavailableError
from pytest_echo_bench.providers.base import Completion
from pytest_echo_bench.providers.network import Network, Proxy, cert_failure, tls_refused
from pytest_echo_bench.providers.reply import UnknownEncoding
from pytest_echo_bench.providers.wire import BadHeader, BadURL, Connection, ProxyRefused, Reply, Target, WireError, request_head
from pytest_echo_bench.store.redaction import Secrets, redact

PROXY_HINT = "check the proxy's address and credentials (the arm's proxy:, or HTTP(S)_PROXY), or set proxy: none"
BODY_SHOWN = 1 << 16  # of a body that is no JSON, the bytes redacted before its first 200 characters are kept
# What to do when a server answers, but not in the API's wire format.
WIRE_HINT = "base_url must be the API's address (for example https://host/v1), not a web page, a redirect or a login"


class Transport(Protocol):
    """How a chat provider reaches its API: the official SDK, or the lean ``JSONClient``."""

    def post(self, payload: dict[str, Any]) -> Completion: ...

    def close(self) -> None:
        """Close its connections once the run's calls are done."""



def plain(resp: Any) -> Any:
    """An SDK's reply object as the JSON it was built from. The SDKs build replies without
    validating them (any field may hold any JSON value), so the provider reads the plain data
    with the same rules as the lean client's."""
    if isinstance(resp, Mapping):
        return resp
    to_dict = getattr(resp, "to_dict", None)
    return to_dict(warnings=False) if callable(to_dict) else None


@contextlib.contextmanager
def sdk_errors(sdk: Any, base_error: type[Exception],
               classify: Callable[[int, Any, Mapping[str, str]], ProviderError], url: str = "") -> Iterator[None]:
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
    except base_error as exc:
        raise PermanentError(f"{type(exc).__name__}: {exc}") from exc


@dataclass
class JSONClient:
    url: str  # the endpoint, e.g. http://127.0.0.1:8000/v1/chat/completions
    headers: dict[str, str]
    timeout: float
    network: Network = field(default_factory=Network)
    secrets: Secrets = field(default_factory=Secrets)  # redacted from a body before it is cut for a message
    _local: threading.local = field(default_factory=threading.local)
    # Every thread's connection, for ``close``: a thread's end does not close its socket (nor the
    # server's side of it), which stayed open until the cycle collector ran.
    _opened: list[Connection] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        # identity: a compressed reply would cost CPU to inflate (``reply`` still inflates one, if sent).
        self.headers = {"content-type": "application/json", "accept-encoding": "identity", **self.headers}
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
            self._target, self._refused = None, f"the proxy cannot be used by client: http: {exc}; {PROXY_HINT}"
        self._tls = self.network.tls_context() if self._target is not None and self._target.tls else None

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

    def post(self, payload: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        """(status, lower-cased headers, parsed body); transport failures are TransientError."""
        target = self._target
        if target is None:  # the spec's base_url, refused before anything was sent
            raise UnavailableError(str(self._refused)) from None
        try:
            head = self._request_head(target)
        except BadHeader:
            # Nothing about this prompt is wrong, so the arm cannot run; the message names the header,
            # never its value (the whole key). ``from None``: a printed chain would show it again.
            raise UnavailableError("a request header was refused before sending (a control character such as a "
                                   "newline, or one no HTTP header can carry); check the API key variable") from None
        try:
            reply = self._connection(target).post(head, json.dumps(payload).encode("utf-8"))
        except UnknownEncoding as exc:  # the server compresses every reply so: retrying cannot help
            raise PermanentError(str(exc)) from None
        except ssl.SSLCertVerificationError as exc:  # untrusted, expired, another host's: the same on every try
            raise tls_refused(target.host, target.port, exc) from None
        except ProxyRefused as exc:
            if exc.status in (403, 407):  # the proxy's policy or credentials: this arm's settings
                raise ArmError(str(exc), hint=PROXY_HINT, status=exc.status) from None
            raise TransientError(str(exc), status=exc.status) from None  # 502/503: it cannot reach the origin now
        except (OSError, WireError) as exc:  # timeouts, resets, refused, torn replies
            via = f" (through the proxy {self._proxy.shown})" if self._proxy is not None else ""
            raise TransientError(f"{type(exc).__name__}: {exc}{via}") from exc
        if reply.status == 407 and self._proxy is not None:
            raise ArmError(f"the proxy {self._proxy.shown} asks for credentials (HTTP 407)", hint=PROXY_HINT, status=407)
        return reply.status, reply.headers, _data(reply, self.secrets)


def _data(reply: Reply, secrets: Secrets) -> Any:
    """The reply's parsed body; ``{"message": <its start>}`` when it is no JSON."""
    if not reply.body and (reply.delimited or reply.status != 200):
        return {}
    try:
        return _loads(reply.body)  # an empty 200 read to the close fails here: cut before its first byte
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        if reply.status == 200 and not reply.delimited and reply.body.lstrip()[:1] in (b"", b"{", b"["):
            # Read to the close, nothing says where the body ends: a JSON text the close cut
            # short is a torn transfer, not the server's answer. A framed one is a WireError.
            raise TransientError("the reply's body ended before its JSON did: the connection closed in the middle "
                                 f"of it ({len(reply.body)} bytes, no content-length)") from None
        # Redacted before it is cut to its start: cut first, a key across the cut kept its near piece.
        return {"message": redact(reply.body[:BODY_SHOWN].decode("utf-8", "replace"), secrets, limit=200)}


def _loads(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError as exc:
        if "digits" not in str(exc):
            raise
    # An integer of more than 4300 digits (a usage count gone wrong) is refused by int(): read as
    # infinity, which no count is, so the answer is kept and its usage is unknown.
    return json.loads(body, parse_int=lambda digits: int(digits) if len(digits) <= 4000 else math.inf)


# The wait headers, first found wins: the standard one, its millisecond form (OpenAI, Anthropic),
# and LiteLLM's, the only one its router sends when every deployment is at its rpm.
RETRY_HEADERS = (("retry-after-ms", 0.001), ("retry-after", 1.0), ("llm_provider-retry-after", 1.0))


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asks us to wait (``retry-after-ms``, ``retry-after``,
    ``llm_provider-retry-after``, else OpenAI's ``x-ratelimit-reset-*`` of the limit that ran
    out), if it says."""
    for name, scale in RETRY_HEADERS:
        value = headers.get(name)
        if value is not None:
            try:
                seconds = float(value) * scale
            except ValueError:
                return None  # an HTTP date: fall back to our own backoff
            # "inf" or "nan" would pause the endpoint for good (and are no JSON in a stop marker).
            return max(0.0, seconds) if math.isfinite(seconds) else None
    return _reset(headers)


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
    spent = [w for kind, w in waits.items() if headers.get(f"x-ratelimit-remaining-{kind}", "").strip() == "0"]
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
