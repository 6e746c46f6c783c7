"""The ``pairwise`` scorer: a judge compares this arm's answer with another arm's, in both orders.

``scorer: {name: pairwise, judge: J, against: ARM}`` asks judge ``J`` which of two answers is
better, first with this arm's answer as assistant A ("ab"), then as assistant B ("ba"), by
FastChat's ``pair-v2`` prompt unless ``template:`` (with ``{answer_a}`` and ``{answer_b}``) gives
another. Its verdict is ``[[A]]``, ``[[B]]`` or ``[[C]]`` (a tie). A verdict that flips with the
order is a tie, as FastChat counts it: the row's ``score`` is 1 (a win against ARM), 0.5 (a tie)
or 0 (a loss), ``passed`` a win, and both judgments are kept with their ``order``. An order whose
only verdicts repeat verdicts either answer wrote (``scoring.grades``) is a loss for this arm.

The other arm's answer is its stored output (``Judges.answer_of``): a pairwise comparison is made
from a results file by ``echo-bench judge``; in a live sweep the verdict is ``unjudged``.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_echo_bench.scoring.fastchat_prompts import PAIR_V2
from pytest_echo_bench.scoring.grades import GradeRule
from pytest_echo_bench.scoring.judging import Judges
from pytest_echo_bench.scoring.judgment import Judgment
from pytest_echo_bench.scoring.model_graded import (
    OptionError,
    ask_panel,
    option_problem,
    template_fields,
)
from pytest_echo_bench.scoring.verdict import CORRECT, WRONG, Verdict, unjudged

if TYPE_CHECKING:
    from pytest_echo_bench.datasets.example import Example

OPTIONS = frozenset({"judge", "against", "template", "system", "judges"})
VERDICT = re.compile(r"\[\[([ABC])\]\]")
# Each order's verdict as this arm's grade: 1 it won, 0 it lost, 0.5 a tie. The last verdict of
# a reply counts: the prompt asks for it after the explanation, which may name the others.
RULES = {
    "ab": GradeRule(VERDICT, (0.0, 1.0), 1.0, {"a": 1.0, "b": 0.0, "c": 0.5}, pick="last"),
    "ba": GradeRule(VERDICT, (0.0, 1.0), 1.0, {"a": 0.0, "b": 1.0, "c": 0.5}, pick="last"),
}
OUTCOMES = {1.0: "win", 0.5: "tie", 0.0: "loss"}


@dataclass(frozen=True)
class Options:
    """A ``pairwise`` scorer's options, read and checked."""

    judge: str
    against: str
    template: str
    system: str | None


def pairwise(output: str, example: Example, options: dict[str, Any], *,
             judges: Judges) -> Verdict:
    """This arm's ``output`` against arm ``against``'s stored output for the same item."""
    conf = read_options(options)
    other = judges.answer_of(conf.against)
    if other is None:
        return unjudged(f"unjudged: pairwise against {conf.against} is judged from stored "
                        "outputs: run echo-bench judge RUN.jsonl --spec SPEC once both arms' "
                        "outputs are recorded")
    if other == output:  # ARM's own rows, or the same text: a tie, with nothing to ask
        return Verdict(WRONG, "tie", f"tie against {conf.against}: the same answer, no judge "
                       "asked", score=0.5)
    both = f"{output}\n{other}"  # what the judge may quote back: neither answer grades itself
    judgments = [
        *ask_panel(judges, [conf.judge], render(conf.template, example, output, other),
                   conf.system, RULES["ab"], both, "ab"),
        *ask_panel(judges, [conf.judge], render(conf.template, example, other, output),
                   conf.system, RULES["ba"], both, "ba"),
    ]
    return combine(judgments, conf.against)


