"""The ``model_graded`` scorer: a judge (or a panel) grades an open answer by a rubric.

``scorer: {name: model_graded, judge: grader, template: ..., grade: {...}}`` renders the template
over the item (``{question}``: its input, ``{answer}``: the output under judgement,
``{reference}``: its ``reference`` field or else its target, ``{target}``, and every field of the
item's metadata), asks each judge named (the spec's ``judges:``, ``engine.declared``), reads
each reply's grade (``scoring.grades``) and aggregates the panel's grades (``mean``, ``median``
or ``majority``). Every judgment is kept in the verdict, so the row shows what each judge did.

A panel grade needs every judge's grade: when one judge gives none (or fails: the engine decides
that item as the failure says), the verdict is ``unjudged``, never wrong, and the item is graded
again on ``--bench-retry-errors``. A judge whose only grades repeat grades the answer wrote
itself (``scoring.grades``) makes the item ``wrong`` with no score: its verdict cannot be told
from the answer's claim, and leaving it out of the pass rate would let an answer veto its own
low grades.
"""

from __future__ import annotations

import statistics
import string
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_echo_bench.scoring.grades import Grade, GradeRule, parse_rule, read_grade
from pytest_echo_bench.scoring.judging import Judges
from pytest_echo_bench.scoring.judgment import Judgment, kept_prompt, kept_reply, prompt_digest
from pytest_echo_bench.scoring.verdict import CORRECT, WRONG, Verdict, unjudged

if TYPE_CHECKING:
    from pytest_echo_bench.datasets.example import Example

AGGREGATES = ("mean", "median", "majority")
OPTIONS = frozenset({"judge", "template", "template_file", "system", "grade", "aggregate",
                     "judges"})
MAX_TEMPLATE = 1_000_000  # characters of a template file read


class OptionError(ValueError):
    """A ``model_graded`` option that cannot work: the spec check names the key."""


def model_graded(output: str, example: Example, options: dict[str, Any], *,
                 judges: Judges) -> Verdict:
    """Grade ``output`` with the judges ``options`` name (checked before any call)."""
    conf = read_options(options)
    prompt = render(conf.template, example, output)
    judgments = ask_panel(judges, conf.judges, prompt, conf.system, conf.rule, output)
    return aggregate(judgments, conf.rule, conf.aggregate)


class Options:
    """A ``model_graded`` scorer's options, read and checked."""

    def __init__(self, judges: tuple[str, ...], template: str, system: str | None,
                 rule: GradeRule, how: str) -> None:
        self.judges, self.template, self.system, self.rule = judges, template, system, rule
        self.aggregate = how


_read: dict[int, tuple[Mapping[str, Any], Options]] = {}  # id(options) -> what they read as


def read_options(options: Mapping[str, Any]) -> Options:
    """The options read once per mapping (a spec's items share one): OptionError for bad ones."""
    found = _read.get(id(options))
    if found is not None and found[0] is options:
        return found[1]
    conf = _parse(options)
    _read[id(options)] = (options, conf)
    return conf


def check_options(options: Mapping[str, Any]) -> str | None:
    """Why ``options`` cannot grade (None: they can): the spec check's message."""
    return option_problem(_parse, options)


def option_problem(read: Callable[[Mapping[str, Any]], object],
                   options: Mapping[str, Any]) -> str | None:
    """What ``read`` (a judged scorer's reading of its options) refuses in ``options``, as the
    spec check says it, or None: the one shape of every judged scorer's ``check_options``."""
    try:
        read(options)
    except OptionError as exc:
        return str(exc)
    return None


