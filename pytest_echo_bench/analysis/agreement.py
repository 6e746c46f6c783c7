"""Agreement between raters: Cohen's kappa (plain and quadratic-weighted), Krippendorff's alpha,
and bootstrap intervals over items (``analysis.judges`` builds the judge figures on them).

Pure functions of plain ratings: a rating is a label or a number, ``None`` is a missing rating.
No figure is ever NaN: an undefined one is ``None`` with a reason a reader can be shown. Bad
input (a NaN rating, a value off the given scale, a malformed pair) raises ``ValueError``.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import chain
from typing import Literal, TypeVar

from pytest_echo_bench.analysis.stats import percentile

Metric = Literal["nominal", "ordinal", "interval"]
METRICS: tuple[Metric, ...] = ("nominal", "ordinal", "interval")
Weights = Literal["none", "quadratic"]
Rating = Hashable
UnitKind = frozenset[tuple[Rating, int]]
T = TypeVar("T")

DEFAULT_RESAMPLES = 1000
MAX_RESAMPLES = 100_000
# A bootstrap's work is resamples x (items + the statistic's own steps); this bounds it (a few
# seconds in pure Python), so a large run gets fewer resamples rather than a report that hangs.
# Kappa on 5,000 items gets all 1,000.
MAX_WORK = 5_000_000
# Fewer resamples than this give percentiles too coarse to print as a 95% interval.
MIN_RESAMPLES = 100


@dataclass(frozen=True)
class Estimate:
    """A statistic over ``n`` items; ``value`` is None, and ``reason`` says why, when undefined."""

    value: float | None
    n: int
    reason: str | None = None


@dataclass(frozen=True)
class Interval:
    """A bootstrap percentile interval: ``resamples`` drawn, ``skipped`` of them undefined."""

    lo: float | None
    hi: float | None
    level: float
    resamples: int
    skipped: int
    reason: str | None = None


def _check_rating(value: object, where: str) -> None:
    """A rating must be hashable and not NaN (NaN equals nothing, not even itself)."""
    if isinstance(value, float) and math.isnan(value):
        raise ValueError(f"{where}: NaN is not a rating; give None for a missing one")
    try:
        hash(value)
    except TypeError:
        raise ValueError(
            f"{where}: a {type(value).__name__} is not a rating; give a label or a number"
        ) from None


def is_number(value: object) -> bool:
    """True for a finite int or float (a bool counts: True is 1)."""
    return isinstance(value, (int, float)) and math.isfinite(value)


def categories(
    values: Iterable[Rating], scale: Sequence[Rating] | None = None, ordered: bool = False
) -> list[Rating]:
    """The categories in order: ``scale`` as given (every value must be on it), else the sorted
    union of the values (labels that do not sort together, when unordered, sort by type and text).
    """
    seen = set(values)
    if scale is not None:
        if len(set(scale)) != len(scale) or any(c is None for c in scale):
            raise ValueError(f"the scale {list(scale)!r} repeats a category or holds None")
        off = seen - set(scale)
        if off:
            shown = ", ".join(sorted(map(repr, off)))
            raise ValueError(f"ratings {shown} are not on the scale {list(scale)!r}")
        return list(scale)
    try:
        return sorted(seen)  # type: ignore[type-var]
    except TypeError:
        if ordered:
            raise ValueError(
                "ordinal ratings must compare with each other (all numbers or all text); "
                "give the ordered scale"
            ) from None
        return sorted(seen, key=lambda v: (type(v).__name__, repr(v)))


def rated_pairs(pairs: Sequence[Sequence[Rating | None]]) -> list[tuple[Rating, Rating]]:
    """The pairs with both ratings present, each checked."""
    rated: list[tuple[Rating, Rating]] = []
    # A panel's million pairs repeat a few: each distinct tuple is checked once (an equal tuple
    # holds ratings that pass the same checks), then only looked up.
    checked: dict[tuple[Rating | None, ...], bool] = {}
    for i, pair in enumerate(pairs):
        known = _known(checked, pair)
        if known is None:
            a, b = _checked_pair(pair, i)
            known = a is not None and b is not None
            if type(pair) is tuple:
                checked[pair] = known
        if known:  # a tuple as it is: one object however many items share it
            rated.append(pair if type(pair) is tuple else tuple(pair))  # type: ignore[arg-type]
    return rated


def _known(checked: dict[tuple[Rating | None, ...], bool], pair: object) -> bool | None:
    """Whether a tuple equal to ``pair`` was checked and had both ratings (None: not checked)."""
    if type(pair) is not tuple:
        return None
    try:
        return checked.get(pair)
    except TypeError:  # a rating that is not hashable: refused by the check
        return None


def _checked_pair(pair: object, i: int) -> tuple[Rating | None, Rating | None]:
    if isinstance(pair, (str, bytes)) or not isinstance(pair, Sequence) or len(pair) != 2:
        raise ValueError(f"item {i}: a pair of two ratings is needed, got {pair!r}")
    a, b = pair
    _check_rating(a, f"item {i}, first rating")
    _check_rating(b, f"item {i}, second rating")
    return a, b


def _kappa_of(indexed: Sequence[tuple[int, int]], weights: Weights) -> float | None:
    """Kappa from (row, column) category positions: 1 - n sum(w O) / sum(w r c), in integers.

    With disagreement weights w (0/1, or (i - j)^2; the (k - 1)^2 that would scale them to [0, 1]
    cancels) this is Cohen's 1 - q_o / q_e with the chance table e_ij = r_i c_j / n, O the
    observed counts, r and c the raters' category counts. None when the chance sum is 0: both
    raters gave one and the same category, so chance agrees for certain.
    """
    n = len(indexed)
    rows = Counter(i for i, _ in indexed)
    cols = Counter(j for _, j in indexed)
    if weights == "quadratic":
        observed = n * sum((i - j) ** 2 for i, j in indexed)
        expected = _quadratic_chance(n, rows, cols)
    else:
        observed = n * sum(i != j for i, j in indexed)
        expected = n * n - sum(m * cols[i] for i, m in rows.items())
    if expected == 0:
        return None
    # One rounding at the end: the figure is exact, and exactly symmetric in the two raters.
    return float(Fraction(expected - observed, expected))


def _quadratic_chance(n: int, rows: Counter[int], cols: Counter[int]) -> int:
    """sum_ij (i - j)^2 r_i c_j in closed form, linear in the categories (sum r = sum c = n):
    n sum r_i i^2 + n sum c_j j^2 - 2 (sum r_i i)(sum c_j j)."""
    squares = sum(m * i * i for side in (rows, cols) for i, m in side.items())
    first_r, first_c = (sum(m * i for i, m in side.items()) for side in (rows, cols))
    return n * squares - 2 * first_r * first_c


def _indexed(
    pairs: Sequence[Sequence[Rating | None]], weights: Weights, scale: Sequence[Rating] | None
) -> list[tuple[int, int]]:
    if weights not in ("none", "quadratic"):
        raise ValueError(f"weights must be 'none' or 'quadratic', not {weights!r}")
    rated = rated_pairs(pairs)
    cats = categories(chain.from_iterable(rated), scale, ordered=weights == "quadratic")
    position = {c: i for i, c in enumerate(cats)}
    # one (row, column) tuple per distinct pair, shared by the items that have it
    places: dict[tuple[Rating, Rating], tuple[int, int]] = {}
    return [places.get(pair) or places.setdefault(pair, (position[pair[0]], position[pair[1]]))
            for pair in rated]


NO_PAIRS = "no item was rated by both raters"
ONE_CATEGORY = "both raters gave one and the same category throughout: chance agreement is 1"


def cohen_kappa(
    pairs: Sequence[Sequence[Rating | None]],
    weights: Weights = "none",
    scale: Sequence[Rating] | None = None,
) -> Estimate:
    """Cohen's kappa of two raters, one (first, second) pair of ratings per item.

    kappa = (p_o - p_e) / (1 - p_e): p_o the share of items on which they agree, p_e the share
    expected by chance from each rater's own category shares (Cohen 1960, "A coefficient of
    agreement for nominal scales"). ``weights="quadratic"`` gives weighted kappa
    1 - sum(w o) / sum(w e) with w_ij = (i - j)^2 / (k - 1)^2 on the categories' positions in
    the ordered ``scale`` (else the sorted union of the ratings) (Cohen 1968; Fleiss & Cohen
    1973, who show it equals the intraclass correlation). Positions, not values: a scale with
    gaps weighs by rank. Items missing either rating are left out.
    """
    indexed = _indexed(pairs, weights, scale)
    if not indexed:
        return Estimate(None, 0, NO_PAIRS)
    value = _kappa_of(indexed, weights)
    return Estimate(value, len(indexed), None if value is not None else ONE_CATEGORY)


def _present(unit: Sequence[Rating | None], u: int, metric: Metric) -> list[Rating]:
    """The ratings of one unit that are not missing, each checked."""
    if isinstance(unit, (str, bytes)) or not isinstance(unit, Sequence):
        raise ValueError(f"unit {u}: a sequence of ratings (one per rater) is needed")
    present = []
    for r, value in enumerate(unit):
        _check_rating(value, f"unit {u}, rater {r}")
        if value is not None and metric == "interval" and not is_number(value):
            raise ValueError(f"unit {u}, rater {r}: {value!r} is not a finite number")
        if value is not None:
            present.append(value)
    return present


def _units(units: Sequence[Sequence[Rating | None]], metric: Metric) -> list[list[Rating]]:
    """The pairable units (two or more ratings), missing ratings dropped, each rating checked."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, not {metric!r}")
    present = [_present(unit, u, metric) for u, unit in enumerate(units)]
    pairable = [unit for unit in present if len(unit) >= 2]
    if metric == "ordinal":
        categories((v for unit in pairable for v in unit), ordered=True)  # they must sort
    return pairable


