"""HTTP/1.1 over one keep-alive socket: a POST out, a reply in, and nothing a JSON API does not use.

``http.client`` parses every reply's headers with the ``email`` package and builds a request
header by header: about 0.2 ms of CPU per call on this project's reference machine, four times
what a JSON call needs here, and at hundreds of calls in flight that CPU is the ceiling (see
docs/performance.md). This speaks the part of HTTP/1.1 the APIs use: a request with a
``content-length``, replies with ``content-length``, ``transfer-encoding: chunked`` or a body up
to the close, ``1xx`` interim replies skipped, ``connection: close`` honoured; TLS through ``ssl``.
No proxies, no redirects (a 3xx is the caller's to judge), no compression (none is asked for).

A reply must never be taken for the next request's: a connection is reused only when its last
reply ended exactly where its framing said and nothing has arrived since; anything else closes it.
"""

from __future__ import annotations

import re
import select
import socket
import ssl
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

MAX_LINE = 65536  # bytes in a status, header or chunk-size line
MAX_HEADERS = 200
MAX_HEAD = 256 * 1024  # bytes of a reply's status line and headers together
MAX_INTERIM = 10  # 1xx replies skipped before the final one
MAX_BODY = 256 * 1024 * 1024  # a reply larger than this is no chat completion
RESEND_WITHIN_S = 0.5  # a reused connection closed this soon after the send, with no reply: sent again
# What may not appear in a header value or the request target: it would end the line early
# (a key read with its trailing newline would otherwise smuggle a header of its own).
_ILLEGAL_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TARGET = re.compile(r"[\x21-\x7e]+")
_DIGITS = re.compile(r"[0-9]+")
_HEX = re.compile(r"[0-9A-Fa-f]+")


class WireError(Exception):
    """The reply was not HTTP: a torn or malformed status line, header, chunk or body; or too slow."""


class BadURL(ValueError):
    """The URL cannot be used for a request: no host, a port that is no number, controls in the path."""


class BadHeader(ValueError):
    """A header the request may not carry; the message names it but never quotes its value."""


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]  # names lower-cased; a repeated header's values joined with ", "
    body: bytes
    reusable: bool = True  # the connection may carry another request


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
        if port == 0:
            raise BadURL("port 0 is no port to connect to")
        host = parts.hostname
        if not host:
            raise BadURL("no host in it")
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        if not _TARGET.fullmatch(path) or _ILLEGAL_VALUE.search(host) or " " in host:
            raise BadURL("it holds spaces or control characters")
        try:
            ascii_host = host if host.isascii() else host.encode("idna").decode("ascii")
        except UnicodeError:
            raise BadURL("its host name cannot be written in ASCII (IDNA)") from None
        tls = parts.scheme == "https"
        default = 443 if tls else 80
        shown_host = f"[{ascii_host}]" if ":" in ascii_host else ascii_host
        host_header = shown_host if port in (None, default) else f"{shown_host}:{port}"
        return cls(ascii_host, port or default, tls, path, host_header)


def request_head(target: Target, headers: dict[str, str]) -> bytes:
    """The request's line and headers up to ``content-length``'s value; checked once, reused per call."""
    lines = [f"POST {target.path} HTTP/1.1", f"host: {target.host_header}"]
    for name, value in headers.items():
        if not _TOKEN.fullmatch(name):
            raise BadHeader(f"the header name {name!r} is not a token")
        if _ILLEGAL_VALUE.search(value) or value != value.strip(" \t"):
            raise BadHeader(f"the value of the {name} header holds control characters or surrounding blanks")
        try:
            value.encode("latin-1")
        except UnicodeEncodeError:
            raise BadHeader(f"the value of the {name} header holds characters HTTP headers cannot carry") from None
        lines.append(f"{name}: {value}")
    lines.append("content-length: ")
    return "\r\n".join(lines).encode("latin-1")