def _parse(options: Mapping[str, Any]) -> Options:
    unknown = sorted(set(map(str, options)) - OPTIONS)
    if unknown:
        raise OptionError(f"unknown model_graded option {unknown[0]!r}; known: "
                          f"{', '.join(sorted(OPTIONS - {'judges'}))}")
    names = judge_names(options.get("judge"))
    template = _template(options)
    system = options.get("system")
    if system is not None and not isinstance(system, str):
        raise OptionError("system must be text: the judge's system prompt")
    rule = parse_rule(options.get("grade"), OptionError)
    how = options.get("aggregate", "majority" if rule.labels else "mean")
    if how not in AGGREGATES:
        raise OptionError(f"aggregate must be one of {', '.join(AGGREGATES)}, got {how!r}")
    return Options(names, template, system, rule, how)


def judge_names(value: Any) -> tuple[str, ...]:
    """``judge: NAME`` or ``judge: [NAMES]``: the judges to ask, in order, each once."""
    names = [value] if isinstance(value, str) else value
    if (not isinstance(names, list) or not names
            or not all(isinstance(n, str) and n for n in names)):
        raise OptionError("judge must name a judge of the spec's judges: (or a list of them)")
    if len(set(names)) != len(names):
        raise OptionError("judge names a judge twice: each judge of a panel grades once")
    return tuple(names)


def _template(options: Mapping[str, Any]) -> str:
    text, file = options.get("template"), options.get("template_file")
    if (text is None) == (file is None):
        raise OptionError("give the judge's prompt as template (text) or template_file (a path "
                          "beside the spec), one of them")
    if file is not None:
        text = _read_template(file)
    if not isinstance(text, str) or not text.strip():
        raise OptionError("template must be text, with {answer} where the answer goes")
    fields = template_fields(text)
    if "answer" not in fields:
        raise OptionError("template has no {answer}: the judge would not see the answer")
    return text


def _read_template(file: Any) -> str:
    """The template file's text (the spec's loader made its path absolute)."""
    if not isinstance(file, str):
        raise OptionError("template_file must be a path (relative to the spec's folder)")
    path = Path(file)
    try:
        with path.open(encoding="utf-8") as handle:
            return handle.read(MAX_TEMPLATE + 1)[:MAX_TEMPLATE]
    except (OSError, UnicodeDecodeError) as exc:
        raise OptionError(f"template_file {file!r} cannot be read: {exc}") from None


