"""Power and sample size of a paired comparison (McNemar), by Connor's (1987) normal approximation.

``psi`` is the share of items on which the two arms disagree (discordant pairs) and ``delta`` the
difference of the two discordant shares, p(a right, b wrong) - p(b right, a wrong), which equals
the difference of the pass rates.
"""

from __future__ import annotations

import math
from statistics import NormalDist

ALPHA = 0.05
POWER = 0.80


def _z(p: float) -> float:
    return NormalDist().inv_cdf(p)


def n_for_power(delta: float, psi: float, alpha: float = ALPHA, power: float = POWER) -> int | None:
    """Items needed to detect ``delta`` with a two-sided test at ``alpha`` and the given power.

    Connor (1987): n = (z_{1-alpha/2} sqrt(psi) + z_{power} sqrt(psi - delta^2))^2 / delta^2.
    None when delta is 0 or so small that n overflows a float (no sweep suffices), or the shares
    are impossible (|delta| > psi).
    """
    delta = abs(delta)
    if delta == 0 or psi <= 0 or delta > psi or psi > 1:
        return None
    root = _z(1 - alpha / 2) * math.sqrt(psi) + _z(power) * math.sqrt(psi - delta * delta)
    # (root / delta)^2, not root^2 / delta^2: delta = 1e-300 squares to 0.0 (a division by zero);
    # this way it gives inf, which no count of items is.
    # A power so low that root < 0 is had with any n: squaring the negative root would not say so.
    ratio = max(root, 0.0) / delta
    n = ratio * ratio
    return max(1, math.ceil(n)) if math.isfinite(n) else None


def power_at(n: int, delta: float, psi: float, alpha: float = ALPHA) -> float:
    """The power of Connor's approximation at ``n`` items (the inverse of ``n_for_power``)."""
    delta = abs(delta)
    if n <= 0 or psi <= 0 or delta == 0 or delta > psi:
        return alpha if delta == 0 else 0.0
    spread = math.sqrt(psi - delta * delta)
    if spread == 0:
        return 1.0
    return NormalDist().cdf((math.sqrt(n) * delta - _z(1 - alpha / 2) * math.sqrt(psi)) / spread)


def mde(n: int, psi: float, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """The smallest |difference| that ``n`` items with discordant share
    ``psi`` detect with that power.

    Solved by bisection on delta in (0, psi]: power grows with delta there. None when even
    delta = psi (every disagreement one way) is not detected with that power.
    """
    if n <= 0 or psi <= 0:
        return None
    if power_at(n, psi, psi, alpha) < power:
        return None
    lo, hi = 0.0, psi
    for _ in range(60):  # 2^-60 of psi: far below any printed digit
        mid = (lo + hi) / 2
        if power_at(n, mid, psi, alpha) >= power:
            hi = mid
        else:
            lo = mid
    return hi
