"""HTTP/1.1 over one keep-alive socket: a POST out, a reply in, and nothing a JSON API does not use.

``http.client`` parses every reply's headers with the ``email`` package and builds a request
header by header: about 0.2 ms of CPU per call on this project's reference machine, three times
what a JSON call needs, and at hundreds of calls in flight that CPU is the ceiling (see
docs/performance.md). This speaks the part of HTTP/1.1 the APIs use: a request with a
``content-length``, replies with ``content-length``, ``transfer-encoding: chunked`` or a body up
to the close, ``1xx`` interim replies skipped, ``connection: close`` honoured; TLS through ``ssl``.
No proxies, no redirects (a 3xx is the caller's to judge), no compression (none is asked for).
"""

from __future__ import annotations

import re
import socket
import ssl
from dataclasses import dataclass, field
from typing import BinaryIO
from urllib.parse import urlsplit

MAX_LINE = 65536  # bytes in a status, header or chunk-size line
MAX_HEADERS = 200
MAX_BODY = 256 * 1024 * 1024  # a reply larger than this is no chat completion
# What may not appear in a header value or the request target: it would end the line early
# (a key read with its trailing newline would otherwise smuggle a header of its own).
_ILLEGAL_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TARGET = re.compile(r"[\x21-\x7e]+")


class WireError(Exception):
    """The reply was not HTTP: a torn or malformed status line, header, chunk or body."""


class BadURL(ValueError):
    """The URL cannot be used for a request: no host, a port that is no number, controls in the path."""


class BadHeader(ValueError):
    """A header the request may not carry; the message names it but never quotes its value."""


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]  # names lower-cased; a repeated header's values joined with ", "
    body: bytes


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
        try:
            port = parts.port
        except ValueError as exc:
            raise BadURL(str(exc)) from None
        host = parts.hostname
        if not host:
            raise BadURL("no host in it")
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        if not _TARGET.fullmatch(path) or _ILLEGAL_VALUE.search(host) or " " in host:
            raise BadURL("it holds spaces or control characters")
        tls = parts.scheme == "https"
        default = 443 if tls else 80
        shown_host = f"[{host}]" if ":" in host else host
        host_header = shown_host if port in (None, default) else f"{shown_host}:{port}"
        return cls(host, port or default, tls, path, host_header)


def request_head(target: Target, headers: dict[str, str]) -> bytes:
    """The request's line and headers up to ``content-length``'s value; checked once, reused per call."""
    lines = [f"POST {target.path} HTTP/1.1", f"host: {target.host_header}"]
    for name, value in headers.items():
        if not _TOKEN.fullmatch(name):
            raise BadHeader(f"the header name {name!r} is not a token")
        if _ILLEGAL_VALUE.search(value) or value != value.strip(" \t"):
            raise BadHeader(f"the value of the {name} header holds control characters or surrounding blanks")
        lines.append(f"{name}: {value}")
    lines.append("content-length: ")
    return "\r\n".join(lines).encode("latin-1")


@dataclass
class Connection:
    """One keep-alive connection, opened on first use and again after the server closed it."""

    target: Target
    timeout: float
    tls: ssl.SSLContext | None = None
    _sock: socket.socket | None = field(default=None, repr=False)
    _reader: BinaryIO | None = field(default=None, repr=False)

    def post(self, head: bytes, body: bytes) -> Reply:
        """Send one request and read its reply; OSError / WireError leave the connection closed.

        A reused connection the server closed while idle (keep-alive timeouts) shows as a reset or
        as the end of the stream before any reply: the request is sent once more on a new
        connection, as browsers do; a fresh connection's failure is the caller's.
        """
        data = head + str(len(body)).encode("ascii") + b"\r\n\r\n" + body
        reused = self._sock is not None
        try:
            return self._exchange(data)
        except (ConnectionResetError, BrokenPipeError, _ClosedBeforeReply):
            self.close()
            if not reused:
                raise WireError("the server closed the connection without replying") from None
        except BaseException:
            self.close()
            raise
        try:
            return self._exchange(data)
        except _ClosedBeforeReply:
            self.close()
            raise WireError("the server closed the connection without replying") from None
        except BaseException:
            self.close()
            raise

    def _exchange(self, data: bytes) -> Reply:
        sock, reader = self._open()
        sock.sendall(data)
        reply = read_reply(reader)
        if reply.headers.get("connection", "").lower() == "close":
            self.close()
        return reply

    def _open(self) -> tuple[socket.socket, BinaryIO]:
        if self._sock is None or self._reader is None:
            sock = socket.create_connection((self.target.host, self.target.port), self.timeout)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self.target.tls:
                    context = self.tls or ssl.create_default_context()
                    sock = context.wrap_socket(sock, server_hostname=self.target.host)
            except BaseException:
                sock.close()
                raise
            self._sock, self._reader = sock, sock.makefile("rb")
        return self._sock, self._reader

    def close(self) -> None:
        sock, reader, self._sock, self._reader = self._sock, self._reader, None, None
        for part in (reader, sock):
            if part is not None:
                try:
                    part.close()
                except OSError:
                    pass


