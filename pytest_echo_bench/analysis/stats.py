"""Small, exact statistics for pass rates and paired comparisons (no SciPy needed)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from itertools import repeat
from operator import sub
from statistics import NormalDist

Z95 = 1.959963984540054
# Below this many discordant pairs the binomial tail is summed in exact integers (fast enough,
# and exactly rounded); above it, in log space, where the integers grow too large to be quick.
EXACT_INT_MAX = 2000
# Terms of the log-space tail are dropped once they fall below this share of the sum: they can
# no longer change a double.
NEGLIGIBLE = 1e-20


def z_for(level: float) -> float:
    """The two-sided normal quantile for a confidence ``level`` such as 0.95."""
    return Z95 if level == 0.95 else NormalDist().inv_cdf(0.5 + level / 2)


def wilson(correct: float, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval for ``correct`` successes out of ``n`` (95% by default).

    ``correct`` may be a sum of per-item scores in [0, 1] (the mean of repeats): the interval is
    then conservative, since such a score's variance is at most p(1 - p).
    """
    if n <= 0:
        return (0.0, 1.0)
    p = correct / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # At 0 or n correct the bound is exactly 0 or 1; in floats centre - half leaves ~5.55e-17.
    lo = 0.0 if correct <= 0 else max(0.0, centre - half)
    hi = 1.0 if correct >= n else min(1.0, centre + half)
    return (lo, hi)


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts (a binomial test at 1/2).

    Exact for any count: integer arithmetic up to ``EXACT_INT_MAX`` discordant pairs, a
    log-space sum of the same binomial terms beyond (``float(1 << n)`` overflowed at 1,024).
    """
    n = a_only + b_only
    k = min(a_only, b_only)
    if n == 0 or 2 * k == n:
        return 1.0
    if n <= EXACT_INT_MAX:
        # int / int is correctly rounded in Python, and underflows to 0.0 rather than raising.
        return min(1.0, 2 * _comb_sum(n, k) / (1 << n))
    return min(1.0, 2 * math.exp(log_binomial_tail(n, k)))


def _comb_sum(n: int, k: int) -> int:
    """C(n, 0) + ... + C(n, k), each term from the one before
    (math.comb for each costs k times more)."""
    term = total = 1
    for i in range(k):
        term = term * (n - i) // (i + 1)
        total += term
    return total


def log_binomial_tail(n: int, k: int) -> float:
    """log P(X <= k) for X ~ Binomial(n, 1/2), with k < n / 2, summed from the largest term down."""
    log_top = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) - n * math.log(2)
    total, ratio = 1.0, 1.0
    # C(n, i-1) / C(n, i) = i / (n - i + 1): each term from the one above it
    for i in range(k, 0, -1):
        ratio *= i / (n - i + 1)
        total += ratio
        if ratio < NEGLIGIBLE * total:
            break
    return log_top + math.log(total)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))  # adjusted values never decrease
        adjusted[i] = running
    return adjusted


def paired_phi(both: int, a_only: int, b_only: int, neither: int) -> float:
    """The phi correlation of a paired 2x2 table, with Newcombe's (1998) continuity correction.

    When ad > bc, ad - bc is reduced by n/2 (not below 0); phi is 0 when a margin is empty.
    """
    n = both + a_only + b_only + neither
    margins = (both + a_only) * (b_only + neither) * (both + b_only) * (a_only + neither)
    if margins == 0:
        return 0.0
    cross: float = both * neither - a_only * b_only
    if cross > 0:
        cross = max(cross - n / 2, 0.0)
    return cross / math.sqrt(margins)


def newcombe_paired(
    both: int, a_only: int, b_only: int, neither: int, z: float = Z95
) -> tuple[float, float] | None:
    """Newcombe's hybrid score interval (1998, method 10) for rate(a) - rate(b) on paired items.

    Built from the Wilson interval of each arm's rate and the corrected phi of the pairs; None
    when there are no pairs.
    """
    n = both + a_only + b_only + neither
    if n == 0:
        return None
    p1, p2 = (both + a_only) / n, (both + b_only) / n
    l1, u1 = wilson(both + a_only, n, z)
    l2, u2 = wilson(both + b_only, n, z)
    phi = paired_phi(both, a_only, b_only, neither)
    delta = math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    eps = math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    diff = p1 - p2
    return (max(-1.0, diff - delta), min(1.0, diff + eps))


def cluster_interval(
    clusters: Sequence[tuple[float, int]], z: float = Z95
) -> tuple[float, float, float] | None:
    """(standard error, lo, hi) of the overall rate over ``clusters``
    of (correct, n), cluster-robust.

    The sandwich (CR1) variance of a mean, sum over clusters of (correct_g - p n_g)^2, scaled by
    G / (G - 1) and divided by n^2: items of one subtask are not independent draws. None with
    fewer than two clusters.
    """
    groups = [(c, m) for c, m in clusters if m > 0]
    g = len(groups)
    n = sum(m for _, m in groups)
    if g < 2:
        return None
    p = sum(c for c, _ in groups) / n
    variance = g / (g - 1) * sum((c - p * m) ** 2 for c, m in groups) / (n * n)
    se = math.sqrt(variance)
    return (se, max(0.0, p - z * se), min(1.0, p + z * se))


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]) of ``values``; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def t_two_sided_p(t: float, df: int) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom: I_{df/(df+t^2)}(df/2, 1/2)."""
    if df < 1:
        return 1.0
    if math.isinf(t):
        return 0.0
    return min(1.0, _beta_regularized(df / (df + t * t), df / 2, 0.5))


# A report asks for the same few (level, df) many times (each pair of arms over the same items);
# each answer is a hundred steps of a continued fraction.
@lru_cache(maxsize=256)
def t_quantile(level: float, df: int) -> float:
    """The two-sided critical value t such that P(|T| >= t) = 1 - ``level``
    (bisection on ``t_two_sided_p``)."""
    alpha, lo, hi = 1 - level, 0.0, 1.0
    while t_two_sided_p(hi, df) > alpha:
        hi *= 2
    for _ in range(100):  # far below a double's resolution of the quantile
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_two_sided_p(mid, df) > alpha else (lo, mid)
    return (lo + hi) / 2


def paired_t(
    diffs: Sequence[float], level: float = 0.95
) -> tuple[float, float, tuple[float, float] | None, float]:
    """(mean, standard error, interval, two-sided p) of paired
    differences, by Student's t on n - 1 df.

    With fewer than two differences there is no interval and p is 1; with no spread the interval
    is the mean itself and p is 0 (or 1 when the mean is 0).
    """
    n = len(diffs)
    mean = math.fsum(diffs) / n if n else 0.0
    if n < 2:
        return mean, math.nan, None, 1.0
    se = math.sqrt(math.fsum(map(pow, map(sub, diffs, repeat(mean)), repeat(2))) / (n - 1) / n)
    if se == 0:
        return mean, 0.0, (mean, mean), 1.0 if mean == 0 else 0.0
    half = t_quantile(level, n - 1) * se
    return (
        mean,
        se,
        (max(-1.0, mean - half), min(1.0, mean + half)),
        t_two_sided_p(mean / se, n - 1),
    )


def _beta_regularized(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction (Lentz)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    # the fraction converges fast only below this point: use the symmetry
    if x > (a + 1) / (a + b + 2):
        return 1.0 - front * _beta_fraction(1 - x, b, a) / b
    return front * _beta_fraction(x, a, b) / a


def _beta_fraction(x: float, a: float, b: float) -> float:
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 300):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return result
