"""The agreement statistics against published worked examples and against independent
computations from their definitions (brute-force pairs for alpha, the moment form for weighted
kappa), with Hypothesis properties: never NaN, symmetric in the raters, 1 for identical raters."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from itertools import permutations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_echo_bench.analysis.agreement import (
    MAX_WORK,
    METRICS,
    Estimate,
    Interval,
    alpha_interval,
    bootstrap,
    cohen_kappa,
    coincidences,
    kappa_interval,
    krippendorff_alpha,
)

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True, database=None)
N = None
# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", section C: four observers,
# twelve units, values 1..5, missing data. Rows are observers A..D, columns units 1..12.
OBSERVERS = (
    (1, 2, 3, 3, 2, 1, 4, 1, 2, N, N, N),
    (1, 2, 3, 3, 2, 2, 4, 1, 2, 5, N, 3),
    (N, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, N),
    (1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, N),
)
UNITS = list(zip(*OBSERVERS, strict=True))


def brute_alpha(units: Sequence[Sequence[object]], metric: str) -> float:
    """alpha = 1 - D_o / D_e straight from the definition: D_o averages delta over every pair of
    ratings within a unit (weighted 1 / (m_u - 1)), D_e over every pair of pooled ratings."""
    pairable = [[v for v in unit if v is not None] for unit in units]
    pairable = [unit for unit in pairable if len(unit) >= 2]
    pooled = [v for unit in pairable for v in unit]
    n, counts = len(pooled), Counter(pooled)
    ordered = sorted(counts) if metric == "ordinal" else []

    def delta(c: object, k: object) -> float:
        if metric == "nominal":
            return float(c != k)
        if metric == "interval":
            return (c - k) ** 2  # type: ignore[operator]
        lo, hi = sorted((ordered.index(c), ordered.index(k)))  # Krippendorff's ordinal metric
        return (sum(counts[g] for g in ordered[lo : hi + 1]) - (counts[c] + counts[k]) / 2) ** 2

    d_o = (
        sum(
            sum(delta(a, b) for a, b in permutations(unit, 2)) / (len(unit) - 1)
            for unit in pairable
        )
        / n
    )
    d_e = sum(delta(a, b) for a, b in permutations(pooled, 2)) / (n * (n - 1))
    return 1 - d_o / d_e


@pytest.mark.parametrize(
    ("metric", "published"), [("nominal", 0.743), ("ordinal", 0.815), ("interval", 0.849)]
)
def test_alpha_of_krippendorffs_own_example(metric: str, published: float) -> None:
    got = krippendorff_alpha(UNITS, metric)  # type: ignore[arg-type]
    assert round(got.value, 3) == published  # type: ignore[arg-type]
    assert got.value == pytest.approx(brute_alpha(UNITS, metric), abs=1e-12)
    assert got.n == 11 and got.reason is None  # unit 12 has one rating: it cannot be paired


def test_the_coincidence_matrix_of_krippendorffs_example() -> None:
    # The paper's matrix of coincidences (section C): o_11 = 7, o_12 = 4/3, ..., n_c = 9, 13, 10,
    # 5, 3 of n = 40 pairable values; 8 of them off the diagonal, so nominal
    # alpha = 1 - (n - 1) 8 / (n^2 - sum n_c^2) = 1 - 39 * 8 / 1216.
    matrix, marginals = coincidences([[v for v in unit if v is not None] for unit in UNITS[:11]])
    third = 1 / 3
    expected = {
        (1, 1): 7, (1, 2): 4 * third, (1, 3): third, (1, 4): third, (2, 2): 10,
        (2, 3): 4 * third, (2, 4): third, (3, 3): 8, (3, 4): third, (4, 4): 4, (5, 5): 3,
    }  # fmt: skip
    for (c, k), o in expected.items():
        assert matrix[c, k] == pytest.approx(o) and matrix[k, c] == pytest.approx(o)
    assert len(matrix) == 17 and marginals == {1: 9, 2: 13, 3: 10, 4: 5, 5: 3}
    assert krippendorff_alpha(UNITS).value == pytest.approx(1 - 39 * 8 / 1216, abs=1e-14)


def test_cohen_kappa_of_a_hand_computed_two_by_two_table() -> None:
    # yes/yes 20, yes/no 5, no/yes 10, no/no 15: p_o = 35/50 = 0.7,
    # p_e = (25/50)(30/50) + (25/50)(20/50) = 0.5, kappa = (0.7 - 0.5) / (1 - 0.5) = 0.4.
    pairs = [("y", "y")] * 20 + [("y", "n")] * 5 + [("n", "y")] * 10 + [("n", "n")] * 15
    assert cohen_kappa(pairs) == Estimate(0.4, 50)
    # an item either rater left unrated is left out
    assert cohen_kappa([*pairs, (None, "y"), ("n", None)]) == Estimate(0.4, 50)


def moment_weighted_kappa(pairs: Sequence[tuple[int, int]]) -> float:
    """Quadratic-weighted kappa by its moment form (Fleiss & Cohen 1973; Schuster 2004):
    2 s_xy / (s_x^2 + s_y^2 + (mean_x - mean_y)^2), population moments of the positions."""
    n = len(pairs)
    mx, my = sum(a for a, _ in pairs) / n, sum(b for _, b in pairs) / n
    sxy = sum((a - mx) * (b - my) for a, b in pairs) / n
    sxx = sum((a - mx) ** 2 for a, _ in pairs) / n
    syy = sum((b - my) ** 2 for _, b in pairs) / n
    return 2 * sxy / (sxx + syy + (mx - my) ** 2)


def test_weighted_kappa_of_a_worked_table() -> None:
    # positions 0..2, w = (i - j)^2: the disagreements weigh 1 + 1 + 4 = 6 over n = 6 items;
    # rows and columns (2, 2, 2), so the chance table weighs sum(w r c) / n = 4 * 12 / 6 = 8:
    # kappa_w = 1 - 6 / 8.
    pairs = [(1, 1), (1, 2), (2, 2), (2, 3), (3, 1), (3, 3)]
    got = cohen_kappa(pairs, "quadratic")
    assert got.value == 0.25
    assert got.value == pytest.approx(moment_weighted_kappa([(a - 1, b - 1) for a, b in pairs]))


grade_pairs = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=1, max_size=40)


@SETTINGS
@given(grade_pairs)
def test_weighted_kappa_equals_its_moment_form(pairs: list[tuple[int, int]]) -> None:
    got = cohen_kappa(pairs, "quadratic", scale=range(6))  # type: ignore[arg-type]
    if got.value is None:
        assert len({v for pair in pairs for v in pair}) == 1
    else:
        assert got.value == pytest.approx(moment_weighted_kappa(pairs), abs=1e-9)


def test_weighted_kappa_weighs_by_position_on_the_scale() -> None:
    pairs = [(1, 1), (1, 3), (3, 3), (3, 1), (2, 2)]
    # Without a scale the categories are 1, 2, 3 (positions 0..2), the same as the full scale.
    assert cohen_kappa(pairs, "quadratic") == cohen_kappa(pairs, "quadratic", scale=[1, 2, 3])
    # A scale with more categories changes nothing: weights depend on position differences only.
    assert cohen_kappa(pairs, "quadratic", scale=[0, 1, 2, 3, 4]) == cohen_kappa(pairs, "quadratic")


ratings = st.one_of(
    st.none(),
    st.integers(-3, 3),
    st.sampled_from(["pass", "fail", "maybe"]),
    st.floats(allow_nan=False, allow_infinity=False),
)


def finite_or_none(estimate: Estimate) -> None:
    if estimate.value is None:
        assert estimate.reason
    else:
        assert math.isfinite(estimate.value) and estimate.reason is None


@SETTINGS
@given(st.lists(st.tuples(ratings, ratings), max_size=30))
def test_kappa_never_nan_and_symmetric_in_the_raters(pairs: list[tuple[object, object]]) -> None:
    got = cohen_kappa(pairs)
    finite_or_none(got)
    assert cohen_kappa([(b, a) for a, b in pairs]) == got
    if got.value is not None:
        assert -1 <= got.value <= 1


@SETTINGS
@given(st.lists(st.one_of(st.none(), st.integers(1, 7)), max_size=30), st.booleans())
def test_kappa_of_identical_raters_is_one_when_defined(
    grades: list[int | None], quad: bool
) -> None:
    got = cohen_kappa([(g, g) for g in grades], "quadratic" if quad else "none")
    finite_or_none(got)
    assert got.value in (None, 1.0)
    assert (got.value is None) == (len({g for g in grades if g is not None}) < 2)


units_of = st.lists(st.lists(ratings, min_size=3, max_size=3), max_size=25)


@SETTINGS
@given(units_of)
def test_nominal_alpha_never_nan_within_bounds_and_symmetric(units: list[list[object]]) -> None:
    got = krippendorff_alpha(units)
    finite_or_none(got)
    if got.value is not None:
        assert -1 <= got.value <= 1
        assert got.value == pytest.approx(brute_alpha(units, "nominal"), abs=1e-9)
    for order in permutations(range(3)):
        swapped = krippendorff_alpha([[unit[r] for r in order] for unit in units])
        assert swapped.n == got.n and swapped.reason == got.reason
        assert swapped.value == pytest.approx(got.value, abs=1e-12)


numeric_units = st.lists(
    st.lists(st.one_of(st.none(), st.integers(0, 10)), min_size=2, max_size=4), max_size=20
)


@SETTINGS
@given(numeric_units, st.sampled_from(["ordinal", "interval"]))
def test_alpha_equals_the_brute_force_definition(units: list[list[int]], metric: str) -> None:
    got = krippendorff_alpha(units, metric)  # type: ignore[arg-type]
    finite_or_none(got)
    if got.value is not None:
        assert got.value == pytest.approx(brute_alpha(units, metric), abs=1e-9)


@SETTINGS
@given(st.lists(st.lists(st.floats(-1e308, 1e308), min_size=2, max_size=3), max_size=10))
def test_interval_alpha_of_huge_or_tiny_numbers_is_never_nan(units: list[list[float]]) -> None:
    finite_or_none(krippendorff_alpha(units, "interval"))


def test_undefined_figures_say_why() -> None:
    assert cohen_kappa([]) == Estimate(None, 0, "no item was rated by both raters")
    assert cohen_kappa([(None, 1), (2, None)]).n == 0
    assert cohen_kappa([("a", "a")] * 5).reason.startswith("both raters gave one")  # type: ignore[union-attr]
    assert krippendorff_alpha([]) == Estimate(None, 0, "no item has two or more ratings")
    assert krippendorff_alpha([[1, None], [None, 2]]).reason == "no item has two or more ratings"
    for metric in METRICS:
        one = krippendorff_alpha([[3, 3], [3, None, 3]], metric)
        assert one.value is None and one.n == 2 and "same value" in one.reason  # type: ignore[operator]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: cohen_kappa([(1, math.nan)]), "item 0, second rating: NaN is not a rating"),
        (lambda: cohen_kappa([(1, 2, 3)]), "item 0: a pair of two ratings"),
        (lambda: cohen_kappa(["ab"]), "item 0: a pair of two ratings"),
        (lambda: cohen_kappa([([1], 1)]), "a list is not a rating"),
        (lambda: cohen_kappa([(1, 9)], scale=[1, 2]), "ratings 9 are not on the scale"),
        (lambda: cohen_kappa([(1, 1)], scale=[1, 1]), "repeats a category"),
        (lambda: cohen_kappa([(1, 1)], "linear"), "weights must be"),  # type: ignore[arg-type]
        (lambda: cohen_kappa([(1, "a")], "quadratic"), "give the ordered scale"),
        (lambda: krippendorff_alpha([[1, "a"]], "ordinal"), "give the ordered scale"),
        (lambda: krippendorff_alpha([[1, "a"]], "interval"), "unit 0, rater 1: 'a' is not a"),
        (lambda: krippendorff_alpha([[1, math.inf]], "interval"), "is not a finite number"),
        (lambda: krippendorff_alpha([[1, 2]], "ratio"), "metric must be one of"),  # type: ignore[arg-type]
        (lambda: krippendorff_alpha([3]), "unit 0: a sequence of ratings"),  # type: ignore[list-item]
        (lambda: kappa_interval([(1, 2)], resamples=0), "resamples must be 1.."),
        (lambda: kappa_interval([(1, 2)], level=95), "level must be between 0 and 1"),
        (lambda: alpha_interval([[1, 2]], seed=1.5), "seed must be a whole number"),  # type: ignore[arg-type]
        (lambda: bootstrap([1], len, work=-1), "work must be a whole number"),
    ],
)
def test_bad_input_is_a_clear_value_error(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        call()  # type: ignore[operator]


def test_bootstrap_of_the_example_is_seeded_and_contains_the_estimate() -> None:
    for metric in METRICS:
        point = krippendorff_alpha(UNITS, metric).value
        got = alpha_interval(UNITS, metric, seed=7)  # type: ignore[arg-type]
        assert got == alpha_interval(UNITS, metric, seed=7)  # type: ignore[arg-type]
        assert got.resamples == 1000 and got.reason is None
        assert got.lo <= point <= got.hi <= 1  # type: ignore[operator]


def test_degenerate_resamples_are_skipped_and_counted() -> None:
    # 9 items both call "a", one both call "b": kappa 1. A resample without the "b" item has one
    # category only (kappa undefined): about 0.9^10 = 35% of them are skipped, not counted as 0.
    pairs = [("a", "a")] * 9 + [("b", "b")]
    got = kappa_interval(pairs, resamples=1000, seed=3)
    assert got.lo == got.hi == 1.0
    assert got.resamples == 1000 and 250 < got.skipped < 450
    assert kappa_interval([("a", "a")] * 9).reason.startswith("both raters")  # type: ignore[union-attr]
    assert alpha_interval([]) == Interval(None, None, 0.95, 0, 0, "no item has two or more ratings")
    assert bootstrap([1, 2], lambda s: None).reason == "undefined on every resample"
    assert bootstrap([], len).reason == "no items to resample"


def test_the_bootstrap_work_is_bounded() -> None:
    # More items than the bound allows 1,000 resamples of: fewer resamples, said in the result.
    items = list(range(MAX_WORK // 400))
    got = bootstrap(items, lambda s: float(s[0]), resamples=1000)
    assert got.resamples == 400 and got.lo is not None
    too_many = bootstrap(list(range(MAX_WORK // 50)), len)
    assert too_many.lo is None and too_many.resamples == 0 and "too many" in too_many.reason  # type: ignore[operator]


agreeing = st.lists(st.tuples(st.integers(1, 5), st.booleans()), min_size=40, max_size=80)


@settings(max_examples=25, deadline=None, derandomize=True, database=None)
@given(agreeing)
def test_bootstrap_interval_contains_the_estimate_of_well_behaved_data(
    draws: list[tuple[int, bool]],
) -> None:
    # The first rater uses every grade in turn; a second agrees where the flag says and guesses
    # on the rest.
    pairs = [(i % 5 + 1, i % 5 + 1 if same else b) for i, (b, same) in enumerate(draws)]
    for weights in ("none", "quadratic"):
        point = cohen_kappa(pairs, weights).value  # type: ignore[arg-type]
        got = kappa_interval(pairs, weights, resamples=300)  # type: ignore[arg-type]
        assert point is not None and got.lo <= point <= got.hi  # type: ignore[operator]
    # a third rater who agrees with the first on the even items, with the second on the odd ones
    units = [[a, b, b if i % 2 else a] for i, (a, b) in enumerate(pairs)]
    for metric in METRICS:
        point = krippendorff_alpha(units, metric).value  # type: ignore[arg-type]
        got = alpha_interval(units, metric, resamples=300)  # type: ignore[arg-type]
        assert point is not None and got.lo <= point <= got.hi  # type: ignore[operator]


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(st.lists(st.tuples(ratings, ratings), max_size=20), st.integers(0, 2**32))
def test_bootstrap_intervals_are_ordered_and_never_nan(
    pairs: list[tuple[object, object]], seed: int
) -> None:
    units = [[a, b, a] for a, b in pairs]
    for got in (kappa_interval(pairs, resamples=50, seed=seed), alpha_interval(units, seed=seed)):
        assert got.skipped <= got.resamples
        if got.lo is None:
            assert got.hi is None and got.reason
        else:
            assert -1 <= got.lo <= got.hi <= 1 and got.reason is None
