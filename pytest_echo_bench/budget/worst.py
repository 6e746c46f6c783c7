"""What a call may cost at most, before it is sent: the figure a budget reserves.

It is read from the request the provider sends, not from the spec's options alone: OpenAI's
``extra_body`` is merged over the options on the wire (``providers.openai_chat.request_params``),
so a ``max_tokens`` there is the bound the server keeps, and ``n`` replies are ``n`` times as long.

A prompt's tokens are bounded by its UTF-8 bytes: every tokenizer the priced providers use is a
byte-level BPE whose every token covers at least one byte, so a text of B bytes is at most B
tokens. Each message adds its framing (``MESSAGE_TOKENS``: role and separators, 3-4 in OpenAI's
published count, taken at 8) and a reply its priming (``REPLY_TOKENS``); any other field the
request carries that a model may read (tools, a response format's schema) counts at its JSON bytes.
The completion is at most the request's ``max_tokens`` or ``max_completion_tokens`` (the larger,
when both are sent: a server keeps one of them) times its ``n``, as the provider's ``sent``
builds the request (``providers.base.ProviderInfo``: Anthropic's sends its default ``max_tokens``
when the spec sets none); an arm with an output price and no such bound has no worst case. A
routing arm's worst case is the sum of the calls it may make: every cheap call, the judge's, and
the strong arm's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pytest_echo_bench.providers import provider_info, route_of
from pytest_echo_bench.providers.base import Route
from pytest_echo_bench.spec.load import ArmSpec, Spec

MESSAGE_TOKENS = 8
REPLY_TOKENS = 8
# The judge's prompt quotes the cheap answers, whose text is only known by then: each is taken at
# this many tokens per token of its cap (another model's tokenizer may
# split it finer), plus framing.
QUOTED_FACTOR = 2
JUDGE_TEMPLATE_BYTES = 160  # routing.JUDGE_PROMPT without the question and the answers, rounded up
CAP_KEYS = ("max_tokens", "max_completion_tokens")  # the request fields that bound a reply's tokens
# Request fields that hold no text a model reads (numbers, flags, names): every other field a
# request carries beside its messages counts as prompt at its JSON bytes.
PARAMETERS = frozenset(
    {
        *CAP_KEYS,
        "n",
        "model",
        "temperature",
        "top_p",
        "seed",
        "stop",
        "presence_penalty",
        "frequency_penalty",
        "logprobs",
        "top_logprobs",
        "logit_bias",
        "user",
        "store",
        "parallel_tool_calls",
        "service_tier",
        "reasoning_effort",
        "metadata",
    }
)


def prompt_tokens(*texts: str | None) -> int:
    """An upper bound on the prompt tokens of a chat whose messages are ``texts``."""
    parts = [t for t in texts if t]
    return (
        sum(len(t.encode("utf-8", "surrogatepass")) for t in parts)
        + MESSAGE_TOKENS * len(parts)
        + REPLY_TOKENS
    )


def sent(arm: ArmSpec) -> dict[str, Any]:
    """What a call of leaf ``arm`` sends beside its prompt, as its provider builds the request."""
    reads = provider_info(arm.provider).sent
    return {} if reads is None else reads(arm)


def completion_cap(arm: ArmSpec) -> int | None:
    """The most completion tokens one call of ``arm`` may be
    billed, when its request bounds them."""
    return reply_bound(arm)[0]


def reply_bound(arm: ArmSpec) -> tuple[int | None, str]:
    """(the bound, or None and why there is none) of the completion tokens a request allows."""
    wire = sent(arm)
    caps = {key: wire[key] for key in CAP_KEYS if key in wire}
    if not caps:
        return None, "no max_tokens, so a reply's length has no bound"
    where = _from(arm)
    for key, value in caps.items():
        if not _count(value):
            return None, (
                f"its request carries {key}: {_shown(value)}{where(key)}, not a whole number > 0, "
                "so a reply's length has no bound"
            )
    n = wire.get("n", 1)
    if not _count(n):
        return None, (f"its request carries n: {_shown(n)}{where('n')}, not a whole number > 0, "
                      "so the replies it may bill have no bound")
    return max(caps.values()) * n, ""


def _from(arm: ArmSpec) -> Callable[[str], str]:
    """Where a request field comes from, as a refusal names it:
    ``extra_body`` overrides the options."""
    extra = arm.options.get("extra_body")
    return lambda key: " (from extra_body)" if isinstance(extra, dict) and key in extra else ""


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _shown(value: object) -> str:
    text = json.dumps(value, default=repr)
    return text if len(text) <= 40 else text[:37] + "..."


def input_tokens(arm: ArmSpec, prompt: str | None) -> int:
    """An upper bound on the prompt tokens of one call of leaf ``arm`` with ``prompt``: its messages
    (``extra_body``'s own, when it replaces them: those are sent) and
    every other field a model reads."""
    wire = sent(arm)
    if "messages" in wire:
        messages = wire["messages"]
        count = len(messages) if isinstance(messages, list) else 1
        tokens = _json_bytes(messages) + MESSAGE_TOKENS * count + REPLY_TOKENS
    else:
        system = arm.options.get("system")
        tokens = prompt_tokens(system if isinstance(system, str) else None, prompt)
    return tokens + sum(
        _json_bytes(v) for k, v in wire.items() if k not in PARAMETERS and k != "messages"
    )


def _json_bytes(value: object) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=repr).encode("utf-8", "surrogatepass"))


def unbounded(spec: Spec, name: str) -> str | None:
    """Why arm ``name`` has no worst case (None: it has one)."""
    arm = spec.arms.get(name)
    if arm is None:
        return f"it routes to {name!r}, which is not an arm of the spec"
    if provider_info(arm.provider).opaque:
        return "a Python arm may make any number of calls"
    route = route_of(arm, spec)
    if route is not None:
        return next((why for sub in route.arms if (why := unbounded(spec, sub))), None)
    if name not in spec.pricing:
        return "it has no prices (pricing: in the spec)"
    cap, why = reply_bound(arm)
    if spec.pricing[name].dearest()[1] > 0 and cap is None:
        return f"it has an output price but {why}"
    return None


def call_worst(spec: Spec, name: str, prompt: str, batch: bool = False) -> float | None:
    """The most one call of leaf arm ``name`` with ``prompt`` may cost (None: no worst case);
    ``batch``: sent in a batch, at the batch price."""
    return _priced(spec, name, prompt, batch=batch)


def item_worst(spec: Spec, name: str, prompt: str, batch: bool = False) -> float | None:
    """The most an item of arm ``name`` may cost: one call (``batch``: at the batch price), or
    every call a routing arm may make."""
    arm = spec.arms.get(name)
    if arm is None or provider_info(arm.provider).opaque:
        return None
    route = route_of(arm, spec)
    if route is None:
        return call_worst(spec, name, prompt, batch)
    return _route_worst(spec, route, prompt)


def _route_worst(spec: Spec, route: Route, prompt: str) -> float | None:
    """Every cheap call, the judge's and the strong arm's, each at its most."""
    total = _cheap_worst(spec, route, prompt)
    if total is not None and route.judge is not None:
        quoted = sum(QUOTED_FACTOR * (answer_cap(spec, sub) or 0) + MESSAGE_TOKENS
                     for sub in route.cheap)
        judged = _priced(spec, route.judge, prompt, JUDGE_TEMPLATE_BYTES + quoted)
        total = None if judged is None else total + judged
    strong = None if total is None else item_worst(spec, route.strong, prompt)
    return None if total is None or strong is None else total + strong


def _cheap_worst(spec: Spec, route: Route, prompt: str) -> float | None:
    total = 0.0
    for sub, persona in zip(route.cheap, route.personas, strict=True):
        cost = item_worst(spec, sub, prompt if persona is None else f"{persona}\n\n{prompt}")
        if cost is None:
            return None
        total += cost
    return total


def _priced(spec: Spec, name: str, prompt: str, more: int = 0,
            batch: bool = False) -> float | None:
    """The most a call of leaf arm ``name`` costs with ``prompt`` (and
    ``more`` tokens of it unknown yet)."""
    if unbounded(spec, name) is not None:
        return None
    arm = spec.arms[name]
    if provider_info(arm.provider).composite:
        # A judge that is itself a routing arm: every call it may make, with a prompt as long as the
        # judge's may be (a byte a token).
        return item_worst(spec, name, prompt + " " * more)
    per_input, per_output = spec.pricing[name].dearest(batch)
    return (
        (input_tokens(arm, prompt) + more) * per_input + (completion_cap(arm) or 0) * per_output
    ) / 1e6


def answer_cap(spec: Spec, name: str) -> int | None:
    """The most tokens an arm's answer may have: its cap, or a routing arm's largest sub-arm's."""
    arm = spec.arms.get(name)
    if arm is None:
        return None
    route = route_of(arm, spec)
    if route is not None:
        return max((answer_cap(spec, sub) or 0 for sub in route.arms), default=None)
    return completion_cap(arm)
