"""An item's hold on the budget with its scorer's judges, driven directly on a real ledger file:
what the item holds at its start, a judge call beyond it, and a judge's reply over its bound."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pytest_echo_bench.budget.hold import Budget
from pytest_echo_bench.budget.judged import call_worst, judges_worst, panel
from pytest_echo_bench.budget.ledger import Ledger
from pytest_echo_bench.budget.worst import item_worst
from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.engine.declared import declared
from pytest_echo_bench.errors import BudgetError
from pytest_echo_bench.spec.load import Spec, load_spec

SPEC = """benchmark: units
dataset: {loader: inline, items: [{id: q, input: x, target: x}]}
scorer: {name: graded}
judges:
  grader: {provider: openai, model: j, max_tokens: 10}
arms:
  a: {provider: openai, model: m, max_tokens: 10}
pricing:
  a: {input: 1000, output: 1000}
  grader: {input: 1000, output: 2000}
"""
ITEM = Example("q", "x", "x")
PAIR = ("units", "q", 1)


@pytest.fixture
def spec(tmp_path: Path) -> Spec:
    path = tmp_path / "units.yaml"
    path.write_text(SPEC)
    return load_spec(path)


def make_budget(tmp_path: Path, limit: float) -> Budget:
    ledger = Ledger(tmp_path / "r.jsonl")
    ledger.create({"run": limit}, {})
    budget = Budget(ledger)
    budget.max_wait_s = 0.0
    return budget


def test_an_item_holds_its_judges_worst_case_from_its_first_call(tmp_path: Path,
                                                                 spec: Spec) -> None:
    plan = panel(spec, declared(spec))
    judged = judges_worst(spec, plan, ITEM, "a")
    arm = item_worst(spec, "a", "x")
    assert judged is not None and arm is not None and judged > arm
    budget = make_budget(tmp_path, 10.0)
    grader = declared(spec)["grader"]
    prompt = "Target x. Answer: x. Right?"  # well within the prompt the hold allows
    with budget.item(spec, "a", "x", PAIR, lambda name: judges_worst(spec, plan, ITEM, name)):
        with budget.call(spec, "a", "x") as settle:
            state = budget.ledger.read()
            assert state is not None
            assert state.accounts["run"].held == pytest.approx(arm + judged)
            settle(0.0)
        with budget.call(spec, "grader", prompt, grader) as settle:
            settle(0.001)
        state = budget.ledger.read()
        assert state is not None and state.accounts["run"].held == pytest.approx(arm + judged)
        assert budget.charged() == pytest.approx(0.001)  # the row's charge: the judge's too
    state = budget.ledger.read()
    assert state is not None
    assert (state.accounts["run"].held, state.accounts["run"].spent) == (0, pytest.approx(0.001))


def test_a_judge_call_beyond_the_items_hold_takes_more_only_if_it_fits(tmp_path: Path,
                                                                       spec: Spec) -> None:
    grader = declared(spec)["grader"]
    long = "y" * 9000  # a prompt far beyond what the item held for its judge (4,096 bytes and more)
    judged = judges_worst(spec, panel(spec, declared(spec)), ITEM, "a")
    worst = call_worst(spec, "grader", grader, long)
    assert judged is not None and worst is not None and worst > judged
    budget = make_budget(tmp_path, worst + 0.001)
    with budget.item(spec, "a", "x", PAIR, lambda name: judged):
        with budget.call(spec, "grader", long, grader) as settle:
            settle(worst)
        with pytest.raises(BudgetError, match="its next call's worst case"), \
                budget.call(spec, "grader", long, grader):
            pass  # not sent: the item is left for a resume
    state = budget.ledger.read()
    assert state is not None and state.accounts["run"].spent == pytest.approx(worst)
    assert state.refused == 1


def test_a_judges_reply_over_its_bound_is_charged_and_named(tmp_path: Path, spec: Spec) -> None:
    grader = declared(spec)["grader"]
    worst = call_worst(spec, "grader", grader, "p")
    assert worst is not None
    budget = make_budget(tmp_path, 10.0)
    with budget.item(spec, "a", "x", PAIR), budget.call(spec, "grader", "p", grader) as settle:
        settle(worst + 0.5)
    state = budget.ledger.read()
    assert state is not None and state.accounts["run"].spent == pytest.approx(worst + 0.5)
    assert state.notes and state.notes[-1].startswith("budget: judge grader of arm units/a, item q")


def test_an_unpriced_judge_holds_nothing_and_counts_what_it_reports(tmp_path: Path,
                                                                    spec: Spec) -> None:
    """``budget_unpriced: allow``: a judge without a worst case runs unreserved."""
    unpriced = dataclasses.replace(spec, pricing={"a": spec.pricing["a"]})
    grader = declared(unpriced)["grader"]
    plan = panel(unpriced, declared(unpriced))
    assert judges_worst(unpriced, plan, ITEM, "a") is None
    budget = make_budget(tmp_path, 10.0)
    def judged(name: str) -> float | None:
        return judges_worst(unpriced, plan, ITEM, name)

    with budget.item(unpriced, "a", "x", PAIR, judged):
        with budget.call(unpriced, "grader", "p", grader) as settle:
            settle(0.25)
    state = budget.ledger.read()
    assert state is not None and state.accounts["run"].spent == pytest.approx(0.25)
