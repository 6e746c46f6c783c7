"""Real network parts for tests, all on 127.0.0.1: certificates made by the openssl CLI, the
loopback OpenAI server behind TLS, and proxy.py (a forward proxy written by others) as a process."""

from __future__ import annotations

import contextlib
import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from openai_server import FakeOpenAI

PROXY_READY_S = 30.0


@dataclass
class Cert:
    cert: Path
    key: Path


def make_cert(
    where: Path, name: str, san: str = "IP:127.0.0.1,DNS:localhost", days: int = 2
) -> Cert:
    """A self-signed certificate (its own CA) for ``san``, as PROVIDER-FACTS records making one."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed: it makes the test certificates")
    where.mkdir(parents=True, exist_ok=True)
    cert, key = where / f"{name}.pem", where / f"{name}.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            str(days),
            "-subj",
            f"/CN={name}",
            "-addext",
            f"subjectAltName={san}",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return Cert(cert, key)


@contextlib.contextmanager
def tls_server(cert: Cert, make: Callable[[], Any] = FakeOpenAI) -> Iterator[Any]:
    """The loopback OpenAI (or ``make``'s) server speaking https with ``cert``; the handshake runs
    on the connection's own thread, so a client that refuses the certificate stalls no other."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert.cert, cert.key)
    server = make()
    # a refused handshake is what these tests make
    server.httpd.handle_error = lambda request, address: None
    server.httpd.socket = context.wrap_socket(
        server.httpd.socket, server_side=True, do_handshake_on_connect=False
    )
    with server:
        yield server


def https_url(server: Any, host: str = "127.0.0.1", path: str = "/v1") -> str:
    return f"https://{host}:{server.httpd.server_address[1]}{path}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ForwardProxy:
    url: str
    log: Path

    def lines(self, needle: str = "", at_least: int = 0) -> list[str]:
        """The connections proxy.py opened to ``needle`` (host:port), as its debug log says when it
        opens one: for a plain request and for a ``CONNECT`` tunnel alike. Its access log line comes
        only when a connection closes, and the SDK keeps its pooled ones open. ``at_least``: wait
        (5 s at most) for the log to show that many."""
        deadline = time.monotonic() + (5.0 if at_least else 0.0)
        while len(found := self._lines(needle)) < at_least and time.monotonic() < deadline:
            time.sleep(0.05)
        return found

    def _lines(self, needle: str) -> list[str]:
        text = self.log.read_text(encoding="utf-8", errors="replace") if self.log.exists() else ""
        return [line for line in text.splitlines() if f"Connecting to upstream {needle}" in line]


def proxy_executable() -> Path:
    exe = Path(sys.executable).with_name("proxy")
    if not exe.is_file():
        pytest.fail(
            "proxy.py is not installed: pip install -e '.[test]' (it is in the test extra)",
            pytrace=False,
        )
    return exe


@contextlib.contextmanager
def forward_proxy(where: Path, basic_auth: str | None = None) -> Iterator[ForwardProxy]:
    """proxy.py on 127.0.0.1 with one worker; ``basic_auth``
    ("user:pass") makes it demand credentials."""
    port, log = free_port(), where / "proxy.log"
    argv = [
        str(proxy_executable()),
        "--hostname",
        "127.0.0.1",
        "--port",
        str(port),
        "--num-workers",
        "1",
        "--num-acceptors",
        "1",
        "--log-file",
        str(log),
        "--log-level",
        "DEBUG",
    ]
    if basic_auth:
        argv += ["--basic-auth", basic_auth]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + PROXY_READY_S
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
                break
            time.sleep(0.1)
        else:
            pytest.fail(
                f"proxy.py did not listen on 127.0.0.1:{port} within {PROXY_READY_S:g} s",
                pytrace=False,
            )
        yield ForwardProxy(f"http://127.0.0.1:{port}", log)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


CA_CONFIG = """[ca]
default_ca = test_ca
[test_ca]
database = {dir}/index.txt
new_certs_dir = {dir}
serial = {dir}/serial
default_md = sha256
policy = anything
copy_extensions = copy
[anything]
commonName = supplied
"""


def make_expired_cert(where: Path) -> tuple[Path, Cert]:
    """(a CA, a certificate it signed for 127.0.0.1 that expired in 2020):
    ``openssl ca`` sets past dates."""
    ca = make_cert(where, "expired-test-ca", san="DNS:expired-test-ca")
    (where / "index.txt").write_text("")
    (where / "serial").write_text("01\n")
    (where / "ca.cnf").write_text(CA_CONFIG.format(dir=where))
    key, csr, cert = where / "old.key", where / "old.csr", where / "old.pem"
    run = [
        [
            "openssl",
            "req",
            "-new",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(csr),
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        [
            "openssl",
            "ca",
            "-batch",
            "-config",
            str(where / "ca.cnf"),
            "-cert",
            str(ca.cert),
            "-keyfile",
            str(ca.key),
            "-in",
            str(csr),
            "-out",
            str(cert),
            "-startdate",
            "20200101000000Z",
            "-enddate",
            "20200102000000Z",
            "-notext",
        ],
    ]
    for argv in run:
        subprocess.run(argv, check=True, capture_output=True, timeout=60)
    return ca.cert, Cert(cert, key)
