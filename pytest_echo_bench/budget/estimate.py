"""What a sweep will cost before anything is sent: calls, tokens and USD per arm, as a range.

Every item of an arm makes the calls of one *path*: a plain arm one call; a routing arm its cheap
calls (and a judge's) when it does not escalate, those and the strong arm's when it does, each
call expanded again when it names a routing arm. ``low`` is the cheapest path with the
completion tokens the arm was seen to give (the response cache and earlier results files; none
seen: 0) at the plain input and output prices, ``high`` the dearest path with every reply as long
as its request allows and every token at the dearest price its side may be billed at (cache
writes, reasoning: ``budget.worst``). Prompt tokens are estimated from the text as
``ceil(characters / 4)`` (the arm's ``system`` prompt counted too): about right for English with
the OpenAI and Anthropic tokenizers, low for text of other scripts. A call whose reply the
response cache holds is not sent and costs nothing. An arm the spec does not price, or one with no
``max_tokens`` for ``high``, has an unknown cost: ``None``, never 0; so has a Python arm (and a
routing arm that calls one): the calls it makes are its code's, counted here as its one call.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from pytest_echo_bench.budget.judged import Panel, judges_worst
from pytest_echo_bench.budget.worst import completion_cap
from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.datasets.prompts import Prompter, render_for
from pytest_echo_bench.providers import provider_info, route_of
from pytest_echo_bench.providers.base import Route
from pytest_echo_bench.providers.routing import JUDGE_PROMPT
from pytest_echo_bench.spec.load import Spec

CHARS_PER_TOKEN = 4


def prompt_tokens(text: str) -> int:
    """The tokens a prompt is estimated to take: ``ceil(len(text) / 4)``."""
    return -(-len(text) // CHARS_PER_TOKEN)


@dataclass(frozen=True)
class Call:
    """One call an item may make: to ``arm``, never a routing arm."""

    arm: str
    prompt: str | None  # the request's prompt, when known before the run (a judge's holds answers)
    tokens: int  # prompt tokens, estimated
    fed: tuple[str, ...] = ()  # arms whose replies are part of this prompt (the judge's)
    sample: int = 0  # the n-th ask of this arm and prompt within the item (its own cache entry)


# whether the response cache answers a call of an item's epoch
CacheCheck = Callable[[Call, Example, int], bool]


@dataclass(frozen=True)
class Paths:
    best: tuple[Call, ...]
    worst: tuple[Call, ...]


def max_completion(spec: Spec, arm: str) -> int | None:
    """The most completion tokens one call of ``arm`` may be billed, else unknown: the
    bound its request carries, as the budget holds it (``budget.worst``:
    ``extra_body`` merged, times ``n``)."""
    return completion_cap(spec.arms[arm])


Plans = dict[str, "Route | None"]  # arm -> its route (None: no routing arm), read once a sweep


Own = Callable[[str], str]  # an arm's own prompt for the item (``prompt:``), as the run renders it


def own_prompts(prompters: Mapping[str, Prompter] | None, example: Example) -> Own | None:
    """Each arm's prompt for ``example`` (None: no arm of the spec has a prompt of its own)."""
    return (lambda arm: render_for(prompters, arm, example)) if prompters else None


def arm_paths(
    spec: Spec,
    arm: str,
    prompt: str,
    question: str,
    plans: Plans | None = None,
    own: Own | None = None,
) -> Paths:
    """The calls an item of ``arm`` with ``prompt`` makes, cheapest and dearest (``plans`` keeps
    each routing arm's plan, so that a sweep's items read it once; ``own`` gives an arm asked with
    the item's input its own prompt, as the run does)."""
    plans = {} if plans is None else plans
    if arm not in plans:
        plans[arm] = route_of(spec.arms[arm], spec)
    route = plans[arm]
    if route is None:
        prompt = own(arm) if own is not None and prompt == question else prompt
        system = spec.arms[arm].options.get("system")
        extra = prompt_tokens(system) if isinstance(system, str) else 0
        call = (Call(arm, prompt, prompt_tokens(prompt) + extra),)
        return Paths(call, call)
    cheap, personas, strong, judge = route.cheap, route.personas, route.strong, route.judge
    asked: dict[tuple[str, str], int] = {}
    best: list[Call] = []
    worst: list[Call] = []
    for name, persona in zip(cheap, personas, strict=True):
        text = f"{persona}\n\n{prompt}" if persona else prompt
        sub = _asked(arm_paths(spec, name, text, question, plans, own), asked, (name, text))
        best += sub.best
        worst += sub.worst
    if judge is not None:
        template = JUDGE_PROMPT.format(question=question, answers="")
        labels = sum(prompt_tokens(f"Answer {i}:\n\n\n") for i in range(1, len(cheap) + 1))
        fed = tuple(_answering(spec, name) for name in cheap)
        call = Call(judge, None, prompt_tokens(template) + labels, fed)
        judged = arm_paths(spec, judge, "", question, plans)
        if len(judged.worst) == 1:
            best.append(call)
            worst.append(call)
        else:  # a routing judge: its calls, each fed the answers
            best += [Call(c.arm, None, c.tokens + call.tokens, fed) for c in judged.best]
            worst += [Call(c.arm, None, c.tokens + call.tokens, fed) for c in judged.worst]
    strong_paths = _asked(
        arm_paths(spec, strong, prompt, question, plans, own), asked, (strong, prompt)
    )
    return Paths(tuple(best), tuple(worst) + strong_paths.worst)


