"""``*_PROXY`` and ``NO_PROXY`` mean to the lean client what they mean to the SDKs' httpx.

Generated environments and URLs are routed by ``proxy_env`` and by httpx's own code (the one the
installed SDKs use), and must agree; then both clients run a sweep through a real forward proxy
(proxy.py on 127.0.0.1) under the same environment, and the proxy's log says they went the same way.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from fake_server import Server
from hypothesis import given, settings
from hypothesis import strategies as st
from netparts import ForwardProxy, forward_proxy
from openai_server import FakeOpenAI

from conftest import Sweep, make_spec, sim_spec
from pytest_echo_bench.providers.network import Network
from pytest_echo_bench.providers.proxy_env import environment_proxy

PROXY = "http://proxy.corp:3128"
FAST = "retries: {attempts: 2, backoff_s: 0.05, max_backoff_s: 0.1}\ntimeout_s: 10\n"


pytestmark = pytest.mark.usefixtures("api_key", "no_network_variables")


def httpx_route(url: str, proxies: dict[str, str]) -> str | None:
    """The proxy httpx's client picks for ``url`` (None: direct): its environment patterns,
    sorted and matched as ``httpx.Client`` does, or None when it refuses the environment."""
    httpx = pytest.importorskip("httpx2")
    from httpx2 import _utils

    original = _utils.getproxies
    _utils.getproxies = lambda: dict(proxies)  # type: ignore[assignment]
    try:
        mounts = _utils.get_environment_proxies()
        patterns = sorted((_utils.URLPattern(key), value) for key, value in mounts.items())
    finally:
        _utils.getproxies = original  # type: ignore[assignment]
    target = httpx.URL(url)
    return next((value for pattern, value in patterns if pattern.matches(target)), None)


def ours(url: str, proxies: dict[str, str]) -> str | None:
    from urllib.parse import urlsplit
    parts = urlsplit(url)
    return environment_proxy(parts.scheme, parts.hostname or "", parts.port, proxies)


@pytest.mark.parametrize("url, no_proxy", [
    # httpx drops a default port: the entry never matches
    ("http://api.example/v1", "api.example:80"),
    ("http://api.example:80/v1", "api.example:80"),
    ("https://api.example/v1", "api.example:443"),
    ("http://api.example:8080/v1", "api.example:8080"),
    ("http://localhost:8000/v1", ".localhost"),  # subdomains only
    ("http://a.localhost:8000/v1", ".localhost"),
    ("http://a.localhost:8000/v1", "localhost"),  # localhost: itself only
    ("http://localhost:8000/v1", "localhost"),
    ("https://api.openai.com/v1", "openai.com"),
    ("https://openai.com/v1", ".openai.com"),
    ("https://openai.com/v1", "*.openai.com"),
    ("http://10.2.3.4/v1", "10.0.0.0/8"),
    ("http://[::1]:8000/v1", "::1"),
    ("http://[::1]:8000/v1", "[::1]:8000"),
    ("http://[::1]/v1", "[::1]:80"),
    ("http://API.Example/v1", "api.EXAMPLE"),
    ("http://api.example/v1", "api.example:x"),  # no port: httpx ignores the entry
    ("http://api.example/v1", " , *"),
], ids=str)
def test_no_proxy_entries_route_as_httpx_routes_them(url: str, no_proxy: str) -> None:
    proxies = {"http": PROXY, "https": PROXY, "no": no_proxy}
    assert ours(url, proxies) == httpx_route(url, proxies)


def test_the_issues_two_cases_go_through_the_proxy_as_the_sdk_does() -> None:
    assert ours("http://api.example/v1", {"http": PROXY, "no": "api.example:80"}) == PROXY
    assert ours("http://localhost:8000/v1", {"http": PROXY, "no": ".localhost"}) == PROXY


LABEL = st.text(alphabet="abclo0123-", min_size=1, max_size=5)
NAME = st.one_of(st.lists(LABEL, min_size=1, max_size=3).map(".".join), st.just("localhost"),
                 st.sampled_from(["127.0.0.1", "10.1.2.3", "::1", "fe80::1"]))
ENTRY = st.one_of(
    st.tuples(
        st.sampled_from(["", ".", "*.", "*"]),
        NAME,
        st.sampled_from(["", ":80", ":443", ":8080", ":x", ":"]),
    ).map(lambda t: t[0] + (f"[{t[1]}]" if ":" in t[1] and t[2] else t[1]) + t[2]),
    st.sampled_from(
        [
            "10.0.0.0/8",
            "127.0.0.0/8",
            "::1/128",
            "fe80::/10",
            "*",
            "",
            "http://api.example",
            "https://",
            "all://",
            "10.0.0.0/x",
        ]
    ),
)


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(
    scheme=st.sampled_from(["http", "https"]),
    host=NAME,
    port=st.sampled_from(["", ":80", ":443", ":8080"]),
    entries=st.lists(ENTRY, max_size=4),
    variables=st.sets(st.sampled_from(["http", "https", "all"]), min_size=1),
)
def test_generated_environments_route_as_httpx_routes_them(
    scheme: str, host: str, port: str, entries: list[str], variables: set[str]
) -> None:
    shown = f"[{host}]" if ":" in host else host
    url = f"{scheme}://{shown}{port}/v1"
    proxies = {name: f"http://{name}-proxy:3128" for name in variables}
    proxies["no"] = ",".join(entries)
    assert ours(url, proxies) == httpx_route(url, proxies), (url, proxies)


# -- both clients through a real forward proxy, under one environment
# --------------------------------

@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForwardProxy]:
    with forward_proxy(tmp_path_factory.mktemp("proxy")) as running:
        yield running


@pytest.fixture
def on_port_80() -> Iterator[tuple[FakeOpenAI, str]]:
    """The OpenAI server on port 80 of a loopback address, so its URL names no port."""
    server = FakeOpenAI()
    server.httpd.server_close()
    for last in range(2, 40):
        try:
            server.httpd = Server((f"127.0.0.{last}", 80), server._handler())
            break
        except OSError:
            continue
    else:
        pytest.skip("no loopback address has port 80 free (or binding it is not allowed here)")
    server.thread = threading.Thread(target=server.httpd.serve_forever, daemon=True)
    with server:
        yield server, f"http://{server.httpd.server_address[0]}/v1"


def sweep_through(
    pytester: pytest.Pytester, sweep: Sweep, url: str, client: str
) -> list[dict[str, Any]]:
    arms = (f"  gpt:\n    provider: openai\n    model: local-model\n    base_url: {url}\n"
            f"    api_key_env: TEST_OPENAI_KEY\n    client: {client}\n")
    make_spec(pytester, sim_spec(3, arms=arms, extra=FAST).replace('target: "4"', 'target: "42"'))
    out = pytester.path / "results.jsonl"
    if out.exists():
        out.unlink()
    result, _, rows = sweep.run("--bench-concurrency", "1", "--bench-cache", "off")
    assert result.ret == 0, result.stdout.str()[-3000:]
    return rows


def routed(
    pytester: pytest.Pytester, sweep: Sweep, proxy: ForwardProxy, url: str, needle: str
) -> dict[str, bool]:
    """For each client: whether its calls went through the proxy (its log names the origin)."""
    went = {}
    for client in ("http", "sdk"):
        before = len(proxy.lines(needle))
        rows = sweep_through(pytester, sweep, url, client)
        assert [r["status"] for r in rows] == ["correct"] * 3
        went[client] = len(proxy.lines(needle)) > before
    return went


@pytest.mark.parametrize("named", [False, True], ids=["url-without-port", "url-with-80"])
def test_no_proxy_host_port_80_for_an_http_url(
    pytester: pytest.Pytester,
    sweep: Sweep,
    proxy: ForwardProxy,
    on_port_80: tuple[FakeOpenAI, str],
    monkeypatch: pytest.MonkeyPatch,
    named: bool,
) -> None:
    server, url = on_port_80
    address = server.httpd.server_address[0]
    url = url.replace(address, f"{address}:80") if named else url
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", f"{address}:80")
    # httpx drops the default port from the URL, so the entry does not
    # match: both go through the proxy.
    assert routed(pytester, sweep, proxy, url, f"{address}:80") == {"http": True, "sdk": True}


def test_no_proxy_dot_localhost_leaves_localhost_itself_to_the_proxy(
        pytester: pytest.Pytester, sweep: Sweep, proxy: ForwardProxy, openai_server: FakeOpenAI,
        monkeypatch: pytest.MonkeyPatch) -> None:
    port = openai_server.httpd.server_address[1]
    url = f"http://localhost:{port}/v1"
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", ".localhost")
    assert routed(pytester, sweep, proxy, url, f"localhost:{port}") == {"http": True, "sdk": True}
    monkeypatch.setenv("NO_PROXY", "localhost")
    assert routed(pytester, sweep, proxy, url, f"localhost:{port}") == {"http": False, "sdk": False}


def test_an_arms_network_routes_by_the_same_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.corp:3128")
    monkeypatch.setenv("NO_PROXY", ".localhost")
    chosen = Network().proxy_for("http://localhost:8000/v1")
    assert chosen is not None and chosen.shown == "proxy.corp:3128"
    assert Network().proxy_for("http://a.localhost:8000/v1") is None
