"""Declarative routing arms: a cascade that escalates on disagreement, and the oracle router.

    echo-judge:
      provider: cascade
      cheap: haiku            # an arm of this spec (or a list of arms, one call each)
      n: 2                    # calls to a single cheap arm
      personas: ["You are careful.", "You are skeptical."]   # optional, one per call
      agreement: lexical      # lexical: same extracted answer; judge: ask the judge arm
      judge: haiku
      strong: sonnet          # asked only when the cheap answers disagree
    oracle:
      provider: oracle        # escalates only when every cheap answer is wrong (uses the target):
      cheap: [haiku]          # the ceiling a perfect router reaches
      strong: sonnet

Every call goes through the same retries, classification, cache and accounting as an arm of its
own; the first call to a sub-arm with the item's prompt reuses that arm's cached answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_echo_bench.providers import provider_info
from pytest_echo_bench.providers.base import (
    BaseProvider,
    Caller,
    Completion,
    ProviderInfo,
    Request,
    Route,
)
from pytest_echo_bench.providers.python_arm import ArmContext
from pytest_echo_bench.scoring.registry import get_scorer, takes_judges
from pytest_echo_bench.scoring.verdict import Scorer
from pytest_echo_bench.spec.load import ArmSpec, Spec

JUDGE_PROMPT = (
    "Question:\n{question}\n\n{answers}\n\nDo these answers reach the same final answer? "
    "Reply with exactly one word: yes or no."
)


@dataclass
class Router(BaseProvider):
    cheap: list[str]
    personas: list[str | None]
    strong: str
    caller: Caller
    scorer: Scorer
    scorer_options: dict[str, Any]

    def context(self, request: Request) -> ArmContext:
        return ArmContext(
            request.example,
            request.prompt,
            self.caller,
            self.scorer,
            self.scorer_options,
            epoch=request.epoch,
        )

    def ask_cheap(self, ctx: ArmContext) -> list[str]:
        return [ctx.call(arm, f"{persona}\n\n{ctx.prompt}" if persona else None)
                for arm, persona in zip(self.cheap, self.personas, strict=True)]

    def finish(self, ctx: ArmContext, cheap: list[str], escalate: bool) -> Completion:
        ctx.extra["escalated"] = escalate
        return ctx.completion(ctx.call(self.strong) if escalate else cheap[0])


@dataclass
class Cascade(Router):
    agreement: str = "lexical"
    judge: str | None = None

    def complete(self, request: Request) -> Completion:
        ctx = self.context(request)
        outputs = self.ask_cheap(ctx)
        answers = [ctx.answer(o) for o in outputs]
        ctx.extra["cheap_answers"] = answers
        agreed = self._judged(ctx, outputs) if self.agreement == "judge" else _same(answers)
        ctx.extra["agreed"] = agreed
        return self.finish(ctx, outputs, escalate=not agreed)

    def _judged(self, ctx: ArmContext, outputs: list[str]) -> bool:
        assert self.judge is not None  # build() requires it for agreement: judge
        answers = "\n\n".join(f"Answer {i}:\n{o}" for i, o in enumerate(outputs, 1))
        verdict = ctx.call(
            self.judge, JUDGE_PROMPT.format(question=ctx.example.input, answers=answers)
        )
        words = verdict.strip().split()
        return bool(words) and words[0].strip(".,!:;*\"'").lower() == "yes"


def _same(answers: list[str | None]) -> bool:
    return answers[0] is not None and all(a == answers[0] for a in answers)


@dataclass
class Oracle(Router):
    def complete(self, request: Request) -> Completion:
        ctx = self.context(request)
        outputs = self.ask_cheap(ctx)
        right = [o for o in outputs if self.scorer(o, ctx.example, self.scorer_options).passed]
        if right:
            return self.finish(ctx, right, escalate=False)
        return self.finish(ctx, outputs, escalate=True)


def _arm_names(arm: ArmSpec, spec: Spec, key: str, value: Any) -> list[str]:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise spec.error(
            f"{key} must name an arm of this spec (or a list of arms)", "arms", arm.name, key
        )
    for name in names:
        if name not in spec.arms or name == arm.name:
            raise spec.error(
                f"{key} names {name!r}, which is not another arm of this spec",
                "arms",
                arm.name,
                key,
            )
        if _reaches(spec, name, arm.name, set()):
            # A cycle of routing arms would call itself until the stack
            # ran out, holding its arms' turns.
            raise spec.error(
                f"{key} names {name!r}, which routes back to {arm.name!r}: routing arms "
                "cannot form a cycle",
                "arms",
                arm.name,
                key,
            )
    return names


ROUTE_KEYS = ("cheap", "strong", "judge")


def _reaches(spec: Spec, start: str, target: str, seen: set[str]) -> bool:
    """Whether routing arm ``start`` calls ``target``, directly or through other routing arms."""
    conf = spec.arms.get(start)
    if conf is None or provider_info(conf.provider).routes is None or start in seen:
        return False
    seen.add(start)
    for key in ROUTE_KEYS:
        value = conf.options.get(key)
        for name in [value] if isinstance(value, str) else value if isinstance(value, list) else []:
            if name == target or (isinstance(name, str) and _reaches(spec, name, target, seen)):
                return True
    return False


def _router_parts(arm: ArmSpec, spec: Spec,
                  known: frozenset[str]) -> tuple[list[str], list[str | None], str]:
    unknown = sorted(set(arm.options) - known)
    if unknown:
        raise spec.error(
            f"unknown {arm.provider} option {unknown[0]!r}; known: {', '.join(sorted(known))}",
            "arms",
            arm.name,
            unknown[0],
        )
    cheap = _arm_names(arm, spec, "cheap", arm.options.get("cheap"))
    n = arm.options.get("n", 1 if len(cheap) > 1 else 2)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1 or (len(cheap) > 1 and n != 1):
        raise spec.error(
            "n must be a whole number >= 1, and only with a single cheap arm", "arms", arm.name, "n"
        )
    cheap = cheap * n
    personas = arm.options.get("personas") or []
    if (
        not isinstance(personas, list)
        or len(personas) > len(cheap)
        or not all(isinstance(p, str) for p in personas)
    ):
        raise spec.error(
            f"personas must be a list of at most {len(cheap)} strings", "arms", arm.name, "personas"
        )
    padded: list[str | None] = [*personas, *[None] * (len(cheap) - len(personas))]
    strong = _arm_names(arm, spec, "strong", arm.options.get("strong"))
    return cheap, padded, strong[0]


_ORACLE_KEYS = frozenset({"cheap", "n", "personas", "strong"})
_CASCADE_KEYS = _ORACLE_KEYS | {"agreement", "judge"}


def cascade_route(arm: ArmSpec, spec: Spec) -> Route:
    """A cascade's calls, read once from its options: what it is built from, what the budget
    bounds and what ``echo-bench estimate`` counts, without building it."""
    cheap, personas, strong = _router_parts(arm, spec, _CASCADE_KEYS)
    agreement = arm.options.get("agreement", "lexical")
    if agreement not in ("lexical", "judge"):
        raise spec.error("agreement must be lexical or judge", "arms", arm.name, "agreement")
    judge = None
    if agreement == "judge":
        judge = _arm_names(arm, spec, "judge", arm.options.get("judge"))[0]
    return Route(tuple(cheap), tuple(personas), strong, judge)


def oracle_route(arm: ArmSpec, spec: Spec) -> Route:
    """The oracle router's calls, read once from its options (it has no judge)."""
    cheap, personas, strong = _router_parts(arm, spec, _ORACLE_KEYS)
    return Route(tuple(cheap), tuple(personas), strong)


