"""Provider registry: ``provider:`` names in a spec map to factories here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_echo_bench.providers.base import Caller, Completion, Factory, Provider, Request

if TYPE_CHECKING:
    from pytest_echo_bench.spec.load import ArmSpec

# Where an arm's calls go when its spec says nothing else (kept in step with each provider's default).
DEFAULT_ENDPOINTS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
PRESET_BINARIES = {"claude": "claude"}


def _sim(arm, spec, caller):  # type: ignore[no-untyped-def]
    from pytest_echo_bench.providers.sim import build
    return build(arm, spec, caller)


def _openai(arm, spec, caller):  # type: ignore[no-untyped-def]
    from pytest_echo_bench.providers.openai_chat import build
    return build(arm, spec, caller)


def _anthropic(arm, spec, caller):  # type: ignore[no-untyped-def]
    from pytest_echo_bench.providers.anthropic_messages import build
    return build(arm, spec, caller)


def _command(arm, spec, caller):  # type: ignore[no-untyped-def]
    from pytest_echo_bench.providers.command import build
    return build(arm, spec, caller)


def _python(arm, spec, caller):  # type: ignore[no-untyped-def]
    from pytest_echo_bench.providers.python_arm import build
    return build(arm, spec, caller)


def _cascade(arm, spec, caller):  # type: ignore[no-untyped-def]
    from pytest_echo_bench.providers.routing import build_cascade
    return build_cascade(arm, spec, caller)


def _oracle(arm, spec, caller):  # type: ignore[no-untyped-def]
    from pytest_echo_bench.providers.routing import build_oracle
    return build_oracle(arm, spec, caller)


def _replay(arm, spec, caller):  # type: ignore[no-untyped-def]
    from pytest_echo_bench.providers.replay import build
    return build(arm, spec, caller)


def _reference(arm, spec, caller):  # type: ignore[no-untyped-def]
    from pytest_echo_bench.providers.reference import build
    return build(arm, spec, caller)


PROVIDERS: dict[str, Factory] = {"sim": _sim, "openai": _openai, "anthropic": _anthropic, "command": _command,
                                 "python": _python, "cascade": _cascade, "oracle": _oracle,
                                 "replay": _replay, "reference": _reference}

def endpoint(arm: ArmSpec) -> str:
    """What an arm calls, for a message that must say where to look: a base URL or an executable."""
    options = arm.options
    if arm.provider in DEFAULT_ENDPOINTS:
        return str(options.get("base_url") or DEFAULT_ENDPOINTS[arm.provider])
    if arm.provider == "command":
        argv = options.get("argv")
        program = argv[0] if isinstance(argv, list) and argv else PRESET_BINARIES.get(str(options.get("preset")), "?")
        return f"executable {options.get('binary') or program}"
    return f"provider {arm.provider}"


__all__ = ["PROVIDERS", "Caller", "Completion", "Factory", "Provider", "Request", "endpoint"]
