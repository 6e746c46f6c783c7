"""How an amount of US dollars is shown: in fixed point, with the digits a small amount needs."""

from __future__ import annotations

import math


def usd(amount: float) -> str:
    """Four decimals, or as many as a small amount needs to show its first two digits (never
    "0.0000" for an amount that is not zero, and never an exponent: "0.000055", not "5.5e-05")."""
    if amount == 0 or abs(amount) >= 0.001:
        return f"{amount:.4f}"
    return f"{amount:.{min(12, 2 - math.floor(math.log10(abs(amount))))}f}"
