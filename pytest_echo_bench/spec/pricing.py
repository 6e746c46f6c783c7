"""Prices: a spec's ``pricing:`` read into a ``Price`` per arm or judge, and what a call's usage
costs with every billed token class (input, cache reads and writes, output, reasoning) priced apart.

A row's ``usage`` counts ``prompt_tokens`` (all input, cached included) and ``completion_tokens``
(all output, reasoning included); ``cache_read_tokens`` and ``cache_write_tokens`` are parts of the
first, ``reasoning_tokens`` a part of the second (docs/results.md). A class without a price of its
own is billed at its side's price (input or output), so a spec without the new keys, or a row
without the new counts, costs exactly what it did before they existed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_echo_bench.spec.values import mapping, non_negative, number

# The keys of one arm's entry; ``input`` and ``output`` default to 0 (free), the rest to their
# side's price.
PRICE_KEYS = ("input", "output", "cache_read", "cache_write", "reasoning", "batch_discount")
# A token count a JSON reader holds exactly: a larger one is no count (providers.answer.MAX_COUNT).
_MAX_COUNT = 2**53 - 1
# The most a batch may take off: 1 would make every batch call free, which no provider does.
_MOST_DISCOUNT = 1.0


@dataclass(frozen=True, slots=True)
class Price:
    """One arm's (or judge's) prices, in USD per million tokens."""

    input: float
    output: float
    cache_read: float | None = None  # None: the input price
    cache_write: float | None = None  # None: the input price
    reasoning: float | None = None  # None: the output price
    batch_discount: float = 0.0  # 0 <= d < 1: a batch call costs (1 - d) x every price

    def dearest(self, batch: bool = False) -> tuple[float, float]:
        """(input, output) price of a token billed at its dearest: a worst case cannot know
        which input tokens a cache will answer or how much of a reply is reasoning, so it
        assumes each token costs the most any class of its side costs (no cache discount)."""
        per_input = max(self.input, _or(self.cache_read, 0.0), _or(self.cache_write, 0.0))
        per_output = max(self.output, _or(self.reasoning, 0.0))
        factor = self._factor(batch)
        return per_input * factor, per_output * factor

    def cost(self, usage: Mapping[str, Any], batch: bool = False) -> float | None:
        """USD of one call with ``usage``: each class at its price, a class whose count the
        others' exceed clamped at 0 (a provider whose counts do not add up never makes a cost
        negative); None when a count is not one (never a NaN or an infinite cost)."""
        counts = {key: _count(usage.get(key, 0)) for key in _CLASSES}
        if any(c is None for c in counts.values()):
            return None
        prompt, completion, read, write, reasoning = (int(counts[k] or 0) for k in _CLASSES)
        # Tokens summed per distinct price before multiplying: a class priced as its side is then
        # the same product as before classes existed (figures identical to the last digit).
        inputs = _by_price(((max(prompt - read - write, 0), self.input),
                            (read, _or(self.cache_read, self.input)),
                            (write, _or(self.cache_write, self.input))))
        outputs = _by_price(((max(completion - reasoning, 0), self.output),
                             (reasoning, _or(self.reasoning, self.output))))
        total = inputs + outputs
        if batch:
            total *= self._factor(True)
        total /= 1e6
        return total if math.isfinite(total) and total >= 0 else None

    def _factor(self, batch: bool) -> float:
        return 1.0 - self.batch_discount if batch else 1.0


_CLASSES = (
    "prompt_tokens", "completion_tokens", "cache_read_tokens", "cache_write_tokens",
    "reasoning_tokens",
)


def _count(value: Any) -> int | None:
    """A usage count as a number of tokens: a negative one is 0 (clamped), a non-count None."""
    if isinstance(value, bool) or not isinstance(value, int) or value > _MAX_COUNT:
        return None
    return max(value, 0)


def _or(price: float | None, side: float) -> float:
    return side if price is None else price


def _by_price(parts: tuple[tuple[int, float], ...]) -> float:
    tokens: dict[float, int] = {}
    for count, price in parts:
        if count:
            tokens[price] = tokens.get(price, 0) + count
    return sum(count * price for price, count in tokens.items())


def parse_pricing(
    value: Any, priced: set[str], fail: Any
) -> tuple[dict[str, Price], float | None]:
    """``pricing: {arm or judge: {input, output, cache_read, cache_write, reasoning,
    batch_discount}}`` in USD per million tokens, and the optional ``unit`` reference call's USD."""
    conf = mapping(value, "pricing", fail)
    prices: dict[str, Price] = {}
    for arm, entry in conf.items():
        if arm == "unit":
            continue
        if arm not in priced:
            raise fail(f"pricing names arm {arm!r}, which the spec does not have (as an arm or a "
                       "judge)", "pricing", arm)
        prices[arm] = _price(arm, entry, fail)
    unit = conf.get("unit")
    return prices, None if unit is None else _unit(unit, prices, fail)


def _price(arm: str, entry: Any, fail: Any) -> Price:
    if not isinstance(entry, dict):
        raise fail(f"the prices of {arm!r} must be a mapping ({{input: X, output: Y}}, USD per "
                   "million tokens)", "pricing", arm)
    unknown = sorted(str(k) for k in entry if k not in PRICE_KEYS)
    if unknown:
        raise fail(f"unknown key {unknown[0]!r} in the prices of {arm!r}; known keys: "
                   f"{', '.join(PRICE_KEYS)}", "pricing", arm, unknown[0])

    def at(key: str) -> Any:
        # The key path given whole: an arm's name may hold a dot, which a dotted key would split.
        return lambda message, *_: fail(message, "pricing", arm, key)

    def rate(key: str) -> float | None:
        return None if key not in entry else non_negative(entry[key], key, at(key))

    discount = 0.0
    if "batch_discount" in entry:
        discount = number(entry["batch_discount"], "batch_discount", at("batch_discount"), 0.0,
                          _MOST_DISCOUNT)
        if discount >= _MOST_DISCOUNT:
            raise fail(f"must be less than 1 (a share taken off every price of a batch call: "
                       f"0.5 is half price), got {discount:g}", "pricing", arm, "batch_discount")
    return Price(rate("input") or 0.0, rate("output") or 0.0, rate("cache_read"),
                 rate("cache_write"), rate("reasoning"), discount)


def _unit(value: Any, prices: dict[str, Price], fail: Any) -> float:
    """The USD of the reference call ``pricing.unit`` describes (its arm's plain prices)."""
    if not isinstance(value, dict):
        raise fail("pricing.unit must be a mapping ({arm: A, prompt_tokens: N, "
                   "completion_tokens: M})", "pricing", "unit")
    unit = value
    ref = unit.get("arm")
    if not isinstance(ref, str) or ref not in prices:
        raise fail("pricing.unit.arm must name a priced arm", "pricing", "unit", "arm")
    tokens = {
        k: int(non_negative(unit.get(k, 0), f"pricing.unit.{k}", fail))
        for k in ("prompt_tokens", "completion_tokens")
    }
    usd = (
        tokens["prompt_tokens"] * prices[ref].input
        + tokens["completion_tokens"] * prices[ref].output
    ) / 1e6
    if usd <= 0:
        raise fail("the reference call must cost more than 0", "pricing", "unit")
    return usd
