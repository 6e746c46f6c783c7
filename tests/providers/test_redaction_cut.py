"""No piece of a secret is shown: a key across the cut of an error page or a CLI's stderr tail, a
key echoed in part, a proxy's page that echoes its credentials. Each is a real sweep against a real
loopback server or process; every artifact (terminal, rows, JUnit XML, json-report, the stop marker,
the summary) is searched, raw and decoded, for any run of eight characters of a secret."""

from __future__ import annotations

import base64
import json
import threading
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cli_fakes import python_cli

from conftest import Sweep, make_spec, report_args, reports, sim_spec

KEY = "sk-proj-Qm7Zt4Lk9Wx2Rb8Nc5Vd3Hf6Jg1Ps0Ty"
ENV = "TEST_CUT_KEY"
CUT = 200  # the lean client keeps the first 200 characters of a body that is no JSON
TAIL = 2000  # a CLI's message keeps the last 2,000 characters of its output
PROXY_USER, PROXY_PASSWORD = "bench-proxy-user", "pr0xy-s3cret-4f9a-77"
MIN_RUN = 8  # the promise: no run this long of a secret is shown anywhere
FAST = "retries: {attempts: 2, backoff_s: 0.01, max_backoff_s: 0.02}\ntimeout_s: 10\n"


def runs_of(secret: str, text: str) -> list[str]:
    """Every ``MIN_RUN``-character piece of ``secret`` that ``text`` shows."""
    return sorted(
        {
            secret[i : i + MIN_RUN]
            for i in range(len(secret) - MIN_RUN + 1)
            if secret[i : i + MIN_RUN] in text
        }
    )


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _json_texts(text: str) -> Iterator[str]:
    """A JSON file's or a JSON Lines file's strings, decoded (an escaped piece reads as itself)."""
    try:
        yield from _strings(json.loads(text))
        return
    except ValueError:
        pass
    for line in text.splitlines():
        try:
            yield from _strings(json.loads(line))
        except ValueError:
            continue


def artifacts(pytester: pytest.Pytester, sweep: Sweep, result: pytest.RunResult) -> dict[str, str]:
    """Every text the run showed or stored, raw and decoded."""
    junit, report = reports(pytester)
    found = {
        "terminal": result.stdout.str() + result.stderr.str(),
        "junit": junit,
        "json-report": report,
        "junit (decoded)": " ".join(
            t
            for node in ET.fromstring(junit).iter()
            for t in (node.text or "", node.tail or "", *node.attrib.values())
        ),
        "json-report (decoded)": " ".join(_json_texts(report)),
    }
    for path in pytester.path.glob("results.jsonl*"):
        found[path.name] = path.read_text(encoding="utf-8", errors="replace")
        found[f"{path.name} (decoded)"] = " ".join(_json_texts(found[path.name]))
    return found


def assert_no_piece(secrets: tuple[str, ...], found: dict[str, str]) -> None:
    leaks = {
        (where, piece)
        for where, text in found.items()
        for secret in secrets
        for piece in runs_of(secret, text)
    }
    assert not leaks, sorted(leaks)[:6]


