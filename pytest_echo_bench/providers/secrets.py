"""What a spec's texts must never show: its arms' keys, its proxies'
credentials, the variables it names.

Read from the environment when asked (a worker reads the same), and handed to ``store.redaction``:
every error text of the spec's calls, and every body or tail a provider cuts, is redacted with
them first.
"""

from __future__ import annotations

import base64
import os
import re
import urllib.request
from collections.abc import Iterator
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, unquote, urlsplit

from pytest_echo_bench.providers import provider_info
from pytest_echo_bench.providers.azure import KEY_ENV as AZURE_KEY_ENV
from pytest_echo_bench.store.redaction import MIN_RUN, Secrets

if TYPE_CHECKING:
    from pytest_echo_bench.spec.load import Spec

# A query parameter holding a credential (``?key=``, ``?sig=``); others
# (``api-version``) are settings.
_CREDENTIAL = re.compile(r"key|token|secret|sig|pass|auth|code|cred", re.IGNORECASE)


def key_names(spec: Spec) -> set[str]:
    """The variables holding keys for ``spec``'s arms: those they name, else their provider's
    default, and a command arm's pass-through variables (``env:``)."""
    names: set[str] = set()
    for arm in spec.arms.values():
        named = arm.options.get("api_key_env", ...)
        if isinstance(named, str):
            names.add(named)
        elif named is ...:
            names.update(provider_info(arm.provider).key_env)
            if isinstance(arm.options.get("azure"), dict):  # an Azure OpenAI arm reads its own
                names.add(AZURE_KEY_ENV)
        passed = arm.options.get("env")
        if isinstance(passed, list):
            names.update(name for name in passed if isinstance(name, str))
    return names


def spec_secrets(spec: Spec) -> Secrets:
    """Every value ``spec``'s error texts must not show (see the module's docstring)."""
    return Secrets(_values(spec))


def _values(spec: Spec) -> Iterator[str]:
    for name in key_names(spec):
        yield from _variants(os.environ.get(name, ""))
    for name in spec.env_names:
        # Any variable the spec names may hold a secret. A short value (a number, a flag) holds none
        # and would shred every message; nor does a path (a dataset's, whose "not found" must say
        # where it looked). A URL's secrets are its credentials.
        value = os.environ.get(name, "")
        if "://" in value:
            yield from url_secrets(value)
        elif len(value.strip()) >= MIN_RUN and not _is_path(value):
            yield from _variants(value)
    urls = list(urllib.request.getproxies_environment().values())
    for arm in spec.arms.values():
        urls += [
            v for k, v in arm.options.items() if k in ("proxy", "base_url") and isinstance(v, str)
        ]
    for url in urls:
        yield from url_secrets(url)


def _is_path(value: str) -> bool:
    """A file system path, written as one or naming what exists."""
    if value.startswith(("/", "./", "../", "~")):
        return True
    try:
        return os.path.exists(value)
    except ValueError:  # a NUL inside: no path
        return False


def _variants(value: str) -> Iterator[str]:
    """A value as set (a trailing newline included) and stripped, as a client sends it."""
    yield value
    yield value.strip()


def url_secrets(url: str) -> Iterator[str]:
    """A URL's credentials as a server may echo them: the user and password (as
    written and decoded), the pair, its ``Basic`` (``Proxy-Authorization``) form, and
    the query's credential values."""
    try:
        parts = urlsplit(url if "://" in url else "http://" + url)
        user, password = parts.username, parts.password
    except ValueError:  # a malformed URL holds no credentials we could send
        return
    for raw in (user, password):
        if raw:
            yield from (raw, unquote(raw))
    if user is not None:
        pair = f"{unquote(user)}:{unquote(password or '')}"
        yield pair
        yield base64.b64encode(pair.encode("utf-8")).decode("ascii")
    yield from (value for name, value in parse_qsl(parts.query) if _CREDENTIAL.search(name))