def template_fields(template: str) -> set[str]:
    """The fields ``template`` names; OptionError for one that is not a plain name."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise OptionError(f"template is not a format text ({exc}); write a literal brace "
                          "as {{ or }}") from None
    names = {name for _, name, _, _ in parsed if name is not None}
    for name in names:
        if not name.isidentifier():
            raise OptionError(f"template field {{{name}}} must be a plain name ({{answer}}, "
                              "{question}, {reference}, {target} or a field of the dataset)")
    for _, name, spec, _ in parsed:
        if name is not None and spec:
            _check_format(name, spec)
    return names


TEXT_FIELDS = frozenset({"question", "answer", "answer_a", "answer_b", "target"})


def _check_format(name: str, spec: str) -> None:
    """A field's format (``{question:>40}``) must format its value, or every item's prompt fails
    to render: text for the fields that are always text; text or a number for a dataset's field,
    which may hold numbers (an item whose field does not fit the format is that item's scorer
    error, as any scorer crash)."""
    samples: tuple[object, ...] = ("text",) if name in TEXT_FIELDS else ("text", 0, 0.5)
    why = ""
    for sample in samples:
        try:
            format(sample, spec)
            return
        except (ValueError, TypeError) as exc:
            why = why or str(exc)
    kind = "text" if name in TEXT_FIELDS else "text or a number"
    raise OptionError(f"template field {{{name}:{spec}}}: its format cannot format {kind} "
                      f"({why}); write {{{name}}}, or a format for text such as {{{name}:>40}}")


def render(template: str, example: Example, output: str) -> str:
    """The judge's prompt: ``template`` over the item's fields, the answer as ``{answer}``.

    A field the item lacks renders empty; the fields' text is inserted once, never formatted
    again, so braces in an answer are just text."""
    metadata = {str(k): v for k, v in example.metadata.items()}
    reference = metadata.get("reference", example.target)
    values: dict[str, Any] = {**metadata, "question": example.input, "answer": output,
                              "reference": reference, "target": example.target}
    parts = []
    for literal, name, spec, _ in string.Formatter().parse(template):
        parts.append(literal)
        if name is not None:
            value = values.get(name, "")
            parts.append(format(value, spec) if spec else str(value))
    return "".join(parts)


def ask_panel(judges: Judges, names: Sequence[str], prompt: str, system: str | None,
              rule: GradeRule, answer: str, order: str | None = None) -> list[Judgment]:
    """Ask each judge ``prompt`` and read its grade: one Judgment per judge."""
    found = []
    for name in names:
        reply = judges.ask(name, prompt, system)
        grade = read_grade(rule, reply.text, answer)
        found.append(judgment(name, prompt, system, reply, grade, order))
    return found


def judgment(name: str, prompt: str, system: str | None, reply: Any, grade: Grade,
             order: str | None = None) -> Judgment:
    """The record of one ask (``reply``: a ``scoring.judging.Reply``)."""
    return Judgment(judge=name, model=reply.model, prompt_sha256=prompt_digest(prompt, system),
                    prompt=kept_prompt(prompt), reply=kept_reply(reply.text),
                    reply_chars=len(reply.text), grade=grade.grade, label=grade.label,
                    passed=grade.passed, usage=reply.usage, cost_usd=reply.cost_usd,
                    cached=reply.cached, order=order, note=grade.note)


def aggregate(judgments: Sequence[Judgment], rule: GradeRule, how: str) -> Verdict:
    """The panel's verdict: ``wrong`` with no score when a judge's only grades were the answer's
    own; else ``unjudged`` unless every judge graded; else the mean or median grade (passing at
    ``pass_at``) or the majority of passes (more than half)."""
    kept = tuple(judgments)
    ungraded = _ungraded(kept)
    if ungraded is not None:
        return ungraded
    score, passed = _panel(kept, rule, how)
    label = ", ".join(f"{j.judge}: {j.label or _shown(j.grade)}" for j in kept)
    detail = f"graded {_shown(score)} ({label})" if len(kept) > 1 else f"graded {label}"
    return Verdict(CORRECT if passed else WRONG, _shown(score), detail, score=score,
                   judgments=kept)


def _ungraded(kept: tuple[Judgment, ...]) -> Verdict | None:
    """The verdict of a panel a judge of which gave no grade (None: every judge graded)."""
    planted = [j for j in kept if j.planted]
    if planted:  # counted as not passed: left out of n, the answer's failures would drop out
        why = "; ".join(f"{j.judge}: {j.note}" for j in planted)
        return Verdict(WRONG, None, f"not passed: {why}", judgments=kept)
    missing = [j for j in kept if j.grade is None]
    if not kept or missing:
        why = "; ".join(f"{j.judge}: {j.note or 'no grade'}" for j in missing) or "no judge"
        return unjudged(f"unjudged: {why}", kept)
    return None


def _panel(kept: tuple[Judgment, ...], rule: GradeRule, how: str) -> tuple[float, bool]:
    """(score, passed) of judgments that all graded."""
    grades = [j.grade for j in kept if j.grade is not None]
    if how == "majority":
        passes = sum(1 for j in kept if j.passed)
        # Labels: the mean of the words' grades, which is the share of passes for pass and fail
        # words and keeps a partial word's credit (one judge's "partial" scores 0.5, not 0).
        score = statistics.fmean(grades) if rule.labels else statistics.median(grades)
        return score, 2 * passes > len(kept)
    score = statistics.fmean(grades) if how == "mean" else statistics.median(grades)
    return score, score >= (rule.pass_at if rule.pass_at is not None else rule.scale[1])


def _shown(grade: float | None) -> str:
    return "none" if grade is None else f"{grade:g}"
