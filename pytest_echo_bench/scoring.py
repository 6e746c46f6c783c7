"""Scorers: turn a model output and a target into a verdict (correct, wrong or unparseable)."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .datasets import Example

CORRECT, WRONG, UNPARSEABLE = "correct", "wrong", "unparseable"


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
Scorer = Callable[[str, Example, dict[str, Any]], Verdict]  # (output, item, options): may use more than the target


def judge(answer: str | None, target: str, same: bool) -> Verdict:
    """The common tail of every scorer: the detail strings older readers expect."""
    if answer is None:
        return Verdict(UNPARSEABLE, None, "unparseable")
    if same:
        return Verdict(CORRECT, answer, "passed")
    return Verdict(WRONG, answer, f"expected {target} got {_short(answer)}")


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def exact(output: str, target: str, options: dict[str, Any]) -> Verdict:
    answer = output.strip()
    if not answer:
        return judge(None, target, False)
    if options.get("ignore_case"):
        return judge(answer, target, answer.casefold() == target.strip().casefold())
    return judge(answer, target, answer == target.strip())


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def numeric(output: str, target: str, options: dict[str, Any]) -> Verdict:
    """The last number in the output, compared with tolerance ``tol`` (default exact)."""
    found = _NUMBER.findall(output)
    if not found:
        return judge(None, target, False)
    answer = found[-1].replace(",", "")
    try:
        same = abs(float(answer) - float(target.replace(",", ""))) <= float(options.get("tol", 0.0))
    except ValueError:
        same = False
    return judge(answer, target, same)


def regex(output: str, target: str, options: dict[str, Any]) -> Verdict:
    """Extract with ``pattern`` (the last match, first group if any), then compare exactly."""
    matches = list(re.finditer(str(options.get("pattern", r"(.+)")), output))
    if not matches:
        return judge(None, target, False)
    last = matches[-1]
    answer = (last.group(1) if last.groups() else last.group(0)).strip()
    return judge(answer, target, answer == target.strip())


_CUE = r"(?:the\s+(?:final\s+|correct\s+)?answer\s+is|answer\s*:)"
# The answer runs to the end of the line or to the next cue, so "... is (A). No: the answer is (C)"
# yields both declarations and the later one wins.
_DECLARED = re.compile(_CUE + r"\s*:?\s*(?P<ans>(?:(?!" + _CUE + r")[^\n])*)", re.IGNORECASE)
_LETTER = re.compile(r"^\(?([A-R])\)?(?=$|[\s.,:;)])")


def declared_answers(output: str) -> list[str]:
    """Every "the answer is X" / "Answer: X" in order; the latest declaration wins."""
    return [m.group("ans").strip() for m in _DECLARED.finditer(output)]


def choice(output: str, target: str, options: dict[str, Any]) -> Verdict:
    """Multiple choice with letters: explicit declarations first, then a bare letter answer."""
    letter = _choice_letter(output)
    want = _LETTER.match(target.strip())
    goal = want.group(1) if want else target.strip()
    return judge(f"({letter})" if letter else None, target, letter == goal)


def _choice_letter(output: str) -> str | None:
    for text in reversed(declared_answers(output)):
        m = _LETTER.match(text.strip())
        if m:
            return m.group(1)
    m = _LETTER.match(output.strip())  # the whole output is just "(B)" or "B."
    return m.group(1) if m and len(output.strip()) <= 4 else None


def bbh(output: str, target: str, options: dict[str, Any]) -> Verdict:
    """BIG-Bench Hard (see bbh.py): choice letters and free-form answers; ``strict`` follows the paper exactly."""
    from .bbh import score  # imported here: bbh.py builds on this module's Verdict and judge

    return score(output, target, options)


def on_target(fn: TextScorer) -> Scorer:
    """Most scorers compare with the target alone; this lets them stay functions of text."""

    def score(output: str, example: Example, options: dict[str, Any]) -> Verdict:
        return fn(output, example.target, options)

    score.__name__ = fn.__name__
    return score


SCORERS: dict[str, Scorer] = {
    name: on_target(fn) for name, fn in {"exact": exact, "numeric": numeric, "regex": regex, "choice": choice, "bbh": bbh}.items()
}
IN_PROCESS = frozenset(SCORERS)  # pure text checks: microseconds, nothing to wait for


def _humaneval(output: str, example: Example, options: dict[str, Any]) -> Verdict:
    from .humaneval import score  # the sandbox is loaded only when a spec uses it

    return score(output, example, options)


SCORERS["humaneval"] = _humaneval


def scorer(name: str) -> Callable[[Scorer], Scorer]:
    """Register a custom scorer, e.g. in a conftest.py::

        @pytest_echo_bench.scorer("contains")
        def contains(output: str, example: Example, options: dict) -> Verdict:
            found = example.target.lower() in output.lower()
            return judge(example.target if found else output[-40:], example.target, found)

    and use it as ``scorer: contains`` (options: ``scorer: {name: contains, ...}``).
    """

    def register(fn: Scorer) -> Scorer:
        SCORERS[name] = fn
        return fn

    return register


def get_scorer(name: str) -> Scorer | None:
    """A built-in or registered scorer, or ``module:function``."""
    if name in SCORERS:
        return SCORERS[name]
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            found = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError):
            return None
        return found if callable(found) else None
    return None
