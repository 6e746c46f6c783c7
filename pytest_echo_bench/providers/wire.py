"""HTTP/1.1 over one keep-alive socket: a POST out, a reply in, and nothing a JSON API does not use.

``http.client`` parses every reply's headers with the ``email`` package and builds a request
header by header: about 0.2 ms of CPU per call on this project's reference machine, four times
what a JSON call needs here, and at hundreds of calls in flight that CPU is the ceiling (see
docs/performance.md). This speaks the part of HTTP/1.1 the APIs use: a request with a
``content-length``, replies with ``content-length``, ``transfer-encoding: chunked`` or a body up
to the close, ``1xx`` interim replies skipped, ``connection: close`` honoured; TLS through ``ssl``.
Through a forward proxy (``network.Proxy``) as browsers and the SDKs go: an http request in
absolute form, an https one inside a ``CONNECT`` tunnel with TLS to the origin. No redirects (a 3xx
is the caller's to judge); ``accept-encoding: identity`` is asked for, and a gzip or deflate body
sent anyway is inflated (``reply.decoded``).

A reply must never be taken for the next request's: a connection is reused only when its last
reply ended exactly where its framing said and nothing has arrived since; anything else closes it.
"""

from __future__ import annotations

import re
import socket
import ssl
import time
from dataclasses import dataclass, field
from urllib.parse import SplitResult, urlsplit

from pytest_echo_bench.providers.network import Proxy
from pytest_echo_bench.providers.reply import (
    TOKEN,
    ClosedBeforeReply,
    Reader,
    Reply,
    WireError,
    read_head_status,
    read_reply,
)

__all__ = [
    "BadHeader",
    "BadURL",
    "Connection",
    "ProxyRefused",
    "Reply",
    "Target",
    "WireError",
    "request_head",
]

# a reused connection closed this soon after the send, with no reply: sent again
RESEND_WITHIN_S = 0.5
# What may not appear in a header value or the request target: it would end the line early
# (a key read with its trailing newline would otherwise smuggle a header of its own).
_ILLEGAL_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_TARGET = re.compile(r"[\x21-\x7e]+")


class BadURL(ValueError):
    """The URL cannot be used for a request: no host, a port that is
    no number, controls in the path."""


class ProxyRefused(WireError):
    """The proxy answered ``CONNECT`` with something other than 200
    (``status``); its text is not kept."""

    def __init__(self, proxy: Proxy, status: int) -> None:
        super().__init__(f"the proxy {proxy.shown} refused the tunnel: HTTP {status}")
        self.status = status


class BadHeader(ValueError):
    """A header the request may not carry; the message names it but never quotes its value."""


@dataclass(frozen=True)
class Target:
    """Where requests go: parsed once, and refused before any connection if unusable."""

    host: str
    port: int
    tls: bool
    path: str
    host_header: str

    @classmethod
    def parse(cls, url: str) -> Target:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise BadURL(f"the scheme must be http or https, not {parts.scheme or 'none'!r}")
        port = _port(parts)
        host = parts.hostname
        if not host:
            raise BadURL("no host in it")
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        if not _TARGET.fullmatch(path) or _ILLEGAL_VALUE.search(host) or " " in host:
            raise BadURL("it holds spaces or control characters")
        ascii_host = _ascii_host(host)
        tls = parts.scheme == "https"
        default = 443 if tls else 80
        shown_host = f"[{ascii_host}]" if ":" in ascii_host else ascii_host
        host_header = shown_host if port in (None, default) else f"{shown_host}:{port}"
        return cls(ascii_host, port or default, tls, path, host_header)


def _port(parts: SplitResult) -> int | None:
    """The URL's port (None: the scheme's own), refused when it is no port to connect to."""
    try:
        port = parts.port
    except ValueError as exc:
        raise BadURL(str(exc)) from None
    if port == 0:
        raise BadURL("port 0 is no port to connect to")
    return port


def _ascii_host(host: str) -> str:
    """The host as a request names it: a name outside ASCII in its IDNA form."""
    try:
        return host if host.isascii() else host.encode("idna").decode("ascii")
    except UnicodeError:
        raise BadURL("its host name cannot be written in ASCII (IDNA)") from None


