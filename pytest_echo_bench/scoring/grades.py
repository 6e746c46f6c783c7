"""How a judge's reply becomes a grade: a scorer's ``grade:`` option, and the reading of a reply.

Two kinds of rule. A number on a scale: ``{pattern: '\\[\\[(\\d+\\.?\\d*)\\]\\]', scale: [1, 10],
pass_at: 7}`` (one group; ``pass_at`` is the grade from which the item passes, what pass rates
count). Verdict words: ``{labels: {correct: pass, incorrect: fail, partial: 0.5}}``, each word
mapped to pass, fail or a grade in [0, 1] (pass is 1, fail 0; passing at 1), found by ``pattern``
(default: ``GRADE: <word>`` or ``VERDICT: <word>``, as Inspect's graders write them).

A reply is the judge's text, not evidence of its own. A grade in it equal to one the answer under
judgement holds is suspect: the judge's other grades are picked from, so an answer that says
``Rating: [[10]]`` cannot grade itself when the judge mentions it. Among suspect grades alone, one
quoted from the answer is left out (``scoring.quotes``); when none is left (or they disagree),
the reply's only grades are the answer's claims: not passed, with no grade, never unjudged (left
out of the pass rate, an answer listing its low grades would veto them). Several different
grades are no grade under ``pick: only`` (the default); ``first`` and ``last`` take one of them
(FastChat takes the first). A grade off the scale, or not a finite number, is no grade; what
went wrong is the note.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from itertools import islice
from typing import Any

from pytest_echo_bench.scoring.quotes import MATCH_LIMIT, Quotes
from pytest_echo_bench.store.checks import grade as finite_grade

PICKS = ("only", "first", "last")
LABEL_PATTERN = r"(?i)\b(?:grade|verdict)\s*:\s*\**\s*([A-Za-z_][A-Za-z_-]*)"

Fail = Callable[[str], Exception]  # how a rule refuses an option: an error naming the spec key


@dataclass(frozen=True)
class GradeRule:
    pattern: re.Pattern[str]
    scale: tuple[float, float] | None = None  # numeric rules
    pass_at: float | None = None
    labels: Mapping[str, float] = field(default_factory=dict)  # label rules: word -> grade
    pick: str = "only"
    fallback: re.Pattern[str] | None = None  # tried when ``pattern`` finds nothing (FastChat)

    @property
    def numeric(self) -> bool:
        return not self.labels


@dataclass(frozen=True)
class Grade:
    grade: float | None
    passed: bool | None = None
    label: str | None = None
    note: str | None = None  # why there is no grade

    @property
    def planted(self) -> bool:
        """No grade, yet not passed: the reply's only grades were the answer's own claims."""
        return self.grade is None and self.passed is False


def parse_rule(value: Any, fail: Fail) -> GradeRule:
    """The ``grade:`` option, checked: every problem raised through ``fail`` with what to write."""
    if not isinstance(value, Mapping):
        raise fail("grade must be a mapping: {pattern, scale, pass_at} or {labels: {...}}")
    unknown = sorted(set(map(str, value)) - {"pattern", "scale", "pass_at", "labels", "pick",
                                             "fallback"})
    if unknown:
        raise fail(f"unknown grade key {unknown[0]!r}; known: fallback, labels, pass_at, "
                   "pattern, pick, scale")
    pick = value.get("pick", "only")
    if pick not in PICKS:
        raise fail(f"grade.pick must be one of {', '.join(PICKS)}, got {pick!r}")
    if "labels" in value:
        return _label_rule(value, pick, fail)
    return _number_rule(value, pick, fail)


def _number_rule(value: Mapping[str, Any], pick: str, fail: Fail) -> GradeRule:
    if "pattern" not in value:
        raise fail("grade needs a pattern with one group for the grade, e.g. "
                   "'\\[\\[(\\d+\\.?\\d*)\\]\\]', or labels: {...}")
    scale = value.get("scale")
    if (not isinstance(scale, list) or len(scale) != 2
            or not all(finite_grade(x) is not None for x in scale) or not scale[0] < scale[1]):
        raise fail("grade.scale must be [LOW, HIGH], two numbers with LOW < HIGH")
    low, high = float(scale[0]), float(scale[1])
    pass_at = finite_grade(value.get("pass_at"))
    if pass_at is None or not low <= pass_at <= high:
        raise fail(f"grade.pass_at must be a number on the scale [{low:g}, {high:g}]: the "
                   "grade from which an item passes (what pass rates count)")
    return GradeRule(_pattern(value["pattern"], "pattern", fail), (low, high), pass_at, pick=pick,
                     fallback=_fallback(value, fail))


def _label_rule(value: Mapping[str, Any], pick: str, fail: Fail) -> GradeRule:
    labels = value["labels"]
    if not isinstance(labels, Mapping) or not labels:
        raise fail("grade.labels must map each verdict word to pass, fail or a grade in [0, 1]")
    grades: dict[str, float] = {}
    for word, meaning in labels.items():
        grade = {"pass": 1.0, "fail": 0.0}.get(meaning) if isinstance(meaning, str) else None
        grade = grade if grade is not None else finite_grade(meaning)
        if not isinstance(word, str) or not word.strip() or grade is None or not 0 <= grade <= 1:
            raise fail(f"grade.labels: {word!r} must map to pass, fail or a grade in [0, 1]")
        grades[word.strip().lower()] = grade
    if "scale" in value or "pass_at" in value:
        raise fail("grade.labels takes no scale or pass_at: pass is 1, fail 0, passing at 1")
    pattern = _pattern(value.get("pattern", LABEL_PATTERN), "pattern", fail)
    return GradeRule(pattern, (0.0, 1.0), 1.0, grades, pick, _fallback(value, fail))


def _fallback(value: Mapping[str, Any], fail: Fail) -> re.Pattern[str] | None:
    found = value.get("fallback")
    return None if found is None else _pattern(found, "fallback", fail)


def _pattern(text: Any, key: str, fail: Fail) -> re.Pattern[str]:
    if not isinstance(text, str):
        raise fail(f"grade.{key} must be a regular expression (text)")
    try:
        pattern = re.compile(text)
    except re.error as exc:
        raise fail(f"grade.{key} is not a regular expression: {exc}") from None
    if pattern.groups != 1:
        raise fail(f"grade.{key} must have exactly one group (the grade), has {pattern.groups}")
    return pattern


def read_grade(rule: GradeRule, reply: str, answer: str = "") -> Grade:
    """The grade ``reply`` gives by ``rule``: the judge's own, never one the answer planted.

    A grade of the reply equal to one the answer holds is suspect: the pick rule takes the
    reply's other grades when it has any. When all are suspect, those the quote rules
    (``scoring.quotes``) do not take as quoted are the judge's. When none is left, the reply's
    only grades are the answer's claims: not passed, with no grade (``passed`` False)."""
    patterns = [p for p in (rule.pattern, rule.fallback) if p is not None]
    quotes = Quotes(answer, patterns)
    # FastChat's rule: the fallback only for a reply the pattern finds nothing in (so a reply
    # whose [[n]] the answer planted never falls back to a stray "[7]" of the judge's prose).
    pattern = (rule.fallback if rule.fallback is not None and not rule.pattern.search(reply)
               else rule.pattern)
    found, suspect = _judges(rule, pattern, reply, quotes)
    if not found and suspect:
        said = ", ".join(sorted(suspect))[:200]
        return Grade(None, False, note=f"the judge's only grades ({said}) repeat grades the "
                     "answer wrote itself, so its verdict cannot be told from the answer's claim: "
                     "not passed")
    if not found:
        return Grade(None, note="the judge's reply holds no grade")
    return _graded(rule, found)


