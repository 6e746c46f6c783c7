"""How an amount of US dollars is shown: in fixed point, with the digits a small amount needs; and
as a figure in JSON and CSV, without the float sum's noise."""

from __future__ import annotations

import math

# a sum of float costs is exact to about 15 digits: 12 drop its noise, never a cent
SIGNIFICANT = 12


def usd(amount: float) -> str:
    """Four decimals, or as many as a small amount needs to show its first two digits (never
    "0.0000" for an amount that is not zero, and never an exponent: "0.000055", not "5.5e-05")."""
    if amount == 0 or abs(amount) >= 0.001:
        return f"{amount:.4f}"
    return f"{amount:.{min(12, 1 - math.floor(math.log10(abs(amount))))}f}"


def figure(amount: float | None) -> float | None:
    """An amount for JSON and CSV: 0.00165, not 0.0016500000000000009 (None stays unknown)."""
    return None if amount is None else float(f"{amount:.{SIGNIFICANT}g}")
