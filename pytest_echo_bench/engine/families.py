"""Model families, for the self-preference warning: a judge of an arm's own family grades it.

A judge tends to prefer answers of its own kind (the self-enhancement bias of Zheng et al. 2023,
"Judging LLM-as-a-Judge with MT-Bench and Chatbot Arena"; FastChat's data measures 87%
self-preference). A model's family here is its
provider with the leading alphabetic stem of its name, lowercased: the name's last ``/`` or ``:``
part (``openrouter/anthropic/claude-3`` is ``claude-3``) up to the first character that is not a
letter. So ``gpt-4o`` and ``gpt-4o-mini`` (and ``gpt-3.5-turbo``) are one family ``gpt``,
``claude-3-5-sonnet`` and ``claude-3-haiku`` are ``claude``, ``Llama-3.1-8B`` is ``llama``,
``gemini-1.5-pro`` is ``gemini``, ``mistral-large`` is ``mistral``. A name without a leading
letter (``o1-mini``'s ``o`` is one letter) has the family of its stem however short.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pytest_echo_bench.engine.declared import declared
from pytest_echo_bench.scoring.registry import takes_judges
from pytest_echo_bench.spec.load import ArmSpec, Spec

_STEM = re.compile(r"[A-Za-z]+")


@dataclass(frozen=True)
class Model:
    """Who answers: an arm or a judge, its provider (None: not known) and its model name."""

    name: str
    provider: str | None
    model: str


def stem(model: str) -> str | None:
    """The leading alphabetic stem of a model name's last part, lowercased (None: it has none)."""
    last = re.split(r"[/:]", model.strip())[-1]
    found = _STEM.match(last)
    return found.group(0).lower() if found else None


def same_family(a: Model, b: Model) -> bool:
    """One provider (when both are known) and one stem."""
    if a.provider is not None and b.provider is not None and a.provider != b.provider:
        return False
    found = stem(a.model)
    return found is not None and found == stem(b.model)


def declared_model(arm: ArmSpec) -> Model | None:
    """An arm's or a judge's declared model (None: its provider takes no ``model:``)."""
    model = arm.options.get("model")
    return Model(arm.name, arm.provider, model) if isinstance(model, str) and model else None


def self_preference(arms: Iterable[Model], judges: Iterable[Model]) -> list[str]:
    """One warning per judge that shares a family with arms it grades."""
    arms = list(arms)
    warnings = []
    for judge in judges:
        own = [a for a in arms if same_family(a, judge)]
        if own:
            warnings.append(warning(judge, own))
    return warnings


def warning(judge: Model, arms: list[Model]) -> str:
    """The warning's text: the judge, its family and the arms of that family."""
    said = ", ".join(f"{a.name} ({a.model})" for a in arms)
    return (f"self-preference: judge {judge.name} ({judge.model}) is of the family "
            f"{family_text(judge)} of arm(s) {said}: a judge favours answers of its own family "
            "(87% self-preference in FastChat's data); judge with a model of another family, "
            "or read its grades of these arms with care")


def family_text(model: Model) -> str:
    return f"{model.provider}/{stem(model.model)}" if model.provider else f"{stem(model.model)}"


def spec_warnings(arms: Mapping[str, ArmSpec], judges: Mapping[str, ArmSpec]) -> list[str]:
    """A spec's judges against its arms, each by its declared provider and model."""
    return self_preference(
        (m for a in arms.values() if (m := declared_model(a)) is not None),
        (m for j in judges.values() if (m := declared_model(j)) is not None))


def judged_spec_warnings(specs: Iterable[Spec]) -> list[str]:
    """The warnings of the specs whose scorer asks judges, each said once (a sweep's start)."""
    found: dict[str, None] = {}
    for spec in specs:
        if takes_judges(spec.scorer):
            found.update(dict.fromkeys(f"{spec.benchmark}: {w}"
                                       for w in spec_warnings(spec.arms, declared(spec))))
    return list(found)