def _asked(paths: Paths, asked: dict[tuple[str, str], int], key: tuple[str, str]) -> Paths:
    """A sub-arm's paths with the sample index of its ask (a repeated ask is a new cache entry)."""
    sample = asked.get(key, 0)
    asked[key] = sample + 1
    if not sample:
        return paths
    return Paths(*(tuple(Call(c.arm, c.prompt, c.tokens, c.fed, c.sample + sample) for c in p)
                   for p in (paths.best, paths.worst)))


def _answering(spec: Spec, arm: str) -> str:
    """The arm whose reply a routing arm passes on at worst (its strong arm's, all the way down)."""
    while (route := route_of(spec.arms[arm], spec)) is not None:
        arm = route.strong
    return arm


@dataclass
class Seen:
    """Per arm of a benchmark, what earlier calls showed: completion tokens a call
    and seconds an item, each as a running (sum, count): a million rows seen cost
    two numbers an arm, not a list."""

    completion: dict[str, tuple[float, int]] = field(default_factory=dict)
    seconds: dict[str, tuple[float, int]] = field(default_factory=dict)

    def add_completion(self, arm: str, tokens: int) -> None:
        total, n = self.completion.get(arm, (0.0, 0))
        self.completion[arm] = (total + tokens, n + 1)

    def add_seconds(self, arm: str, seconds: float) -> None:
        total, n = self.seconds.get(arm, (0.0, 0))
        self.seconds[arm] = (total + seconds, n + 1)

    def mean_completion(self, arm: str) -> float | None:
        total, n = self.completion.get(arm, (0.0, 0))
        return total / n if n else None

    def mean_seconds(self, arm: str) -> float | None:
        total, n = self.seconds.get(arm, (0.0, 0))
        return total / n if n else None


@dataclass
class ArmEstimate:
    """One arm's share of a sweep; costs in USD, None where unknown."""

    arm: str
    items: int = 0
    calls_min: int = 0
    calls_max: int = 0
    cached: int = 0  # calls the response cache answers: never sent
    prompt_tokens: int = 0
    completion_low: float = 0.0
    completion_high: int | None = 0
    cost_low: float | None = 0.0
    cost_high: float | None = 0.0
    seconds_per_item: float | None = None
    priced: bool = True
    # False when a Python arm is among its calls: the calls it makes are its code's
    calls_known: bool = True
    # its provider has a batch API (``batch: true``): the share its prices' ``batch_discount``
    # takes off (0: none said); None: its calls cannot be batched
    batch_discount: float | None = None


def call_cost(
    spec: Spec, call: Call, completion: float | None, fed: float | None, high: bool = False
) -> float | None:
    """USD of one call with ``completion`` tokens in its reply and ``fed`` in each fed answer: at
    the plain input and output prices, or (``high``) every token at its dearest class's price."""
    if call.arm not in spec.pricing or completion is None or fed is None:
        return None
    price = spec.pricing[call.arm]
    per_input, per_output = price.dearest() if high else (price.input, price.output)
    return ((call.tokens + fed * len(call.fed)) * per_input + completion * per_output) / 1e6


def estimate_arm(
    spec: Spec,
    arm: str,
    items: Iterable[tuple[Example, int]],
    seen: Seen | None = None,
    cache_of: CacheCheck | None = None,
    prompters: Mapping[str, Prompter] | None = None,
) -> ArmEstimate:
    """The calls and cost range of ``arm`` over ``items`` ((example, epoch) pairs); ``cache_of(call,
    example, epoch)`` says whether the response cache answers a call (None: no cache)."""
    seen = seen or Seen()
    leaves = _leaves(spec, arm)
    opaque = any(_opaque(spec, leaf) for leaf in leaves)
    out = ArmEstimate(
        arm, priced=not opaque and all(c in spec.pricing for c in leaves), calls_known=not opaque
    )
    plans: Plans = {}
    for example, epoch in items:
        paths = arm_paths(
            spec, arm, example.input, example.input, plans, own_prompts(prompters, example)
        )
        out.items += 1
        low = _path(spec, paths.best, seen, example, epoch, cache_of, high=False, into=None)
        sent = out.calls_max
        high = _path(spec, paths.worst, seen, example, epoch, cache_of, high=True, into=out)
        # The calls sent, cached ones not: counted on the best path as calls_max is on the worst.
        out.calls_min += min(low[2], out.calls_max - sent)
        out.cost_low = _add(out.cost_low, low[0])
        out.completion_low += low[1]
        out.cost_high = _add(out.cost_high, high[0])
        out.completion_high = (
            None
            if out.completion_high is None or high[1] is None
            else out.completion_high + int(high[1])
        )
    out.batch_discount = _batch_discount(spec, arm)
    out.seconds_per_item = seen.mean_seconds(arm)
    if out.seconds_per_item is None and provider_info(spec.arms[arm].provider).routes is not None:
        leaves = [seen.mean_seconds(c) for c in _leaves(spec, arm)]
        out.seconds_per_item = None if None in leaves else sum(x for x in leaves if x is not None)
    return out