class _ClosedBeforeReply(WireError):
    """The stream ended before the first byte of a status line."""


def read_reply(reader: BinaryIO) -> Reply:
    """A whole reply, interim (1xx) replies skipped. When the connection cannot carry another
    request (a body read to the close, HTTP/1.0 without keep-alive) it says ``connection: close``."""
    first = True
    while True:
        status, version = _status_line(reader, first)
        first = False
        headers = _headers(reader)
        if 100 <= status < 200:
            continue  # 100 Continue and the like: the final reply follows
        body, framed = _body(reader, status, headers)
        if not framed or (version == "HTTP/1.0" and headers.get("connection", "").lower() != "keep-alive"):
            headers = {**headers, "connection": "close"}
        return Reply(status, headers, body)


def _line(reader: BinaryIO, what: str) -> bytes:
    line = reader.readline(MAX_LINE + 1)
    if len(line) > MAX_LINE:
        raise WireError(f"the reply's {what} line is longer than {MAX_LINE} bytes")
    return line


def _status_line(reader: BinaryIO, first: bool) -> tuple[int, str]:
    line = _line(reader, "status")
    if not line:
        raise _ClosedBeforeReply("the server closed the connection without replying") if first else WireError(
            "the server closed the connection after an interim reply")
    version, _, rest = line.decode("latin-1").rstrip("\r\n").partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or not code.isdigit() or rest[3:4] not in ("", " "):
        raise WireError(f"not an HTTP reply: {line[:60]!r}")
    return int(code), version


def _headers(reader: BinaryIO) -> dict[str, str]:
    headers: dict[str, str] = {}
    last = ""
    for _ in range(MAX_HEADERS + 1):
        line = _line(reader, "header")
        if line in (b"\r\n", b"\n"):
            return headers
        if not line:
            raise WireError("the server closed the connection in the middle of the reply's headers")
        text = line.decode("latin-1").rstrip("\r\n")
        if text[:1] in (" ", "\t") and last:  # an obsolete folded continuation
            headers[last] += " " + text.strip()
            continue
        name, sep, value = text.partition(":")
        if not sep or not name or name != name.strip():
            raise WireError(f"a malformed header line in the reply: {line[:60]!r}")
        last = name.lower()
        value = value.strip()
        headers[last] = f"{headers[last]}, {value}" if last in headers else value
    raise WireError(f"the reply has more than {MAX_HEADERS} headers")


def _body(reader: BinaryIO, status: int, headers: dict[str, str]) -> tuple[bytes, bool]:
    """(body, framed): framed is False when the body ran to the close of the connection."""
    if status in (204, 304):
        return b"", True
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return _chunked(reader), True
    length = headers.get("content-length")
    if length is not None:
        if not length.strip().isdigit() or len({v.strip() for v in length.split(",")}) != 1:
            raise WireError(f"the reply's content-length is not a number: {length[:40]!r}")
        return _exactly(reader, int(length.split(",")[0])), True
    body = reader.read(MAX_BODY + 1)
    if len(body) > MAX_BODY:
        raise WireError(f"the reply is larger than {MAX_BODY} bytes")
    return body, False


def _exactly(reader: BinaryIO, size: int) -> bytes:
    if size > MAX_BODY:
        raise WireError(f"the reply is larger than {MAX_BODY} bytes")
    data = reader.read(size)
    if len(data) != size:
        raise WireError(f"the reply was cut short: {len(data)} of {size} bytes")
    return data


def _chunked(reader: BinaryIO) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        line = _line(reader, "chunk size").split(b";", 1)[0].strip()
        try:
            size = int(line, 16)
        except ValueError:
            raise WireError(f"a malformed chunk size in the reply: {line[:20]!r}") from None
        if size == 0:
            break
        total += size
        parts.append(_exactly(reader, size) if total <= MAX_BODY else _exactly(reader, MAX_BODY + 1))
        if _line(reader, "chunk end") not in (b"\r\n", b"\n"):
            raise WireError("a chunk of the reply does not end where its size says")
    _headers(reader)  # trailers, if any: nothing a JSON API sends that we need
    return b"".join(parts)
