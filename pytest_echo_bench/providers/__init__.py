"""Provider registry: ``provider:`` names in a spec map to factories here."""

from __future__ import annotations

from pytest_echo_bench.providers.base import Caller, Completion, Factory, Provider, Request


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

__all__ = ["PROVIDERS", "Caller", "Completion", "Factory", "Provider", "Request"]
