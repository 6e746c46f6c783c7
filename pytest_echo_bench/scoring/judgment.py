"""What one judge did for one item: the record a row keeps in its ``judgments`` list.

The row keeps enough to audit the grade without re-asking: which judge and which model served
it, a digest of the exact prompt (the prompt itself when it is short), the raw reply (bounded),
the grade read from it, the tokens and the cost. ``from_json`` reads a record back from any file,
hostile ones included: anything that is not a well-formed record is None, never an exception,
and a figure that is not a finite number >= 0 (a grade may be negative: scales are the user's)
is left out.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, fields
from typing import Any

from pytest_echo_bench.store.checks import count, figure, grade

PROMPT_KEEP = 8_000  # characters of the rendered prompt a row keeps (else its digest alone)
REPLY_KEEP = 16_000  # characters of the judge's reply a row keeps (the length is kept too)
ORDERS = ("ab", "ba")  # a pairwise judgment's order: the arm judged first, or second


@dataclass(frozen=True)
class Judgment:
    judge: str  # the judge's declared name
    model: str | None  # the model the reply says served it, else the declared one
    prompt_sha256: str  # of the whole prompt sent: ``system + "\n\n" + prompt`` with a system
    prompt: str | None = None  # the rendered prompt, when at most PROMPT_KEEP characters
    reply: str = ""  # the raw reply, cut to REPLY_KEEP characters
    reply_chars: int = 0  # the reply's whole length
    grade: float | None = None  # None: no grade read (``note`` says why)
    label: str | None = None  # the label word read (labels grading)
    passed: bool | None = None
    usage: dict[str, int] | None = None
    cost_usd: float | None = None
    cached: bool = False  # answered by the response cache: no call made (cost: its list price)
    order: str | None = None  # pairwise: "ab" (this arm's answer first) or "ba"
    note: str | None = None

    @property
    def planted(self) -> bool:
        """No grade, yet not passed: the judge's only grades were the answer's own claims
        (``scoring.grades``), a verdict that counts against the answer, never for it."""
        return self.grade is None and self.passed is False

    def to_json(self) -> dict[str, Any]:
        """The record as a row stores it: fields that are None left out, and ``cached`` when
        False and ``reply_chars`` when 0 (``passed: false`` is kept: a grade under ``pass_at``
        is a failed judgment, not an unknown one)."""
        return {f.name: value for f in fields(self)
                if (value := getattr(self, f.name)) is not None
                and not (f.name == "cached" and value is False)
                and not (f.name == "reply_chars" and value == 0)}

    @classmethod
    def from_json(cls, record: object) -> Judgment | None:
        """A record as a row holds it, or None when it is not one (a hostile or damaged file)."""
        if not isinstance(record, dict):
            return None
        judge, digest = record.get("judge"), record.get("prompt_sha256")
        if not isinstance(judge, str) or not isinstance(digest, str):
            return None
        return cls(
            judge=judge, model=_text(record.get("model")), prompt_sha256=digest,
            prompt=_text(record.get("prompt")), reply=_text(record.get("reply")) or "",
            reply_chars=count(record.get("reply_chars")) or 0,
            grade=grade(record.get("grade")), label=_text(record.get("label")),
            passed=record.get("passed") if isinstance(record.get("passed"), bool) else None,
            usage=_usage(record.get("usage")), cost_usd=figure(record.get("cost_usd")),
            cached=record.get("cached") is True,
            order=order if (order := record.get("order")) in ORDERS else None,
            note=_text(record.get("note")),
        )


def prompt_digest(prompt: str, system: str | None) -> str:
    """The digest of everything a judge was sent (two judgments with one digest saw one text)."""
    whole = prompt if not system else f"{system}\n\n{prompt}"
    return hashlib.sha256(whole.encode("utf-8", "surrogatepass")).hexdigest()


def kept_prompt(prompt: str) -> str | None:
    return prompt if len(prompt) <= PROMPT_KEEP else None


def kept_reply(reply: str) -> str:
    return reply if len(reply) <= REPLY_KEEP else reply[:REPLY_KEEP]


def judge_cost(judgments: tuple[Judgment, ...] | list[Judgment]) -> float | None:
    """What the judges' calls spent, when any of them says: a judgment the response cache
    answered sent nothing (its own record keeps its list price), as a cached arm's row spends
    nothing in the budget's and the report's count."""
    known = [0.0 if j.cached else j.cost_usd for j in judgments if j.cost_usd is not None]
    return round(math.fsum(known), 10) if known else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def grade_of(value: object) -> float | None:
    """A recorded grade as ``from_json`` reads it, by the row's ``score`` rule
    (``store.checks.grade``); the report's fast reading shares it."""
    return grade(value)


def _usage(value: object) -> dict[str, int] | None:
    if not isinstance(value, dict):
        return None
    counts = {str(k): v for k, v in value.items() if type(v) is int and v >= 0}
    return counts or None
