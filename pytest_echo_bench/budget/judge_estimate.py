"""What a sweep's judges will cost before anything is sent: calls, tokens and USD per judge, apart
from the arms' (``budget.estimate``).

Each item of each arm makes its scorer's judge calls (``budget.judged``: per judge, once for each
time the scorer names it, twice for ``pairwise``). A judge's prompt is its template with the
item's fields (estimated as ``budget.estimate`` estimates every prompt, ``ceil(characters / 4)``)
and the answer under judgement: ``low`` with answers and the judge's replies as long as seen (the
earlier results files' rows; none seen: 0), ``high`` with the answer as long as its arm's
``max_tokens`` and the judge's reply as long as the judge's. A judge call the response cache
answers (``cached``: its prompt rendered from an answer the cache holds) is not sent and costs
nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pytest_echo_bench.budget.estimate import CHARS_PER_TOKEN, Seen, prompt_tokens
from pytest_echo_bench.budget.judged import Panel, shape
from pytest_echo_bench.budget.worst import answer_cap, completion_cap
from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.spec.load import Spec


@dataclass
class JudgeEstimate:
    """One judge's share of a sweep; tokens and USD as (low, high), None where unknown."""

    judge: str
    items: int = 0  # the items it judges (each item of each arm)
    calls: int = 0  # calls sent
    cached: int = 0  # calls the response cache answers: never sent
    prompt_low: int = 0
    prompt_high: int | None = 0
    completion_low: float = 0.0
    completion_high: int | None = 0
    cost_low: float | None = 0.0
    cost_high: float | None = 0.0
    priced: bool = True


# whether the response cache answers judge ``name``'s call on the answer of an item of ``arm``
JudgeCache = Callable[[str, Example, str, int], bool]


def estimate_judges(spec: Spec, plan: Panel | None, items: Iterable[tuple[Example, str, int]],
                    seen: Seen | None = None,
                    cache_of: JudgeCache | None = None) -> list[JudgeEstimate]:
    """Each judge ``plan``'s scorer asks: its calls and their cost over ``items`` ((example, arm,
    epoch): an item of each arm); ``cache_of(judge, example, arm, epoch)`` says whether the
    response cache answers a judge's call (None: no cache)."""
    if plan is None:
        return []
    seen = seen or Seen()
    out = {name: JudgeEstimate(name, priced=name in spec.pricing) for name in plan.calls}
    for example, arm, epoch in items:
        for name, calls in plan.calls.items():
            if cache_of is not None and cache_of(name, example, arm, epoch):
                out[name].items += 1
                out[name].cached += calls
                continue
            _add_item(spec, plan, out[name], example, arm, calls, seen)
    return list(out.values())


def _add_item(spec: Spec, plan: Panel, est: JudgeEstimate, example: Example, arm: str,
              calls: int, seen: Seen) -> None:
    """One item's ``calls`` calls of judge ``est.judge`` for ``arm``'s answer."""
    made = shape(plan, example, arm)
    system = plan.judges[est.judge].options.get("system")
    fixed = (prompt_tokens(made.text) + -(-made.pad // CHARS_PER_TOKEN)
             + prompt_tokens(plan.system or "")
             + prompt_tokens(system if isinstance(system, str) else ""))
    low = fixed + sum(round(seen.mean_completion(a) or 0.0) for a in made.answers)
    caps = [answer_cap(spec, a) for a in made.answers]
    high = None if None in caps else fixed + sum(c or 0 for c in caps)
    reply_low = seen.mean_completion(est.judge) or 0.0
    reply_high = completion_cap(plan.judges[est.judge])
    est.items += 1
    est.calls += calls
    est.prompt_low += calls * low
    est.prompt_high = _tokens(est.prompt_high, high, calls)
    est.completion_low += calls * reply_low
    est.completion_high = _tokens(est.completion_high, reply_high, calls)
    est.cost_low = _plus(est.cost_low, _cost(spec, est.judge, low, reply_low, False), calls)
    est.cost_high = _plus(est.cost_high, _cost(spec, est.judge, high, reply_high, True), calls)


def _cost(spec: Spec, judge: str, prompt: int | None, reply: float | None,
          high: bool) -> float | None:
    """USD of one call of ``judge`` (None: unpriced, or a length unknown): at the plain prices,
    or (``high``) every token at its side's dearest (``Price.dearest``)."""
    if judge not in spec.pricing or prompt is None or reply is None:
        return None
    price = spec.pricing[judge]
    per_input, per_output = price.dearest() if high else (price.input, price.output)
    return (prompt * per_input + reply * per_output) / 1e6


def _plus(total: float | None, value: float | None, times: int) -> float | None:
    return None if total is None or value is None else total + times * value


def _tokens(total: int | None, value: int | None, times: int) -> int | None:
    return None if total is None or value is None else total + times * value