def _kind(unit: Sequence[Rating]) -> UnitKind:
    """A unit as the count of each of its ratings: units of one kind add the same coincidences,
    so a resample is summed by kind (a grade scale has few kinds) rather than unit by unit."""
    return frozenset(Counter(unit).items())


def coincidences(
    pairable: Iterable[Sequence[Rating]],
) -> tuple[dict[tuple[Rating, Rating], float], Counter[Rating]]:
    """Krippendorff's coincidence matrix o_ck and its marginals n_c, from the pairable units."""
    return _coincidences(Counter(map(_kind, pairable)))


def _coincidences(
    kinds: Counter[UnitKind],
) -> tuple[dict[tuple[Rating, Rating], float], Counter[Rating]]:
    """o_ck = sum over units u of (number of ordered pairs (c, k) of ratings in u, two different
    raters) / (m_u - 1), m_u the ratings in u (Krippendorff 2011, section B). Sparse: only the
    pairs that occur. n_c = sum_k o_ck is the number of pairable ratings c.
    """
    matrix: dict[tuple[Rating, Rating], float] = {}
    marginals: Counter[Rating] = Counter()
    for kind, times in kinds.items():
        share = times / (sum(n for _, n in kind) - 1)
        for c, n_c in kind:
            marginals[c] += times * n_c
            for k, n_k in kind:
                pairs = n_c * (n_k - 1) if c == k else n_c * n_k
                if pairs:
                    matrix[c, k] = matrix.get((c, k), 0.0) + pairs * share
    return matrix, marginals


