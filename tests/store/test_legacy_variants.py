"""Generated files in the shapes of older writers read, and hostile
ones are refused naming the line.

Sound variants: the parent harness's meta line (``arms`` a list, ``subtasks``, ``n_per_subtask``,
``start``, any of them missing, unknown fields beside them) or none at all, and six-field rows with
fields left out and unknown ones added; and the meta lines of our own older versions (from the
corpus in ``tests/data/results``) with any of their fields left out. The report, merge, the page
and the end-of-run table must count each arm's rows by the older verdict rule
(``store.files.legacy_status``).

Hostile variants (a field of those lines with the wrong type, which would let a row stand for
another item or the line mean something no writer wrote) are refused by every command with
``FILE:LINE`` and exit status 2, never a traceback; the progress page, which must never break a run,
skips such a line (``tests/store/test_untrusted_files.py``).
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from results_files import write

from conftest import Sweep, make_spec, sim_spec
from pytest_echo_bench.cli.main import main
from pytest_echo_bench.report.page.state import progress_state
from pytest_echo_bench.store.checks import META_FIELDS
from pytest_echo_bench.store.tally import FileTally

ARMS = ["haiku", "sonnet", "vote_escalate"]
DETAILS = [
    "passed",
    "unparseable",
    "error: timeout after 120s",
    "error: HTTP 529",
    "expected (B) got (C)",
    "",
    "wrong",
]
# Fields a sound unknown extra must not name: today's meta fields, and the marker.
KNOWN = set(META_FIELDS) | {"_meta", "run_end"}

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)
unknown_fields = st.dictionaries(
    st.text(min_size=1, max_size=8).filter(lambda k: k not in KNOWN), scalars, max_size=3
)


@st.composite
def parent_meta(draw: st.DrawFn) -> dict[str, Any] | None:
    """None (the earliest files: no meta line) or a parent meta line, any of its fields left out."""
    if draw(st.booleans()):
        return None
    line: dict[str, Any] = {"_meta": True, **draw(unknown_fields)}
    optional = {
        "arms": st.lists(st.sampled_from(ARMS), unique=True),
        "subtasks": st.lists(st.text(max_size=8), max_size=3),
        "n_per_subtask": st.integers(0, 300),
        "start": st.text(max_size=20),
        "benchmark": st.sampled_from(["bbh", "gsm8k", ""]),
    }
    for name, values in optional.items():
        if draw(st.booleans()):
            line[name] = draw(values)
    return line


@st.composite
def six_field_rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Rows of the older format, each a distinct item: task_id and arm
    always, the rest maybe left out."""
    rows = []
    for n in range(draw(st.integers(1, 12))):
        row: dict[str, Any] = {"task_id": f"bbh/navigate/{n}", "arm": draw(st.sampled_from(ARMS))}
        detail = draw(st.sampled_from(DETAILS))
        optional = {
            "passed": detail == "passed" or draw(st.booleans()) and detail == "",
            "detail": detail,
            "wall_seconds": draw(st.floats(0, 200)),
            "sub_calls": draw(st.integers(0, 4)),
        }
        row.update({k: v for k, v in optional.items() if draw(st.booleans())})
        rows.append({**row, **draw(unknown_fields)})
    return rows


def verdict(row: dict[str, Any]) -> str:
    """The older rule, written out again: passed or "passed" is correct; then
    unparseable; "error..." an error."""
    detail = row.get("detail")
    detail = detail if isinstance(detail, str) else ""  # a null or odd detail says nothing
    if row.get("passed") is True or detail == "passed":
        return "correct"
    return (
        "unparseable"
        if detail == "unparseable"
        else "error"
        if detail.startswith("error")
        else "wrong"
    )