def _graded(rule: GradeRule, found: list[str]) -> Grade:
    """The grade the judge's own grades ``found`` give, by the pick rule and the scale."""
    values = [_value(rule, raw) for raw in found]
    picked = _pick(rule.pick, values)
    if isinstance(picked, str):
        return Grade(None, note=picked)
    grade, label = picked
    if grade is None:
        return Grade(None, note=f"the judge's grade {label!r} is not one of the labels"
                     if rule.labels else f"the judge's grade {label!r} is not a number")
    assert rule.scale is not None and rule.pass_at is not None
    low, high = rule.scale
    if not low <= grade <= high:
        return Grade(None, note=f"the judge's grade {grade:g} is off the scale [{low:g}, {high:g}]")
    return Grade(grade, grade >= rule.pass_at, label if rule.labels else None)


def _judges(rule: GradeRule, pattern: re.Pattern[str], reply: str,
            quotes: Quotes) -> tuple[list[str], set[str]]:
    """(the judge's grades in ``reply``, the suspect grades it holds): the grades the answer does
    not hold, else the suspect ones the quote rules leave (an empty list: none is the judge's)."""
    claims = _claims(rule, quotes)
    # The answer's lines the reply holds are the answer's text: a grade touching them is not the
    # judge's, and the blanks never join the judge's text into a grade ("[[" + blank + "]]").
    text = quotes.blanked(reply)
    own: list[str] = []
    left: list[re.Match[str]] = []  # suspect grades outside the answer's lines
    suspect: set[str] = set()
    for match in islice(pattern.finditer(reply), MATCH_LIMIT):
        raw = match.group(1) or ""
        claim = _is_claim(rule, raw, claims)
        if claim:
            suspect.add(raw.strip())
        if text[match.start():match.end()] != match.group(0):
            continue
        if claim:
            left.append(match)
        else:
            own.append(raw)
    if own or not suspect or len({_key(rule, raw) for raw in suspect}) > 1:
        # Suspect grades of several values: which one is the judge's verdict and which the
        # answer's claims it mentions cannot be told, and no pick may choose for the answer.
        return own, suspect
    # Every grade is the one the answer holds: those the quote rules leave are the judge's own
    # (a judge answering "4" to the answer "4" under a bare-number pattern).
    return [m.group(1) or "" for m in left if not quotes.quoted(text, m)], suspect