def request_head(
    target: Target,
    headers: dict[str, str],
    proxy: Proxy | None = None,
    method: str = "POST",
    path: str | None = None,
) -> bytes:
    """The request's line and headers up to ``content-length``'s value;
    checked once, reused per call. ``path`` (None: the target's) must be a request target.

    Through a proxy, an http request names its origin in full (RFC 9112's absolute form) and
    carries the proxy's credentials; an https one goes in a tunnel, as if direct.
    """
    path = target.path if path is None else path
    if not _TARGET.fullmatch(path) or not TOKEN.fullmatch(method):
        raise BadURL("the request's method or path holds spaces or control characters")
    via = proxy is not None and not target.tls
    where = f"http://{target.host_header}{path}" if via else path
    lines = [f"{method} {where} HTTP/1.1", f"host: {target.host_header}"]
    if via and proxy is not None and proxy.authorization:
        lines.append(f"proxy-authorization: {proxy.authorization}")
    for name, value in headers.items():
        if not TOKEN.fullmatch(name):
            raise BadHeader(f"the header name {name!r} is not a token")
        if _ILLEGAL_VALUE.search(value) or value != value.strip(" \t"):
            raise BadHeader(
                f"the value of the {name} header holds control characters or surrounding blanks"
            )
        try:
            value.encode("latin-1")
        except UnicodeEncodeError:
            raise BadHeader(
                f"the value of the {name} header holds characters HTTP headers cannot carry"
            ) from None
        lines.append(f"{name}: {value}")
    lines.append("content-length: ")
    return "\r\n".join(lines).encode("latin-1")


@dataclass
class Connection:
    """One keep-alive connection, opened on first use and again after the server closed it."""

    target: Target
    timeout: float
    tls: ssl.SSLContext | None = None
    proxy: Proxy | None = None
    _sock: socket.socket | None = field(default=None, repr=False)
    _reader: Reader | None = field(default=None, repr=False)

    def post(self, head: bytes, body: bytes) -> Reply:
        """Send one request and read its reply; OSError / WireError leave the connection closed.

        A kept connection the server closed while idle is seen before sending (it is readable):
        a new one is opened. If the server closes it just as the request goes out (within
        ``RESEND_WITHIN_S``, not a byte of a reply received), the request is sent once more on a
        new connection, as browsers do; a fresh connection's failure, or one after any byte of a
        reply, is the caller's.
        """
        data = head + str(len(body)).encode("ascii") + b"\r\n\r\n" + body
        try:
            if self._reader is not None and not self._reader.idle():
                # closed while idle, or bytes nobody asked for: never read them as this reply
                self.close()
        except (OSError, ValueError):
            self.close()
        reused = self._sock is not None
        sent_at = time.monotonic()
        try:
            return self._exchange(data)
        except (ConnectionResetError, BrokenPipeError, ssl.SSLEOFError, ClosedBeforeReply) as exc:
            received = self._reader.received if self._reader is not None else 0
            self.close()
            if not (reused and received == 0 and time.monotonic() - sent_at < RESEND_WITHIN_S):
                if isinstance(exc, ClosedBeforeReply):
                    raise WireError(str(exc)) from None
                raise
        except BaseException:
            self.close()
            raise
        try:
            return self._exchange(data)
        except ClosedBeforeReply as exc:
            self.close()
            raise WireError(str(exc)) from None
        except BaseException:
            self.close()
            raise

    def _exchange(self, data: bytes) -> Reply:
        sock, reader = self._open()
        reader.expect(self.timeout)  # one deadline for sending and the whole reply
        sock.settimeout(self.timeout)
        sock.sendall(data)
        reply = read_reply(reader)
        if not reply.reusable or reader.buf:
            # bytes beyond the reply's framing: the next reply could not be told from them
            self.close()
        return reply

    def _open(self) -> tuple[socket.socket, Reader]:
        if self._sock is None or self._reader is None:
            peer = (
                (self.proxy.host, self.proxy.port)
                if self.proxy
                else (self.target.host, self.target.port)
            )
            sock = socket.create_connection(peer, self.timeout)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self.proxy is not None and self.target.tls:
                    self._tunnel(sock, self.proxy)
                if self.target.tls:
                    context = self.tls or ssl.create_default_context()
                    sock = context.wrap_socket(sock, server_hostname=self.target.host)
            except BaseException:
                sock.close()
                raise
            self._sock, self._reader = sock, Reader(sock)
        return self._sock, self._reader

    def _tunnel(self, sock: socket.socket, proxy: Proxy) -> None:
        """``CONNECT host:port`` through the proxy; TLS to the origin goes inside it."""
        authority = f"[{self.target.host}]:{self.target.port}" if ":" in self.target.host else \
            f"{self.target.host}:{self.target.port}"
        lines = [f"CONNECT {authority} HTTP/1.1", f"host: {authority}"]
        if proxy.authorization:
            lines.append(f"proxy-authorization: {proxy.authorization}")
        sock.settimeout(self.timeout)
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        reader = Reader(sock)
        reader.expect(self.timeout)
        status = read_head_status(reader)
        if status != 200:
            raise ProxyRefused(proxy, status)
        # the origin's TLS has not started: anything here is the proxy's, not ours to read
        if reader.buf:
            raise WireError(f"the proxy {proxy.shown} sent bytes after its CONNECT reply")

    def close(self) -> None:
        sock, self._sock, self._reader = self._sock, None, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass


