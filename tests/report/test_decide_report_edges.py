"""``echo-bench report`` on a results file whose meta line has a decide plan but whose rows
are partial or malformed: a pair with no common item, an arm with no row, a plan that cannot
be used. Every format says so in words and exits 0 (or 2 naming the line, for a meta line the
store refuses), never a traceback or the internal-error status; Hypothesis tries small row
sets against an independent count."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from results_files import ABSENT, brief_row, meta, write

from pytest_echo_bench.cli.main import BUG, main

FORMATS = ("table", "markdown", "json", "csv", "html")
PLAN = {"pairs": [["demo", "a", "b"]], "alpha": 0.05, "margin": 0.0}


def _meta(decide: Any, epochs: int = 1, arms: tuple[str, ...] = ("a", "b")) -> dict[str, Any]:
    return meta(arms=arms, items=4, epochs=epochs if epochs > 1 else None,
                created_at="2026-12-01T00:00:00Z", decide=decide)


def _run(path: Path, fmt: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(["report", str(path), "--format", fmt])
    out, err = capsys.readouterr()
    return status, out, err


def _every_format_says(
    path: Path, capsys: pytest.CaptureFixture[str], words: str
) -> dict[str, Any]:
    """Each format exits 0 and carries ``words``; the JSON's ``sequential``."""
    seq: dict[str, Any] = {}
    for fmt in FORMATS:
        status, out, err = _run(path, fmt, capsys)
        assert status == 0 and "Traceback" not in out + err, (fmt, err)
        assert (words.replace("'", "&#x27;") if fmt == "html" else words) in out, fmt
        if fmt == "json":
            seq = json.loads(out)["sequential"]
    return seq


@pytest.mark.parametrize(
    ("rows", "words"),
    [
        (
            [brief_row("q1", "a", True), brief_row("q2", "b", False)],
            "no item both a and b answered",
        ),
        (
            [brief_row("q1", "a", True), brief_row("q2", "a", False)],
            "no graded row of b: nothing to compare yet",
        ),
        ([brief_row("q1", "b", True)], "no graded row of a: nothing to compare yet"),
        ([], "no graded row of a or b"),
        (
            [
                brief_row("q1", "a", True, benchmark="other"),
                brief_row("q1", "b", True, benchmark="other"),
            ],
            "no graded row of a or b",
        ),
    ],
)
def test_a_pair_with_nothing_to_compare_says_why_in_every_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: list[dict[str, Any]], words: str
) -> None:
    seq = _every_format_says(write(tmp_path / "r.jsonl", rows, meta=_meta(PLAN)), capsys, words)
    (pair,) = seq["pairs"]
    assert (pair["n"], pair["state"], pair["diff"], pair["ci"], pair["p_anytime"]) == (
        0,
        "undecided",
        None,
        [-1.0, 1.0],
        1.0,
    )
    assert words in pair["note"]


