"""The judges a spec's scorer may ask, each declared as an arm is: a ``provider:`` and its options.

Today the scorer's options declare them, ``scorer: {name: graded, judges: {grader: {provider:
openai, model: ...}}}``, and ``declared`` alone reads them: a spec key of their own replaces it
here. A judge's name is its own, never an arm's, whose prices and cache entries it would take.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pytest_echo_bench.providers import PROVIDERS
from pytest_echo_bench.spec.load import ArmSpec, Spec

JUDGES = "judges"  # the scorer option that declares them


def declared(spec: Spec) -> dict[str, ArmSpec]:
    """The judges ``spec``'s scorer may ask, by name, each declared as an arm is."""
    value = spec.scorer_options.get(JUDGES, {})
    if not isinstance(value, dict):
        raise spec.error("judges must map each judge's name to its provider settings",
                         "scorer", JUDGES)
    return {str(name): _judge(spec, str(name), conf) for name, conf in value.items()}


def _judge(spec: Spec, name: str, conf: Any) -> ArmSpec:
    where = ("scorer", JUDGES, name)
    if name in spec.arms:
        raise spec.error(f"judge {name!r} has the name of an arm; give it one of its own", *where)
    provider = conf.get("provider") if isinstance(conf, dict) else None
    if not isinstance(provider, str):
        raise spec.error(f"judge {name!r} needs a 'provider' (openai, anthropic, ...)", *where)
    if provider not in PROVIDERS or PROVIDERS[provider].composite:
        known = ", ".join(n for n in PROVIDERS.names() if not PROVIDERS[n].composite)
        raise spec.error(f"judge {name!r}: provider {provider!r} cannot judge; known: {known}",
                         *where)
    concurrency = conf.get("concurrency")
    if concurrency is not None and (type(concurrency) is not int or concurrency < 1):
        raise spec.error(f"judge {name!r}: concurrency must be a whole number >= 1", *where)
    options = {k: v for k, v in conf.items() if k not in ("provider", "concurrency")}
    return ArmSpec(name, provider, options, spec.line_of(*where) or 0, concurrency)


def with_judges(spec: Spec) -> Spec:
    """``spec`` with its judges among its arms: what its error texts must not show covers theirs."""
    judges = declared(spec)
    return dataclasses.replace(spec, arms={**spec.arms, **judges}) if judges else spec
