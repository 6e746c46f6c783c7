"""The report's statistics against values derived by hand and against exact integer arithmetic."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from pytest_echo_bench.analysis.stats import (
    EXACT_INT_MAX,
    cluster_interval,
    holm,
    mcnemar_exact,
    newcombe_paired,
    paired_phi,
    wilson,
)


def exact_p(a_only: int, b_only: int) -> float:
    """The two-sided exact McNemar p-value as a fraction of integers, rounded once at the end."""
    n, k = a_only + b_only, min(a_only, b_only)
    if 2 * k == n:
        return 1.0
    term = total = 1
    for i in range(k):
        term = term * (n - i) // (i + 1)  # C(n, i + 1), exactly
        total += term
    return float(min(Fraction(1), 2 * Fraction(total, 2**n)))


@pytest.mark.parametrize(
    ("a_only", "b_only"),
    [
        (10, 2),
        (2, 10),
        (0, 7),
        (600, 700),
        (1000, 1023),
        (1100, 1300),
        (2500, 2600),
        (2400, 2700),
        (4000, 4001),
        (3000, 3333),
    ],
)
def test_mcnemar_is_exact_on_both_sides_of_the_integer_limit(a_only: int, b_only: int) -> None:
    assert mcnemar_exact(a_only, b_only) == pytest.approx(exact_p(a_only, b_only), rel=1e-9)


def test_mcnemar_at_any_size() -> None:
    # float(1 << n) overflowed from 1,024 discordant pairs on; a million must work, and quickly.
    assert mcnemar_exact(1024, 0) == 2.0**-1023  # a subnormal double, still exact
    # below the smallest double
    assert mcnemar_exact(1100, 0) == 0.0 and mcnemar_exact(3000, 0) == 0.0
    assert mcnemar_exact(500_000, 500_000) == 1.0
    p = mcnemar_exact(500_000, 501_000)
    assert 0 < p < 1 and p == mcnemar_exact(501_000, 500_000)
    # The normal approximation agrees at this size to about three
    # digits: z = 1000 / sqrt(1,001,000).
    z = 1000 / math.sqrt(1_001_000)
    assert p == pytest.approx(math.erfc(z / math.sqrt(2)), rel=2e-3)
    assert EXACT_INT_MAX < 1_001_000


def test_mcnemar_hand_values() -> None:
    assert exact_p(10, 2) == 2 * 79 / 4096 and exact_p(7, 0) == 2 / 128
    assert mcnemar_exact(10, 2) == pytest.approx(2 * 79 / 4096)  # (1 + 12 + 66) / 2^12, doubled
    assert mcnemar_exact(0, 0) == 1.0 and mcnemar_exact(3, 3) == 1.0 and mcnemar_exact(2, 1) == 1.0


def test_wilson_bounds_are_exactly_zero_and_one() -> None:
    assert wilson(0, 17)[0] == 0.0 and wilson(17, 17)[1] == 1.0
    assert wilson(0, 1000)[0] == 0.0 and wilson(1000, 1000)[1] == 1.0
    assert wilson(0, 0) == (0.0, 1.0)


def test_holm_step_down() -> None:
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 ->
    # monotone 0.02, 0.03, 0.06, 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == [1.0, 1.0] and holm([]) == []


def test_phi_with_newcombes_correction() -> None:
    # a=36, b=12, c=2, d=6: ad - bc = 192 > 0, less n/2 = 28 gives 164; margins 48 * 8 * 38 * 18.
    assert paired_phi(36, 12, 2, 6) == pytest.approx(164 / math.sqrt(48 * 8 * 38 * 18))
    # ad < bc: uncorrected
    assert paired_phi(36, 12, 2, 0) == pytest.approx(-24 / math.sqrt(48 * 2 * 38 * 12))
    assert paired_phi(5, 0, 0, 0) == 0.0  # an empty margin
    assert paired_phi(10, 1, 1, 10) == pytest.approx((100 - 1 - 11) / math.sqrt(11 * 11 * 11 * 11))


def newcombe_by_hand(a: int, b: int, c: int, d: int) -> tuple[float, float]:
    """Method 10 spelled out, step by step, from the Wilson limits (Newcombe 1998, section 2)."""
    n = a + b + c + d
    p1, p2 = (a + b) / n, (a + c) / n
    z = 1.959963984540054

    def limits(x: int) -> tuple[float, float]:
        p = x / n
        root = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
        return (
            (p + z * z / (2 * n) - root) / (1 + z * z / n),
            (p + z * z / (2 * n) + root) / (1 + z * z / n),
        )

    (l1, u1), (l2, u2) = limits(a + b), limits(a + c)
    cross = a * d - b * c
    phi = (max(cross - n / 2, 0) if cross > 0 else cross) / math.sqrt(
        (a + b) * (c + d) * (a + c) * (b + d)
    )
    dl = math.sqrt((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2)
    du = math.sqrt((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2)
    return (p1 - p2 - dl, p1 - p2 + du)


@pytest.mark.parametrize(("table", "expected"), [
    ((36, 12, 2, 6), (0.0490, 0.3050)),  # n = 56, diff 10/56 = 0.1786
    ((36, 12, 2, 0), (0.0569, 0.3404)),  # n = 50, diff 10/50 = 0.2
    ((25, 2, 1, 2), (-0.1144, 0.1860)),  # the 30-item report fixture: diff 1/30
])
def test_newcombe_method_10(
    table: tuple[int, int, int, int], expected: tuple[float, float]
) -> None:
    lo, hi = newcombe_paired(*table)
    assert (round(lo, 4), round(hi, 4)) == expected
    assert (lo, hi) == pytest.approx(newcombe_by_hand(*table), abs=1e-12)


def test_newcombe_edges() -> None:
    assert newcombe_paired(0, 0, 0, 0) is None
    # a always right, b never: diff 1, the interval stays within [-1, 1]
    lo, hi = newcombe_paired(0, 20, 0, 0)
    assert -1 <= lo < 1 and hi == 1.0
    lo, hi = newcombe_paired(10, 0, 0, 10)  # full agreement: diff 0, an interval around it
    assert lo < 0 < hi


def test_cluster_interval_by_hand() -> None:
    # p = 0.6; residuals -1, -1, 2: sum of squares 6, times G/(G-1) = 1.5, over n^2 = 900: SE 0.1.
    se, lo, hi = cluster_interval([(5, 10), (5, 10), (8, 10)])  # type: ignore[misc]
    assert se == pytest.approx(0.1) and (lo, hi) == pytest.approx(
        (0.6 - 0.196, 0.6 + 0.196), abs=1e-3
    )
    se, lo, hi = cluster_interval([(8, 10), (2, 10)])  # type: ignore[misc]
    assert se == pytest.approx(0.3) and (lo, hi) == (0.0, pytest.approx(1.0))  # clamped to [0, 1]
    assert cluster_interval([(3, 10)]) is None and cluster_interval([(3, 10), (0, 0)]) is None