class PageServer:
    """A loopback server that answers every POST with ``page(request headers)`` and ``status``."""

    def __init__(self, status: int, page: Callable[[dict[str, str]], tuple[str, bytes]]) -> None:
        self.status, self.page = status, page
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> PageServer:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - the stdlib's naming
                self.rfile.read(int(self.headers.get("content-length", 0)))
                kind, body = server.page({k.lower(): v for k, v in self.headers.items()})
                self.send_response(server.status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler


def across_the_cut(
    secret: str, shown_before: int = 21
) -> Callable[[dict[str, str]], tuple[str, bytes]]:
    """An HTML error page quoting the first 24 characters of ``secret`` early (a partial echo) and
    the whole of it across byte ``CUT``, ``shown_before`` of its characters before the cut."""
    def page(headers: dict[str, str]) -> tuple[str, bytes]:
        head = (
            f"<html><head><title>Error</title></head><body><p>key {secret[:24]}... refused</p><p>"
        )
        filler = "x" * (CUT - shown_before - len(head))
        return "text/html", f"{head}{filler}{secret}</p>{'y' * 300}</body></html>".encode()
    return page


def partial_json(secret: str) -> Callable[[dict[str, str]], tuple[str, bytes]]:
    """The API's own JSON error, quoting the key in part (as
    "Incorrect API key provided: sk-...")."""
    def page(headers: dict[str, str]) -> tuple[str, bytes]:
        error = {
            "message": f"Incorrect API key provided: {secret[:20]}****{secret[-6:]}",
            "type": "invalid_request_error",
        }
        return "application/json", json.dumps({"error": error}).encode()
    return page


def chat_spec(provider: str, client: str, base_url: str, extra: str = "") -> str:
    arm = (
        f"  chat:\n    provider: {provider}\n    model: m\n    base_url: {base_url}\n    "
        f"api_key_env: {ENV}\n"
        f"    client: {client}\n{extra}"
    )
    return sim_spec(2, arms=arm, extra=FAST)


@pytest.mark.parametrize("client", ["http", "sdk"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("status", [400, 500])
def test_a_key_across_the_cut_of_an_html_page_shows_no_piece(
    pytester: pytest.Pytester,
    sweep: Sweep,
    monkeypatch: pytest.MonkeyPatch,
    provider: str,
    client: str,
    status: int,
) -> None:
    monkeypatch.setenv(ENV, KEY + "\n")
    with PageServer(status, across_the_cut(KEY)) as server:
        make_spec(
            pytester,
            chat_spec(provider, client, server.url + ("/v1" if provider == "openai" else "")),
        )
        result, _, rows = sweep.run("--bench-concurrency", "1", *report_args(pytester))
    if status == 400:  # an error row per item
        assert [r["status"] for r in rows] == ["error", "error"]
    else:  # retried, then left for a resume: the message is on the terminal and in the stop marker
        assert rows == [] and result.ret == 2
    found = artifacts(pytester, sweep, result)
    # the openai SDK shows no body that is not JSON ("Error code: 400")
    if (provider, client) != ("openai", "sdk"):
        assert "key [redacted]... refused" in found["terminal"]
    assert_no_piece((KEY,), found)


@pytest.mark.parametrize("client", ["http", "sdk"])
def test_a_key_quoted_in_part_by_the_apis_own_error_shows_no_piece(
    pytester: pytest.Pytester, sweep: Sweep, monkeypatch: pytest.MonkeyPatch, client: str,
) -> None:
    monkeypatch.setenv(ENV, KEY)
    with PageServer(400, partial_json(KEY)) as server:
        make_spec(pytester, chat_spec("openai", client, server.url + "/v1"))
        result, _, rows = sweep.run("--bench-concurrency", "1", *report_args(pytester))
    assert rows == [] and result.ret == 2  # the arm's key was refused: the arm stops
    found = artifacts(pytester, sweep, result)
    assert "Incorrect API key provided: [redacted]" in found["terminal"]
    assert_no_piece((KEY,), found)


def echoing_proxy(kind: str) -> Callable[[dict[str, str]], tuple[str, bytes]]:
    """A forward proxy's 502 that quotes the request's headers, credentials included: an HTML page
    (the value across the cut, 13 of its characters before it) or a JSON error."""
    def page(headers: dict[str, str]) -> tuple[str, bytes]:
        quoted = f"Proxy-Authorization: {headers.get('proxy-authorization', '(none)')}"
        if kind == "json":
            error = {
                "message": f"upstream unreachable; request headers: {quoted}",
                "type": "proxy_error",
            }
            return "application/json", json.dumps({"error": error}).encode()
        head = "<html><body><h1>502 Bad Gateway</h1><pre>"
        filler = "x" * (CUT - len("Proxy-Authorization: Basic ") - 13 - len(head))
        return (
            "text/html",
            f"{head}{filler}{quoted}\nHost: {headers.get('host')}</pre></body></html>".encode(),
        )
    return page


@pytest.mark.parametrize("client, kind", [("http", "html"), ("http", "json"), ("sdk", "json")])
@pytest.mark.parametrize("where", ["arm", "environment"])
def test_a_proxys_page_echoing_its_credentials_shows_no_piece(
    pytester: pytest.Pytester,
    sweep: Sweep,
    monkeypatch: pytest.MonkeyPatch,
    client: str,
    kind: str,
    where: str,
) -> None:
    monkeypatch.setenv(ENV, KEY)
    for name in ("HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    with PageServer(502, echoing_proxy(kind)) as proxy:
        url = proxy.url.replace("http://", f"http://{PROXY_USER}:{PROXY_PASSWORD}@")
        if where == "environment":
            monkeypatch.setenv("HTTP_PROXY", url)
        extra = f"    proxy: {url}\n" if where == "arm" else ""
        # Nothing listens at the origin: only the proxy answers.
        make_spec(pytester, chat_spec("openai", client, "http://127.0.0.1:9/v1", extra))
        result, _, rows = sweep.run("--bench-concurrency", "1", *report_args(pytester))
    assert rows == [] and result.ret == 2
    found = artifacts(pytester, sweep, result)
    said = [
        line
        for line in found["terminal"].splitlines()
        if "HTTP 502" in line and "Proxy-Authorization: Basic " in line
    ]
    # the cut may end in it
    assert said and all("[red" in line.partition("Proxy-Authorization: Basic ")[2] for line in said)
    basic = base64.b64encode(f"{PROXY_USER}:{PROXY_PASSWORD}".encode()).decode()
    assert_no_piece((PROXY_USER, PROXY_PASSWORD, basic), found)


def stderr_cli(path: Path, secret_env: str, before: int, rc: int, last_line: str = "") -> Path:
    """A CLI that prints the key it was given, then ``before`` characters, to stderr, and exits
    ``rc``: a 2,000-character tail starts inside the key."""
    return python_cli(
        path,
        f"import os, sys\nsys.stderr.write('token ' + os.environ[{secret_env!r}] + ' rejected\\n'"
        f" + 'z' * {before} + '\\n{last_line}')\nsys.exit({rc})\n",
    )


@pytest.mark.parametrize("preset", [False, True], ids=["argv", "claude-preset"])
def test_a_key_across_the_cut_of_a_clis_stderr_tail_shows_no_piece(
    pytester: pytest.Pytester, sweep: Sweep, monkeypatch: pytest.MonkeyPatch, preset: bool,
) -> None:
    monkeypatch.setenv(ENV, KEY)
    # The tail starts 19 characters before the key's end; with the claude preset a text-only
    # failure that says "Prompt is too long" is this item's error row.
    last = "Prompt is too long" if preset else ""
    before = TAIL - 19 - len(" rejected\n") - 1 - len(last)
    cli = stderr_cli(pytester.path / "cli", ENV, before, 1, last)
    arm = (
        f"{{provider: command, preset: claude, model: sonnet, binary: {cli}, env: [{ENV}]}}"
        if preset
        else f"{{provider: command, argv: [{cli}], env: [{ENV}]}}"
    )
    make_spec(pytester, sim_spec(1, arms=f"  cli: {arm}", extra=FAST))
    result, _, rows = sweep.run(*report_args(pytester))
    if preset:
        assert [r["status"] for r in rows] == ["error"] and "Prompt is too long" in rows[0][
            "detail"
        ]
    else:
        assert rows == [] and "exited with status 1" in result.stdout.str()
    assert_no_piece((KEY,), artifacts(pytester, sweep, result))


def test_a_variable_the_spec_names_is_a_secret_too(
    pytester: pytest.Pytester, sweep: Sweep, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The key reaches the server through ${VAR} in a header-like option, not through api_key_env.
    token = "gw-tok-8c1d5e9f2a7b4c6d0e3f"
    monkeypatch.setenv("GATEWAY_TOKEN", token)
    monkeypatch.setenv(ENV, KEY)
    with PageServer(400, across_the_cut(token, shown_before=12)) as server:
        make_spec(
            pytester, chat_spec("openai", "http", server.url + "/v1?gateway=${GATEWAY_TOKEN}")
        )
        result, _, rows = sweep.run("--bench-concurrency", "1", *report_args(pytester))
    assert [r["status"] for r in rows] == ["error", "error"]
    assert_no_piece((token,), artifacts(pytester, sweep, result))
