"""How a chat arm reaches its API over a real network: the proxy it goes
through and the CAs it trusts.

Users of the official SDKs expect what httpx does with ``trust_env``: ``HTTP_PROXY``,
``HTTPS_PROXY``, ``ALL_PROXY`` (either case) and ``NO_PROXY`` decide the route, and
``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` the trusted CAs (``proxy_env`` holds httpx's rules). The lean
client and the SDK path read the
same settings from here, so both go the same way. Arm options override the environment:
``proxy: none`` (always direct) or ``proxy: http://[user:password@]host:port``; ``ca_file:`` and
``ca_dir:`` add CAs to the system's (a private CA behind a corporate gateway).

A proxy URL's credentials are sent (``proxy-authorization``) and never shown: every text about a
proxy names it by ``host:port`` only.
"""

from __future__ import annotations

import base64
import os
import ssl
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote, urlsplit

from pytest_echo_bench.errors import ArmError, UnavailableError
from pytest_echo_bench.providers.proxy_env import environment_proxy

if TYPE_CHECKING:
    from pytest_echo_bench.spec.load import ArmSpec, Spec

NETWORK_OPTIONS = {"proxy", "ca_file", "ca_dir"}
T = TypeVar("T")
TLS_HINT = (
    "trust the server's CA: set the arm's ca_file: (a PEM bundle) or ca_dir:, or SSL_CERT_FILE; "
    "for a wrong host, fix base_url"
)


