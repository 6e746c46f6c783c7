"""The verdict type every scorer returns, the common tail of every scorer (``judge``), and the
verdict of an item that could not be graded (``failed``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_echo_bench.datasets.example import Example

CORRECT, WRONG, UNPARSEABLE, ERROR = "correct", "wrong", "unparseable", "error"
# The keys the shipped scorers put in a row's "extra" (mmlu_pro's seeded guess,
# HumanEval's sandbox): a regrade drops them before the new verdict's, so a flag the new
# scorer no longer sets does not linger.
SCORER_EXTRA = ("random_guess", "sandbox")


@dataclass(frozen=True)
class Verdict:
    status: str  # correct | wrong | unparseable | error
    answer: str | None
    detail: str
    extra: dict[str, Any] = field(default_factory=dict)  # stored in the row's "extra"

    @property
    def passed(self) -> bool:
        return self.status == CORRECT


TextScorer = Callable[[str, str, dict[str, Any]], Verdict]  # (output, target, options)
# (output, item, options): may use more than the target
Scorer = Callable[[str, Example, dict[str, Any]], Verdict]


def judge(answer: str | None, target: str, same: bool) -> Verdict:
    """The detail strings older readers expect: "passed", "unparseable", "expected T got A"."""
    if answer is None:
        return Verdict(UNPARSEABLE, None, "unparseable")
    if same:
        return Verdict(CORRECT, answer, "passed")
    return Verdict(WRONG, answer, f"expected {target} got {_short(answer)}")


def failed(text: str) -> Verdict:
    """An error row's verdict: the call (or the grading) failed, so the item has no answer.

    One prefix: a message that already says "error:" is not told so twice.
    """
    return Verdict(ERROR, None, text if text.lower().startswith("error:") else f"error: {text}")


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
