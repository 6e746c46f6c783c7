"""What ``--bench-budget-usd`` (and its variable and ini key)
accepts, as docs/options.md says it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_echo_bench.plugin.options import _budget

OPTIONS = Path(__file__).resolve().parents[2] / "docs" / "options.md"


@pytest.mark.parametrize(
    ("raw", "usd"), [("5", 5.0), ("0.25", 0.25), ("$5", 5.0), (" $0.5 ", 0.5), ("1e-3", 0.001)]
)
def test_an_amount_in_ascii_digits_with_an_optional_dollar_sign_is_a_budget(
    raw: str, usd: float
) -> None:
    assert _budget(raw) == usd


@pytest.mark.parametrize("raw", ["$", "$$5", "5$", "\u0665", "USD 5", "0", "-1"])
def test_anything_else_is_refused_saying_what_is_accepted(raw: str) -> None:
    with pytest.raises(
        pytest.UsageError, match=r"\(ASCII digits, a \$ in front allowed\), e\.g\. 5, 0\.25 or \$5"
    ):
        _budget(raw)


def test_the_options_page_says_the_same() -> None:
    row = next(
        line
        for line in OPTIONS.read_text().splitlines()
        if line.startswith("| `--bench-budget-usd")
    )
    assert "in ASCII digits with an optional `$` in front: `5`, `0.25`, `$5`" in row
