"""The built-in text scorers: exact, numeric, regex and multiple choice, and the answer cues
("the answer is X", "Answer: X") that the choice scorer and the BBH scorer both read."""

from __future__ import annotations

import re
from typing import Any

from pytest_echo_bench.scoring.verdict import Verdict, judge


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


def declaration_pattern(cue: str, separator: str) -> re.Pattern[str]:
    """Each ``cue`` and the answer after it (in group ``ans``). The answer runs to the end of the
    line or to the next cue, so "... is (A). No: the answer is (C)" yields both declarations and
    the later one wins."""
    return re.compile(cue + separator + r"(?P<ans>(?:(?!" + cue + r")[^\n])*)", re.IGNORECASE)


_DECLARED = declaration_pattern(
    r"(?:the\s+(?:final\s+|correct\s+)?answer\s+is|answer\s*:)", r"\s*:?\s*"
)
_LETTER = re.compile(r"^\(?([A-R])\)?(?=$|[\s.,:;)])")


def declared_answers(output: str, pattern: re.Pattern[str] = _DECLARED) -> list[str]:
    """Every "the answer is X" / "Answer: X" in order; the latest declaration wins."""
    return [m.group("ans").strip() for m in pattern.finditer(output)]


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
