"""The judges a spec's scorer may ask, each declared as an arm is: a ``provider:`` and its options.

A spec declares them under its top-level ``judges:`` (``judges: {grader: {provider: openai, model:
...}}``); the scorer's ``judges:`` option of older specs declares them too (one or the other, never
both), and ``declared`` alone reads either. A judge's name is its own, never an arm's, whose prices
and cache entries it would take.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pytest_echo_bench.providers import PROVIDERS
from pytest_echo_bench.spec.load import ArmSpec, Spec

JUDGES = "judges"  # the spec key (and the older scorer option) that declares them


def declared(spec: Spec) -> dict[str, ArmSpec]:
    """The judges ``spec``'s scorer may ask, by name, each declared as an arm is."""
    where: tuple[str, ...] = (JUDGES,)
    value: Any = spec.judges
    if JUDGES in spec.scorer_options:
        if spec.judges:
            raise spec.error("judges are declared twice: keep the top-level judges: and remove "
                             "the scorer's judges: option", "scorer", JUDGES)
        where, value = ("scorer", JUDGES), spec.scorer_options[JUDGES]
    if not isinstance(value, dict):
        raise spec.error("judges must map each judge's name to its provider settings", *where)
    return {str(name): _judge(spec, str(name), conf, (*where, name))
            for name, conf in value.items()}


def _judge(spec: Spec, name: str, conf: Any, where: tuple[str, ...]) -> ArmSpec:
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
