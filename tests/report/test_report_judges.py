"""What `echo-bench report` shows of the judges: their spend apart from the arms', mean grades and
paired grade differences, a panel's agreement, each judge's grades, people's labels, pairwise
judging, and self-preference warnings; each figure checked against a computation by hand."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from results_files import meta, row, write

from pytest_echo_bench.cli.main import main

T95_DF3 = 3.182446305284263  # Student's t, 97.5th percentile, 3 degrees of freedom (tables)
Z95 = 1.959963984540054
A = {"g1": [8, 6, 9, 7], "g2": [8, 7, 9, 5]}
B = {"g1": [5, 6, 4, 7], "g2": [6, 6, 4, 8]}


def judgment(judge: str, grade: float | None, model: str = "gpt-4o", **fields: Any) -> dict:
    record = {"judge": judge, "model": model, "prompt_sha256": "ab" * 32,
              "reply": f"Rating: [[{grade}]]", "cost_usd": 0.01, **fields}
    return record if grade is None else {**record, "grade": grade}


def judged_rows() -> list[dict[str, Any]]:
    """A and B, four items each, graded by g1 and g2 (score: their mean). A's t0 has g2's
    judgment answered by the cache (its 0.01 not spent, as the writer records it); B's t3 says no
    judge cost."""
    rows = []
    for arm, grades in (("A", A), ("B", B)):
        for t in range(4):
            g1, g2 = grades["g1"][t], grades["g2"][t]
            cached = {"cached": True} if (arm, t) == ("A", 0) else {}
            judge_cost = {("B", 3): None, ("A", 0): 0.01}.get((arm, t), 0.02)
            rows.append(row(f"t{t}", arm, (g1 + g2) / 2 >= 7, cost_usd=0.001,
                            score=(g1 + g2) / 2, judge_cost_usd=judge_cost,
                            judgments=[judgment("g1", g1), judgment("g2", g2, **cached)]))
    return rows


@pytest.fixture
def judged(tmp_path: Path) -> Path:
    return write(tmp_path / "run.jsonl", judged_rows(), meta=meta(arms=("A", "B")))


@pytest.fixture
def here(tmp_path: Path) -> Iterator[Path]:
    """The test's folder as the current directory (the report looks for specs there)."""
    old = Path.cwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(old)


def report(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["report", *argv]) == 0
    return capsys.readouterr().out


def as_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    return json.loads(report(capsys, *argv, "--format", "json"))["judging"]


def t_interval(values: list[float]) -> tuple[float, float, float]:
    mean = statistics.fmean(values)
    half = T95_DF3 * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def quadratic_kappa(pairs: list[tuple[float, float]]) -> float:
    """Cohen's weighted kappa by its definition: 1 - sum w_ij o_ij / sum w_ij e_ij."""
    cats = sorted({v for p in pairs for v in p})
    pos = {c: i for i, c in enumerate(cats)}
    n = len(pairs)
    observed = sum((pos[a] - pos[b]) ** 2 for a, b in pairs) / n
    rows = [sum(pos[a] == i for a, _ in pairs) / n for i in range(len(cats))]
    cols = [sum(pos[b] == j for _, b in pairs) / n for j in range(len(cats))]
    expected = sum((i - j) ** 2 * rows[i] * cols[j] for i in range(len(cats))
                   for j in range(len(cats)))
    return 1 - observed / expected


def wilson(k: int, n: int) -> tuple[float, float]:
    p, z2 = k / n, Z95 ** 2
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return centre - half, centre + half


