"""The worst case of a scorer's judge calls: which judges an item asks and how often, the bound of
each judge prompt, and its price, checked against figures written out by hand."""

from __future__ import annotations

import dataclasses
import string
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_echo_bench.budget.estimate import worst_case_usd
from pytest_echo_bench.budget.judged import (
    TEMPLATE_BYTES,
    call_worst,
    judges_worst,
    panel,
    prompt_bound,
    unbounded,
)
from pytest_echo_bench.budget.worst import MESSAGE_TOKENS, QUOTED_FACTOR, REPLY_TOKENS, input_tokens
from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.engine.declared import declared
from pytest_echo_bench.spec.load import Spec, load_spec
from pytest_echo_bench.spec.pricing import Price

TEMPLATE = "Q: {question}\\nRef: {reference}\\nA: {answer}\\nScore?"
SPEC = """benchmark: judged
dataset: {{loader: inline, items: [{{id: q, input: x, target: x}}]}}
scorer:
  name: {scorer}
{options}  judges:
    g1: {{provider: openai, model: j1, max_tokens: 10}}
    g2: {{provider: openai, model: j2, max_tokens: 20, system: "Be strict."}}
arms:
  a: {{provider: openai, model: m, max_tokens: 50}}
  b: {{provider: openai, model: m, max_tokens: 300}}
"""
PRICES = {"a": Price(1.0, 1.0), "b": Price(1.0, 1.0), "g1": Price(2.0, 4.0),
          "g2": Price(3.0, 5.0)}
ITEM = Example("q", "What is 2+2?", "4", metadata={"reference": "four"})


def judged_spec(tmp_path: Path, scorer: str = "model_graded", options: str = "",
                prices: dict[str, tuple[float, float]] | None = None) -> Spec:
    path = tmp_path / "judged.yaml"
    path.write_text(SPEC.format(scorer=scorer, options=options))
    return dataclasses.replace(load_spec(path), pricing=dict(PRICES if prices is None else prices))


def test_each_judge_the_scorer_names_is_asked_once_pairwise_twice(tmp_path: Path) -> None:
    graded = judged_spec(tmp_path, options="  judge: [g1, g2, g1]\n")
    assert dict(panel(graded, declared(graded)).calls) == {"g1": 2, "g2": 1}  # type: ignore[union-attr]
    one = judged_spec(tmp_path, options="  judge: g2\n")
    assert dict(panel(one, declared(one)).calls) == {"g2": 1}  # type: ignore[union-attr]
    pairwise = judged_spec(tmp_path, "pairwise", "  judge: g1\n  against: b\n")
    plan = panel(pairwise, declared(pairwise))
    assert plan is not None and dict(plan.calls) == {"g1": 2} and plan.against == "b"
    # A scorer that names none (a user's own) is taken to ask every declared judge once.
    custom = judged_spec(tmp_path, "graded")
    assert dict(panel(custom, declared(custom)).calls) == {"g1": 1, "g2": 1}  # type: ignore[union-attr]


def test_a_judge_prompt_is_its_template_with_the_fields_and_the_answer_at_its_cap(
        tmp_path: Path) -> None:
    spec = judged_spec(tmp_path, options=f'  judge: [g1, g2]\n  template: "{TEMPLATE}"\n'
                                         '  system: "Grade it."\n')
    plan = panel(spec, declared(spec))
    assert plan is not None
    text = "Q: What is 2+2?\nRef: four\nA: \nScore?"  # the reference is the metadata's
    answer = QUOTED_FACTOR * 50 + MESSAGE_TOKENS  # arm a's max_tokens, in the judge's tokens
    system = len("Grade it.") + MESSAGE_TOKENS
    g1 = len(text) + MESSAGE_TOKENS + REPLY_TOKENS + answer + system
    assert prompt_bound(spec, plan, "g1", ITEM, "a") == g1
    # g2 sends its own system text beside the scorer's
    g2 = g1 + len("Be strict.") + MESSAGE_TOKENS
    assert prompt_bound(spec, plan, "g2", ITEM, "a") == g2
    worst = (g1 * 2.0 + 10 * 4.0) / 1e6 + (g2 * 3.0 + 20 * 5.0) / 1e6
    assert judges_worst(spec, plan, ITEM, "a") == pytest.approx(worst)
    # arm b's answers may be six times as long: its judges' prompts are held for them
    longer = QUOTED_FACTOR * (300 - 50)
    assert prompt_bound(spec, plan, "g1", ITEM, "b") == g1 + longer


def test_a_template_the_spec_does_not_give_is_taken_at_its_allowance(tmp_path: Path) -> None:
    spec = judged_spec(tmp_path, "graded")
    plan = panel(spec, declared(spec))
    assert plan is not None
    fields = len("What is 2+2?") + len("4") + len("four")  # question, target, reference
    answer = QUOTED_FACTOR * 50 + MESSAGE_TOKENS
    expected = TEMPLATE_BYTES + fields + MESSAGE_TOKENS + REPLY_TOKENS + answer
    assert prompt_bound(spec, plan, "g1", ITEM, "a") == expected


def test_pairwise_quotes_both_answers(tmp_path: Path) -> None:
    template = '  template: "{question} A: {answer_a} B: {answer_b}"\n'
    spec = judged_spec(tmp_path, "pairwise", "  judge: g1\n  against: b\n" + template)
    plan = panel(spec, declared(spec))
    assert plan is not None
    text = "What is 2+2? A:  B: "
    answers = QUOTED_FACTOR * 50 + QUOTED_FACTOR * 300 + 2 * MESSAGE_TOKENS
    bound = len(text) + MESSAGE_TOKENS + REPLY_TOKENS + answers
    assert prompt_bound(spec, plan, "g1", ITEM, "a") == bound
    assert judges_worst(spec, plan, ITEM, "a") == pytest.approx(2 * (bound * 2.0 + 40.0) / 1e6)


