"""Edges a new user meets in the report: arms with no graded row, the
counts of repeats, the HTML wording."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from results_files import meta, row, write

from conftest import Sweep, make_spec, sim_spec
from pytest_echo_bench.cli.args import OutputClosed, say
from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.report.figures import build_report, load_results
from pytest_echo_bench.report.formats import render
from pytest_echo_bench.report.formats.text import report_json
from pytest_echo_bench.store.checks import META_FIELDS
from pytest_echo_bench.store.meta import BenchmarkEntry, SelectionRecord
from pytest_echo_bench.store.records import Meta

META = meta(arms=("A", "B", "C"), items=3)


@pytest.fixture
def silent_arm(tmp_path: Path) -> Path:
    """The meta names A, B and C; C has no graded row (every item of it went unrecorded)."""
    rows = [
        row("t1", "A", True),
        row("t2", "A", False),
        row("t1", "B", False),
        row("t2", "B", True),
    ]
    return write(tmp_path / "run.jsonl", [META, *rows])


def test_an_arm_without_graded_rows_is_listed_with_n_0_and_no_rate(silent_arm: Path) -> None:
    report = build_report(load_results([silent_arm]))
    assert [(s.arm, s.n, s.pass_rate) for s in report.arms] == [
        ("A", 2, 0.5),
        ("B", 2, 0.5),
        ("C", 0, None),
    ]
    c = report.arms[2]
    assert c.not_completed == 2  # the ids the other arms recorded
    # The comparisons leave it out: with it every oracle and pair would shrink to 0 shared items.
    assert [(p.a, p.b, p.n) for p in report.pairs] == [("A", "B", 2)]
    assert report.oracles[0].arms == ("A", "B") and report.oracles[0].n == 2


def test_every_format_shows_the_silent_arm(silent_arm: Path) -> None:
    report = build_report(load_results([silent_arm]))
    line = next(
        line for line in render(report, "table").splitlines() if line.startswith("demo       C")
    )
    assert line.split()[2:5] == ["0", "0", "n/a"]
    assert "| demo | C | 0 | 0 | n/a |" in render(report, "markdown")
    data = report_json(report)["arms"]["C"]
    assert (data["n"], data["correct"], data["pass_rate"]) == (0, 0, None)
    assert json.loads(render(report, "json"))["arms"]["C"]["pass_rate"] is None
    (c,) = [r for r in csv.DictReader(io.StringIO(render(report, "csv"))) if r["arm"] == "C"]
    assert (c["n"], c["pass_rate"]) == ("0", "")
    page = render(report, "html")
    assert 'data-arm="C"' in page and "n/a [0.000, 1.000] n=0" in page
    # The disagreement table and pair matrix hold only arms with
    # verdicts: no ✗ for C's missing answers.
    assert '<th class="text">C</th>' not in page


def test_the_cost_frontier_leaves_out_an_arm_without_graded_rows(tmp_path: Path) -> None:
    rows = [row("t1", "A", True, cost_usd=0.01), row("t1", "B", False, cost_usd=0.001)]
    report = build_report(load_results([write(tmp_path / "run.jsonl", [META, *rows])]))
    (found,) = report.frontiers
    assert [p[0] for p in found.points] == ["A", "B"]
    assert "cost-point" in render(report, "html")


def test_a_report_of_only_silent_arms_renders(tmp_path: Path) -> None:
    path = write(tmp_path / "run.jsonl", [META, row("t1", "A", True)])
    report = build_report(load_results([path]))
    assert [(s.arm, s.n) for s in report.arms] == [("A", 1), ("B", 0), ("C", 0)]
    assert not report.pairs and not report.oracles
    for fmt in ("table", "markdown", "json", "csv", "html"):
        assert "C" in render(report, fmt)


def test_the_end_table_and_the_report_agree_on_an_arm_whose_items_all_failed_transiently(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    arms = ("  ok: {provider: sim, accuracy: 1.0}\n"
            "  flaky: {provider: sim, accuracy: 1.0, faults: {transient_rate: 1.0}}")
    make_spec(
        pytester,
        sim_spec(
            2, arms=arms, extra="retries: {attempts: 2, backoff_s: 0.01, max_backoff_s: 0.02}\n"
        ),
    )
    result, _, rows = sweep.run()
    assert result.ret == 2 and {r["arm"] for r in rows} == {"ok"}
    end = [
        line.split()
        for line in result.stdout.lines
        if line.startswith("demo") and "flaky" in line.split()[:2]
    ]
    assert end and end[0][2:5] == ["0", "0", "n/a"]
    report = build_report(load_results([sweep.out]))
    assert [(s.arm, s.n, s.pass_rate) for s in report.arms] == [("ok", 2, 1.0), ("flaky", 0, None)]


# --- repeats: what the counts count
# -----------------------------------------------------------------

EPOCH_META = {
    "_meta": True,
    "benchmark": "d",
    "benchmarks": {"d": {"epochs": 5}},
    "arms": {"d": ["A", "B"]},
}


def sampled(verdicts: dict[str, dict[str, list[bool]]]) -> list[dict[str, Any]]:
    return [
        {
            "task_id": task,
            "arm": arm,
            "passed": ok,
            "status": "correct" if ok else "wrong",
            "detail": "",
            "benchmark": "d",
            "epoch": e,
            "wall_seconds": 1.0,
            "answer": "x",
        }
        for arm, tasks in verdicts.items()
        for task, per_epoch in tasks.items()
        for e, ok in enumerate(per_epoch, 1)
    ]


@pytest.fixture
def repeats(tmp_path: Path) -> Path:
    """4 items of 5 samples; A gets 4 of 5 right on each: 16 correct
    samples, far more than its 4 items."""
    a = {f"t{i}": [True, True, True, True, False] for i in range(4)}
    b = {f"t{i}": [i % 2 == 0] * 5 for i in range(4)}
    return write(tmp_path / "r.jsonl", [EPOCH_META, *sampled({"A": a, "B": b})])


def test_mean_names_its_score_and_its_correct_samples_and_no_count_exceeds_its_total(
    repeats: Path,
) -> None:
    a = next(s for s in build_report(load_results([repeats]), reduce="mean").arms if s.arm == "A")
    assert (a.n, a.correct, a.score, a.samples, a.correct_samples) == (
        4,
        None,
        pytest.approx(3.2),
        20,
        16,
    )
    assert a.pass_rate == pytest.approx(0.8)


@pytest.mark.parametrize("how", ["majority", "pass_at_k"])
def test_a_reduction_to_verdicts_counts_correct_items(repeats: Path, how: str) -> None:
    a = next(s for s in build_report(load_results([repeats]), reduce=how).arms if s.arm == "A")
    assert (a.n, a.correct, a.score, a.samples, a.correct_samples) == (4, 4, 4.0, 20, 16)


def test_every_format_counts_items_and_samples_apart_under_mean(repeats: Path) -> None:
    report = build_report(load_results([repeats]), reduce="mean")
    lines = render(report, "table").splitlines()
    # cells are 2 spaces apart
    cells = dict(zip(re.split(r"\s{2,}", lines[1]), re.split(r"\s{2,}", lines[2]), strict=True))
    assert (
        cells["n"],
        cells["correct"],
        cells["score"],
        cells["samples"],
        cells["correct samples"],
    ) == ("4", "-", "3.20", "20", "16")
    md = render(report, "markdown")
    assert "| n | correct | score | pass rate |" in md and "| A | 4 | - | 3.20 | 0.800 |" in md
    data = json.loads(render(report, "json"))["arms"]["A"]
    assert (
        data["n"],
        data["correct"],
        data["score"],
        data["samples"],
        data["correct_samples"],
    ) == (4, None, pytest.approx(3.2), 20, 16)
    (row_a,) = [r for r in csv.DictReader(io.StringIO(render(report, "csv"))) if r["arm"] == "A"]
    assert (
        row_a["n"],
        row_a["correct"],
        float(row_a["score"]),
        row_a["samples"],
        row_a["correct_samples"],
    ) == ("4", "", 3.2, "20", "16")
    page = render(report, "html")
    assert "<th>items</th><th>score</th><th>samples</th><th>correct samples</th>" in page
    assert '<td class="text">A</td><td>4</td><td>3.20</td><td>20</td><td>16</td>' in page


def test_the_html_header_says_items_and_samples_with_repeats(repeats: Path) -> None:
    page = render(build_report(load_results([repeats])), "html")
    assert "8 graded item(s) from 40 sample row(s)" in page and "graded row(s)" not in page


def test_the_html_header_counts_graded_rows_without_repeats(silent_arm: Path) -> None:
    assert "4 graded row(s)" in render(build_report(load_results([silent_arm])), "html")


def test_the_pair_caption_names_the_paired_t_under_mean(repeats: Path) -> None:
    page = render(build_report(load_results([repeats]), reduce="mean"), "html")
    caption = page.split("Paired comparisons", 1)[1].split("</p>", 1)[0]
    assert "paired t" in caption and "McNemar" not in caption and "Newcombe" not in caption


@pytest.mark.parametrize("how", ["majority", "pass_at_k"])
def test_the_pair_caption_names_mcnemar_on_verdicts(repeats: Path, how: str) -> None:
    caption = (
        render(build_report(load_results([repeats]), reduce=how), "html")
        .split("Paired comparisons", 1)[1]
        .split("</p>", 1)[0]
    )
    assert "McNemar" in caption and "Newcombe" in caption and "paired t" not in caption


# --- long outputs in the disagreement table
# ----------------------------------------------------------


def _rules(page: str) -> dict[str, str]:
    css = page.split("<style>", 1)[1].split("</style>", 1)[0]
    return {sel.strip(): body for sel, body in re.findall(r"([^{}]+)\{([^{}]*)\}", css)}


def test_long_answers_wrap_only_where_they_must(tmp_path: Path) -> None:
    long = "x" * 120 + " a readable sentence"  # no space in 120 characters: wider than the cell
    rows = [row("t1", "A", True, answer=long), row("t1", "B", False, answer="short")]
    page = render(build_report(load_results([write(tmp_path / "r.jsonl", [META, *rows])])), "html")
    table = page.split('<table class="disagreements">', 1)[1].split("</table>", 1)[0]
    assert f'<span class="answer">{long}</span>' in table
    rules = _rules(page)
    for selector in (".answer", "table.disagreements td"):
        assert "overflow-wrap:anywhere" in rules[selector]
    # break-all splits every word at the edge of the cell, the readable ones too.
    assert not any("break-all" in body for body in rules.values())


# --- a reader that goes away: ``echo-bench report F | head``
# ---------------------------------------


def _report_into_closed_pipe(path: Path, lines_read: int) -> tuple[int, str]:
    """``echo-bench report`` with its stdout a real pipe whose reader
    closes after ``lines_read`` lines."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest_echo_bench.cli.main", "report", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    for _ in range(lines_read):
        proc.stdout.readline()
    proc.stdout.close()
    try:
        err = proc.stderr.read().decode()
        return proc.wait(timeout=60), err
    finally:
        proc.kill()