def test_spend_of_each_arm_and_its_judges_apart_with_a_total(
        judged: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = as_json(capsys, str(judged))
    spend = {s["arm"]: s for s in data["spend"]}
    # A: 0.02 x 3 + 0.01 (one judgment of t0 answered by the cache); B: 0.02 x 3, one unknown
    assert spend["A"]["judge_usd"] == pytest.approx(0.07)
    assert (spend["B"]["judge_usd"], spend["B"]["judge_unknown"]) == (pytest.approx(0.06), 1)
    assert spend["A"]["arm_usd"] == pytest.approx(0.004) == spend["B"]["arm_usd"]
    assert data["total"] == {"arm_usd": pytest.approx(0.008), "judge_usd": pytest.approx(0.13)}
    text = report(capsys, str(judged))
    assert "spend: each arm's own, apart from its judges'" in text
    lines = [" ".join(line.split()) for line in text.splitlines()]
    assert "demo A 0.0040 0.0700 0.0740" in lines
    assert "demo B 0.0040 0.0600 + 1 unknown 0.0640" in lines
    assert "total 0.0080 0.1300 0.1380" in lines


def test_mean_grades_with_t_intervals_and_the_paired_t_between_arms(
        judged: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = as_json(capsys, str(judged))
    scores = {arm: [(g["g1"][t] + g["g2"][t]) / 2 for t in range(4)] for arm, g in
              (("A", A), ("B", B))}
    for grades in data["grades"]:
        mean, lo, hi = t_interval(scores[grades["arm"]])
        assert grades["n"] == 4
        assert grades["mean"] == pytest.approx(mean)
        assert grades["ci95"] == [pytest.approx(lo), pytest.approx(hi)]
    [pair] = data["grade_pairs"]
    diffs = [a - b for a, b in zip(scores["A"], scores["B"], strict=True)]
    mean, lo, hi = t_interval(diffs)
    assert (pair["a"], pair["b"], pair["n"]) == ("A", "B", 4)
    assert pair["diff"] == pytest.approx(mean) == pytest.approx(1.625)
    assert pair["ci95"] == [pytest.approx(lo), pytest.approx(hi)]  # wider than [-1, 1]: a scale
    assert 0 < pair["p_value"] < 1


def test_two_judges_agreement_is_quadratic_kappa_and_each_judges_mean_grade(
        judged: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = as_json(capsys, str(judged))
    [agreement] = data["agreement"]
    pairs = [(g["g1"][t], g["g2"][t]) for g in (A, B) for t in range(4)]
    assert agreement["judges"] == ["g1", "g2"]
    assert agreement["statistic"] == "weighted kappa"
    assert agreement["estimate"]["value"] == pytest.approx(quadratic_kappa(pairs))
    assert agreement["estimate"]["n"] == 8
    interval = agreement["interval"]
    assert interval["resamples"] == 1000 and interval["lo"] <= interval["hi"] <= 1
    judges = {j["judge"]: j for j in data["judges"]}
    assert judges["g1"]["mean"] == pytest.approx(52 / 8) and judges["g1"]["n"] == 8
    assert judges["g2"]["mean"] == pytest.approx(53 / 8) and judges["g2"]["models"] == ["gpt-4o"]


def test_a_panel_of_three_is_measured_by_krippendorffs_alpha(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    units = [(1, 1, 1), (2, 2, 2), (1, 1, 2), (3, 3, 3), (3, 2, 3)]
    rows = [row(f"t{i}", "A", score=statistics.fmean(u),
                judgments=[judgment(f"j{k}", g) for k, g in enumerate(u)])
            for i, u in enumerate(units)]
    path = write(tmp_path / "panel.jsonl", rows, meta=meta(arms=("A",)))
    [agreement] = as_json(capsys, str(path))["agreement"]
    # interval alpha by its definition: 1 - D_o / D_e over all pairs of values within and across
    values = [v for u in units for v in u]
    n = len(values)
    within = sum((a - b) ** 2 for u in units for i, a in enumerate(u) for j, b in enumerate(u)
                 if i != j) / (3 - 1)
    across = sum((a - b) ** 2 for a in values for b in values) / (n - 1)
    assert agreement["statistic"] == "alpha (interval)"
    assert agreement["estimate"]["value"] == pytest.approx(1 - within / across)
    assert agreement["judges"] == ["j0", "j1", "j2"]


def test_labels_measure_each_judge_against_people(
        judged: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    labels = tmp_path / "labels.jsonl"
    labels.write_text('{"task_id": "t0", "arm": "A", "label": 8}\n'
                      '{"task_id": "t1", "arm": "A", "label": 6, "benchmark": "demo"}\n\n'
                      '{"task_id": "t2", "arm": "B", "label": 5, "epoch": 1}\n'
                      '{"task_id": "t9", "arm": "X", "label": "correct"}\n')
    data = as_json(capsys, str(judged), "--labels", str(labels))
    assert data["labels"] == {"path": str(labels), "matched": 3, "unmatched": 1,
                              "named": ["t9 X"]}
    humans = {h["judge"]: h["agreement"] for h in data["humans"]}
    g1, g2 = humans["g1"], humans["g2"]  # g1: 8, 6, 4; g2: 8, 7, 4; people: 8, 6, 5
    assert (g1["n"], g1["accuracy"]["count"]) == (3, 2)
    assert g1["mean_bias"]["value"] == pytest.approx(-1 / 3)
    assert g2["accuracy"]["count"] == 1 and g2["mean_bias"]["value"] == pytest.approx(0)
    assert g1["categories"] == [4, 5, 6, 8]
    # people (rows) by judge (columns): 5 -> 4, 6 -> 6, 8 -> 8
    assert g1["confusion"] == [[0, 0, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]
    assert [g1["accuracy"]["lo"], g1["accuracy"]["hi"]] == [pytest.approx(x) for x in wilson(2, 3)]
    text = report(capsys, str(judged), "--labels", str(labels))
    assert "3 matched a row, 1 name no row of the files: t9 X" in text
    assert "confusion (demo, g1): people's labels (rows) by the judge's (columns)" in text


def test_a_task_id_holding_a_unicode_line_separator_is_one_label(tmp_path: Path) -> None:
    """JSON allows U+2028, U+2029 and U+0085 raw inside a string: they end no line of the file
    (only LF, or CR LF, does), and a bad line is named by its number counted so."""
    from pytest_echo_bench.report.labels import read_labels

    ids = ["q\u2028x", "q\u2029x", "q\x85x", "q\x0bx\x0c\x1c"]
    lines = [json.dumps({"task_id": t, "arm": "j", "label": 1}, ensure_ascii=False) for t in ids]
    labels = tmp_path / "labels.jsonl"
    labels.write_bytes(("\r\n".join(lines) + "\n").encode("utf-8"))
    assert [x.task_id for x in read_labels(labels)] == ids
    labels.write_bytes(("\n".join([*lines, "not json"]) + "\n").encode("utf-8"))
    with pytest.raises(ValueError, match=f"^{labels}:5: not a JSON object"):
        read_labels(labels)


@pytest.mark.parametrize(("line", "said"), [
    ("not json", "not a JSON object"),
    ('["t0"]', "not a JSON object"),
    ('{"task_id": "t0", "arm": "A"}', "label must be a finite number"),
    ('{"task_id": "t0", "arm": "A", "label": true}', "label must be a finite number"),
    ('{"task_id": "t0", "arm": "A", "label": 1e999}', "label must be a finite number"),
    ('{"task_id": 3, "arm": "A", "label": 1}', "task_id must be text"),
    ('{"task_id": "t0", "arm": "A", "label": 1, "epoch": 0}', "epoch must be a whole number"),
    ('{"task_id": "t0", "arm": "A", "label": 1, "grade": 2}', "unknown key 'grade'"),
])
def test_a_bad_label_line_is_refused_with_its_file_and_line(
        judged: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str,
        said: str) -> None:
    labels = tmp_path / "labels.jsonl"
    labels.write_text('{"task_id": "t0", "arm": "A", "label": 8}\n' + line + "\n")
    assert main(["report", str(judged), "--labels", str(labels)]) == 2
    err = capsys.readouterr().err
    assert f"{labels}:2: {said}" in err and '"label": 7' in err  # what to write


def test_pairwise_orders_give_position_consistency_and_win_rates(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # (ab, ba) grades from C's side: win, flip (a tie), loss, tie, win
    orders = [(1.0, 1.0), (1.0, 0.0), (0.0, 0.0), (0.5, 0.5), (1.0, 1.0)]
    rows = [row(f"t{i}", "C", ab == ba == 1.0, score=ab if ab == ba else 0.5,
                judgments=[judgment("j", ab, order="ab"), judgment("j", ba, order="ba")])
            for i, (ab, ba) in enumerate(orders)]
    path = write(tmp_path / "pair.jsonl", rows, meta=meta(arms=("C", "D")))
    [pw] = as_json(capsys, str(path))["pairwise"]
    assert pw["arm"] == "C"
    for figure, k in ((pw["consistency"], 4), (pw["wins"]["win"], 2), (pw["wins"]["tie"], 2),
                      (pw["wins"]["loss"], 1)):
        assert (figure["count"], figure["n"]) == (k, 5)
        assert [figure["lo"], figure["hi"]] == [pytest.approx(x) for x in wilson(k, 5)]
    assert as_json(capsys, str(path))["agreement"] == []  # one judge's two orders: no panel
    text = report(capsys, str(path))
    assert "pairwise judging" in text and "0.800" in text


def test_csv_and_html_show_every_judging_figure(
        judged: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = list(csv.DictReader(io.StringIO(report(capsys, str(judged), "--format", "csv"))))
    judging = {(r["arm"], r["judge"], r["figure"]): r for r in lines if r["kind"] == "judging"}
    assert float(judging[("A", "", "judge_usd")]["value"]) == pytest.approx(0.07)
    assert judging[("B", "", "judge_usd")]["n"] == "1"  # the unknown count
    mean = judging[("A", "", "mean_grade")]
    assert float(mean["value"]) == pytest.approx(7.375) and mean["n"] == "4"
    assert float(judging[("", "g1,g2", "weighted kappa")]["value"]) == pytest.approx(
        quadratic_kappa([(g["g1"][t], g["g2"][t]) for g in (A, B) for t in range(4)]))
    assert float(judging[("", "", "total_judge_usd")]["value"]) == pytest.approx(0.13)
    page = report(capsys, str(judged), "--format", "html")
    assert '<section id="judging"><h2>Judges</h2>' in page
    assert "<td>7.375</td>" in page and "judges&#x27; agreement" in page
    markdown = report(capsys, str(judged), "--format", "markdown")
    assert "### grades: each arm's mean grade" in markdown
    assert "| demo | A | 4 | 7.375 |" in markdown


def test_a_file_without_judges_has_no_judging_in_any_format(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "plain.jsonl", [row("t0", "A"), row("t0", "B", False)],
                 meta=meta(arms=("A", "B")))
    assert "judging" not in json.loads(report(capsys, str(path), "--format", "json"))
    header = report(capsys, str(path), "--format", "csv").splitlines()[0].split(",")
    assert "figure" not in header and "judge" not in header
    assert "judge usd" not in report(capsys, str(path))
    assert 'id="judging"' not in report(capsys, str(path), "--format", "html")


SPEC = """\
benchmark: demo
dataset:
  loader: inline
  items:
    - {id: t0, input: "q", target: "a"}
scorer:
  name: model_graded
  judge: g1
  template: "{answer}"
  grade: {pattern: '\\[\\[(\\d+)\\]\\]', scale: [1, 10], pass_at: 7}
judges:
  g1: {provider: openai, model: gpt-4o}
  g2: {provider: anthropic, model: claude-3-5-sonnet}
arms:
  A: {provider: openai, model: gpt-4o-mini}
  B: {provider: anthropic, model: claude-3-haiku-20240307}
"""


def test_a_judge_of_an_arms_family_is_named_in_a_warning(
        judged: Path, here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (here / "demo.yaml").write_text(SPEC)  # the meta line names demo.yaml
    warnings = as_json(capsys, str(judged))["warnings"]
    # g1 (openai gpt-4o) grades A (openai gpt-4o-mini): one family "openai/gpt"; g2's replies
    # say gpt-4o too, but its provider is anthropic: not A's family, nor B's (another model)
    assert len(warnings) == 1
    assert warnings[0].startswith("self-preference: judge g1 (gpt-4o) is of the family "
                                  "openai/gpt of arm(s) A (gpt-4o-mini)")
    assert "87%" in warnings[0]
    assert "warning: self-preference: judge g1" in report(capsys, str(judged))


def test_without_the_spec_the_judges_model_is_compared_with_the_arms_names(
        tmp_path: Path, here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [row("t0", "gpt-4o-mini", score=8, judgments=[judgment("g1", 8)]),
            row("t0", "llama-3-8b", score=6, judgments=[judgment("g1", 6)])]
    path = write(tmp_path / "named.jsonl", rows, meta=meta(arms=("gpt-4o-mini", "llama-3-8b")))
    [warning] = as_json(capsys, str(path))["warnings"]
    assert "arm(s) gpt-4o-mini (gpt-4o-mini)" in warning and "llama" not in warning
    assert "its spec was not found" in warning and "compared with the arms' names" in warning


def test_verdict_words_are_measured_by_plain_kappa_and_against_word_labels(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    said = [("correct", "correct"), ("correct", "incorrect"), ("incorrect", "incorrect"),
            ("correct", "correct")]
    rows = [row(f"t{i}", "A", score=(a == "correct") + (b == "correct") / 2,
                judgments=[judgment("j1", float(a == "correct"), label=a.upper()),
                           judgment("j2", float(b == "correct"), label=b)])
            for i, (a, b) in enumerate(said)]
    path = write(tmp_path / "words.jsonl", rows, meta=meta(arms=("A",)))
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"task_id": f"t{i}", "arm": "A", "label": word})
                              + "\n" for i, word in
                              enumerate(["Correct", "incorrect", "incorrect", "incorrect"])))
    data = as_json(capsys, str(path), "--labels", str(labels))
    [agreement] = data["agreement"]
    # Cohen's kappa by hand: p_o = 3/4; j1 says correct 3/4, j2 2/4: p_e = 3/8 + 1/8 = 1/2
    assert agreement["statistic"] == "kappa"
    assert agreement["estimate"]["value"] == pytest.approx((3 / 4 - 1 / 2) / (1 - 1 / 2))
    humans = {h["judge"]: h["agreement"] for h in data["humans"]}
    assert humans["j1"]["categories"] == ["correct", "incorrect"]  # words, without case
    assert humans["j1"]["accuracy"]["count"] == 2 and humans["j2"]["accuracy"]["count"] == 3
    assert humans["j1"]["mean_bias"]["value"] is None  # words have no difference


def test_an_unjudged_row_counts_in_no_grade_and_its_judges_no_grade(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [row("t0", "A", score=8, judgments=[judgment("g1", 8)]),
            row("t1", "A", False, status="unjudged", judge_cost_usd=0.01,
                judgments=[judgment("g1", None, note="the judge's reply holds no grade")])]
    data = as_json(capsys, str(write(tmp_path / "u.jsonl", rows, meta=meta(arms=("A",)))))
    assert [(g["n"], g["mean"]) for g in data["grades"]] == [(1, 8.0)]
    assert [(j["n"], j["ungraded"]) for j in data["judges"]] == [(1, 1)]
    assert data["spend"][0]["judge_usd"] == pytest.approx(0.01)  # its judge was paid all the same
