"""Everything about a spec that can be checked before a call: scorer, provider names, options."""

from __future__ import annotations

from pytest_echo_bench.engine.declared import declared
from pytest_echo_bench.errors import PermanentError, UnavailableError
from pytest_echo_bench.providers import PROVIDERS, Completion, Request
from pytest_echo_bench.scoring.registry import get_scorer, known, option_check, takes_judges
from pytest_echo_bench.spec.load import ArmSpec, Spec


def check_spec(spec: Spec) -> None:
    """Raise the SpecError (file, line, key) of the first problem found."""
    if get_scorer(spec.scorer) is None:
        raise spec.error(f"unknown scorer {spec.scorer!r}; known: {', '.join(known())}", "scorer")
    check = option_check(spec.scorer)
    why = check(spec.scorer_options) if check is not None else None
    if why is not None:
        raise spec.error(why, "scorer")
    for arm in spec.arms.values():
        if arm.provider not in PROVIDERS:
            names = ", ".join(PROVIDERS.names())
            raise spec.error(f"unknown provider {arm.provider!r}; known: {names}",
                             "arms", arm.name, "provider")
        info = PROVIDERS[arm.provider]
        # An arm that sends no prompt of its own: a prompt there would change the fingerprint only.
        if arm.prompt is not None and info.no_prompt is not None:
            key = "prompt" if arm.prompt.template is not None else "fewshot"
            refused = f"a {arm.provider} arm {info.no_prompt}: it takes no prompt: or fewshot:"
            raise spec.error(refused, "arms", arm.name, key)
        if arm.batch and not info.batch:
            able = ", ".join(n for n in PROVIDERS.names() if PROVIDERS[n].batch)
            raise spec.error(f"a {arm.provider} arm has no batch API (batch: is for {able})",
                             "arms", arm.name, "batch")
        _build(spec, arm)
    judges = declared(spec)
    for judge in judges.values():  # a scorer's judges, declared as arms are
        _build(spec, judge)
    _check_named(spec, judges)
    _check_against(spec)


def _check_named(spec: Spec, judges: dict[str, ArmSpec]) -> None:
    """A judged scorer's ``judge:`` names declared judges only (a typo would fail every item)."""
    named = spec.scorer_options.get("judge")
    if not takes_judges(spec.scorer) or named is None:
        return
    for name in [named] if isinstance(named, str) else named:
        if name not in judges:
            known = ", ".join(sorted(judges)) or "none: declare them under judges:"
            raise spec.error(f"scorer judge {name!r} is not a declared judge; declared: {known}",
                             "scorer", "judge")


def _check_against(spec: Spec) -> None:
    """A pairwise scorer's ``against:`` names an arm of the spec: any other name has no stored
    answer anywhere, so every row would be unjudged, told to run the judging it is running."""
    against = spec.scorer_options.get("against")
    if spec.scorer != "pairwise" or not isinstance(against, str) or against in spec.arms:
        return
    arms = ", ".join(sorted(spec.arms)) or "none"
    raise spec.error(f"scorer against {against!r} is not an arm of this spec; its arms: {arms}",
                     "scorer", "against")


def _build(spec: Spec, arm: ArmSpec) -> None:
    try:
        # Building validates the arm's options now, at collection, with file and line;
        # a missing SDK or key is not a spec error: those items skip at run time.
        PROVIDERS[arm.provider].build(arm, spec, _no_calls)
    except UnavailableError:
        pass


def _no_calls(arm: str, request: Request) -> Completion:
    raise PermanentError("no calls are made while checking a spec")
