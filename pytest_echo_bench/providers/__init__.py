"""Provider registry: ``provider:`` names in a spec map to factories here."""

from __future__ import annotations

from .base import Caller, Completion, Factory, Provider, Request


def _sim(arm, spec, caller):  # type: ignore[no-untyped-def]
    from .sim import build
    return build(arm, spec, caller)


def _openai(arm, spec, caller):  # type: ignore[no-untyped-def]
    from .openai_chat import build
    return build(arm, spec, caller)


def _python(arm, spec, caller):  # type: ignore[no-untyped-def]
    from ..arms import build
    return build(arm, spec, caller)


PROVIDERS: dict[str, Factory] = {"sim": _sim, "openai": _openai, "python": _python}

__all__ = ["PROVIDERS", "Caller", "Completion", "Factory", "Provider", "Request"]
