"""The checks of a spec's values: numbers within bounds (``.inf``, ``.nan`` and 400-digit
integers refused before any float()), whole numbers, mappings and lists of strings, each failing
through the loader's ``fail`` so that the error names the key and its line."""

from __future__ import annotations

import math
from typing import Any

from pytest_echo_bench.spec.parse import KeyPath


def mapping(value: Any, key: str, fail: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise fail(f"{key} must be a mapping", key)
    return value


def strings(value: Any, where: KeyPath, fail: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise fail("must be a list of strings", *where)
    return tuple(value)


def optional_int(value: Any, where: KeyPath, fail: Any, most: int = 1_000_000) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise fail(f"must be a whole number >= 1, got {shown(value)}", *where)
    if value > most:
        raise fail(f"must be at most {most:,}, got {shown(value)}", *where)
    return value


# Bounds that keep every number a spec gives usable downstream: a timeout of 1e300 s overflows
# the clock, an integer of 400 digits overflows a float, and ``.inf`` or ``.nan`` compare oddly.
MAX_SECONDS = 86_400.0  # a day: any timeout or backoff
MAX_NUMBER = 1e12


def number(
    value: Any, key: str, fail: Any, least: float = -MAX_NUMBER, most: float = MAX_NUMBER
) -> float:
    """A number from ``least`` to ``most``; compared before any float() (10**400 overflows one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise fail(f"must be a number, got {shown(value)}{yaml_hint(value)}", *key.split("."))
    if value != value or value in (math.inf, -math.inf):
        raise fail(f"must be a finite number, got {shown(value)}", *key.split("."))
    if value < least:
        raise fail(
            f"must be {'> 0' if least > 0 else f'>= {least:,g}'}, got {shown(value)}",
            *key.split("."),
        )
    if value > most:
        raise fail(f"must be at most {most:,g}, got {shown(value)}", *key.split("."))
    return float(value)


def yaml_hint(value: Any) -> str:
    """YAML 1.1 reads ``1e-300`` (no dot) as text: say how to write it as a number."""
    if not isinstance(value, str):
        return ""
    try:
        float(value)
    except ValueError:
        return ""
    mantissa, sep, exponent = value.strip().lower().partition("e")
    if not sep or "." in mantissa:
        return " (quoted, it is text: write it without quotes)"
    return f" (YAML reads it as text: write {mantissa}.0e{exponent})"


def positive(value: Any, key: str, fail: Any, most: float = MAX_NUMBER) -> float:
    return number(value, key, fail, math.ulp(0.0), most)


def non_negative(value: Any, key: str, fail: Any, most: float = MAX_NUMBER) -> float:
    return number(value, key, fail, 0.0, most)


def shown(value: Any) -> str:
    """A value as an error quotes it: a 4,000-digit number or a long string shown by its start."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