def _positions(marginals: Counter[Rating], metric: Metric) -> dict[Rating, float]:
    """Where each value lies for the squared-difference metrics: the value itself (interval) or
    its mid-rank among the pooled pairable ratings (ordinal).

    Krippendorff's ordinal delta_ck = (sum_{g=c..k} n_g - (n_c + n_k) / 2)^2 equals
    (M_k - M_c)^2 with the mid-rank M_c = sum_{g<c} n_g + n_c / 2: ordinal alpha is interval
    alpha on mid-ranks.
    """
    if metric == "interval":
        # alpha is unchanged by scaling; dividing by the largest magnitude keeps every square
        # within [0, 4], so values near the float limits neither overflow nor underflow.
        largest = max(abs(float(c)) for c in marginals) or 1.0  # type: ignore[arg-type]
        return {c: float(c) / largest for c in marginals}  # type: ignore[arg-type]
    positions, below = {}, 0
    for c in sorted(marginals):  # type: ignore[type-var]
        positions[c] = below + marginals[c] / 2
        below += marginals[c]
    return positions


def _alpha_of(kinds: Counter[UnitKind], metric: Metric) -> float | None:
    """alpha = 1 - (n - 1) sum_ck o_ck delta_ck / sum_ck n_c n_k delta_ck (Krippendorff 2011).

    The expected sum over all value pairs is taken in closed form: n^2 - sum n_c^2 for nominal
    delta (0 when equal, else 1), 2 n sum n_c (x_c - mean)^2 for squared differences. None when
    it is 0: every pairable rating is the same value, so no disagreement could be expected.
    """
    matrix, marginals = _coincidences(kinds)
    n = sum(marginals.values())
    if metric == "nominal":
        observed = sum(o for (c, k), o in matrix.items() if c != k)
        expected = float(n * n - sum(m * m for m in marginals.values()))
    else:
        x = _positions(marginals, metric)
        observed = sum(o * (x[c] - x[k]) ** 2 for (c, k), o in matrix.items() if c != k)
        mean = math.fsum(m * x[c] for c, m in marginals.items()) / n
        expected = 2 * n * math.fsum(m * (x[c] - mean) ** 2 for c, m in marginals.items())
    if expected == 0:
        return None
    return 1 - (n - 1) * observed / expected


NO_UNITS = "no item has two or more ratings"
ONE_VALUE = "every rating is the same value: no disagreement could be expected by chance"


