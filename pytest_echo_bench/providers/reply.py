"""Reading an HTTP/1.1 reply: a buffered reader with one deadline, and the framing rules.

A reply must never be taken for the next request's: the reader keeps its own buffer, so what is
left in it after a reply is known, and ``Reply.reusable`` says whether the connection may carry
another request (see ``wire.Connection``).
"""

from __future__ import annotations

import re
import select
import socket
import ssl
import time
import zlib
from dataclasses import dataclass

MAX_LINE = 65536  # bytes in a status, header or chunk-size line
MAX_HEADERS = 200
MAX_HEAD = 256 * 1024  # bytes of a reply's status line and headers together
MAX_INTERIM = 10  # 1xx replies skipped before the final one
MAX_BODY = 256 * 1024 * 1024  # a reply larger than this is no chat completion, inflated or not
# content-encodings applied one over the other ("gzip, gzip" is legal, more is abuse)
MAX_CODINGS = 4
MAX_MEMBERS = 64  # gzip members one after the other in one body
# zlib's window bits per content-encoding: gzip framing, zlib framing
# (what "deflate" means in HTTP).
_INFLATE = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # a header name
_DIGITS = re.compile(r"[0-9]+")
_HEX = re.compile(r"[0-9A-Fa-f]+")


class WireError(Exception):
    """The reply was not HTTP: a torn or malformed status line,
    header, chunk or body; or too slow."""


class UnknownEncoding(WireError):
    """The body is compressed in a way this client does not read (it asked for none)."""


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]  # names lower-cased; a repeated header's values joined with ", "
    body: bytes  # with its content-encoding undone
    reusable: bool = True  # the connection may carry another request
    # the body's end was announced (content-length, chunked), not only the close
    delimited: bool = True


class Reader:
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
            ends = [
                at + len(mark)
                for mark in (b"\r\n\r\n", b"\n\n")
                if (at := self.buf.find(mark, start)) >= 0
            ]
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



class ClosedBeforeReply(WireError):
    """The stream ended before the first byte of a status line."""


def read_reply(reader: Reader) -> Reply:
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
        delimited = (
            status in (204, 304) or "transfer-encoding" in headers or "content-length" in headers
        )
        return Reply(status, headers, decoded(body, headers.get("content-encoding")),
                     reusable=framed and keep, delimited=delimited)
    raise WireError(f"the server sent more than {MAX_INTERIM} interim (1xx) replies")


def read_head_status(reader: Reader) -> int:
    """The status of a reply that has no body to read (a proxy's answer to ``CONNECT``)."""
    status, _, _ = _head(reader, first=True)
    return status


def _line(reader: Reader, what: str) -> bytes:
    line = reader.readline(MAX_LINE)
    if len(line) > MAX_LINE:
        raise WireError(f"the reply's {what} line is longer than {MAX_LINE} bytes")
    return line


def _head(reader: Reader, first: bool) -> tuple[int, str, dict[str, str]]:
    """(status, version, headers) of the next reply on the connection. Read in one piece: a
    reply's head usually comes in one segment, and one search beats a read per line."""
    head = reader.read_head(MAX_HEAD)
    if head is None:
        if first:
            raise ClosedBeforeReply("the server closed the connection without replying")
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
    if (
        version not in ("HTTP/1.0", "HTTP/1.1")
        or not _DIGITS.fullmatch(code)
        or rest[3:4] not in ("", " ")
    ):
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
        if not sep or not TOKEN.fullmatch(name):
            raise WireError(f"a malformed header line in the reply: {text[:60]!r}")
        last = name.lower()
        value = value.strip()
        headers[last] = f"{headers[last]}, {value}" if last in headers else value
    return headers


def _body(reader: Reader, status: int, headers: dict[str, str]) -> tuple[bytes, bool]:
    """(body, framed): framed is False when the connection cannot
    be trusted with another request."""
    coding = headers.get("transfer-encoding")
    length = headers.get("content-length")
    if status in (204, 304):
        # No body by definition; one announcing a body anyway leaves its framing in doubt.
        return b"", coding is None and length in (None, "0")
    if coding is not None:
        if coding.strip().lower() != "chunked":
            raise WireError(
                f"the reply's transfer-encoding {coding[:40]!r} is not one this client reads "
                "(chunked)"
            )
        # both framings at once: read as chunked, then close
        return _chunked(reader), length is None
    if length is not None:
        values = {v.strip() for v in length.split(",")}
        if len(values) != 1 or not _DIGITS.fullmatch(next(iter(values))):
            raise WireError(f"the reply's content-length is not a number: {length[:40]!r}")
        return _exactly(reader, int(next(iter(values)))), True
    body = reader.read_to_close(MAX_BODY)
    if len(body) > MAX_BODY:
        raise WireError(f"the reply is larger than {MAX_BODY} bytes")
    return body, False


def _exactly(reader: Reader, size: int) -> bytes:
    if size > MAX_BODY:
        raise WireError(f"the reply is larger than {MAX_BODY} bytes")
    data = reader.read(size)
    if len(data) != size:
        raise WireError(f"the reply was cut short: {len(data)} of {size} bytes")
    return data


def _chunked(reader: Reader) -> bytes:
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
            raise WireError(
                "the server closed the connection in the middle of the reply's trailers"
            )
    raise WireError(f"the reply has more than {MAX_HEADERS} trailers")


def decoded(body: bytes, coding: str | None) -> bytes:
    """``body`` with its content-encoding undone. The client asks for identity; a server (or a
    proxy) that compresses anyway is read all the same, up to ``MAX_BODY`` inflated."""
    if not body:  # a 204, or an empty error reply: nothing was compressed
        return body
    names = [name.strip().lower() for name in (coding or "").split(",")]
    names = [name for name in names if name not in ("", "identity")]
    if len(names) > MAX_CODINGS:
        raise WireError(f"the reply's content-encoding has more than {MAX_CODINGS} codings")
    for name in reversed(names):  # the last coding listed was applied last
        if name not in _INFLATE:
            raise UnknownEncoding(
                f"the reply's content-encoding {name[:40]!r} is not one this client reads "
                "(gzip, deflate; it asks for identity)"
            )
        body = _inflate(body, name)
    return body


def _inflate(data: bytes, name: str) -> bytes:
    try:
        return _members(data, _INFLATE[name])
    except zlib.error as exc:
        if name != "deflate":
            raise WireError(f"the reply's {name} body does not inflate: {exc}") from None
    try:  # some servers send "deflate" without the zlib header, as raw deflate
        return _members(data, -zlib.MAX_WBITS)
    except zlib.error as exc:
        raise WireError(f"the reply's deflate body does not inflate: {exc}") from None


def _members(data: bytes, wbits: int) -> bytes:
    """Every compressed member of ``data``, inflated; a stream cut short is a WireError."""
    out = bytearray()
    for _ in range(MAX_MEMBERS):
        inflater = zlib.decompressobj(wbits)
        out += inflater.decompress(data, MAX_BODY + 1 - len(out))
        if len(out) > MAX_BODY or inflater.unconsumed_tail:
            raise WireError(f"the reply is larger than {MAX_BODY} bytes once inflated")
        if not inflater.eof:
            raise WireError("the reply's compressed body was cut short")
        data = inflater.unused_data
        if not data:
            return bytes(out)
    raise WireError(f"the reply's compressed body has more than {MAX_MEMBERS} members")
