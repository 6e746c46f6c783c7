"""The design of a paired comparison from a pilot run: paired
variance, subtask clusters and repeats.

Following Miller, "Adding Error Bars to Evals" (arXiv 2411.00640): an item's score under an arm
is its conditional mean plus sampling noise, so the paired difference of item i averaged over K
samples of each arm has variance ``Var(x_A - x_B) + (E[sigma2_A] + E[sigma2_B]) / K`` (its sections
on resampling and on paired differences); items of one subtask are correlated, which inflates the
variance of the mean by the design effect ``1 + (m - 1) * ICC`` (clustered standard errors);
and the items a two-sided test at ``alpha`` needs for ``power`` against a difference ``delta`` are
``(z_{1-alpha/2} + z_power)^2 * omega^2 / delta^2`` (power analysis). Formulas and their
estimators: ``docs/statistics.md``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist


@dataclass(frozen=True)
class PairedItem:
    """One item both arms answered: its subtask and each arm's sample scores (one per epoch)."""

    subtask: str | None
    a: tuple[float, ...]
    b: tuple[float, ...]

    @property
    def diff(self) -> float:
        return sum(self.a) / len(self.a) - sum(self.b) / len(self.b)


@dataclass(frozen=True)
class Design:
    """Variance components of the per-item paired difference, estimated from a pilot."""

    n: int
    mean_diff: float
    var_diff: float  # sample variance of the items' differences at the pilot's samples per item
    # sigma2_c: the subtasks' own shift of the difference (ANOVA, clamped at 0)
    between_cluster: float
    clusters: int
    noise: float | None  # E[sigma2_A / k_A + sigma2_B / k_B] at the pilot's k; None without epochs
    # E[sigma2_A]: one sample's variance about its item's mean; None without epochs
    within_a: float | None
    within_b: float | None
    samples: float  # mean samples per item and arm in the pilot

    @property
    def icc(self) -> float:
        """The intra-cluster correlation of the pilot's paired differences (clusters = subtasks)."""
        return self.between_cluster / self.var_diff if self.var_diff > 0 else 0.0

    def variance(self, repeats: int | None = None) -> float:
        """omega^2: the variance of one item's paired difference with ``repeats`` samples of each
        arm (None: as many as the pilot had)."""
        if repeats is None or self.noise is None or self.within_a is None or self.within_b is None:
            return self.var_diff
        signal = max(self.var_diff - self.noise, 0.0)  # Var(x_A - x_B): what repeats cannot remove
        return signal + (self.within_a + self.within_b) / repeats

    def icc_at(self, repeats: int | None = None) -> float:
        total = self.variance(repeats)
        return min(self.between_cluster / total, 1.0) if total > 0 else 0.0


def _sample_var(values: Sequence[float]) -> float:
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / (len(values) - 1)


def estimate_design(items: Sequence[PairedItem]) -> Design | None:
    """The components from ``items`` (two or more); None with fewer."""
    n = len(items)
    if n < 2:
        return None
    diffs = [it.diff for it in items]
    var_diff = _sample_var(diffs)
    between, clusters = _between_cluster(items)
    noisy = [it for it in items if len(it.a) > 1 and len(it.b) > 1]
    samples = sum(len(it.a) + len(it.b) for it in items) / (2 * n)
    if len(noisy) < n or not noisy:  # the noise of an item with one sample is not seen
        return Design(n, sum(diffs) / n, var_diff, between, clusters, None, None, None, samples)
    within_a = sum(_sample_var(it.a) for it in noisy) / n
    within_b = sum(_sample_var(it.b) for it in noisy) / n
    noise = sum(_sample_var(it.a) / len(it.a) + _sample_var(it.b) / len(it.b) for it in noisy) / n
    return Design(
        n, sum(diffs) / n, var_diff, between, clusters, noise, within_a, within_b, samples
    )


def _between_cluster(items: Sequence[PairedItem]) -> tuple[float, int]:
    """(sigma2_c, G) by one-way ANOVA on the differences: (MSB - MSW) / m0,
    clamped at 0; 0 for one cluster."""
    groups: dict[str | None, list[float]] = {}
    for it in items:
        groups.setdefault(it.subtask, []).append(it.diff)
    n, g = len(items), len(groups)
    if g < 2 or n <= g:
        return 0.0, g
    grand = sum(sum(v) for v in groups.values()) / n
    msb = sum(len(v) * (sum(v) / len(v) - grand) ** 2 for v in groups.values()) / (g - 1)
    msw = sum(sum((x - sum(v) / len(v)) ** 2 for x in v) for v in groups.values()) / (n - g)
    m0 = (n - sum(len(v) ** 2 for v in groups.values()) / n) / (g - 1)
    return max((msb - msw) / m0, 0.0), g


def z_total(alpha: float, power: float) -> float:
    dist = NormalDist()
    return dist.inv_cdf(1 - alpha / 2) + dist.inv_cdf(power)


def items_needed(variance: float, delta: float, alpha: float, power: float) -> int | None:
    """``ceil((z_{1-alpha/2} + z_power)^2 variance / delta^2)``; None for delta 0 or no finite n."""
    n = _n0(variance, delta, alpha, power)
    return max(1, math.ceil(n)) if math.isfinite(n) else None


def _n0(variance: float, delta: float, alpha: float, power: float) -> float:
    """The unrounded n; inf when none suffices. ``ratio * ratio``, not ``** 2``: a float power
    raises OverflowError where a product gives inf (a difference of 1e-300)."""
    if delta == 0:
        return math.inf
    ratio = z_total(alpha, power) * math.sqrt(max(variance, 0.0)) / abs(delta)
    return ratio * ratio


def items_clustered(variance: float, icc: float, clusters: int, delta: float, alpha: float,
                    power: float) -> int | None:
    """Items needed when they fall into ``clusters`` subtasks of m = n / G items each: the n that
    solves ``n = n0 (1 + (n / G - 1) ICC)``, i.e. ``n0 (1 - ICC) / (1 - n0 ICC / G)``.
    None when no n suffices (the subtasks' own variance alone exceeds what ``delta``
    allows: more subtasks needed)."""
    base = items_needed(variance, delta, alpha, power)
    if base is None:
        return None
    if clusters < 2 or icc <= 0:
        return base
    n0 = _n0(variance, delta, alpha, power)
    room = 1 - n0 * icc / clusters
    if room <= 0:
        return None
    return max(1, math.ceil(n0 * (1 - icc) / room))


def paired_items(
    rows: Iterable[tuple[str, str, str | None, int, float]], a: str, b: str
) -> list[PairedItem]:
    """Items both arms answered, from (task_id, arm, subtask, epoch,
    score) rows; epochs stay apart."""
    by_item: dict[str, dict[str, dict[int, float]]] = {}
    subtask: dict[str, str | None] = {}
    for task, arm, sub, epoch, score in rows:
        if arm in (a, b):
            by_item.setdefault(task, {}).setdefault(arm, {})[epoch] = score
            subtask.setdefault(task, sub)
    return [PairedItem(subtask[t], tuple(s[a].values()), tuple(s[b].values()))
            for t, s in by_item.items() if a in s and b in s]