def krippendorff_alpha(
    units: Sequence[Sequence[Rating | None]], metric: Metric = "nominal"
) -> Estimate:
    """Krippendorff's alpha of any number of raters, missing ratings allowed.

    ``units`` holds one sequence per item, a rating (or None) per rater. alpha = 1 - D_o / D_e
    from the coincidence matrix (Krippendorff 2011, "Computing Krippendorff's Alpha-Reliability",
    Annenberg School for Communication, University of Pennsylvania): 1 is perfect agreement,
    0 agreement no better than chance. ``metric``: nominal (labels), ordinal (ordered grades,
    mid-rank distances), interval (numbers, squared differences). Items with fewer than two
    ratings cannot be paired and are left out; ``n`` counts the items used.
    """
    pairable = _units(units, metric)
    if not pairable:
        return Estimate(None, 0, NO_UNITS)
    value = _alpha_of(Counter(map(_kind, pairable)), metric)
    return Estimate(value, len(pairable), None if value is not None else ONE_VALUE)


def _check_bootstrap(resamples: int, level: float, seed: int) -> None:
    if isinstance(resamples, bool) or not isinstance(resamples, int):
        raise ValueError(f"resamples must be a whole number, not {resamples!r}")
    if not 1 <= resamples <= MAX_RESAMPLES:
        raise ValueError(f"resamples must be 1..{MAX_RESAMPLES}, not {resamples}")
    if not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ValueError(f"level must be between 0 and 1 (such as 0.95), not {level!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be a whole number, not {seed!r}")


def bootstrap(
    items: Sequence[T],
    statistic: Callable[[Sequence[T]], float | None],
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    level: float = 0.95,
    work: int = 0,
) -> Interval:
    """The percentile bootstrap interval of ``statistic`` over ``items`` (Efron & Tibshirani 1993,
    "An Introduction to the Bootstrap", ch. 13): draw len(items) items with replacement,
    ``resamples`` times from ``random.Random(seed)``, and take the (1 - level) / 2 and
    (1 + level) / 2 percentiles of the statistic's values.

    A resample on which the statistic is undefined (None or not finite: all one category, say)
    is skipped and counted in ``skipped``; the interval then describes the defined resamples
    only, so a large ``skipped`` share says the interval is not to be trusted. The work is
    bounded: resamples x (len(items) + ``work``, the statistic's steps beyond reading its items)
    stays within ``MAX_WORK``, so a large ``items`` gets fewer resamples (the result says how
    many), and below ``MIN_RESAMPLES`` none.
    """
    _check_bootstrap(resamples, level, seed)
    n = len(items)
    if n == 0:
        return Interval(None, None, level, 0, 0, "no items to resample")
    if isinstance(work, bool) or not isinstance(work, int) or work < 0:
        raise ValueError(f"work must be a whole number of steps, not {work!r}")
    drawn = min(resamples, MAX_WORK // (n + work))
    if drawn < min(resamples, MIN_RESAMPLES):
        reason = f"{n} items are too many to resample {MIN_RESAMPLES} times within the work bound"
        return Interval(None, None, level, 0, 0, reason)
    rng = random.Random(seed)
    values: list[float] = []
    for _ in range(drawn):
        value = statistic(rng.choices(items, k=n))
        if value is not None and math.isfinite(value):
            values.append(value)
    skipped = drawn - len(values)
    if not values:
        return Interval(None, None, level, drawn, skipped, "undefined on every resample")
    tail = (1 - level) / 2 * 100
    lo, hi = percentile(values, tail), percentile(values, 100 - tail)
    return Interval(lo, hi, level, drawn, skipped)


def kappa_interval(
    pairs: Sequence[Sequence[Rating | None]],
    weights: Weights = "none",
    scale: Sequence[Rating] | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    level: float = 0.95,
) -> Interval:
    """The bootstrap interval of ``cohen_kappa`` over the items both raters rated. The categories
    (and so the weights) are those of the whole data in every resample."""
    _check_bootstrap(resamples, level, seed)
    indexed = _indexed(pairs, weights, scale)
    if not indexed or _kappa_of(indexed, weights) is None:
        return Interval(None, None, level, 0, 0, NO_PAIRS if not indexed else ONE_CATEGORY)
    # Each resample's kappa is linear in its items: no work beyond drawing them to bound.
    return bootstrap(indexed, lambda s: _kappa_of(s, weights), resamples, seed, level)


def alpha_interval(
    units: Sequence[Sequence[Rating | None]],
    metric: Metric = "nominal",
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    level: float = 0.95,
) -> Interval:
    """The bootstrap interval of ``krippendorff_alpha`` over the items with two or more ratings."""
    _check_bootstrap(resamples, level, seed)
    kinds = [_kind(unit) for unit in _units(units, metric)]
    if not kinds or _alpha_of(Counter(kinds), metric) is None:
        return Interval(None, None, level, 0, 0, ONE_VALUE if kinds else NO_UNITS)
    # Each distinct kind of unit costs its m^2 coincidence steps on every resample.
    steps = sum(sum(n for _, n in kind) ** 2 for kind in set(kinds))
    return bootstrap(
        kinds, lambda s: _alpha_of(Counter(s), metric), resamples, seed, level, work=steps
    )
