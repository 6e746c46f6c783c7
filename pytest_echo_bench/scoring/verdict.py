"""The verdict type every scorer returns, the common tail of every scorer (``judge``), and the
verdict of an item that could not be graded (``failed``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.scoring.judgment import Judgment

CORRECT, WRONG, UNPARSEABLE, ERROR = "correct", "wrong", "unparseable", "error"
# The output is stored but has no grade: its judge failed, gave no usable grade, or judging was
# deferred. Never a wrong answer: counted apart, and graded again (``--bench-retry-errors``).
UNJUDGED = "unjudged"
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
    # A judged scorer's grade on its scale (the row's ``score``), and what each judge did.
    score: float | None = None
    judgments: tuple[Judgment, ...] = ()

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


def unjudged(detail: str, judgments: tuple[Judgment, ...] = ()) -> Verdict:
    """The verdict of an output its judges did not grade; what they did is kept."""
    return Verdict(UNJUDGED, None, detail, judgments=judgments)


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