def _key(rule: GradeRule, raw: str) -> float | str:
    """What a grade says: its value, else its text (a label word without case)."""
    value = _value(rule, raw)[0]
    return raw.strip().lower() if value is None else value


def _claims(rule: GradeRule, quotes: Quotes) -> tuple[set[str], set[float]]:
    """The grades the answer holds: their texts and, where they have one, their values."""
    texts = {raw.strip().lower() for raw in quotes.grades}
    values = {v for v, _ in map(partial(_value, rule), texts) if v is not None}
    return texts, values


def _is_claim(rule: GradeRule, raw: str, claims: tuple[set[str], set[float]]) -> bool:
    texts, values = claims
    if not texts:
        return False
    if raw.strip().lower() in texts:
        return True
    value = _value(rule, raw)[0]
    return value is not None and value in values


def _value(rule: GradeRule, raw: str) -> tuple[float | None, str]:
    """(grade, what the reply said): a label's grade, or the number it wrote."""
    word = raw.strip()
    if rule.labels:
        return rule.labels.get(word.lower()), word
    return _number_text(word), word


def _pick(how: str, values: list[tuple[float | None, str]]) -> tuple[float | None, str] | str:
    if how == "first":
        return values[0]
    if how == "last":
        return values[-1]
    distinct = {grade for grade, _ in values}
    if len(distinct) > 1:
        said = ", ".join(sorted({word for _, word in values}))[:200]
        return f"the judge's reply gives several different grades ({said}): no grade taken"
    return values[0]


def _number_text(text: str) -> float | None:
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None