def combine(judgments: list[Judgment], against: str) -> Verdict:
    """The verdict of both orders: the same in both, or else a tie (the order decided it). An
    order whose only verdicts were the answers' own is a loss for this arm, never a win."""
    kept = tuple(judgments)
    incomplete = _incomplete(kept, against)
    if incomplete is not None:
        return incomplete
    ab, ba = (0.0 if j.grade is None else j.grade for j in kept)
    said = f"ab: {_said(kept[0])}, ba: {_said(kept[1])}"
    if ab == ba:
        grade, detail = ab, f"{OUTCOMES[ab]} against {against} ({said})"
    else:
        grade, detail = 0.5, f"tie against {against}: the verdict flips with the order ({said})"
    return Verdict(CORRECT if grade == 1.0 else WRONG, OUTCOMES[grade], detail, score=grade,
                   judgments=kept)


def _incomplete(kept: tuple[Judgment, ...], against: str) -> Verdict | None:
    """The verdict when an order gave no verdict (None: both did)."""
    missing = [j for j in kept if j.grade is None and not j.planted]
    if not missing:
        return None
    if any(j.planted for j in kept):
        # One order counts against this arm, the other gave nothing: at best a tie, so never
        # left out of the pass rate as unjudged (that would count for it).
        why = "; ".join(f"{j.order}: {j.note or 'no verdict'}" for j in kept)
        return Verdict(WRONG, None, f"not passed against {against}: {why}", judgments=kept)
    why = "; ".join(f"{j.order}: {j.note or 'no verdict'}" for j in missing)
    return unjudged(f"unjudged: {why}", kept)


def _said(judgment: Judgment) -> str:
    """An order's verdict as the detail shows it."""
    return "only the answers' own verdicts, a loss" if judgment.planted else str(judgment.label)


def render(template: str, example: Example, answer_a: str, answer_b: str) -> str:
    """The judge's prompt: ``template`` over the item's fields and the two answers, each inserted
    once as text (braces in an answer are never formatted again)."""
    values: dict[str, Any] = {**{str(k): v for k, v in example.metadata.items()},
                              "question": example.input, "answer_a": answer_a,
                              "answer_b": answer_b, "target": example.target}
    values.setdefault("reference", example.target)
    parts = []
    for literal, name, spec, _ in string.Formatter().parse(template):
        parts.append(literal)
        if name is not None:
            value = values.get(name, "")
            parts.append(format(value, spec) if spec else str(value))
    return "".join(parts)


def read_options(options: Mapping[str, Any]) -> Options:
    """The options, checked: OptionError for options that cannot work."""
    unknown = sorted(set(map(str, options)) - OPTIONS)
    if unknown:
        raise OptionError(f"unknown pairwise option {unknown[0]!r}; known: against, judge, "
                          "system, template")
    judge, against = options.get("judge"), options.get("against")
    if not isinstance(judge, str) or not judge:
        raise OptionError("judge must name one judge of the spec's judges: (pairwise asks one "
                          "judge, in both orders)")
    if not isinstance(against, str) or not against:
        raise OptionError("against must name the arm whose answers this arm's are compared with")
    template, system = options.get("template"), options.get("system")
    if template is None:  # FastChat's pair-v2, with its own system text unless one is given
        return Options(judge, against, PAIR_V2.template, PAIR_V2.system if system is None
                       else _system(system))
    if not isinstance(template, str) or not template.strip():
        raise OptionError("template must be text, with {answer_a} and {answer_b}")
    missing = sorted({"answer_a", "answer_b"} - template_fields(template))
    if missing:
        raise OptionError(f"template has no {{{missing[0]}}}: the judge would not see both "
                          "answers")
    return Options(judge, against, template, None if system is None else _system(system))


def _system(system: Any) -> str:
    if not isinstance(system, str):
        raise OptionError("system must be text: the judge's system prompt")
    return system


def check_options(options: Mapping[str, Any]) -> str | None:
    """Why ``scorer: {name: pairwise, ...}`` options are wrong, or None."""
    return option_problem(read_options, options)
