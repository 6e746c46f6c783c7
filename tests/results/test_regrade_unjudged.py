"""Regrade of a sweep with unjudged rows: a text scorer grades their stored outputs (no model is
called), and a judge's grade or judgments no longer stand beside the new verdict."""

from __future__ import annotations

import pytest

from conftest import Sweep, make_spec, read_rows, sim_spec
from pytest_echo_bench.cli.main import main

# The simulator's judge gives no grade on two items in three ("I am not sure."), else [[8]].
MODEL_GRADED = """
judges:
  grader: {provider: sim, accuracy: 0.4, unparseable_rate: 1.0, template: 'Rating: [[8]]'}
scorer:
  name: model_graded
  judge: grader
  template: "Question: {question}\\nAnswer: {answer}\\nRate 1-10 as [[n]]."
  grade: {pattern: '\\[\\[(\\d+)\\]\\]', scale: [1, 10], pass_at: 7}
"""


def test_a_text_scorer_grades_the_outputs_the_judge_left_unjudged(
    pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = make_spec(pytester, sim_spec(6).replace("scorer: exact\n", MODEL_GRADED))
    result, _, rows = sweep.run()
    assert result.ret == 0, result.stdout.str()
    unjudged = sum(r["status"] == "unjudged" for r in rows)
    assert 0 < unjudged < len(rows)
    text = spec.read_text()
    spec.write_text(text[:text.index("scorer:")] + "scorer: exact\n"
                    + text[text.index("arms:"):])
    out = pytester.path / "regraded.jsonl"
    capsys.readouterr()
    assert main(["regrade", str(sweep.out), "-o", str(out)]) == 0
    _, regraded = read_rows(out)
    assert len(regraded) == len(rows)
    assert {(r["arm"], r["status"]) for r in regraded} == {("good", "correct"), ("bad", "wrong")}
    assert not any("score" in r or "judgments" in r for r in regraded)
    said = capsys.readouterr().out
    assert said.count("unjudged -> ") == unjudged
