"""Everything about a spec that can be checked before a call: scorer, provider names, options."""

from __future__ import annotations

from pytest_echo_bench.errors import PermanentError, UnavailableError
from pytest_echo_bench.providers import PROVIDERS, Completion, Request
from pytest_echo_bench.providers.routing import ROUTERS
from pytest_echo_bench.scoring.registry import get_scorer, known, option_check
from pytest_echo_bench.spec.load import Spec

# Arms that send no prompt of their own: a prompt there would change
# the fingerprint and nothing else.
NO_PROMPT = {
    **{
        name: "sends none of its own (each arm it calls is sent its own prompt)" for name in ROUTERS
    },
    "replay": "answers from its recording",
    "reference": "answers with the target",
}


def check_spec(spec: Spec) -> None:
    """Raise the SpecError (file, line, key) of the first problem found."""
    if get_scorer(spec.scorer) is None:
        raise spec.error(f"unknown scorer {spec.scorer!r}; known: {', '.join(known())}", "scorer")
    check = option_check(spec.scorer)
    why = check(spec.scorer_options) if check is not None else None
    if why is not None:
        raise spec.error(why, "scorer")
    for arm in spec.arms.values():
        if arm.prompt is not None and arm.provider in NO_PROMPT:
            raise spec.error(
                f"a {arm.provider} arm {NO_PROMPT[arm.provider]}: it takes no prompt: or fewshot:",
                "arms",
                arm.name,
                "prompt" if arm.prompt.template is not None else "fewshot",
            )
        if arm.provider not in PROVIDERS:
            raise spec.error(
                f"unknown provider {arm.provider!r}; known: {', '.join(sorted(PROVIDERS))}",
                "arms",
                arm.name,
                "provider",
            )
        try:
            # Building validates the arm's options now, at collection, with file and line;
            # a missing SDK or key is not a spec error: those items skip at run time.
            PROVIDERS[arm.provider](arm, spec, _no_calls)
        except UnavailableError:
            pass


def _no_calls(arm: str, request: Request) -> Completion:
    raise PermanentError("no calls are made while checking a spec")