def test_an_item_missing_an_epoch_of_one_arm_is_not_paired(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # b has 1 of 2 samples
    rows = [
        brief_row("q1", "a", True),
        brief_row("q1", "a", True, epoch=2),
        brief_row("q1", "b", False),
    ]
    seq = _every_format_says(write(tmp_path / "r.jsonl", rows, meta=_meta(PLAN, epochs=2)), capsys,
                             "no item both a and b answered (with every sample)")
    rows.append(brief_row("q1", "b", False, epoch=2))
    seq = _every_format_says(
        write(tmp_path / "r.jsonl", rows, meta=_meta(PLAN, epochs=2)), capsys, ""
    )
    assert (
        seq["pairs"][0]["n"] == 1
        and seq["pairs"][0]["diff"] == 1.0
        and "note" not in seq["pairs"][0]
    )


@pytest.mark.parametrize(("decide", "words"), [
    ({**PLAN, "alpha": 0}, "its alpha must be between 0 and 1, got 0.0"),
    ({**PLAN, "alpha": 1.5}, "its alpha must be between 0 and 1, got 1.5"),
    ({**PLAN, "alpha": math.nan}, "its alpha must be between 0 and 1, got nan"),
    ({**PLAN, "margin": 1}, "its margin must be at least 0 and below 1, got 1.0"),
    ({**PLAN, "margin": -0.1}, "its margin must be at least 0 and below 1, got -0.1"),
    # Found by hand: a NaN margin passed the store's number check, and the
    # section vanished without a word.
    ({**PLAN, "margin": math.nan}, "its margin must be at least 0 and below 1, got nan"),
    ({"pairs": [["demo", "a", "a"]]}, "its pair ['demo', 'a', 'a'] compares an arm with itself"),
    ({"pairs": [], "alpha": 0.05}, "it names no pair"),
])
def test_a_plan_that_cannot_be_used_is_left_out_saying_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], decide: dict[str, Any], words: str
) -> None:
    path = write(
        tmp_path / "r.jsonl",
        [brief_row("q1", "a", True), brief_row("q1", "b", False)],
        meta=_meta(decide),
    )
    seq = _every_format_says(path, capsys, "the meta line's decide plan cannot be used: " + words)
    assert seq["pairs"] == [] and seq["alpha"] is None and words in seq["problem"]


@pytest.mark.parametrize(
    "decide",
    [
        {"pairs": "a,b"},
        {"pairs": [["demo", "a"]]},
        {"pairs": [["demo", "a", "b"]], "alpha": "x"},
        {"pairs": [["demo", "a", "b"]], "margin": True},
        ["demo", "a", "b"],
    ],
)
def test_a_decide_field_of_the_wrong_type_is_refused_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], decide: Any
) -> None:
    path = write(tmp_path / "r.jsonl", [brief_row("q1", "a", True)], meta=_meta(decide))
    for fmt in FORMATS:
        status, out, err = _run(path, fmt, capsys)
        assert status == 2 and out == "" and "Traceback" not in err
        assert (
            f"{path}:1: meta line field 'decide' must be an object" in err and err.count("\n") == 1
        )


TASKS = st.sampled_from(["q0", "q1", "q2", "q3"])
ARMS = st.sampled_from(["a", "b", "c"])
ROWS = st.lists(
    st.tuples(
        TASKS,
        ARMS,
        st.booleans(),
        st.sampled_from([1, 2]),
        st.sampled_from(["demo", "other", None]),
    ),
    max_size=14,
)
# What a damaged row may hold instead: no verdict, a verdict that is not a boolean, an
# unknown status, figures that are not numbers (all read as the report reads them), or key
# fields of the wrong type (refused).
DAMAGE = st.lists(
    st.tuples(
        st.integers(0, 13),
        st.sampled_from(
            [
                {"passed": None},
                {"passed": "yes"},
                {"status": "weird"},
                {"wall_seconds": "slow"},
                {"usage": [1]},
                {"task_id": 7},
                {"arm": None},
                {"epoch": "two"},
                {"benchmark": 3},
            ]
        ),
    ),
    max_size=2,
)
KEY_FIELDS = {"task_id", "arm", "epoch", "benchmark"}
PAIRS = st.lists(st.tuples(st.sampled_from(["demo", "other"]), ARMS, ARMS), min_size=1, max_size=3)
LEVELS = st.sampled_from([0.05, 0.3, 0.5, 0.999, 0.0, 1.0, -1.0, math.nan, math.inf, 1e-300])
MARGINS = st.sampled_from([0.0, 0.1, 0.98, 1.0, -0.5, math.nan])


def _paired(
    rows: list[tuple[str, str, bool, int, str | None]], bench: str, a: str, b: str, epochs: int
) -> int:
    """Task ids of ``bench`` whose rows give both arms every epoch:
    counted here, apart from the monitor."""
    have: dict[tuple[str, str], set[int]] = {}
    for task, arm, _, epoch, name in rows:
        if (name or "demo") == bench:  # a row without a benchmark is the meta line's
            have.setdefault((task, arm), set()).add(epoch if epochs > 1 else 1)
    tasks = {t for t, _ in have}
    return sum(
        len(have.get((t, a), ())) >= epochs and len(have.get((t, b), ())) >= epochs for t in tasks
    )