def test_a_judge_without_prices_or_max_tokens_has_no_worst_case(tmp_path: Path) -> None:
    unpriced = judged_spec(tmp_path, "graded", prices={"a": (1.0, 1.0)})
    judges = declared(unpriced)
    why = unbounded(unpriced, "g1", judges["g1"])
    assert why is not None and "no prices" in why and "pricing: {g1:" in why
    assert judges_worst(unpriced, panel(unpriced, judges), ITEM, "a") is None
    uncapped = dataclasses.replace(judges["g1"], options={"model": "j1"})
    why = unbounded(judged_spec(tmp_path, "graded"), "g1", uncapped)
    assert why is not None and "no max_tokens" in why and "judge 'g1'" in why
    # free output needs no cap: the prompt alone is priced
    free = judged_spec(tmp_path, "graded", prices={**PRICES, "g1": Price(2.0, 0.0)})
    assert unbounded(free, "g1", uncapped) is None
    assert call_worst(free, "g1", uncapped, "hi") == pytest.approx(
        input_tokens(uncapped, "hi") * 2.0 / 1e6)


def test_no_judge_costs_nothing(tmp_path: Path) -> None:
    spec = judged_spec(tmp_path, "graded")
    assert panel(spec, {}) is None and judges_worst(spec, None, ITEM, "a") == 0.0


SAFE = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
PIECES = st.sampled_from(["{question}", "{answer}", "{reference}", "{target}", "{answer_b}",
                          "{question[0]}", "{x.y}", "{0}", "{}", "{", "}", "{{", "}}",
                          "{question:>30}", "{answer:^7.3}", "{target:x>99999999999999}",
                          "\u00e9", "\U0001f600", "Score: "])


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(template=st.lists(PIECES | SAFE, max_size=12).map("".join),
       question=SAFE, reference=SAFE, answer=st.text(max_size=100))
def test_any_template_bounds_the_prompt_it_renders(tmp_path_factory: pytest.TempPathFactory,
                                                   template: str, question: str,
                                                   reference: str, answer: str) -> None:
    """Whatever the template (unbalanced braces, attribute access, unknown fields), the bound never
    raises, and it holds every prompt ``str.format`` renders from it with an answer within
    QUOTED_FACTOR bytes a token of the arm's cap."""
    path = tmp_path_factory.getbasetemp() / "t.yaml"
    path.write_text(SPEC.format(scorer="model_graded", options="  judge: g1\n"))
    spec = dataclasses.replace(load_spec(path), pricing=dict(PRICES),
                               scorer_options={"judge": "g1", "template": template,
                                               "judges": {"g1": {"provider": "openai",
                                                                 "model": "j", "max_tokens": 1}}})
    plan = panel(spec, declared(spec))
    assert plan is not None
    item = Example("q", question, "t", metadata={"reference": reference})
    bound = prompt_bound(spec, plan, "g1", item, "a")
    assert judges_worst(spec, plan, item, "a") is not None
    fitted = answer.encode()[:QUOTED_FACTOR * 50].decode(errors="ignore")
    values = {"question": question, "reference": reference, "target": "t", "answer": fitted}
    try:
        parsed = list(string.Formatter().parse(template))
        names = {n for _, n, _, _ in parsed if n is not None}
        huge = any(len(spec or "") > 6 for _, _, spec, _ in parsed)  # not rendered: gigabytes
        rendered = template.format(**values) if names <= set(values) and not huge else None
    except (ValueError, IndexError, KeyError, AttributeError, TypeError):
        rendered = None
    if rendered is not None:
        assert input_tokens(plan.judges["g1"], rendered) <= bound


def test_what_a_budget_must_still_hold_counts_the_judges(tmp_path: Path) -> None:
    spec = judged_spec(tmp_path, options=f'  judge: g1\n  template: "{TEMPLATE}"\n')
    plan = panel(spec, declared(spec))
    items = [(ITEM, "a", 1), (ITEM, "b", 1)]
    arms = worst_case_usd(spec, items)
    assert arms is not None
    judges = [judges_worst(spec, plan, ITEM, arm) for arm in ("a", "b")]
    assert None not in judges
    total = arms + sum(j for j in judges if j is not None)
    assert worst_case_usd(spec, items, judges=plan) == pytest.approx(total)
    unpriced = dataclasses.replace(spec, pricing={"a": Price(1.0, 1.0), "b": Price(1.0, 1.0)})
    assert worst_case_usd(unpriced, items, judges=plan) is None


def test_a_fields_width_pads_the_prompt_and_is_held(tmp_path: Path) -> None:
    """Found by the test above: ``{question:>30}`` renders 30 characters for an empty question."""
    spec = judged_spec(tmp_path, options='  judge: g1\n  template: "{question:>30}{answer}"\n')
    plan = panel(spec, declared(spec))
    assert plan is not None
    empty = Example("q", "", "t")
    answer = QUOTED_FACTOR * 50 + MESSAGE_TOKENS
    bound = prompt_bound(spec, plan, "g1", empty, "a")
    assert bound == 1 + 30 + MESSAGE_TOKENS + REPLY_TOKENS + answer  # a byte for its message
    assert input_tokens(plan.judges["g1"], "{:>30}".format("") + "a" * 100) <= bound
