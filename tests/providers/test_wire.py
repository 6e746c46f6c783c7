"""The lean HTTP/1.1 client against a real socket server on 127.0.0.1 that sends exact bytes.

Each server answers requests one after another on each connection with what a test scripts:
chunked bodies, bodies up to the close, ``connection: close``, interim 100 replies, an idle
connection closed under a keep-alive client, torn and malformed replies; and over TLS.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pytest_echo_bench.errors import ArmError, TransientError, UnavailableError
from pytest_echo_bench.providers.http_json import JSONClient
from pytest_echo_bench.providers.wire import BadURL, Target

OK = b'{"choices": [{"message": {"content": "4"}}]}'
# (request number, request) -> (reply bytes, close after)
Script = Callable[[int, bytes], tuple[bytes, bool]]


def reply(body: bytes = OK, *headers: str, status: str = "200 OK") -> bytes:
    head = "".join(f"{h}\r\n" for h in headers)
    return f"HTTP/1.1 {status}\r\n{head}\r\n".encode() + body


def framed(body: bytes = OK, *headers: str) -> bytes:
    return reply(body, f"content-length: {len(body)}", *headers)


class RawServer:
    """Answers each request with ``script``'s bytes; counts connections and requests."""

    def __init__(self, script: Script, tls: ssl.SSLContext | None = None) -> None:
        self.script, self.tls = script, tls
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(10)
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.requests: list[bytes] = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def url(self, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}/v1/chat/completions"

    def _serve(self) -> None:
        for _ in range(50):  # bounded: no test opens more connections than this
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            conn.settimeout(10)
            reader = conn.makefile("rb")
            for _ in range(100):
                request = _read_request(reader)
                if request is None:
                    return
                with self.lock:
                    self.requests.append(request)
                    number = len(self.requests)
                data, close = self.script(number, request)
                conn.sendall(data)
                if close:
                    return
        except OSError:
            return
        finally:
            conn.close()

    def close(self) -> None:
        self.listener.close()