def test_a_reader_gone_mid_report_ends_it_quietly_with_sigpipes_status(tmp_path: Path) -> None:
    # 300 subtasks: a report of some 40 kB, far past what one write puts in the pipe.
    rows = [
        row(f"t{i}", arm, i % 3 != 0, subtask=f"sub{i % 300}")
        for i in range(1200)
        for arm in ("A", "B")
    ]
    path = write(tmp_path / "big.jsonl", [META, *rows])
    status, err = _report_into_closed_pipe(path, lines_read=2)
    assert (status, err) == (141, "")


def test_a_reader_gone_before_any_output_ends_it_quietly_too(tmp_path: Path) -> None:
    # The whole report fits Python's buffer: the write that fails is the flush at the end.
    path = write(tmp_path / "small.jsonl", [META, row("t1", "A", True)])
    status, err = _report_into_closed_pipe(path, lines_read=0)
    assert (status, err) == (141, "")


def test_only_a_broken_stdout_counts_as_the_reader_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    """``say`` to a real pipe whose reader closed raises OutputClosed, which main ends
    quietly; a broken pipe anywhere else (a provider's connection) stays a plain
    BrokenPipeError, an error of the command."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    closed = os.fdopen(write_end, "w")
    try:
        monkeypatch.setattr(sys, "stdout", closed)
        with pytest.raises(OutputClosed):
            say("x" * 100_000)
        monkeypatch.undo()
        with pytest.raises(BrokenPipeError) as other:
            os.write(write_end, b"x")
        assert type(other.value) is BrokenPipeError
    finally:
        with contextlib.suppress(OSError):  # what is still buffered for the pipe fails to flush
            closed.close()


# --- the meta line, typed when read
# ------------------------------------------------------------------


def test_meta_from_json_is_to_json_read_back_with_extras_and_defaults_kept() -> None:
    meta = Meta("d", {"d": BenchmarkEntry("d.yaml", items=3)}, ["d.yaml"], "f1", {"d": ["A"]},
                SelectionRecord(["d.yaml"]), "r1", "1.0", "2024-01-01T00:00:00Z",
                extra={"merged_from": ["a.jsonl"]})
    line = meta.to_json()
    assert line["merged_from"] == ["a.jsonl"] and "extra" not in line
    assert Meta.from_json(line) == meta
    # an older writer's line: the rest empty
    old = Meta.from_json({"_meta": True, "benchmark": "d"})
    assert (old.arms, old.benchmarks, old.spec_files, old.fsync) == ({}, {}, [], "end")
    assert old.selection == SelectionRecord()
    assert old.to_json()["selection"] == {} and "order" not in old.to_json()
    # a line's own field called extra is one of its extras
    own = Meta.from_json({"_meta": True, "extra": 5})
    assert own.extra == {"extra": 5} and own.to_json()["extra"] == 5


@given(
    st.dictionaries(
        st.text(max_size=8).filter(lambda k: k != "_meta"),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=8),
            lambda inner: st.lists(inner, max_size=3),
            max_leaves=5,
        ),
        max_size=6,
    ),
    st.text(max_size=8),
    st.dictionaries(st.text(max_size=5), st.lists(st.text(max_size=5), max_size=3), max_size=3),
)
@settings(max_examples=150, deadline=None, derandomize=True, database=None)
def test_meta_round_trips_any_sound_line(
    fields: dict[str, Any], benchmark: str, arms: dict[str, list[str]]
) -> None:
    # fields whose type is checked
    typed = {f.name for f in dataclasses.fields(Meta)} | set(META_FIELDS)
    record = {**{k: v for k, v in fields.items() if k not in typed},
              "_meta": True, "benchmark": benchmark, "arms": arms}
    meta = Meta.from_json(record)
    assert meta.benchmark == benchmark and meta.arms == arms
    assert {k: v for k, v in meta.to_json().items() if k in record} == record
    assert Meta.from_json(meta.to_json()) == meta


@pytest.mark.parametrize(
    "bad",
    [
        {"arms": {"d": "A"}},
        {"benchmark": 3},
        {"benchmarks": {"d": {"items": -1}}},
        {"selection": []},
    ],
)
def test_a_bad_meta_line_is_a_store_error_naming_file_and_line(
    tmp_path: Path, bad: dict[str, Any]
) -> None:
    with pytest.raises(StoreError, match=r"where\.jsonl:1: meta line"):
        Meta.from_json({"_meta": True, **bad}, "where.jsonl:1")
    path = write(tmp_path / "run.jsonl", [{"_meta": True, **bad}, row("t1", "A", True)])
    with pytest.raises(StoreError, match=rf"{path}:1: meta line"):
        load_results([path])


def test_a_line_that_is_no_meta_line_is_refused() -> None:
    with pytest.raises(StoreError, match="not a meta line"):
        Meta.from_json({"benchmark": "d"}, "f.jsonl:1")