@dataclass(frozen=True)
class Proxy:
    """A forward proxy: where to connect, and the
    ``proxy-authorization`` value (None: no credentials)."""

    host: str
    port: int
    authorization: str | None = None

    def __repr__(self) -> str:  # the credentials stay out of every repr, log and traceback
        return f"Proxy({self.shown})"

    @property
    def shown(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Network:
    """An arm's network settings. ``proxy``: "env" (the environment decides), "none", or a URL."""

    proxy: str = "env"
    ca_file: str | None = None
    ca_dir: str | None = None

    def tls_context(self) -> ssl.SSLContext:
        """The system's CAs (``SSL_CERT_FILE``/``SSL_CERT_DIR`` honoured), plus the arm's own."""
        context = ssl.create_default_context()
        if self.ca_file or self.ca_dir:
            context.load_verify_locations(cafile=self.ca_file, capath=self.ca_dir)
        return context

    def proxy_for(self, url: str) -> Proxy | None:
        """The proxy a request to ``url`` goes through, None for a direct connection."""
        if self.proxy == "none":
            return None
        if self.proxy != "env":
            return parse_proxy(self.proxy)
        parts = urlsplit(url)
        # The SDKs' httpx decides by its own rules (proxy_env), which urllib's and curl's are not.
        chosen = environment_proxy(parts.scheme, parts.hostname or "", parts.port,
                                   urllib.request.getproxies_environment())
        return parse_proxy(chosen) if chosen else None

    @property
    def sdk_reads_environment(self) -> bool:
        """The SDK's own client will do: it reads the proxy and the CAs from the environment."""
        return self.proxy == "env" and not (self.ca_file or self.ca_dir)

    def sdk_http_client(self, factory: Callable[..., Any], timeout: float) -> Any | None:
        """The SDK's HTTP client (``factory``: its ``DefaultHttpxClient``) when the arm
        sets something the SDK's default would not do (None: its own default, which
        already honours the environment)."""
        if self.sdk_reads_environment:
            return None
        kwargs: dict[str, Any] = {"timeout": timeout, "verify": self.tls_context()}
        if self.proxy == "none":
            # no proxy from the environment (the CA file is our context's)
            kwargs["trust_env"] = False
        elif self.proxy != "env":
            kwargs["proxy"] = self.proxy
        return factory(**kwargs)


def parse_proxy(url: str) -> Proxy:
    """A proxy URL as the lean client can use it; ValueError names what
    is wrong, never the credentials."""
    # "host:3128" as curl and httpx take it
    parts = urlsplit(url if "://" in url else "http://" + url)
    if parts.scheme != "http":
        raise ValueError(
            f"a proxy must be an http:// URL (a plain forward proxy), not {parts.scheme}://"
        )
    try:
        port = parts.port or 80
    except ValueError:
        raise ValueError("the proxy URL's port is no number") from None
    if not parts.hostname:
        raise ValueError("the proxy URL has no host")
    auth = None
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        auth = "Basic " + base64.b64encode(pair.encode("utf-8")).decode("ascii")
    return Proxy(parts.hostname, port, auth)


def sdk_client(arm: str, network: Network, make: Callable[[], T]) -> T:
    """The SDK's client, made once the CAs it would load from the environment are known to load.

    httpx loads ``SSL_CERT_FILE`` (else ``SSL_CERT_DIR``) when the client is made, whatever the
    base_url (unless the arm's settings give it our context): a file that holds no certificate was
    a traceback at collection that stopped every arm, and a client half made is one the SDK's
    ``__del__`` trips over later, so they are loaded here first, as httpx loads them.
    """
    if network.sdk_reads_environment:
        variable = next(
            (name for name in ("SSL_CERT_FILE", "SSL_CERT_DIR") if os.environ.get(name)), None
        )
        if variable is not None:
            where = os.environ[variable]
            try:
                ssl.create_default_context(
                    **{"cafile" if variable == "SSL_CERT_FILE" else "capath": where}
                )
            except (ssl.SSLError, OSError) as exc:
                reason = getattr(exc, "reason", None) or exc.strerror or str(exc)
                raise UnavailableError(
                    f"arm {arm!r}: the SDK cannot load the CAs {variable} names ({where!r}): "
                    f"{reason}; point "
                    f"{variable} at a PEM bundle of CA certificates (or unset it), or trust "
                    "a CA with the arm's "
                    "ca_file:",
                    misconfigured=True,
                ) from None
    return make()


def network_of(arm: ArmSpec, spec: Spec) -> Network:
    """The arm's ``proxy:``, ``ca_file:`` and ``ca_dir:``, refused
    with file and line when unusable."""
    proxy = arm.options.get("proxy", "env")
    if not isinstance(proxy, str) or not proxy:
        raise spec.error(
            "proxy must be none or a proxy URL (http://host:port)", "arms", arm.name, "proxy"
        )
    if proxy not in ("none", "env"):
        try:
            parse_proxy(proxy)
        except ValueError as exc:
            raise spec.error(str(exc), "arms", arm.name, "proxy") from None
    paths = {key: _path(arm, spec, key) for key in ("ca_file", "ca_dir")}
    network = Network(proxy, paths["ca_file"], paths["ca_dir"])
    try:
        network.tls_context()
    except (ssl.SSLError, OSError) as exc:
        raise spec.error(f"the CA file or directory cannot be loaded: {exc}", "arms", arm.name,
                         "ca_file" if paths["ca_file"] else "ca_dir") from None
    return network


def _path(arm: ArmSpec, spec: Spec, key: str) -> str | None:
    value = arm.options.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise spec.error(f"{key} must be a path", "arms", arm.name, key)
    path = Path(os.path.expanduser(value))
    if not path.is_absolute():
        path = spec.path.parent / path  # relative to the spec, as a dataset path is
    if not (path.is_file() if key == "ca_file" else path.is_dir()):
        raise spec.error(
            f"{key} {str(path)!r} is not a {'file' if key == 'ca_file' else 'directory'}",
            "arms",
            arm.name,
            key,
        )
    return str(path)


def tls_refused(host: str, port: int, exc: ssl.SSLCertVerificationError) -> ArmError:
    """A certificate that failed verification: the arm's settings,
    not chance (retrying repeats it)."""
    reason = exc.verify_message or exc.reason or str(exc)
    return ArmError(
        f"TLS: the certificate of {host}:{port} failed verification: {reason}", hint=TLS_HINT
    )


def cert_failure(exc: BaseException) -> ssl.SSLCertVerificationError | None:
    """The verification failure in ``exc``'s chain (an SDK wraps it twice), if there is one."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen and len(seen) < 16:
        if isinstance(link, ssl.SSLCertVerificationError):
            return link
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return None