def _batch_discount(spec: Spec, arm: str) -> float | None:
    """What a batch takes off ``arm``'s prices, when its provider can batch its calls."""
    if not provider_info(spec.arms[arm].provider).batch:
        return None
    price = spec.pricing.get(arm)
    return price.batch_discount if price is not None else 0.0


def _path(
    spec: Spec,
    calls: tuple[Call, ...],
    seen: Seen,
    example: Example,
    epoch: int,
    cache_of: CacheCheck | None,
    high: bool,
    into: ArmEstimate | None,
) -> tuple[float | None, float | None, int]:
    """(USD, completion tokens, calls sent) of one item's path; ``into``
    counts its calls and prompt tokens."""
    cost: float | None = 0.0
    completion: float | None = 0.0
    sent = 0
    opaque = {c.arm for c in calls if _opaque(spec, c.arm)}
    for call in calls:
        if cache_of is not None and call.prompt is not None and cache_of(call, example, epoch):
            if into is not None:
                into.cached += 1
            continue
        reply = max_completion(spec, call.arm) if high else (seen.mean_completion(call.arm) or 0.0)
        fed = _fed(spec, call, seen, high)
        cost = _add(cost, None if call.arm in opaque else call_cost(spec, call, reply, fed, high))
        completion = None if completion is None or reply is None else completion + reply
        sent += 1
        if into is not None:
            into.calls_max += 1
            into.prompt_tokens += call.tokens
    return cost, completion, sent


def _fed(spec: Spec, call: Call, seen: Seen, high: bool) -> float | None:
    """Completion tokens of each answer fed into ``call``'s prompt (the largest of them)."""
    if not call.fed:
        return 0.0
    values = [
        max_completion(spec, a) if high else (seen.mean_completion(a) or 0.0) for a in call.fed
    ]
    return None if None in values else max(float(v) for v in values if v is not None)


def _add(total: float | None, value: float | None) -> float | None:
    return None if total is None or value is None else total + value


def _leaves(spec: Spec, arm: str) -> list[str]:
    """Every arm ``arm`` may call, routing arms expanded (the arm itself when it routes nothing)."""
    route = route_of(spec.arms[arm], spec)
    if route is None:
        return [arm]
    return list(dict.fromkeys(leaf for name in route.arms for leaf in _leaves(spec, name)))


def _opaque(spec: Spec, arm: str) -> bool:
    """Whether the calls ``arm`` makes to other arms are only its code's to know (a Python arm's):
    counted as its one call, its cost unknown."""
    return provider_info(spec.arms[arm].provider).opaque


def worst_case_usd(
    spec: Spec, items: Iterable[tuple[Example, str, int]], seen: Seen | None = None,
    judges: Panel | None = None,
) -> float | None:
    """The most the items ``(example, arm, epoch)`` can cost if every call is sent and every reply
    is ``max_tokens`` long: what a budget must still hold for them, their scorer's ``judges``'
    calls at the budget's own worst case (``budget.judged``). None when any is unknown."""
    by_arm: dict[str, list[tuple[Example, int]]] = {}
    total: float | None = 0.0
    for example, arm, epoch in items:
        by_arm.setdefault(arm, []).append((example, epoch))
        total = _add(total, judges_worst(spec, judges, example, arm))
    for arm, pairs in by_arm.items():
        total = _add(total, estimate_arm(spec, arm, pairs, seen).cost_high)
    return total


def wall_seconds(
    arms: Iterable[ArmEstimate], spec: Spec, concurrency: int, workers: int
) -> float | None:
    """Expected wall time: each arm's items x its seconds an item, spread over ``concurrency`` calls
    in flight in each of ``workers`` processes, no arm faster than its own ``concurrency:`` allows.
    None unless every arm with calls to send has a latency seen."""
    total = slowest = 0.0
    for est in arms:
        if est.calls_max == 0:
            continue
        if est.seconds_per_item is None:
            return None
        work = est.items * est.seconds_per_item
        limit = min(
            spec.arms[est.arm].concurrency or concurrency,
            spec.concurrency or concurrency,
            concurrency,
        )
        total += work
        slowest = max(slowest, work / (limit * workers))
    return max(total / (min(spec.concurrency or concurrency, concurrency) * workers), slowest)


def finite(value: float | None) -> float | None:
    """A cost as printed: rounded to a millionth of a dollar, None kept."""
    return None if value is None or not math.isfinite(value) else round(value, 6)