@settings(max_examples=40, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=ROWS,
    pairs=PAIRS,
    alpha=LEVELS,
    margin=MARGINS,
    epochs=st.sampled_from([1, 2]),
    damage=DAMAGE,
)
def test_any_small_row_set_reports_clearly_in_every_format(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    rows: list[tuple[str, str, bool, int, str | None]],
    pairs: list[tuple[str, str, str]],
    alpha: float,
    margin: float,
    epochs: int,
    damage: list[tuple[int, dict[str, Any]]],
) -> None:
    decide = {"pairs": [list(p) for p in pairs], "alpha": alpha, "margin": margin}
    records = [
        brief_row(
            t,
            arm,
            ok,
            benchmark=ABSENT if bench is None else bench,
            epoch=epoch if epochs > 1 and epoch > 1 else ABSENT,
        )
        for t, arm, ok, epoch, bench in rows
    ]
    damaged = [(i, change) for i, change in damage if i < len(records)]
    for i, change in damaged:
        records[i].update(change)
    refused = any(KEY_FIELDS & set(change) for _, change in damaged)
    path = write(tmp_path / "r.jsonl", records, meta=_meta(decide, epochs, ("a", "b", "c")))
    usable = 0 < alpha < 1 and 0 <= margin < 1 and all(x != y for _, x, y in pairs)
    for fmt in FORMATS:
        status, out, err = _run(path, fmt, capsys)
        assert status != BUG and "Traceback" not in out + err, err
        # a key field the store refuses: one line naming the file and line, nothing printed
        if refused:
            assert status == 2 and out == "" and f"{path}:" in err and err.count("\n") == 1, err
            continue
        assert status == 0, err
        assert "anytime-valid comparison" in out.lower() or fmt in ("json", "csv")
        # a line of its own, even for a plan that cannot be used
        assert fmt != "csv" or "\r\ndecide," in out
        if fmt == "json":
            seq = json.loads(out)["sequential"]
            assert bool(seq.get("problem")) == (not usable)
            if usable:
                assert [(f["benchmark"], f["a"], f["b"]) for f in seq["pairs"]] == pairs
                for f in seq["pairs"]:
                    assert f["n"] == _paired(rows, f["benchmark"], f["a"], f["b"], epochs)
                    assert bool(f.get("note")) == (f["n"] == 0)
                    assert (
                        f["ci"][0] <= f["ci"][1]
                        and 0 <= f["p_anytime"] <= 1
                        and f["p_anytime"] <= f["p_holm"] <= 1
                    )


def test_the_replay_counts_a_keys_first_graded_row_as_the_run_did_while_the_rest_counts_the_newest(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a's unparseable row was recorded again, correct: its pass rate says so, but the look
    # that decided (or not) used the first graded row (unparseable counts 0), and the
    # anytime-valid figures must be those of that look. An error row was never graded: the
    # look skipped it, and its retry counts.
    first = brief_row("q1", "a", False, status="unparseable")
    error = brief_row("q2", "a", False, status="error")
    rows = [
        first,
        brief_row("q1", "b", False),
        brief_row("q1", "a", True),
        error,
        brief_row("q2", "b", False),
        brief_row("q2", "a", True),
    ]
    path = write(tmp_path / "r.jsonl", rows, meta=_meta(PLAN))
    status, out, _ = _run(path, "json", capsys)
    report = json.loads(out)
    assert status == 0 and report["arms"]["a"]["pass_rate"] == 1.0
    (pair,) = report["sequential"]["pairs"]
    assert (pair["n"], pair["diff"]) == (2, 0.5)  # q1: 0 - 0 (the first row); q2: 1 - 0 (the retry)
