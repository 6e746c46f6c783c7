"""Provider registry: ``provider:`` names in a spec map to factories here."""

from __future__ import annotations

from .base import Caller, Completion, Factory, Provider, Request


def _sim(arm, spec, caller):  # type: ignore[no-untyped-def]
    from .sim import build
    return build(arm, spec, caller)


def _openai(arm, spec, caller):  # type: ignore[no-untyped-def]
    from .openai_chat import build
    return build(arm, spec, caller)


def _anthropic(arm, spec, caller):  # type: ignore[no-untyped-def]
    from .anthropic_messages import build
    return build(arm, spec, caller)


def _command(arm, spec, caller):  # type: ignore[no-untyped-def]
    from .command import build
    return build(arm, spec, caller)


def _python(arm, spec, caller):  # type: ignore[no-untyped-def]
    from ..arms import build
    return build(arm, spec, caller)


def _cascade(arm, spec, caller):  # type: ignore[no-untyped-def]
    from ..routing import build_cascade
    return build_cascade(arm, spec, caller)


def _oracle(arm, spec, caller):  # type: ignore[no-untyped-def]
    from ..routing import build_oracle
    return build_oracle(arm, spec, caller)


def _replay(arm, spec, caller):  # type: ignore[no-untyped-def]
    from .replay import build
    return build(arm, spec, caller)


def _reference(arm, spec, caller):  # type: ignore[no-untyped-def]
    from .reference import build
    return build(arm, spec, caller)


PROVIDERS: dict[str, Factory] = {"sim": _sim, "openai": _openai, "anthropic": _anthropic, "command": _command,
                                 "python": _python, "cascade": _cascade, "oracle": _oracle,
                                 "replay": _replay, "reference": _reference}

__all__ = ["PROVIDERS", "Caller", "Completion", "Factory", "Provider", "Request"]