def _read_request(reader: object) -> bytes | None:
    head = b""
    for _ in range(200):
        line = reader.readline(65537)  # type: ignore[attr-defined]
        if not line:
            return None
        head += line
        if line in (b"\r\n", b"\n"):
            break
    length = next(
        (
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    return head + reader.read(length)  # type: ignore[attr-defined,no-any-return]


@pytest.fixture
def serve() -> Iterator[Callable[..., RawServer]]:
    servers: list[RawServer] = []

    def start(script: Script, tls: ssl.SSLContext | None = None) -> RawServer:
        servers.append(RawServer(script, tls))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def client(server: RawServer, scheme: str = "http") -> JSONClient:
    return JSONClient(server.url(scheme), {"authorization": "Bearer sk-test"}, 5.0)


def test_a_keep_alive_connection_carries_every_request_and_the_request_is_well_formed(
    serve: Callable[..., RawServer],
) -> None:
    server = serve(lambda n, req: (framed(), False))
    json_client = client(server)
    for _ in range(3):
        status, headers, data = json_client.post(
            {"model": "m", "messages": [{"role": "user", "content": "2+2"}]}
        )
        assert status == 200 and data["choices"][0]["message"]["content"] == "4"
    assert server.connections == 1 and len(server.requests) == 3
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /v1/chat/completions HTTP/1.1"
    assert f"host: 127.0.0.1:{server.port}" in lines and "authorization: Bearer sk-test" in lines
    assert f"content-length: {len(body)}" in lines and json.loads(body)["model"] == "m"


def test_a_chunked_reply_with_extensions_and_trailers_is_read_whole(
    serve: Callable[..., RawServer],
) -> None:
    body = (
        b"5;ext=1\r\n"
        + OK[:5]
        + b"\r\n"
        + f"{len(OK) - 5:x}\r\n".encode()
        + OK[5:]
        + b"\r\n0\r\nx-trailer: 1\r\n\r\n"
    )
    server = serve(lambda n, req: (reply(body, "transfer-encoding: chunked"), False))
    json_client = client(server)
    assert json_client.post({})[2]["choices"][0]["message"]["content"] == "4"
    assert json_client.post({})[0] == 200  # the trailers were consumed: the next reply parses
    assert server.connections == 1


def test_a_body_up_to_the_close_and_connection_close_open_a_new_connection(
    serve: Callable[..., RawServer],
) -> None:
    def script(n: int, req: bytes) -> tuple[bytes, bool]:
        return (reply(OK), True) if n == 1 else (framed(OK, "connection: close"), True)

    server = serve(script)
    json_client = client(server)
    # no length: read to the close
    assert json_client.post({})[2]["choices"][0]["message"]["content"] == "4"
    assert json_client.post({})[0] == 200
    assert json_client.post({})[0] == 200
    assert server.connections == 3


def test_an_idle_connection_the_server_closed_is_reopened_and_the_request_sent_once_more(
    serve: Callable[..., RawServer],
) -> None:
    # Keep-alive servers close idle connections: the client only learns it when it sends.
    # closes after the first reply, without saying so
    server = serve(lambda n, req: (framed(), n == 1))
    json_client = client(server)
    assert json_client.post({})[0] == 200
    assert json_client.post({})[0] == 200
    assert server.connections == 2 and len(server.requests) == 2


def test_a_kept_connection_closed_just_as_the_request_went_out_is_sent_once_more(
    serve: Callable[..., RawServer],
) -> None:
    # The server's keep-alive timer fired as the request was sent: it read it, replied nothing and
    # closed at once. Not a byte of a reply, within half a second: the request goes out again.
    server = serve(lambda n, req: (framed(), False) if n != 2 else (b"", True))
    json_client = client(server)
    assert json_client.post({"item": 1})[0] == 200
    assert json_client.post({"item": 2})[0] == 200
    assert [json.loads(r.partition(b"\r\n\r\n")[2]) for r in server.requests] == [
        {"item": 1},
        {"item": 2},
        {"item": 2},
    ]
    assert server.connections == 2


def test_connections_on_descriptors_above_1023_are_reused(serve: Callable[..., RawServer]) -> None:
    # select() refuses descriptors from 1024 on; a sweep with hundreds
    # of calls in flight gets there.
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard >= 1200, (
        f"this test needs a file descriptor limit of at least 1200 (ulimit -n: {hard})"
    )
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    fillers = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        server = serve(lambda n, req: (framed(), False))
        json_client = client(server)
        for _ in range(3):
            assert json_client.post({})[0] == 200
        assert server.connections == 1
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_fresh_connection_closed_without_a_reply_is_transient(
    serve: Callable[..., RawServer],
) -> None:
    server = serve(lambda n, req: (b"", True))
    with pytest.raises(TransientError, match="closed the connection without replying"):
        client(server).post({})
    assert len(server.requests) == 1  # a fresh connection's failure is not sent again


@pytest.mark.parametrize(("data", "message"), [
    (reply(OK[:10], f"content-length: {len(OK)}"), "cut short"),
    (b"SSH-2.0-OpenSSH_9.2\r\n\r\n", "not an HTTP reply"),
    (reply(OK, "content-length: many"), "content-length is not a number"),
    (reply(b"zz\r\n", "transfer-encoding: chunked"), "malformed chunk size"),
    (reply(b"", "no colon here"), "malformed header line"),
])
def test_a_torn_or_malformed_reply_is_transient_and_the_connection_dropped(
    serve: Callable[..., RawServer], data: bytes, message: str,
) -> None:
    server = serve(lambda n, req: (data, True) if n == 1 else (framed(), False))
    json_client = client(server)
    with pytest.raises(TransientError, match=message):
        json_client.post({})
    assert json_client.post({})[0] == 200 and server.connections == 2


def test_an_interim_100_reply_is_skipped_and_repeated_headers_are_joined(
    serve: Callable[..., RawServer],
) -> None:
    interim = b"HTTP/1.1 100 Continue\r\n\r\n"
    error = b'{"error": {"message": "slow down"}}'
    data = interim + framed(error, "x-multi: a", "X-Multi: b", "retry-after: 1").replace(
        b"200 OK", b"429 Too Many Requests"
    )
    server = serve(lambda n, req: (data, False))
    status, headers, body = client(server).post({})
    assert status == 429 and headers["x-multi"] == "a, b" and headers["retry-after"] == "1"
    assert body["error"]["message"] == "slow down"


def test_a_reply_that_is_not_json_is_kept_as_a_message(serve: Callable[..., RawServer]) -> None:
    page = b"<html>login</html>"
    server = serve(lambda n, req: (framed(page, "content-type: text/html"), False))
    assert client(server).post({})[2] == {"message": "<html>login</html>"}


def test_a_timeout_is_transient(serve: Callable[..., RawServer]) -> None:
    gate = threading.Event()
    server = serve(lambda n, req: (gate.wait(5), (framed(), False))[1])
    slow = JSONClient(server.url(), {}, 0.3)
    try:
        with pytest.raises(TransientError, match="TimeoutError|timed out"):
            slow.post({})
    finally:
        gate.set()


def test_bytes_beyond_a_replys_framing_are_never_read_as_the_next_reply(
    serve: Callable[..., RawServer],
) -> None:
    # A 204 carrying a body anyway: left on the connection, it would be the next item's verdict.
    def script(n: int, req: bytes) -> tuple[bytes, bool]:
        body = json.dumps({"verdict": f"for item {n}"}).encode()
        return (
            (framed(body).replace(b"200 OK", b"204 No Content"), False)
            if n == 1
            else (framed(body), False)
        )

    server = serve(script)
    json_client = client(server)
    assert json_client.post({})[0] == 204
    assert json_client.post({})[2] == {"verdict": "for item 2"}
    assert json_client.post({})[2] == {"verdict": "for item 3"}


def test_a_reply_sent_before_the_request_was_read_leaves_nothing_for_the_next_request(
    serve: Callable[..., RawServer],
) -> None:
    # The server answers early, then takes the unread body for a request of its own and answers it
    # too: that stray reply is on the connection before the next request goes out.
    def script(n: int, req: bytes) -> tuple[bytes, bool]:
        if n == 1:
            return framed(b'{"error": "early"}').replace(b"200 OK", b"401 Unauthorized") + framed(
                b'{"stray": 1}'
            ), False
        return framed(
            json.dumps({"for": json.loads(req.partition(b"\r\n\r\n")[2])}).encode()
        ), False

    server = serve(script)
    json_client = client(server)
    assert json_client.post({"item": 1})[0] == 401
    assert json_client.post({"item": 2})[2] == {"for": {"item": 2}}
    assert server.connections == 2  # the connection with the stray reply was not used again


def _part_of_a_reply(n: int, req: bytes) -> tuple[bytes, bool]:
    return (
        (framed(), False)
        if n == 1
        else (b'HTTP/1.1 200 OK\r\ncontent-length: 40\r\n\r\n{"partial', True)
    )


def _held_then_closed(n: int, req: bytes) -> tuple[bytes, bool]:
    # A proxy that gives up on a long call closes without a reply: the model may have answered
    # (and billed) already, so that is the caller's transient error, not a silent second call.
    if n == 2:
        threading.Event().wait(0.8)
        return b"", True
    return framed(), False


@pytest.mark.parametrize(("script", "message"), [
    (_part_of_a_reply, "cut short"),
    (_held_then_closed, "closed the connection without replying"),
])
def test_a_request_is_not_sent_again_after_part_of_its_reply_or_a_long_wait(
    serve: Callable[..., RawServer], script: Script, message: str,
) -> None:
    server = serve(script)
    json_client = client(server)
    json_client.post({})
    with pytest.raises(TransientError, match=message):
        json_client.post({})
    assert len(server.requests) == 2


def test_the_timeout_bounds_the_whole_reply_not_each_read(serve: Callable[..., RawServer]) -> None:
    class Trickle(RawServer):  # interim replies every 0.2 s, for ever
        def _connection(self, conn: socket.socket) -> None:
            try:
                _read_request(conn.makefile("rb"))
                for _ in range(50):
                    conn.sendall(b"HTTP/1.1 102 Processing\r\n\r\n")
                    threading.Event().wait(0.2)
            except OSError:
                pass
            finally:
                conn.close()

    server = Trickle(lambda n, req: (b"", True))
    started = time.monotonic()
    try:
        with pytest.raises(TransientError, match="timed out|longer than the call's timeout"):
            JSONClient(server.url(), {}, 1.0).post({})
        took = time.monotonic() - started
    finally:
        server.close()
    # Each read came within 0.2 s: only the whole call's 1 s deadline ends it, long before the
    # trickle's 10 s end (1.8 s was the bound, which a loaded machine's thread wake-ups can pass).
    assert took < 6, took


@pytest.mark.parametrize(("data", "message"), [
    (reply(b"-1\r\n", "transfer-encoding: chunked"), "malformed chunk size"),
    (reply(b"0x2\r\n", "transfer-encoding: chunked"), "malformed chunk size"),
    (reply(b"", "transfer-encoding: gzip, chunked"), "not one this client reads"),
    (reply(OK, "content-length: \u00b2".encode("latin-1").decode("latin-1")), "not a number"),
    (b"HTTP/1.1 \xb200 OK\r\n\r\n", "not an HTTP reply"),
])
def test_framing_this_client_cannot_read_exactly_is_refused(
    serve: Callable[..., RawServer], data: bytes, message: str
) -> None:
    server = serve(lambda n, req: (data, True))
    with pytest.raises(TransientError, match=message):
        client(server).post({})


def test_a_repeated_identical_content_length_is_one_length(serve: Callable[..., RawServer]) -> None:
    server = serve(
        lambda n, req: (
            reply(OK, f"content-length: {len(OK)}", f"content-length: {len(OK)}"),
            False,
        )
    )
    assert client(server).post({})[0] == 200


def test_a_key_with_characters_headers_cannot_carry_is_the_arm_unavailable() -> None:
    with pytest.raises(UnavailableError, match="header was refused before sending"):
        JSONClient("http://127.0.0.1:9/v1", {"authorization": "Bearer k\u0101y"}, 1.0).post({})


@pytest.mark.parametrize(("url", "why"), [
    ("http://127.0.0.1:port/v1", "Port could not be cast"),
    ("http:///v1/chat/completions", "no host"),
    ("http://127.0.0.1:1/v1 chat", "spaces or control characters"),
    ("ftp://127.0.0.1/v1", "scheme must be http or https"),
    ("http://127.0.0.1:0/v1", "port 0"),
])
def test_a_base_url_that_cannot_be_used_is_the_arm_unavailable(url: str, why: str) -> None:
    with pytest.raises(BadURL, match=why):
        Target.parse(url)
    with pytest.raises(UnavailableError, match="the base_url cannot be used"):
        JSONClient(url, {}, 1.0).post({})


def test_the_host_header_names_the_port_only_when_it_is_not_the_default() -> None:
    assert Target.parse("https://api.example.com/v1").host_header == "api.example.com"
    assert Target.parse("http://api.example.com:8080/v1").host_header == "api.example.com:8080"
    assert Target.parse("http://[::1]:9000/v1").host_header == "[::1]:9000"
    assert Target.parse("https://api.example.com/v1?a=1").path == "/v1?a=1"
    # IDNA
    assert Target.parse("https://b\u00fccher.example/v1").host_header == "xn--bcher-kva.example"


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1, made with the openssl CLI."""
    openssl = shutil.which("openssl")
    assert openssl, "the openssl command is needed (Debian: apt-get install openssl)"
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def test_https_is_verified_against_the_trusted_certificates(
    serve: Callable[..., RawServer],
    certificate: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cert, key = certificate
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = serve(lambda n, req: (framed(), False), context)
    # not trusted: refused, the arm's to fix
    with pytest.raises(ArmError, match="self-signed certificate"):
        client(server, "https").post({})
    # trusted now (OpenSSL reads it for the default paths)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    trusting = client(server, "https")
    assert trusting.post({})[2]["choices"][0]["message"]["content"] == "4"
    assert trusting.post({})[0] == 200
