"""What a call may cost at most, before it is sent: the figure a budget reserves.

A prompt's tokens are bounded by its UTF-8 bytes: every tokenizer the priced providers use is a
byte-level BPE whose every token covers at least one byte, so a text of B bytes is at most B
tokens. Each message adds its framing (``MESSAGE_TOKENS``: role and separators, 3-4 in OpenAI's
published count, taken at 8) and a reply its priming (``REPLY_TOKENS``). The completion is at most
the arm's ``max_tokens`` (Anthropic's default 1024 when unset, as its provider sends); an arm
with an output price and no such cap has no worst case. A routing arm's worst case is the sum of
the calls it may make: every cheap call, the judge's, and the strong arm's.
"""

from __future__ import annotations

from pytest_echo_bench.spec.load import ArmSpec, Spec

MESSAGE_TOKENS = 8
REPLY_TOKENS = 8
ANTHROPIC_DEFAULT_MAX_TOKENS = 1024  # what providers.anthropic_messages sends when the spec says nothing
ROUTERS = ("cascade", "oracle")
COMPOSITE = frozenset({*ROUTERS, "python"})  # arms that answer through other arms' calls
# The judge's prompt quotes the cheap answers, whose text is only known by then: each is taken at
# this many tokens per token of its cap (another model's tokenizer may split it finer), plus framing.
QUOTED_FACTOR = 2
JUDGE_TEMPLATE_BYTES = 160  # routing.JUDGE_PROMPT without the question and the answers, rounded up


def prompt_tokens(*texts: str | None) -> int:
    """An upper bound on the prompt tokens of a chat whose messages are ``texts``."""
    parts = [t for t in texts if t]
    return sum(len(t.encode("utf-8", "surrogatepass")) for t in parts) + MESSAGE_TOKENS * len(parts) + REPLY_TOKENS


def completion_cap(arm: ArmSpec) -> int | None:
    """The most completion tokens one call of ``arm`` may return, when the spec caps it."""
    cap = arm.options.get("max_tokens")
    extra = arm.options.get("extra_body")
    if cap is None and isinstance(extra, dict):
        cap = extra.get("max_completion_tokens") or extra.get("max_tokens")
    if cap is None and arm.provider == "anthropic":
        return ANTHROPIC_DEFAULT_MAX_TOKENS
    return cap if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0 else None


def unbounded(spec: Spec, name: str) -> str | None:
    """Why arm ``name`` has no worst case (None: it has one)."""
    arm = spec.arms.get(name)
    if arm is None:
        return f"it routes to {name!r}, which is not an arm of the spec"
    if arm.provider == "python":
        return "a Python arm may make any number of calls"
    if arm.provider in ROUTERS:
        return next((why for sub in _routes(arm) if (why := unbounded(spec, sub))), None)
    if name not in spec.pricing:
        return "it has no prices (pricing: in the spec)"
    if spec.pricing[name][1] > 0 and completion_cap(arm) is None:
        return "it has an output price but no max_tokens, so a reply's length has no bound"
    return None


def call_worst(spec: Spec, name: str, prompt: str) -> float | None:
    """The most one call of leaf arm ``name`` with ``prompt`` may cost (None: no worst case)."""
    arm = spec.arms[name]
    system = arm.options.get("system")
    return _priced(spec, name, prompt_tokens(system if isinstance(system, str) else None, prompt))


def item_worst(spec: Spec, name: str, prompt: str) -> float | None:
    """The most an item of arm ``name`` may cost: one call, or every call a routing arm may make."""
    arm = spec.arms.get(name)
    if arm is None or arm.provider == "python":
        return None
    if arm.provider not in ROUTERS:
        return call_worst(spec, name, prompt)
    cheap = _cheap_calls(arm)
    personas = arm.options.get("personas") or []
    total = 0.0
    for i, sub in enumerate(cheap):
        persona = personas[i] if isinstance(personas, list) and i < len(personas) else None
        cost = item_worst(spec, sub, f"{persona}\n\n{prompt}" if isinstance(persona, str) else prompt)
        if cost is None:
            return None
        total += cost
    judge = arm.options.get("judge") if arm.options.get("agreement") == "judge" else None
    if isinstance(judge, str):
        quoted = sum(QUOTED_FACTOR * (_answer_cap(spec, sub) or 0) + MESSAGE_TOKENS for sub in cheap)
        judged = _priced(spec, judge, prompt_tokens(prompt) + JUDGE_TEMPLATE_BYTES + quoted)
        if judged is None:
            return None
        total += judged
    strong = item_worst(spec, str(arm.options.get("strong")), prompt)
    return None if strong is None else total + strong


def _priced(spec: Spec, name: str, tokens_in: int) -> float | None:
    if unbounded(spec, name) is not None:
        return None
    per_input, per_output = spec.pricing[name]
    return (tokens_in * per_input + (completion_cap(spec.arms[name]) or 0) * per_output) / 1e6


def _cheap_calls(arm: ArmSpec) -> list[str]:
    """The cheap calls a routing arm makes, as ``routing._router_parts`` builds them."""
    value = arm.options.get("cheap")
    cheap = [value] if isinstance(value, str) else [str(v) for v in value or []]
    n = arm.options.get("n", 1 if len(cheap) > 1 else 2)
    return cheap * (n if isinstance(n, int) and not isinstance(n, bool) else 1)


def _routes(arm: ArmSpec) -> list[str]:
    names = _cheap_calls(arm) + [str(arm.options.get("strong"))]
    if arm.options.get("agreement") == "judge" and isinstance(arm.options.get("judge"), str):
        names.append(arm.options["judge"])
    return list(dict.fromkeys(names))


def _answer_cap(spec: Spec, name: str) -> int | None:
    """The most tokens an arm's answer may have: its cap, or a routing arm's largest sub-arm's."""
    arm = spec.arms.get(name)
    if arm is None:
        return None
    if arm.provider in ROUTERS:
        return max((_answer_cap(spec, sub) or 0 for sub in _routes(arm)), default=None)
    return completion_cap(arm)
