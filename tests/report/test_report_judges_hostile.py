"""Judged rows of any shape through every report format: a row's ``judgments``, ``score`` and
``judge_cost_usd`` may hold any JSON, and no format crashes, prints a NaN or an infinity, or shows
a negative cost; and the model families the self-preference warning compares."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from results_files import meta, row, write

from pytest_echo_bench.engine.families import Model, same_family, self_preference, stem
from pytest_echo_bench.report.figures import build_report, load_results
from pytest_echo_bench.report.formats import FORMATS, render
from pytest_echo_bench.report.formats.text import report_json
from pytest_echo_bench.results.read import judged_of
from pytest_echo_bench.scoring.judgment import Judgment

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, database=None)
NOT_FINITE = re.compile(r"\b(nan|NaN|inf|Infinity)\b")

scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-10**30, max_value=10**30),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8))
anything = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=12)
grades = st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False),
                   st.integers(min_value=-10**20, max_value=10**20), st.sampled_from([0, 0.5, 1]))
records = st.fixed_dictionaries(
    {"judge": st.sampled_from(["g1", "g2", "g3", "gpt-4o", "<b>j</b>"]),
     "prompt_sha256": st.just("ab" * 32)},
    optional={"grade": grades, "model": st.sampled_from(["gpt-4o", "claude-3", "a", ""]),
              "label": st.sampled_from(["correct", "INCORRECT", "x"]),
              "order": st.sampled_from(["ab", "ba", "cd", None]),
              "cost_usd": st.one_of(grades, st.just(-1.0)), "cached": st.booleans()})
judgments = st.one_of(anything, st.lists(st.one_of(records, anything), max_size=4))


def _rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    rows = []
    for i in range(draw(st.integers(1, 6))):
        rows.append(row(f"t{i % 3}", draw(st.sampled_from(["A", "B", "-x"])),
                        score=draw(st.one_of(grades, anything)),
                        judgments=draw(judgments),
                        judge_cost_usd=draw(st.one_of(grades, anything, st.just(-3.0)))))
    return rows


judged_files = st.composite(_rows)()


def _finite_json(text: str) -> Any:
    def refuse(token: str) -> None:
        raise AssertionError(f"{token} in the JSON report")
    return json.loads(text, parse_constant=refuse)


@SETTINGS
@given(rows=judged_files)
def test_any_judgments_never_crash_a_format_nor_print_nan_or_a_negative_cost(
        tmp_path_factory: pytest.TempPathFactory, rows: list[dict[str, Any]]) -> None:
    path = write(tmp_path_factory.mktemp("hostile") / "run.jsonl", rows,
                 meta=meta(arms=("A", "B", "-x")))
    report = build_report(load_results([path]))
    for fmt in FORMATS:
        text = render(report, fmt)
        assert not NOT_FINITE.search(text), (fmt, text)
    _finite_json(render(report, "json"))
    judging = report_json(report).get("judging")
    if judging is not None:
        costs = [s[k] for s in judging["spend"] for k in ("arm_usd", "judge_usd")]
        assert all(c is None or c >= 0 for c in costs)
        assert all(v is None or v >= 0 for v in judging["total"].values())


def test_grades_near_the_float_limit_give_finite_means_and_differences(tmp_path: Path) -> None:
    top = 1e12  # the largest grade a row's score or a judgment holds (``store.checks.grade``)
    big = top
    rows = [row(f"t{i}", arm, score=s, judgments=[{"judge": "j", "prompt_sha256": "x", "grade": g},
                                                  {"judge": "k", "prompt_sha256": "x", "grade": g}])
            for i, (arm, s, g) in enumerate([("A", top, big), ("B", -top, -big),
                                             ("A", top, big), ("B", -top, -big)])]
    rows += [row("t0", "B", score=-top), row("t2", "B", score=-top)]
    path = write(tmp_path / "big.jsonl", rows, meta=meta(arms=("A", "B")))
    report = build_report(load_results([path]))
    judging = report_json(report)["judging"]
    assert {g["arm"]: g["mean"] for g in judging["grades"]} == {"A": top, "B": -top}
    [pair] = judging["grade_pairs"]
    assert (pair["n"], pair["diff"]) == (2, 2 * top)
    assert {j["judge"]: j["mean"] for j in judging["judges"]} == {"j": 0.0, "k": 0.0}
    [agreement] = judging["agreement"]
    assert agreement["estimate"]["value"] == 1.0  # the two judges always agree
    for fmt in FORMATS:
        assert not NOT_FINITE.search(render(report, fmt))


@pytest.mark.parametrize(("model", "family"), [
    ("gpt-4o", "gpt"), ("gpt-4o-mini", "gpt"), ("gpt-3.5-turbo", "gpt"),
    ("claude-3-5-sonnet-20241022", "claude"), ("openrouter/anthropic/claude-3-haiku", "claude"),
    ("meta-llama/Llama-3.1-8B-Instruct", "llama"), ("gemini-1.5-pro", "gemini"),
    ("mistral-large-latest", "mistral"), ("ollama:qwen2.5:7b", None), ("o1-mini", "o"),
    ("4o", None), ("", None),
])
def test_a_models_family_is_its_leading_alphabetic_stem(model: str, family: str | None) -> None:
    if model == "ollama:qwen2.5:7b":
        family = None  # the last ":" part, "7b", starts with a digit
    assert stem(model) == family


def test_one_family_needs_one_provider_when_both_are_known() -> None:
    judge = Model("j", "openai", "gpt-4o")
    assert same_family(judge, Model("a", "openai", "gpt-4o-mini"))
    assert not same_family(judge, Model("a", "anthropic", "gpt-4o-mini"))
    assert same_family(judge, Model("gpt-4o-mini", None, "gpt-4o-mini"))  # a name, no provider
    assert not same_family(judge, Model("a", "openai", "4o"))
    [warning] = self_preference([Model("a", "openai", "gpt-4o-mini"),
                                 Model("b", "openai", "o1")], [judge])
    assert "judge j (gpt-4o)" in warning and "openai/gpt" in warning and "b (o1)" not in warning


@SETTINGS
@given(record=st.one_of(records, anything))
def test_the_reports_reading_of_a_judgment_is_judgments_own(record: Any) -> None:
    read, full = judged_of(record), Judgment.from_json(record)
    if full is None:
        assert read is None
    else:
        label = None if full.label is None else full.label.lower()
        assert read == (full.judge, full.model, full.grade, label, full.order)


def test_a_judge_with_and_without_a_model_named_is_compared_by_the_one_it_names(
        tmp_path: Path) -> None:
    # found by the Hypothesis test above: (judge, None) and (judge, model) were sorted together
    rows = [row("t0", "A", score=1, judgments=[{"judge": "g1", "prompt_sha256": "x", "grade": 1},
                                               {"judge": "g1", "prompt_sha256": "x",
                                                "model": "A-1", "grade": 1}])]
    path = write(tmp_path / "run.jsonl", rows, meta=meta(arms=("A",)))
    [warning] = report_json(build_report(load_results([path])))["judging"]["warnings"]
    assert "judge g1 (A-1)" in warning


def test_a_grade_beyond_the_bound_reads_as_none_in_a_row_and_a_judgment(tmp_path: Path) -> None:
    """One rule for both: a judgment's grade of 9e299 is as unknown as a row's score of it."""
    from pytest_echo_bench.scoring.judgment import Judgment

    record = Judgment.from_json({"judge": "j", "prompt_sha256": "x", "grade": 9e299})
    assert record is not None and record.grade is None
    path = write(tmp_path / "far.jsonl", [row("t0", "A", score=9e299)], meta=meta(arms=("A",)))
    judging = report_json(build_report(load_results([path]))).get("judging") or {}
    assert not judging.get("grades")
