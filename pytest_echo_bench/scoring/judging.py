"""The judge seam: how a scorer asks a model (a judge) to grade an output.

A scorer registered with ``@scorer(name, judges=True)`` is called with a keyword more,
``judges``: it asks a judge by name and reads the reply::

    @pytest_echo_bench.scorer("graded", judges=True)
    def graded(output: str, example: Example, options: dict, *, judges: Judges) -> Verdict:
        reply = judges.ask("grader", f"Does {output!r} answer {example.input!r}? Say yes or no.")
        return judge(output, example.target, reply.text.strip().lower() == "yes")

The scorer never sees how the call is made. During a run the engine sends it the way an arm's
call goes (``engine.judging``: its limiter, retries, response cache, budget and the run's stop);
a judge's failure is never a wrong answer: the item comes to what the failure means (an error
row, a stopped run, an item left for a resume), whatever the scorer does with the exception.
Scorers that do not ask for judges keep their three arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pytest_echo_bench.datasets.example import Example
    from pytest_echo_bench.scoring.verdict import Verdict


@dataclass(frozen=True)
class Reply:
    """A judge's answer: its text, the tokens it used and what they cost when its provider and
    the spec's prices say, the model that served it, and whether the response cache answered."""

    text: str
    usage: dict[str, int] | None = None
    model: str | None = None
    cost_usd: float | None = None
    cached: bool = False


class Judges(Protocol):
    """The judges a scorer may ask while it grades one item."""

    def ask(self, name: str, prompt: str, system: str | None = None) -> Reply:
        """The reply of judge ``name`` to ``prompt``; raises the call's error when it fails.
        ``system``: the judge's system text, sent apart from the prompt where its provider can."""
        ...

    def answer_of(self, arm: str) -> str | None:
        """The stored output of ``arm`` for this item and epoch (a pairwise judge compares two
        answers): the judging stage has it, a live sweep does not (None)."""
        ...


class JudgedScorer(Protocol):
    """A scorer that grades with judges: ``(output, item, options, *, judges)``."""

    def __call__(self, output: str, example: Example, options: dict[str, Any], *,
                 judges: Judges) -> Verdict: ...