def expected(
    meta: dict[str, Any] | None, rows: list[dict[str, Any]]
) -> dict[tuple[str, str], tuple[int, int, int, int]]:
    """(benchmark, arm) -> rows, correct, unparseable, errors. The benchmark: the line's, else bbh
    beside subtasks. Correct is what ``passed`` says (a row without it is not correct, whatever its
    detail), as the report counts it."""
    benchmark = "" if meta is None else meta.get("benchmark", "bbh" if "subtasks" in meta else "")
    counts: dict[tuple[str, str], Counter[str]] = {}
    for row in rows:
        counts.setdefault((benchmark, row["arm"]), Counter())[verdict(row)] += 1
        # every reader counts correct by passed
        counts[benchmark, row["arm"]]["passed"] += row.get("passed") is True
    return {
        key: (sum(c.values()) - c["passed"], c["passed"], c["unparseable"], c["error"])
        for key, c in counts.items()
    }


def report(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> dict[tuple[str, str], tuple[int, int, int, int]]:
    capsys.readouterr()
    status = main(["report", "--format", "json", str(path)])
    out, err = capsys.readouterr()
    assert status == 0, err
    return {(a["benchmark"], a["arm"]): (a["n"], a["correct"], a["unparseable"], a["errors"])
            for a in json.loads(out)["arms"].values()}


@settings(max_examples=50, deadline=None, derandomize=True, database=None,
          # capsys: read out before each command
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(meta=parent_meta(), rows=six_field_rows())
# found by a newer Hypothesis: a null detail is no detail
@example(meta=None, rows=[{"task_id": "bbh/navigate/0", "arm": "haiku", "detail": None}])
def test_older_shapes_read_the_same_in_every_reader(
    meta: dict[str, Any] | None, rows: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    want = expected(meta, rows)
    # The report shows every arm the meta line names, one without rows as 0 of 0.
    named = {
        key: (0, 0, 0, 0)
        for key in expected(meta, [{"task_id": "", "arm": a} for a in (meta or {}).get("arms", [])])
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp) / "old.jsonl", rows, meta=meta)
        assert report(path, capsys) == {**named, **want}
        assert main(["merge", str(path), "-o", f"{tmp}/merged.jsonl"]) == 0
        assert report(Path(tmp) / "merged.jsonl", capsys) == {**named, **want}
        assert {
            k: (t.items, t.correct, t.unparseable, t.errors)
            for k, t in FileTally().update(path).items()
        } == want
        page = {
            arm: (a.done, a.correct, a.unparseable, a.errors)
            for arm, a in progress_state(path).arms.items()
        }
        assert page == {arm: counts for (_, arm), counts in want.items()}


CORPUS = Path(__file__).parents[1] / "data" / "results"
OUR_LINES = [
    json.loads((CORPUS / f"{name}.jsonl").read_text().splitlines()[0])
    for name in (
        "first_format",
        "merged_first",
        "rootdir_parts",
        "merged_shards",
        "decide_plan",
        "regraded",
    )
]


@settings(max_examples=50, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    line=st.sampled_from(OUR_LINES),
    drop=st.sets(st.sampled_from(sorted(set(META_FIELDS) - {"_meta"}))),
    more=unknown_fields,
)
def test_our_older_meta_lines_with_fields_left_out_read_the_same(
    line: dict[str, Any], drop: set[str], more: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """A meta line of any version of our writer, any of its fields left out and unknown ones added:
    its rows (which name their benchmark) count the same in the report,
    after a merge, and on the page."""
    rows = (CORPUS / "first_format.jsonl").read_text().splitlines()[1:]
    meta = {**{k: v for k, v in line.items() if k not in drop}, **more}
    want = {("arith", "weak"): (6, 2, 0, 0), ("arith", "strong"): (6, 6, 0, 0)}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ours.jsonl"
        path.write_text(json.dumps(meta) + "\n" + "\n".join(rows) + "\n")
        assert report(path, capsys) == want
        assert main(["merge", str(path), "-o", f"{tmp}/merged.jsonl"]) == 0
        assert report(Path(tmp) / "merged.jsonl", capsys) == want
        page = {
            arm: (a.done, a.correct, a.unparseable, a.errors)
            for arm, a in progress_state(path).arms.items()
        }
        assert page == {arm: counts for (_, arm), counts in want.items()}


# A field of the older lines with the wrong type: (the line it is on, the field, its value).
HOSTILE = [
    (1, "arms", [1, "haiku"]),
    (1, "arms", ["haiku", None]),
    (1, "arms", {"bbh": "haiku"}),
    (1, "arms", "haiku"),
    (1, "subtasks", "navigate"),
    (1, "subtasks", [3]),
    (1, "n_per_subtask", -1),
    (1, "n_per_subtask", True),
    (1, "n_per_subtask", "2"),
    (1, "start", 1700000000),
    (1, "benchmark", ["bbh"]),
    (2, "task_id", 7),
    (2, "arm", ["haiku"]),
    (2, "arm", None),
    (2, "benchmark", 1),
    (2, "epoch", 0),
]


@settings(max_examples=50, deadline=None, derandomize=True, database=None,
          # capsys: read out before each command
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    hostile=st.sampled_from(HOSTILE),
    meta=parent_meta().filter(lambda m: m is not None),
    rows=six_field_rows(),
    command=st.sampled_from(["report", "merge", "export", "power"]),
)
def test_a_wrong_type_in_an_older_line_is_refused_naming_its_line(
    hostile: tuple[int, str, Any],
    meta: dict[str, Any],
    rows: list[dict[str, Any]],
    command: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    lineno, name, value = hostile
    if lineno == 1:
        meta = {**meta, name: value}
    else:
        rows = [{**rows[0], name: value}, *rows[1:]]
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp) / "old.jsonl", rows, meta=meta)
        argv = {
            "report": [str(path)],
            "merge": [str(path), "-o", f"{tmp}/m.jsonl"],
            "export": [str(path), "-o", f"{tmp}/logs"],
            "power": [str(path), "--pair", "haiku,sonnet"],
        }[command]
        capsys.readouterr()
        assert main([command, *argv]) == 2
        err = capsys.readouterr().err
        assert f"{path}:{lineno}: " in err and name in err and "Traceback" not in err, err
        assert not Path(f"{tmp}/m.jsonl").exists()


# --- the cases above as plain tests: each shape that was refused before ---------------------------

def test_the_parent_meta_line_reads_as_today_s(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the checks refused before ("meta line field 'arms' must be
    an object of lists of strings")."""
    meta = {
        "_meta": True,
        "arms": ["haiku", "sonnet"],
        "subtasks": ["navigate"],
        "n_per_subtask": 1,
        "start": "2026-11-21T09:14:03",
    }
    rows = [
        {
            "task_id": "bbh/navigate/0",
            "arm": "haiku",
            "passed": True,
            "detail": "passed",
            "wall_seconds": 1.0,
            "sub_calls": 1,
        },
        {
            "task_id": "bbh/navigate/0",
            "arm": "sonnet",
            "passed": False,
            "detail": "error: HTTP 529",
            "wall_seconds": 2.0,
            "sub_calls": 1,
        },
    ]
    path = write(tmp_path / "old.jsonl", rows, meta=meta)
    assert report(path, capsys) == {("bbh", "haiku"): (1, 1, 0, 0), ("bbh", "sonnet"): (1, 0, 0, 1)}


def test_a_parent_meta_line_of_the_wrong_type_stops_a_resume_naming_its_line(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, sim_spec(2))
    write(
        sweep.out,
        [{"task_id": "q0", "arm": "good", "passed": True}],
        meta={"_meta": True, "arms": ["good", 3]},
    )
    result, _, _ = sweep.run("--bench-resume", str(sweep.out), str(pytester.path))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{sweep.out}:1: meta line field 'arms' must be *, got list*"])
