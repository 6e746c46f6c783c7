"""A judge against human labels and pairwise judging's figures, against tables worked by hand and
the Wilson interval of ``stats``; hostile inputs give a figure or a clear error, never a NaN."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_echo_bench.analysis.agreement import Estimate, cohen_kappa
from pytest_echo_bench.analysis.judges import (
    OUTCOMES,
    Rate,
    agree_with_humans,
    position_consistency,
    rate,
    win_rates,
)
from pytest_echo_bench.analysis.stats import wilson

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True, database=None)


def test_a_graded_judge_against_people() -> None:
    # (human, judge): the judge agrees on 3 of 5, grades one item a point high, one two points low
    pairs = [(1, 1), (2, 3), (3, 3), (4, 2), (5, 5), (None, 4), (3, None)]
    got = agree_with_humans(pairs, ordinal=True, scale=[1, 2, 3, 4, 5])
    assert got.n == 5
    assert got.accuracy == Rate(3, 5, 0.6, *wilson(3, 5))
    assert got.kappa == cohen_kappa(pairs, "quadratic", scale=[1, 2, 3, 4, 5])
    assert got.categories == (1, 2, 3, 4, 5)
    assert got.confusion == (
        (1, 0, 0, 0, 0),
        (0, 0, 1, 0, 0),
        (0, 0, 1, 0, 0),
        (0, 1, 0, 0, 0),
        (0, 0, 0, 0, 1),
    )
    assert got.mean_bias == Estimate((1 - 2) / 5, 5)  # +1 and -2 over five items


def test_a_labelling_judge_against_people() -> None:
    pairs = [("correct", "correct"), ("incorrect", "correct"), ("incorrect", "incorrect")]
    got = agree_with_humans(pairs)
    assert got.categories == ("correct", "incorrect")
    assert got.confusion == ((1, 0), (1, 1))
    assert got.kappa == cohen_kappa(pairs)
    assert got.mean_bias == Estimate(None, 3, "the grades are labels, not numbers")
    # pass/fail as True/False: the bias is the judge's pass rate minus people's
    lenient = agree_with_humans([(False, True), (True, True), (False, False), (True, True)])
    assert lenient.mean_bias == Estimate(0.25, 4)


def test_no_labelled_item_gives_reasons_not_figures() -> None:
    got = agree_with_humans([(None, 3), (2, None)], ordinal=True)
    assert got.n == 0 and got.confusion == () and got.categories == ()
    assert got.accuracy == Rate(0, 0, None, None, None, "no items")
    assert got.kappa.value is None and got.kappa.reason
    assert got.mean_bias == Estimate(None, 0, "no item was rated by both raters")


def test_a_bias_beyond_the_float_range_is_undefined_not_infinite() -> None:
    got = agree_with_humans([(-1e308, 1e308), (0.0, 0.0)])
    assert got.mean_bias.value is None and "too large" in got.mean_bias.reason  # type: ignore[operator]


def test_a_sum_of_biases_beyond_the_float_range_still_has_a_mean() -> None:
    # found by Hypothesis: fsum raised OverflowError on the sum of two differences near 9e307
    got = agree_with_humans([(False, 8.988465674311579e307), (False, 8.98846567431158e307)])
    assert got.mean_bias.value == pytest.approx(8.98846567431158e307)


def test_position_consistency_counts_verdicts_that_survive_the_swap() -> None:
    verdicts = [("win", "win"), ("win", "loss"), ("tie", "tie"), ("loss", "tie"), (None, "win")]
    assert position_consistency(verdicts) == Rate(2, 4, 0.5, *wilson(2, 4))
    assert position_consistency([]) == Rate(0, 0, None, None, None, "no items")


def test_win_rates_with_their_intervals() -> None:
    got = win_rates(["win", "win", "tie", "loss", None, "win"])
    assert got.win == Rate(3, 5, 0.6, *wilson(3, 5))
    assert got.tie == Rate(1, 5, 0.2, *wilson(1, 5))
    assert got.loss == Rate(1, 5, 0.2, *wilson(1, 5))
    assert win_rates([None]).win.reason == "no items"
    assert rate(0, 7) == Rate(0, 7, 0.0, 0.0, wilson(0, 7)[1])


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: win_rates(["won"]), "item 0: 'won' is not one of win, tie, loss"),
        (lambda: position_consistency([("win",)]), "item 0: a pair of two verdicts"),
        (lambda: position_consistency([("win", "draw")]), "item 0, second order: 'draw'"),
        (lambda: agree_with_humans([(1, math.nan)]), "NaN is not a rating"),
        (lambda: agree_with_humans([(1, 6)], scale=[1, 2, 3]), "ratings 6 are not on the scale"),
        (lambda: agree_with_humans([(1, "a")], ordinal=True), "give the ordered scale"),
    ],
)
def test_bad_input_is_a_clear_value_error(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()  # type: ignore[operator]


labels = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=False), st.text(max_size=3)
)


def figures(estimate: Estimate | Rate) -> list[float | None]:
    if isinstance(estimate, Rate):
        return [estimate.rate, estimate.lo, estimate.hi]
    return [estimate.value]


@SETTINGS
@given(st.lists(st.tuples(labels, labels), max_size=30))
def test_no_figure_is_ever_nan(pairs: list[tuple[object, object]]) -> None:
    got = agree_with_humans(pairs)
    for estimate in (got.accuracy, got.kappa, got.mean_bias):
        values = figures(estimate)
        assert all(v is None or math.isfinite(v) for v in values)
        assert (values[0] is None) == bool(estimate.reason)
    assert sum(map(sum, got.confusion)) == got.n == got.accuracy.n


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from([*OUTCOMES, None]), st.sampled_from([*OUTCOMES, None]))))
def test_pairwise_shares_are_proper(verdicts: list[tuple[str | None, str | None]]) -> None:
    consistency = position_consistency(verdicts)  # type: ignore[arg-type]
    shares = win_rates([a for a, _ in verdicts])  # type: ignore[arg-type]
    for figure in (consistency, shares.win, shares.tie, shares.loss):
        if figure.n:
            assert 0 <= figure.lo <= figure.rate <= figure.hi <= 1  # type: ignore[operator]
    if shares.win.n:
        assert shares.win.count + shares.tie.count + shares.loss.count == shares.win.n