class _Reader:
    """Buffered reads from a socket with one deadline for the whole reply.

    Its own buffer, not ``socket.makefile``'s: what is left in it after a reply is known, and a
    connection with bytes left over is not reused.
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.deadline = float("inf")
        self.received = 0  # bytes received since the last ``expect``

    def expect(self, seconds: float) -> None:
        self.deadline, self.received = time.monotonic() + seconds, 0

    def _fill(self) -> bool:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the reply took longer than the call's timeout")
        self.sock.settimeout(left)
        data = self.sock.recv(16384)
        self.received += len(data)
        self.buf += data
        return bool(data)

    def read_head(self, limit: int) -> bytes | None:
        """A reply's status line and headers, through the blank line ending them; None at the
        end of the stream before any byte; what there was if it ended sooner or grew past ``limit``
        (the caller tells which)."""
        start = 0
        while True:
            # The first blank line ends the head, CRLF or bare LF: a later one may be in the body.
            ends = [at + len(mark) for mark in (b"\r\n\r\n", b"\n\n") if (at := self.buf.find(mark, start)) >= 0]
            if ends:
                end = min(ends)
                break
            if len(self.buf) > limit:
                return bytes(self.buf)
            start = max(0, len(self.buf) - 3)
            if not self._fill():
                if not self.buf:
                    return None
                head = bytes(self.buf)
                self.buf.clear()
                return head
        head = bytes(self.buf[:end])
        del self.buf[:end]
        return head

    def readline(self, limit: int) -> bytes:
        start = 0
        while (end := self.buf.find(b"\n", start)) < 0:
            if len(self.buf) > limit:
                return bytes(self.buf[: limit + 1])
            start = len(self.buf)
            if not self._fill():
                line = bytes(self.buf)
                self.buf.clear()
                return line
        line = bytes(self.buf[: end + 1])
        del self.buf[: end + 1]
        return line

    def read(self, size: int) -> bytes:
        while len(self.buf) < size and self._fill():
            pass
        data = bytes(self.buf[:size])
        del self.buf[:size]
        return data

    def read_to_close(self, limit: int) -> bytes:
        while len(self.buf) <= limit and self._fill():
            pass
        data = bytes(self.buf)
        self.buf.clear()
        return data

    def idle(self) -> bool:
        """Nothing buffered and nothing arrived (no stray bytes, no close): safe to send on."""
        if self.buf or (isinstance(self.sock, ssl.SSLSocket) and self.sock.pending()):
            return False
        poller = select.poll()  # not select(): it refuses descriptors above 1023
        poller.register(self.sock, select.POLLIN)
        return not poller.poll(0)


@dataclass
class Connection:
    """One keep-alive connection, opened on first use and again after the server closed it."""

    target: Target
    timeout: float
    tls: ssl.SSLContext | None = None
    _sock: socket.socket | None = field(default=None, repr=False)
    _reader: _Reader | None = field(default=None, repr=False)

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
                self.close()  # closed while idle, or bytes nobody asked for: never read them as this reply
        except (OSError, ValueError):
            self.close()
        reused = self._sock is not None
        sent_at = time.monotonic()
        try:
            return self._exchange(data)
        except (ConnectionResetError, BrokenPipeError, ssl.SSLEOFError, _ClosedBeforeReply) as exc:
            received = self._reader.received if self._reader is not None else 0
            self.close()
            if not (reused and received == 0 and time.monotonic() - sent_at < RESEND_WITHIN_S):
                if isinstance(exc, _ClosedBeforeReply):
                    raise WireError(str(exc)) from None
                raise
        except BaseException:
            self.close()
            raise
        try:
            return self._exchange(data)
        except _ClosedBeforeReply as exc:
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
            self.close()  # bytes beyond the reply's framing: the next reply could not be told from them
        return reply

    def _open(self) -> tuple[socket.socket, _Reader]:
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
            self._sock, self._reader = sock, _Reader(sock)
        return self._sock, self._reader

    def close(self) -> None:
        sock, self._sock, self._reader = self._sock, None, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass


class _ClosedBeforeReply(WireError):
    """The stream ended before the first byte of a status line."""


def read_reply(reader: _Reader) -> Reply:
    """A whole reply, interim (1xx) replies skipped; ``reusable`` False when the connection
    cannot carry another request (a body read to the close, ``connection: close``, HTTP/1.0
    without keep-alive, framing a keep-alive connection cannot trust)."""
    for interim in range(MAX_INTERIM + 1):
        status, version, headers = _head(reader, first=interim == 0)
        if 100 <= status < 200:
            continue  # 100 Continue and the like: the final reply follows
        body, framed = _body(reader, status, headers)
        tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
        keep = "keep-alive" in tokens if version == "HTTP/1.0" else "close" not in tokens
        return Reply(status, headers, body, reusable=framed and keep)
    raise WireError(f"the server sent more than {MAX_INTERIM} interim (1xx) replies")


def _line(reader: _Reader, what: str) -> bytes:
    line = reader.readline(MAX_LINE)
    if len(line) > MAX_LINE:
        raise WireError(f"the reply's {what} line is longer than {MAX_LINE} bytes")
    return line


def _head(reader: _Reader, first: bool) -> tuple[int, str, dict[str, str]]:
    """(status, version, headers) of the next reply on the connection. Read in one piece: a
    reply's head usually comes in one segment, and one search beats a read per line."""
    head = reader.read_head(MAX_HEAD)
    if head is None:
        if first:
            raise _ClosedBeforeReply("the server closed the connection without replying")
        raise WireError("the server closed the connection after an interim reply")
    if len(head) > MAX_HEAD:
        raise WireError(f"the reply's headers are longer than {MAX_HEAD} bytes")
    if not head.endswith((b"\r\n\r\n", b"\n\n")):
        raise WireError("the server closed the connection in the middle of the reply's headers")
    lines = head.decode("latin-1").split("\n")  # the last two: the blank line's "\r" (or "") and ""
    status, version = _status(lines[0].rstrip("\r"))
    return status, version, _headers(lines[1:-2])


