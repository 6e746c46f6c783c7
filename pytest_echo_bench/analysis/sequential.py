"""An anytime-valid test and confidence sequence for the mean paired difference of two arms.

The method is testing by betting (Waudby-Smith and Ramdas, "Estimating means of bounded random
variables by betting", JRSS-B 86(1), 2024; arXiv 2010.09686). Each item both arms answered gives
``z`` = score(a) - score(b) in [-1, 1], taken to ``x = (z + 1) / 2`` in [0, 1]. To test a mean
``m`` two gamblers bet on it: one that the mean is above (wealth ``K+ = prod(1 + l (x - m))``), one
below (``K- = prod(1 - l (x - m))``), each ``l`` chosen from the items before (predictable) by the
paper's aGRAPA rule, ``(mu - m) / (var + (mu - m)^2)`` clipped to [0, ``BET_CAP``]. Under the mean
``m`` each wealth is a nonnegative (super)martingale, so by Ville's inequality it ever reaches
``2 / alpha`` with probability at most ``alpha / 2``: however often one looks, and whenever one
stops. Hence:

- the two-sided anytime-valid p-value at ``m``: ``min(1, 2 / max(max K+, max K-))``, the maxima
  over every look so far (it never rises again once it falls);
- the (1 - alpha) confidence sequence: the means at which neither wealth has reached 2 / alpha,
  its bounds found by bisection (``interval``).

Pure and small on purpose: the plugin's controller and the simulations in the tests run this
very code, one ``Betting.update`` per item.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

# a bet of at most 0.9 of the wealth: each factor stays >= 0.1, so no look can ruin it
BET_CAP = 0.9
# the paper's regularised start: mu_0 = 1/2, var_0 = 1/4 (on [0, 1])
_PRIOR_MEAN, _PRIOR_VAR = 0.5, 0.25
# 2^-26 of the range (3e-8): far below the printed digits; each one replays the items
BISECTIONS = 26


@dataclass
class Betting:
    """The two gamblers' wealth for the hypothesised mean difference ``null`` (in [-1, 1]), fed one
    paired difference at a time; ``zs`` keeps them for the confidence sequence."""

    null: float = 0.0
    zs: list[float] = field(default_factory=list)
    log_up: float = 0.0  # log K+: evidence the mean is above ``null``
    log_down: float = 0.0
    best_up: float = 0.0  # the largest log K+ of any look so far
    best_down: float = 0.0
    _sum: float = 0.0  # of x
    _sq: float = 0.0  # of (x_i - mu_i)^2, the paper's variance estimate's numerator

    def update(self, z: float) -> None:
        # aGRAPA's bet on the gap between the running mean and m; one side's bet is 0, so only the
        # other wealth moves. Written out in full: the simulations run this a million times.
        x, m, t = (z + 1.0) / 2.0, (self.null + 1.0) / 2.0, len(self.zs)
        gap = (_PRIOR_MEAN + self._sum) / (t + 1) - m
        bet = gap / ((_PRIOR_VAR + self._sq) / (t + 1) + gap * gap)
        if bet > 0:
            self.log_up += math.log1p(min(BET_CAP, bet) * (x - m))
            self.best_up = max(self.best_up, self.log_up)
        elif bet < 0:
            self.log_down += math.log1p(min(BET_CAP, -bet) * (m - x))
            self.best_down = max(self.best_down, self.log_down)
        self.zs.append(z)
        self._sum += x
        self._sq += (x - (_PRIOR_MEAN + self._sum) / (t + 2)) ** 2

    @property
    def n(self) -> int:
        return len(self.zs)

    def decided(self, alpha: float) -> bool:
        """``p_value() <= alpha``, without the exponential (the
        simulations ask after every item)."""
        return max(self.best_up, self.best_down) >= math.log(2.0 / alpha) - 1e-12

    def p_value(self) -> float:
        """Two-sided and anytime-valid: valid at every look and at any stopping time."""
        return min(1.0, 2.0 * math.exp(-max(self.best_up, self.best_down)))

    def direction(self) -> int:
        """+1 when the evidence is that the mean is above ``null``, -1 below, 0 none yet."""
        if self.best_up == self.best_down:
            return 0
        return 1 if self.best_up > self.best_down else -1

    def mean(self) -> float | None:
        return sum(self.zs) / len(self.zs) if self.zs else None

    def interval(self, alpha: float) -> tuple[float, float]:
        return interval(self.zs, alpha)


# per item: x, the running mean before it, its variance term
Course = tuple[list[float], list[float], list[float]]


def _course(zs: Sequence[float]) -> Course:
    """What ``Betting.update``'s bets depend on besides the null, item by item: computed once for
    every bisection step (each replays every item), by the very expressions the bets use."""
    xs: list[float] = []
    means: list[float] = []
    variances: list[float] = []
    total = sq = 0.0
    for t, z in enumerate(zs):
        x = (z + 1.0) / 2.0
        xs.append(x)
        means.append((_PRIOR_MEAN + total) / (t + 1))
        variances.append((_PRIOR_VAR + sq) / (t + 1))
        total += x
        sq += (x - (_PRIOR_MEAN + total) / (t + 2)) ** 2
    return xs, means, variances


def _beats(course: Course, null: float, alpha: float, side: int) -> bool:
    """Whether the gambler betting on ``side`` (+1 above, -1 below) of ``null`` ever held 2 / alpha
    over the items of ``course``."""
    goal = math.log(2.0 / alpha)
    m = (null + 1.0) / 2.0
    log_k = 0.0
    log1p = math.log1p
    # the bets of ``Betting.update``, for one side: the bisection runs this often
    for x, mean, variance in zip(*course, strict=False):
        gap = mean - m
        bet = side * gap / (variance + gap * gap)
        if bet > 0:
            log_k += log1p(min(BET_CAP, bet) * side * (x - m))
            if log_k >= goal:
                return True
    return False


def interval(zs: Sequence[float], alpha: float) -> tuple[float, float]:
    """The (1 - alpha) confidence sequence for the mean difference after ``zs``, as [lower, upper].

    The means a gambler has beaten are those far from the data: below the lower bound the
    "above" gambler has won, above the upper bound the "below" one. Each bound is found by
    bisection between -1 (or +1) and the sample mean.
    """
    if not zs:
        return (-1.0, 1.0)
    centre = sum(zs) / len(zs)
    course = _course(zs)
    return (_bound(course, alpha, -1.0, centre, 1), _bound(course, alpha, 1.0, centre, -1))


def _bound(course: Course, alpha: float, outer: float, centre: float, side: int) -> float:
    if not _beats(course, outer, alpha, side):
        return outer
    beaten, kept = outer, centre
    for _ in range(BISECTIONS):
        mid = (beaten + kept) / 2.0
        if _beats(course, mid, alpha, side):
            beaten = mid
        else:
            kept = mid
    return kept
