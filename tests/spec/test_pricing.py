"""``pricing:`` read into a Price per arm (every bad value a SpecError naming file, line and key;
unknown keys refused) and ``Spec.cost`` with every billed token class priced apart: never
negative, NaN or infinite, the documented formula, and exactly the old figure for a spec or a
usage without the new keys (generated with Hypothesis)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_echo_bench.errors import SpecError
from pytest_echo_bench.spec.load import Spec, load_spec
from pytest_echo_bench.spec.pricing import Price

PROFILE = settings(max_examples=300, deadline=None, derandomize=True, database=None)
HEAD = (
    "benchmark: demo\ndataset:\n  loader: inline\n  items:\n    - {id: t1, input: q, target: a}\n"
    "scorer: exact\narms:\n  a: {provider: sim}\n  b: {provider: sim}\npricing:\n"
)


def loaded(tmp_path: Path, pricing: str) -> Spec:
    path = tmp_path / "demo.yaml"
    path.write_text(HEAD + pricing)
    return load_spec(path)


def refusal(tmp_path: Path, pricing: str) -> str:
    with pytest.raises(SpecError) as info:
        loaded(tmp_path, pricing)
    return str(info.value)


def test_every_key_is_read(tmp_path: Path) -> None:
    spec = loaded(tmp_path, "  a: {input: 3, output: 15, cache_read: 0.3, cache_write: 3.75, "
                            "reasoning: 20, batch_discount: 0.5}\n  b: {input: 1, output: 2}\n")
    assert spec.pricing == {"a": Price(3.0, 15.0, 0.3, 3.75, 20.0, 0.5), "b": Price(1.0, 2.0)}


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("{input: 1, output: 2, cached: 0.1}",
         "demo.yaml:11 [pricing.a.cached]: unknown key 'cached' in the prices of 'a'; known keys: "
         "input, output, cache_read, cache_write, reasoning, batch_discount"),
        ("{input: 1, output: 2, cache_read: -1}",
         "demo.yaml:11 [pricing.a.cache_read]: must be >= 0, got -1"),
        ("{input: 1, output: 2, cache_write: .nan}",
         "demo.yaml:11 [pricing.a.cache_write]: must be a finite number, got nan"),
        ("{input: 1, output: 2, reasoning: cheap}",
         "demo.yaml:11 [pricing.a.reasoning]: must be a number, got 'cheap'"),
        ("{input: 1, output: 2, batch_discount: 1}",
         "demo.yaml:11 [pricing.a.batch_discount]: must be less than 1"),
        ("{input: 1, output: 2, batch_discount: 1.5}",
         "demo.yaml:11 [pricing.a.batch_discount]: must be at most 1, got 1.5"),
        ("{input: 1, output: 2, batch_discount: -0.1}",
         "demo.yaml:11 [pricing.a.batch_discount]: must be >= 0, got -0.1"),
        ("{input: 1, output: 2, batch_discount: true}",
         "demo.yaml:11 [pricing.a.batch_discount]: must be a number, got True"),
        ("[1, 2]", "demo.yaml:11 [pricing.a]: the prices of 'a' must be a mapping"),
    ],
)
def test_a_bad_price_is_refused_naming_file_line_and_key(
    tmp_path: Path, entry: str, expected: str
) -> None:
    assert expected in refusal(tmp_path, f"  a: {entry}\n")


def test_an_unpriced_arm_and_a_bad_unit_are_refused(tmp_path: Path) -> None:
    assert "pricing names arm 'c'" in refusal(tmp_path, "  c: {input: 1}\n")
    assert "must name a priced arm" in refusal(tmp_path, "  a: {input: 1}\n  unit: {arm: b}\n")


def test_the_unit_is_the_plain_prices_of_its_call(tmp_path: Path) -> None:
    spec = loaded(tmp_path, "  a: {input: 2, output: 10, cache_write: 50, reasoning: 70}\n"
                            "  unit: {arm: a, prompt_tokens: 1000, completion_tokens: 100}\n")
    assert spec.cost_unit_usd == pytest.approx((1000 * 2 + 100 * 10) / 1e6)


def test_each_class_is_priced_apart() -> None:
    price = Price(3.0, 15.0, cache_read=0.3, cache_write=3.75, reasoning=20.0, batch_discount=0.5)
    usage = {"prompt_tokens": 1000, "cache_read_tokens": 600, "cache_write_tokens": 100,
             "completion_tokens": 500, "reasoning_tokens": 200}
    plain = (300 * 3.0 + 600 * 0.3 + 100 * 3.75 + 300 * 15.0 + 200 * 20.0) / 1e6
    assert price.cost(usage) == pytest.approx(plain)
    assert price.cost(usage, batch=True) == pytest.approx(plain / 2)


def test_counts_that_do_not_add_up_are_clamped_per_class() -> None:
    """More cached than prompt tokens: the plain input class is 0, never negative."""
    price = Price(1.0, 1.0, cache_read=0.5, reasoning=2.0)
    usage = {"prompt_tokens": 10, "cache_read_tokens": 40, "completion_tokens": 0,
             "reasoning_tokens": 5}
    assert price.cost(usage) == pytest.approx((40 * 0.5 + 5 * 2.0) / 1e6)


def test_a_count_that_is_no_count_makes_the_cost_unknown() -> None:
    price = Price(1.0, 1.0)
    assert price.cost({"prompt_tokens": 2**60}) is None
    assert price.cost({"prompt_tokens": 1.5}) is None
    assert price.cost({"prompt_tokens": True}) is None
    assert price.cost({"prompt_tokens": -5, "completion_tokens": 3}) == pytest.approx(3e-6)


def test_the_dearest_price_of_a_token_assumes_no_cache_discount() -> None:
    assert Price(3.0, 15.0, cache_read=0.3, cache_write=3.75, reasoning=20.0).dearest() == (
        3.75, 20.0)
    assert Price(3.0, 15.0, cache_read=0.3, reasoning=1.0).dearest() == (3.0, 15.0)
    assert Price(2.0, 8.0, batch_discount=0.5).dearest(batch=True) == (1.0, 4.0)
    assert Price(2.0, 8.0, batch_discount=0.5).dearest() == (2.0, 8.0)


RATES = st.floats(0, 1e12, allow_nan=False, allow_infinity=False)
COUNTS = st.integers(-(2**20), 2**53 - 1)
USAGE_KEYS = ("prompt_tokens", "completion_tokens", "cache_read_tokens", "cache_write_tokens",
              "reasoning_tokens")
PRICES = st.builds(Price, RATES, RATES, st.none() | RATES, st.none() | RATES, st.none() | RATES,
                   st.floats(0, 1, exclude_max=True))
USAGES = st.dictionaries(st.sampled_from(USAGE_KEYS), COUNTS)


def formula(price: Price, usage: dict[str, Any], batch: bool) -> float:
    def n(key: str) -> int:
        return max(usage.get(key, 0), 0)

    def side(rate: float | None, other: float) -> float:
        return other if rate is None else rate

    read, write, reasoning = n("cache_read_tokens"), n("cache_write_tokens"), n("reasoning_tokens")
    total = (max(n("prompt_tokens") - read - write, 0) * price.input
             + read * side(price.cache_read, price.input)
             + write * side(price.cache_write, price.input)
             + max(n("completion_tokens") - reasoning, 0) * price.output
             + reasoning * side(price.reasoning, price.output))
    return total * (1 - price.batch_discount if batch else 1) / 1e6


@PROFILE
@given(PRICES, USAGES, st.booleans())
def test_a_cost_is_the_formula_and_never_negative_or_nan(
    price: Price, usage: dict[str, int], batch: bool
) -> None:
    cost = price.cost(usage, batch)
    assert cost is not None and math.isfinite(cost) and cost >= 0
    assert cost == pytest.approx(formula(price, usage, batch), rel=1e-9, abs=1e-18)
    worst_in, worst_out = price.dearest(batch)
    tokens = max(usage.get("prompt_tokens", 0), 0), max(usage.get("completion_tokens", 0), 0)
    if all(usage.get(k, 0) >= 0 for k in USAGE_KEYS) and (
        usage.get("cache_read_tokens", 0) + usage.get("cache_write_tokens", 0) <= tokens[0]
        and usage.get("reasoning_tokens", 0) <= tokens[1]
    ):  # counts that add up never cost more than the worst case of their totals
        assert cost <= (tokens[0] * worst_in + tokens[1] * worst_out) / 1e6 * (1 + 1e-9)


@PROFILE
@given(RATES, RATES, st.integers(0, 2**53 - 1), st.integers(0, 2**53 - 1))
def test_without_the_new_keys_the_figure_is_the_old_one(
    per_input: float, per_output: float, prompt: int, completion: int
) -> None:
    """The figure before token classes, to the last digit: a spec of input and output only."""
    usage = {"prompt_tokens": prompt, "completion_tokens": completion}
    old = (prompt * per_input + completion * per_output) / 1e6
    assert Price(per_input, per_output).cost(usage) == old
    # A usage with classes but a spec that prices none of them apart: the same figure.
    classed = {**usage, "cache_read_tokens": prompt // 3, "reasoning_tokens": completion // 2}
    assert Price(per_input, per_output).cost(classed) == old


@PROFILE
@given(st.dictionaries(st.sampled_from((*USAGE_KEYS, "x")),
                       st.integers() | st.floats() | st.booleans() | st.text(max_size=3)))
def test_any_usage_costs_a_figure_or_nothing(usage: dict[str, Any]) -> None:
    cost = Price(2.0, 8.0, cache_read=0.5, reasoning=9.0, batch_discount=0.25).cost(usage, True)
    assert cost is None or (math.isfinite(cost) and cost >= 0)


def test_an_arm_with_a_dot_in_its_name_is_named_whole(tmp_path: Path) -> None:
    path = tmp_path / "demo.yaml"
    path.write_text(HEAD.replace("  b: {provider: sim}", "  gpt-4.1: {provider: sim}")
                    + "  gpt-4.1: {input: 1, output: 2, reasoning: -3}\n")
    where = r"demo.yaml:11 \[pricing.gpt-4.1.reasoning\]: must be >= 0"
    with pytest.raises(SpecError, match=where):
        load_spec(path)