def _status(line: str) -> tuple[int, str]:
    version, _, rest = line.partition(" ")
    code = rest[:3]
    if version not in ("HTTP/1.0", "HTTP/1.1") or not _DIGITS.fullmatch(code) or rest[3:4] not in ("", " "):
        raise WireError(f"not an HTTP reply: {line[:60]!r}")
    return int(code), version


def _headers(lines: list[str]) -> dict[str, str]:
    if len(lines) > MAX_HEADERS:
        raise WireError(f"the reply has more than {MAX_HEADERS} headers")
    headers: dict[str, str] = {}
    last = ""
    for raw in lines:
        text = raw.rstrip("\r")
        if len(text) > MAX_LINE:
            raise WireError(f"the reply's header line is longer than {MAX_LINE} bytes")
        if text[:1] in (" ", "\t") and last:  # an obsolete folded continuation
            headers[last] += " " + text.strip()
            continue
        name, sep, value = text.partition(":")
        if not sep or not _TOKEN.fullmatch(name):
            raise WireError(f"a malformed header line in the reply: {text[:60]!r}")
        last = name.lower()
        value = value.strip()
        headers[last] = f"{headers[last]}, {value}" if last in headers else value
    return headers


def _body(reader: _Reader, status: int, headers: dict[str, str]) -> tuple[bytes, bool]:
    """(body, framed): framed is False when the connection cannot be trusted with another request."""
    coding = headers.get("transfer-encoding")
    length = headers.get("content-length")
    if status in (204, 304):
        # No body by definition; one announcing a body anyway leaves its framing in doubt.
        return b"", coding is None and length in (None, "0")
    if coding is not None:
        if coding.strip().lower() != "chunked":
            raise WireError(f"the reply's transfer-encoding {coding[:40]!r} is not one this client reads (chunked)")
        return _chunked(reader), length is None  # both framings at once: read as chunked, then close
    if length is not None:
        values = {v.strip() for v in length.split(",")}
        if len(values) != 1 or not _DIGITS.fullmatch(next(iter(values))):
            raise WireError(f"the reply's content-length is not a number: {length[:40]!r}")
        return _exactly(reader, int(next(iter(values)))), True
    body = reader.read_to_close(MAX_BODY)
    if len(body) > MAX_BODY:
        raise WireError(f"the reply is larger than {MAX_BODY} bytes")
    return body, False


def _exactly(reader: _Reader, size: int) -> bytes:
    if size > MAX_BODY:
        raise WireError(f"the reply is larger than {MAX_BODY} bytes")
    data = reader.read(size)
    if len(data) != size:
        raise WireError(f"the reply was cut short: {len(data)} of {size} bytes")
    return data


def _chunked(reader: _Reader) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        size_text = _line(reader, "chunk size").split(b";", 1)[0].strip()
        if not _HEX.fullmatch(size_text.decode("latin-1")):
            raise WireError(f"a malformed chunk size in the reply: {size_text[:20]!r}")
        size = int(size_text, 16)
        if size == 0:
            break
        total += size
        if total > MAX_BODY:
            raise WireError(f"the reply is larger than {MAX_BODY} bytes")
        parts.append(_exactly(reader, size))
        if _line(reader, "chunk end") not in (b"\r\n", b"\n"):
            raise WireError("a chunk of the reply does not end where its size says")
    for _ in range(MAX_HEADERS + 1):  # trailers, if any: nothing a JSON API sends that we need
        line = _line(reader, "trailer")
        if line in (b"\r\n", b"\n"):
            return b"".join(parts)
        if not line.endswith(b"\n"):
            raise WireError("the server closed the connection in the middle of the reply's trailers")
    raise WireError(f"the reply has more than {MAX_HEADERS} trailers")
