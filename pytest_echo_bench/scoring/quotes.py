"""Which grades in a judge's reply are quoted from the answer under judgement, in time linear in
the reply and the answer (``scoring.grades`` asks it of a reply whose grades all repeat the
answer's; a grade the answer does not hold is the judge's).

A judge often quotes the answer; an answer may hold a grade (``Rating: [[10]]``), and a quoted
grade is not the judge's. A quote can carry a grade only where the answer holds one, so only the
answer's grade-bearing parts are sought in the reply: its lines that hold a grade (a quote is
usually whole lines, or a line inside a longer one), the text around each grade with the
whitespace folded (a judge re-wrapping a line), and the QUOTE_MIN characters before and after
each grade (a grade quoted inside a sentence). An answer without a grade quotes none, and
leaves the reply as it is. Searching every line of a 10 MB reply in a long answer, as a plain
search does, took minutes for one item.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from itertools import islice

QUOTE_MIN = 12  # the shortest span of an answer taken as quoted: below it, words coincide
MATCH_LIMIT = 10_000  # grades looked at in one reply, or in one answer
QUOTED_LINES = 32  # the answer's lines holding a grade that are sought in a reply
REWRAP = 1_000  # characters around an answer's grade in which a re-wrapped reply line is sought


class Quotes:
    """What of ``answer`` a reply could quote a grade from, under ``patterns``."""

    def __init__(self, answer: str, patterns: Sequence[re.Pattern[str]]) -> None:
        self.patterns = patterns
        found = [m for p in patterns for m in islice(p.finditer(answer), MATCH_LIMIT)]
        self.graded = bool(found)
        # The grades the answer holds, as each pattern's group captures them (its claims).
        self.grades = {m.group(1) or "" for m in found}
        # The answer's grades by their text: the QUOTE_MIN-wide windows ending and starting at
        # each (a grade longer than that: the grade itself), as a reply's windows are cut.
        self.before: dict[str, set[str]] = {}
        self.after: dict[str, set[str]] = {}
        for match in found:
            start, end = match.span()
            wide = max(end - start, QUOTE_MIN)
            self.before.setdefault(match.group(0), set()).add(answer[max(0, end - wide):end])
            self.after.setdefault(match.group(0), set()).add(answer[start:start + wide])
        self.lines = _graded_lines(answer, found)
        folded = " ".join(answer.split())
        self.excerpts = [folded[max(0, m.start() - REWRAP):m.end() + REWRAP]
                         for m in islice(_matches(folded, patterns), QUOTED_LINES)]

    def blanked(self, reply: str) -> str:
        """``reply`` with the answer's grade-bearing lines it holds blanked, and each of its
        lines that holds a grade and is, whitespace folded, the answer's text around a grade."""
        if not self.graded or not reply:
            return reply
        for quoted in self.lines:  # the longest first, so a whole answer goes before its lines
            if quoted in reply:
                reply = reply.replace(quoted, " " * len(quoted))
        return self._rewrapped_blanked(reply)

    def _rewrapped_blanked(self, reply: str) -> str:
        """``reply`` with each line that holds a grade and is, whitespace folded, the answer's
        text around one of its grades blanked (the first MATCH_LIMIT such lines looked at)."""
        kept, looked = [], 0
        for line in reply.split("\n"):
            if looked < MATCH_LIMIT and len(line) >= QUOTE_MIN and self._holds_grade(line):
                looked += 1
                core = " ".join(line.split())
                if len(core) >= QUOTE_MIN and any(core in text for text in self.excerpts):
                    line = " " * len(line)
            kept.append(line)
        return "\n".join(kept)

    def quoted(self, text: str, match: re.Match[str]) -> bool:
        """Whether the grade ``match`` found in ``text`` sits in a window the answer holds: the
        QUOTE_MIN characters ending or starting with it. A window cut short by the reply's edge
        is evidence only when it holds more than the grade ("4" judging the answer "4" is the
        judge's own)."""
        grade = match.group(0)
        if grade not in self.before:
            return False
        start, end = match.span()
        before = text[min(start, max(0, end - QUOTE_MIN)):end]
        after = text[start:max(end, start + QUOTE_MIN)]
        wide = max(end - start, QUOTE_MIN)
        return (_held(before, wide, end - start, self.before[grade], str.endswith)
                or _held(after, wide, end - start, self.after[grade], str.startswith))

    def _holds_grade(self, line: str) -> bool:
        return any(p.search(line) for p in self.patterns)


def _held(window: str, wide: int, size: int, windows: set[str],
          fits: Callable[[str, str], bool]) -> bool:
    if len(window) == wide:
        return window in windows
    if len(window) <= size:  # the grade alone, at the reply's edge: no evidence
        return False
    return any(fits(held, window) for held in windows)


def _graded_lines(answer: str, found: list[re.Match[str]]) -> list[str]:
    """The answer's lines (and the whole answer) of at least QUOTE_MIN characters that hold a
    grade, the longest first, at most QUOTED_LINES of them."""
    if not found:
        return []
    starts = sorted(m.start() for m in found)
    lines: set[str] = set()
    at = i = 0
    for line in answer.splitlines(keepends=True):
        end, holds = at + len(line), False
        while i < len(starts) and starts[i] < end:  # the grades that start on this line
            holds, i = True, i + 1
        if holds and len(line.strip()) >= QUOTE_MIN:
            lines.add(line.strip())
        at = end
    if len(answer.strip()) >= QUOTE_MIN:
        lines.add(answer.strip())
    return sorted(lines, key=len, reverse=True)[:QUOTED_LINES + 1]


def _matches(text: str, patterns: Sequence[re.Pattern[str]]) -> Iterator[re.Match[str]]:
    for pattern in patterns:
        yield from pattern.finditer(text)