def _scorer(spec: Spec) -> Scorer:
    scorer = get_scorer(spec.scorer)
    if scorer is None:
        raise spec.error(f"unknown scorer {spec.scorer!r}", "scorer")
    return scorer


def _unjudged_scorer(arm: ArmSpec, spec: Spec, why: str) -> None:
    """A routing arm that grades its sub-answers with the scorer: the scorer must read text alone
    (a judged one asks its judges once the item's answer is chosen, not per sub-answer)."""
    if takes_judges(spec.scorer):
        raise spec.error(f"arm {arm.name!r} {why} with the scorer, and {spec.scorer} asks a judge "
                         "model: route with an agreement judge arm, or score with text",
                         "arms", arm.name)


def build_cascade(arm: ArmSpec, spec: Spec, caller: Caller) -> Cascade:
    route = cascade_route(arm, spec)
    agreement = "lexical" if route.judge is None else "judge"
    if agreement == "lexical":
        _unjudged_scorer(arm, spec, "compares its cheap answers' extracted answers")
    return Cascade(list(route.cheap), list(route.personas), route.strong, caller, _scorer(spec),
                   spec.scorer_options, agreement, route.judge)


def build_oracle(arm: ArmSpec, spec: Spec, caller: Caller) -> Oracle:
    route = oracle_route(arm, spec)
    _unjudged_scorer(arm, spec, "grades each cheap answer")
    return Oracle(list(route.cheap), list(route.personas), route.strong, caller, _scorer(spec),
                  spec.scorer_options)


_NO_PROMPT = "sends none of its own (each arm it calls is sent its own prompt)"
CASCADE = ProviderInfo(build_cascade, routes=cascade_route, no_prompt=_NO_PROMPT)
ORACLE = ProviderInfo(build_oracle, routes=oracle_route, no_prompt=_NO_PROMPT)
