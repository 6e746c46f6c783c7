"""The provider registry: a spec's ``provider:`` names, each mapped to its module's facts.

A provider is one module that declares ``PROVIDER = ProviderInfo(build, ...)`` and one line here;
the module is imported when a spec first uses the name. A user's own provider registers itself the
same way, e.g. in a conftest.py: ``register_provider("echo", "my_package.echo:PROVIDER")``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_echo_bench.providers.base import (
    BaseProvider,
    Caller,
    Completion,
    Factory,
    Provider,
    ProviderInfo,
    Request,
    Route,
)
from pytest_echo_bench.registry import Registry

if TYPE_CHECKING:
    from pytest_echo_bench.spec.load import ArmSpec, Spec

_ROOM = "pytest_echo_bench.providers"
PROVIDERS: Registry[ProviderInfo] = Registry("provider", {
    "sim": f"{_ROOM}.sim:PROVIDER",
    "openai": f"{_ROOM}.openai_chat:PROVIDER",
    "anthropic": f"{_ROOM}.anthropic_messages:PROVIDER",
    "command": f"{_ROOM}.command:PROVIDER",
    "python": f"{_ROOM}.python_arm:PROVIDER",
    "cascade": f"{_ROOM}.routing:CASCADE",
    "oracle": f"{_ROOM}.routing:ORACLE",
    "replay": f"{_ROOM}.replay:PROVIDER",
    "reference": f"{_ROOM}.reference:PROVIDER",
    "bedrock": f"{_ROOM}.bedrock:PROVIDER",
    "litellm": f"{_ROOM}.litellm_sdk:PROVIDER",
})


def register_provider(name: str, info: ProviderInfo | str) -> None:
    """Make ``provider: name`` usable in a spec: ``info``, or the ``module:attr`` that names it."""
    PROVIDERS.register(name, info)


def _unknown(arm: ArmSpec, spec: Spec, caller: Caller) -> Provider:
    raise spec.error(f"unknown provider {arm.provider!r}; known: {', '.join(PROVIDERS.names())}",
                     "arms", arm.name, "provider")


# An unknown name's facts: none (the spec check refuses the name before anything asks for more).
UNKNOWN = ProviderInfo(_unknown)


def provider_info(name: str) -> ProviderInfo:
    """What provider ``name`` declares about itself."""
    return PROVIDERS.get(name) or UNKNOWN


# (id(arm), id(spec)) -> (arm, spec, its route): a route is read once per loaded spec, however
# often the budget asks for it (each item of a routing arm, each of its sub-arms). The arm and spec
# are kept with it, so that their ids cannot be reused by others while it is held.
_ROUTES: dict[tuple[int, int], tuple[ArmSpec, Spec, Route]] = {}
_ROUTES_HELD = 4096  # past this many routing arms (a session of in-process runs), the oldest go


def route_of(arm: ArmSpec, spec: Spec) -> Route | None:
    """The calls routing arm ``arm`` makes (None: it is no routing arm), read from its options."""
    routes = provider_info(arm.provider).routes
    if routes is None:
        return None
    held = _ROUTES.get((id(arm), id(spec)))
    if held is None:
        if len(_ROUTES) >= _ROUTES_HELD:
            del _ROUTES[next(iter(_ROUTES))]
        held = _ROUTES[id(arm), id(spec)] = (arm, spec, routes(arm, spec))
    return held[2]


def endpoint(arm: ArmSpec) -> str:
    """What an arm calls, for a message that must say where to look: a base URL or an executable."""
    info = provider_info(arm.provider)
    if info.base_url is not None:
        return str(arm.options.get("base_url") or info.base_url)
    if info.describe is not None:
        return info.describe(arm)
    return f"provider {arm.provider}"


__all__ = ["PROVIDERS", "UNKNOWN", "BaseProvider", "Caller", "Completion", "Factory", "Provider",
           "ProviderInfo", "Request", "Route", "endpoint", "provider_info", "register_provider",
           "route_of"]
