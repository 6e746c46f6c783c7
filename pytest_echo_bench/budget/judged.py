"""What a scorer's judges may cost: the calls a judged scorer makes per item, and the most each may
cost before it is sent, read from the spec (the scorer's options, each judge's request and prices).

Calls per item: ``model_graded`` (and any scorer given ``judge:``) asks each judge it names once,
``pairwise`` asks each twice (both orders), and a scorer that names none (a custom judged scorer)
is taken to ask every declared judge once. A scorer that asks more is held more at its call, when
that fits (``budget.hold``), else its call is refused as any call that does not fit.

A judge's prompt is its template with the item's fields and the answer under judgement put in: the
template's own text and each field it names count at their UTF-8 bytes (a byte a token, as
``budget.worst`` bounds every prompt), a field's width in its format spec at that many more; an
answer at ``QUOTED_FACTOR`` judge tokens per token of the answering arm's cap. A scorer whose
template the spec does not give (a built-in's, or a custom scorer's own) is taken at
``TEMPLATE_BYTES`` of text of its own plus every field of the item once.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_echo_bench.budget.worst import (
    MESSAGE_TOKENS,
    QUOTED_FACTOR,
    answer_cap,
    completion_cap,
    input_tokens,
    reply_bound,
    sent,
)
from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.spec.load import ArmSpec, Spec

# The text of a judge prompt's own, when the spec does not give its template: FastChat's longest
# single-answer template (``single-math-v1``, MT-bench's) is about 1,100 bytes without its fields.
TEMPLATE_BYTES = 4096
PAIRWISE = "pairwise"  # the scorer that asks each judge in both orders
ANSWER = "answer"  # the template field that holds the answer under judgement
TEXT_LIMIT = 1_000_000  # characters of a template file read, as ``model_graded`` reads it
WIDTH = re.compile(r"\d{1,12}")  # a format spec's numbers (a width pads its field that far)


@dataclass(frozen=True)
class Panel:
    """The judges an item's scorer asks: ``calls`` per judge and item, and the prompt's shape
    (``template`` None: the scorer's own, not in the spec)."""

    judges: Mapping[str, ArmSpec]
    calls: Mapping[str, int]
    template: str | None = None
    system: str | None = None
    against: str | None = None  # pairwise: the arm whose answer is quoted beside the item's


def panel(spec: Spec, judges: Mapping[str, ArmSpec]) -> Panel | None:
    """What ``spec``'s scorer asks of ``judges`` (its declared judges) per item (None: none)."""
    if not judges:
        return None
    options = spec.scorer_options
    per = 2 if spec.scorer == PAIRWISE else 1
    calls: dict[str, int] = {}
    for name in _named(options.get("judge"), judges):
        calls[name] = calls.get(name, 0) + per  # a judge named twice on a panel is asked twice
    system = options.get("system")
    against = options.get("against")
    return Panel(judges, calls, _template(spec, options),
                 system if isinstance(system, str) else None,
                 against if isinstance(against, str) and against in spec.arms else None)


def _named(value: object, judges: Mapping[str, ArmSpec]) -> list[str]:
    """The judges a scorer's ``judge:`` names (none named: every declared judge)."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return list(judges)
    return [name for name in value if isinstance(name, str) and name in judges]


def _template(spec: Spec, options: Mapping[str, Any]) -> str | None:
    """The template the spec gives: ``template`` text or ``template_file`` (by the spec's
    folder); None when it gives none, or one that cannot be read (the scorer's check says why)."""
    text = options.get("template")
    if isinstance(text, str):
        return text
    name = options.get("template_file")
    if not isinstance(name, str):
        return None
    path = Path(name) if Path(name).is_absolute() else spec.path.parent / name
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            return handle.read(TEXT_LIMIT)
    except OSError:
        return None


def fields(example: Example) -> dict[str, str]:
    """The item's fields a judge's template may name, as text (the answer apart)."""
    found = {str(k): str(v) for k, v in example.metadata.items()}
    reference = found.get("reference", example.target)
    return {**found, "question": example.input, "target": example.target, "reference": reference}


@dataclass(frozen=True)
class Shape:
    """One judge prompt for an item, in parts: ``text`` (the template's own and the fields it
    names, as one text: its length is what counts), ``pad`` characters more (the padding format
    specs may add, or the allowance of a template the spec does not give) and the ``answers`` it
    quotes (arm names)."""

    text: str
    answers: tuple[str, ...]
    pad: int = 0


def shape(plan: Panel, example: Example, arm: str) -> Shape:
    """The judge prompt ``plan``'s scorer builds for ``example``'s answer by ``arm``."""
    known = fields(example)
    quoted = (arm,) if plan.against is None else (arm, plan.against)
    parts = _parsed(plan.template)
    if parts is None:  # the scorer's own template: its allowance and every field once
        return Shape("".join(known.values()), quoted, TEMPLATE_BYTES)
    text: list[str] = []
    answers: list[str] = []
    padded = 0
    for literal, field, pad in parts:
        text.append(literal)
        if field is None:
            continue
        padded += pad  # a width in its format spec pads the field up to that far
        if field in known and field != ANSWER:
            text.append(known[field])
        else:  # the answer, or a field only the scorer fills (pairwise's two answers)
            answers.append(quoted[len(answers) % len(quoted)])
    return Shape("".join(text), tuple(answers), padded)


def _parsed(template: str | None) -> list[tuple[str, str | None, int]] | None:
    """``template`` as (literal text, field name or None, the widest its format spec pads it)
    triples; None: no template, or one ``str.format`` cannot read (taken as the scorer's own)."""
    if template is None:
        return None
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError:
        return None
    # "{question.x}" or "{question[0]}" names the field "question"
    return [(literal, None if name is None else name.split(".")[0].split("[")[0],
             max(map(int, WIDTH.findall(spec or "")), default=0))
            for literal, name, spec, _ in parsed]


def prompt_bound(spec: Spec, plan: Panel, name: str, example: Example, arm: str) -> int:
    """An upper bound on the prompt tokens of one call of judge ``name`` for ``arm``'s answer."""
    conf = plan.judges[name]
    if "messages" in sent(conf):  # its request's own messages replace the prompt: those are sent
        return input_tokens(conf, None)
    made = shape(plan, example, arm)
    quoted = sum(QUOTED_FACTOR * (answer_cap(spec, a) or 0) + MESSAGE_TOKENS for a in made.answers)
    system = (len(plan.system.encode("utf-8", "surrogatepass")) + MESSAGE_TOKENS
              if plan.system else 0)
    # A prompt of no text of its own (all fields) is still a message: a byte stands for it.
    return input_tokens(conf, made.text or " ") + made.pad + quoted + system


def unbounded(spec: Spec, name: str, conf: ArmSpec) -> str | None:
    """Why judge ``name`` has no worst case (None: it has one)."""
    if name not in spec.pricing:
        return f"it has no prices (add pricing: {{{name}: {{input: .., output: ..}}}} to the spec)"
    cap, why = reply_bound(conf)
    if spec.pricing[name].dearest()[1] > 0 and cap is None:
        return f"it has an output price but {why} (add max_tokens to judge {name!r})"
    return None


def call_worst(spec: Spec, name: str, conf: ArmSpec, prompt: str) -> float | None:
    """The most one call of judge ``name`` with ``prompt`` may cost (None: no worst case)."""
    if unbounded(spec, name, conf) is not None:
        return None
    return _cost(spec, name, conf, input_tokens(conf, prompt))


def _cost(spec: Spec, name: str, conf: ArmSpec, tokens: int) -> float:
    per_input, per_output = spec.pricing[name].dearest()
    return (tokens * per_input + (completion_cap(conf) or 0) * per_output) / 1e6


def judges_worst(spec: Spec, plan: Panel | None, example: Example, arm: str) -> float | None:
    """The most the judge calls of one item of ``arm`` may cost: each judge's worst case times
    its calls (0.0: no judge; None: a judge without a worst case)."""
    if plan is None:
        return 0.0
    total = 0.0
    for name, calls in plan.calls.items():
        conf = plan.judges[name]
        if unbounded(spec, name, conf) is not None:
            return None
        total += calls * _cost(spec, name, conf, prompt_bound(spec, plan, name, example, arm))
    return total
