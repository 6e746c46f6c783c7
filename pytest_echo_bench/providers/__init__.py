"""Provider registry: ``provider:`` names in a spec map to factories here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_echo_bench.providers.base import (
    DEFAULT_BASE_URL,
    Caller,
    Completion,
    Factory,
    Provider,
    Request,
)

if TYPE_CHECKING:
    from pytest_echo_bench.spec.load import ArmSpec



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


PROVIDERS: dict[str, Factory] = {
    "sim": _sim,
    "openai": _openai,
    "anthropic": _anthropic,
    "command": _command,
    "python": _python,
    "cascade": _cascade,
    "oracle": _oracle,
    "replay": _replay,
    "reference": _reference,
}

def endpoint(arm: ArmSpec) -> str:
    """What an arm calls, for a message that must say where to look: a base URL or an executable."""
    options = arm.options
    if arm.provider in DEFAULT_BASE_URL:
        return str(options.get("base_url") or DEFAULT_BASE_URL[arm.provider])
    if arm.provider == "command":
        # only for a message: loaded when one is made
        from pytest_echo_bench.providers.command import PRESETS

        argv, preset = options.get("argv"), PRESETS.get(str(options.get("preset")))
        program = argv[0] if isinstance(argv, list) and argv else preset.argv[0] if preset else "?"
        return f"executable {options.get('binary') or program}"
    return f"provider {arm.provider}"


__all__ = ["PROVIDERS", "Caller", "Completion", "Factory", "Provider", "Request", "endpoint"]
