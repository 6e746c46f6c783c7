"""Which proxy the environment gives a URL: ``*_PROXY`` and ``NO_PROXY`` read as httpx reads them.

The official SDKs reach their APIs through httpx with ``trust_env``, so a user's environment means
what httpx makes of it; the lean client must go the same way, or one ``client:`` switch moves a
sweep on or off the corporate proxy. httpx turns each variable into a URL pattern
(``httpx._utils.get_environment_proxies``) and the first pattern, most specific first, that
matches a URL decides (``URLPattern``). These rules are theirs, not urllib's nor curl's:

- ``example.com`` matches it and its subdomains; ``.example.com`` and ``*.example.com`` only
  subdomains; ``localhost`` only itself; an IP only itself; ``10.0.0.0/8`` (or an IPv6 block) by
  address; ``*`` everything.
- ``host:port`` (and ``[v6]:port``) matches only a URL that names that port and it is not the
  scheme's default: httpx normalizes ``http://host:80`` to no port, so ``NO_PROXY=host:80`` never
  matches an http URL. An entry that does not parse is ignored.

tests/providers/test_proxy_env.py holds this module to httpx's own answers.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass

# The ports httpx's URL drops as the scheme's default (WHATWG); "all" has none.
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Rule:
    """One URL pattern: what it matches, how specific it is, and the proxy (None: go direct)."""

    scheme: str  # "" for any
    host: re.Pattern[str] | None
    network: Network | None
    port: int | None
    proxy: str | None
    priority: tuple[int, int, int, int, int]

    def matches(self, scheme: str, host: str, port: int | None) -> bool:
        if self.scheme and self.scheme != scheme:
            return False
        if self.network is not None:
            try:
                if ipaddress.ip_address(host) not in self.network:
                    return False
            except ValueError:
                return False
        elif self.host is not None and not self.host.match(host):
            return False
        return self.port is None or self.port == port


def environment_proxy(
    url_scheme: str, host: str, port: int | None, proxies: Mapping[str, str]
) -> str | None:
    """The proxy URL a request to ``url_scheme://host:port`` goes through (None: direct), from
    ``proxies`` as ``urllib.request.getproxies_environment()`` reads them."""
    scheme = url_scheme.lower()
    host = host.lower().strip("[]")
    if port is not None and DEFAULT_PORTS.get(scheme) == port:
        port = None
    for rule in rules(proxies):
        if rule.matches(scheme, host, port):
            return rule.proxy
    return None


def rules(proxies: Mapping[str, str]) -> list[Rule]:
    """The patterns httpx mounts, most specific first (ties keep
    their order, as ``sorted`` does)."""
    mounts: dict[str, str | None] = {}
    for scheme in ("http", "https", "all"):
        if proxies.get(scheme):
            chosen = proxies[scheme]
            mounts[f"{scheme}://"] = chosen if "://" in chosen else f"http://{chosen}"
    for entry in (e.strip() for e in proxies.get("no", "").split(",")):
        if entry == "*":
            return []  # every URL goes direct
        pattern = _no_proxy_pattern(entry) if entry else None
        if pattern is not None:
            mounts[pattern] = None
    parsed = (_rule(pattern, proxy) for pattern, proxy in mounts.items())
    return sorted((rule for rule in parsed if rule is not None), key=lambda rule: rule.priority)


def _no_proxy_pattern(entry: str) -> str | None:
    """The pattern httpx makes of one ``NO_PROXY`` entry (None: it makes none)."""
    if "://" in entry:
        return entry
    address = entry.split("/")[0]
    if _is_ip(address, 4):
        return f"all://{entry}"
    if _is_ip(address, 6):
        block, slash, bits = entry.partition("/")
        return f"all://[{block}]/{bits}" if slash else f"all://[{entry}]"
    if entry.lower() == "localhost" or entry.startswith("["):
        return f"all://{entry}"
    if entry.startswith("*.") and "/" not in entry:
        return f"all://{entry}"
    return f"all://*{entry}" if "/" not in entry else None


def _rule(pattern: str, proxy: str | None) -> Rule | None:
    """A pattern as httpx's ``URLPattern`` reads it; None where httpx
    refuses it (the entry is ignored)."""
    scheme, _, rest = pattern.partition("://")
    scheme = scheme.lower()
    authority, slash, path = rest.partition("/")
    split = _host_port(_authority(authority))
    if split is None:
        return None
    host, port = split
    if port is not None and DEFAULT_PORTS.get(scheme) == port:
        port = None
    prefix = path if slash else ""
    network: Network | None = None
    if prefix and (_is_ip(host, 4) or _is_ip(host, 6)):
        network = _network(pattern, host, prefix)
        if network is None:
            return None
    host = "" if host == "*" else host
    scheme = "" if scheme == "all" else scheme
    if network is not None:
        priority = _priority(port, 1, network.num_addresses, 0, scheme)
        return Rule(scheme, None, network, port, proxy, priority)
    return Rule(scheme, _host_pattern(host), None, port, proxy,
                _priority(port, 0 if host else 2, 0, -len(host), scheme))


def _authority(text: str) -> str:
    """The ``host[:port]`` of a pattern's authority: no query, fragment or user."""
    for mark in ("?", "#"):
        text = text.partition(mark)[0]
    return text.rpartition("@")[2]


def _network(pattern: str, host: str, prefix: str) -> Network | None:
    """The addresses of an IP pattern with a ``/bits`` suffix, as httpx reads it (None: refused)."""
    shown = f"[{host}]" if ":" in host else host
    plain = "@" not in pattern and "%" not in pattern
    if not plain or not prefix.isdigit() or not pattern.endswith(f"{shown}/{prefix}"):
        return None
    try:
        return ipaddress.ip_network(f"{host}/{prefix}", strict=False)
    except ValueError:
        return None


def _priority(port: int | None, kind: int, addresses: int, host_length: int,
              scheme: str) -> tuple[int, int, int, int, int]:
    """httpx's order of patterns: a port first, then an address block, a host, none; the smaller
    block, the longer host and a named scheme before the rest."""
    return (0 if port is not None else 1, kind, addresses, host_length, -len(scheme))


def _host_port(authority: str) -> tuple[str, int | None] | None:
    """``host[:port]`` or ``[v6][:port]``, the host lower-cased;
    None for a port that is no number."""
    if authority.startswith("["):
        inside, _, after = authority[1:].partition("]")
        host, port = inside, after[1:] if after.startswith(":") else ""
    else:
        host, _, port = (
            authority.partition(":") if authority.count(":") <= 1 else (authority, "", "")
        )
    if port and not (port.isascii() and port.isdigit()):
        return None
    return host.lower(), int(port) if port else None


def _host_pattern(host: str) -> re.Pattern[str] | None:
    if not host:
        return None
    if host.startswith("*."):  # subdomains only
        return re.compile(rf"^.+\.{re.escape(host[2:])}$")
    if host.startswith("*"):  # the domain and its subdomains
        return re.compile(rf"^(.+\.)?{re.escape(host[1:])}$")
    return re.compile(rf"^{re.escape(host)}$")


def _is_ip(text: str, version: int) -> bool:
    try:
        (ipaddress.IPv4Address if version == 4 else ipaddress.IPv6Address)(text)
    except ValueError:
        return False
    return True
