"""A results file is data from anywhere: every reader treats every field of it as untrusted.

Generated rows and meta lines (every field missing, of the wrong type, NaN, infinite, negative,
huge, odd unicode with lone surrogates, extra fields, non-object and truncated lines) go to every
reader in-process: the report in every format, merge, regrade, the page, the tally and resume's
read, the gates. None may raise anything but the project's own errors, naming the file and line,
and none may show a NaN or a negative figure. The examples that found bugs are plain tests too,
and resume, regrade and merge are driven as a user would with hostile files.
"""

from __future__ import annotations

import json
import math
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import Sweep, make_spec, read_rows, sim_spec
from pytest_echo_bench.analysis.gates import parse_gate
from pytest_echo_bench.cli.main import main
from pytest_echo_bench.errors import EchoBenchError, StoreError
from pytest_echo_bench.report.figures import build_report, load_results
from pytest_echo_bench.report.formats import FORMATS, render
from pytest_echo_bench.report.formats.text import paired_intervals, report_json
from pytest_echo_bench.report.page.html import write_progress
from pytest_echo_bench.report.page.state import progress_state
from pytest_echo_bench.results.merge import merge
from pytest_echo_bench.results.regrade import regrade
from pytest_echo_bench.store import keyscan
from pytest_echo_bench.store.reader import read_index, read_records
from pytest_echo_bench.store.safe_text import shown
from pytest_echo_bench.store.tally import FileTally

# --- the generated files ------------------------------------------------------------------------

ODD = [
    "\ud800",
    "a\udfff",
    "\udc00\ud800",
    "\u202e",
    "\x00",
    "\x1b[31m",
    "\ufeff",
    "\U0001f600",
    "é",
    "\n",
]
odd_text = st.lists(st.one_of(st.characters(), st.sampled_from(ODD)), max_size=6).map("".join)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([10**400, -(10**400)]),
    st.floats(allow_nan=True, allow_infinity=True),
    odd_text,
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(odd_text, inner, max_size=3),
    max_leaves=6,
)
# Values that broke a reader once, or are one step from what a field should hold: drawn often.
NASTY = [
    math.nan,
    math.inf,
    -math.inf,
    -1,
    -1e308,
    1e308,
    10**400,
    0,
    2,
    "slow",
    "",
    "\ud800",
    True,
    False,
    None,
    [],
    {},
    {"prompt_tokens": math.nan},
    {"prompt_tokens": "3", "completion_tokens": -5},
    {"completion_tokens": 10**400},
    {"demo": "f"},
    {"demo": {"fingerprint": 7}},
    {"demo": {"items": -1}},
    {"demo": {"epochs": 0}},
    {"demo": {"parts": []}},
    {"demo": ["good", 3]},
    {"args": "x"},
    ["demo.yaml", 1],
    {"escalated": "yes"},
]
field_values = st.one_of(st.sampled_from(NASTY), values)

ROW: dict[str, Any] = {
    "task_id": "q0",
    "arm": "good",
    "passed": True,
    "detail": "passed",
    "wall_seconds": 0.5,
    "sub_calls": 1,
    "benchmark": "demo",
    "status": "correct",
    "output": "4",
    "answer": "4",
    "target": "4",
    "attempts": 1,
    "started_at": "2026-01-01T00:00:00+00:00",
    "finished_at": "2026-01-01T00:00:01+00:00",
    "worker": "main",
    "run_id": "r1",
    "subtask": "s",
    "usage": {"prompt_tokens": 3, "completion_tokens": 2},
    "retries": 0,
    "cost_usd": 0.01,
    "cost_units": 1.0,
    "cache_hits": 0,
    "extra": {"escalated": False},
    "epoch": 1,
}
META: dict[str, Any] = {
    "_meta": True,
    "benchmark": "demo",
    "spec_files": ["demo.yaml"],
    "fingerprint": "f",
    "benchmarks": {
        "demo": {
            "spec": "demo.yaml",
            "fingerprint": "f",
            "parts": {"dataset": "d"},
            "items": 12,
            "epochs": 2,
        }
    },
    "arms": {"demo": ["good", "bad"]},
    "selection": {"args": ["demo.yaml"], "keyword": "", "markexpr": "", "shard": ""},
    "run_id": "r1",
    "plugin_version": "0",
    "created_at": "x",
    "fsync": "end",
    "rootdir": "/nowhere",
    "schema": 1,
}


def mutated(base: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """``base`` with some fields deleted or replaced by any value, and maybe an extra field."""
    edits = st.dictionaries(
        st.sampled_from(sorted(base)), st.one_of(st.just("DELETE"), field_values), max_size=6
    )
    extra = st.dictionaries(odd_text, values, max_size=1)

    def apply(change: tuple[dict[str, Any], dict[str, Any]]) -> dict[str, Any]:
        edit, more = change
        out = {**base, **more}
        for key, value in edit.items():
            if value == "DELETE":
                out.pop(key, None)
            else:
                out[key] = value
        return out

    return st.tuples(edits, extra).map(apply)


def encoded(record: Any) -> bytes:
    """As JSON with every non-ASCII character escaped: a lone
    surrogate becomes the text ``\\ud800``."""
    return json.dumps(record, ensure_ascii=True, allow_nan=True).encode("ascii")


rows = st.tuples(
    mutated(ROW), st.sampled_from(["q0", "q1", "q2"]), st.sampled_from(["good", "bad"])
).map(
    lambda t: {
        **t[0],
        **({"task_id": t[1]} if isinstance(t[0].get("task_id"), str) else {}),
        **({"arm": t[2]} if isinstance(t[0].get("arm"), str) else {}),
    }
)
lines = st.one_of(
    rows.map(encoded),
    rows.map(encoded),
    rows.map(encoded),
    values.map(encoded),  # a line that is not an object
    # truncated
    st.tuples(rows.map(encoded), st.integers(min_value=1, max_value=200)).map(
        lambda t: t[0][: t[1]]
    ),
)
files = st.tuples(
    st.one_of(st.none(), mutated(META)), st.lists(lines, max_size=8), st.booleans()
).map(
    lambda t: (
        (b"" if t[0] is None else encoded(t[0]) + b"\n")
        + b"\n".join(t[1])
        + (b"\n" if t[2] else b"")
    )
)


# --- what must hold of every reader ---------------------------------------------------------------

def assert_own_error(exc: BaseException, path: Path) -> None:
    """Only our own errors, naming the file (and, for a line of it, the line)."""
    assert isinstance(exc, EchoBenchError), f"{type(exc).__name__}: {exc}"
    assert str(path) in str(exc)
    if isinstance(exc, StoreError):
        assert re.search(re.escape(str(path)) + r":\d+: ", str(exc)), str(exc)


def assert_figures(data: Any, where: str = "") -> None:
    """Every number finite and (outside the paired differences) 0 or more."""
    if isinstance(data, dict):
        for key, value in data.items():
            assert_figures(value, f"{where}.{key}")
    elif isinstance(data, list | tuple):
        for value in data:
            assert_figures(value, where)
    elif isinstance(data, int | float) and not isinstance(data, bool):
        assert math.isfinite(data), where
        signed = any(name in where for name in (".diff", ".pairs", "t_stat"))
        assert signed or data >= 0, where


def readers(path: Path, spec: Path) -> None:
    """Every reader of the file once; each either works or raises our own error naming the file."""
    def attempt(read: Any) -> Any:
        try:
            return read()
        except Exception as exc:  # noqa: BLE001  (the property: only our own errors get out)
            assert_own_error(exc, path)
            return None

    report = attempt(lambda: build_report(load_results([path])))
    if report is not None:
        for fmt in FORMATS:
            # as the command prints it: whatever the file held
            shown(render(report, fmt)).encode("utf-8")
        data = report_json(report)
        assert_figures(data)
        rates = {label: arm["pass_rate"] for label, arm in data["arms"].items() if arm["n"]}
        for rule in ("good>=0.5", "good>=bad-0.1", "good >= bad - 0.1 @95"):
            parse_gate(rule, paired=True).check(rates, paired_intervals(report))
    attempt(lambda: merge([path, path]))
    compared = path.with_suffix(".compare.json")
    compared.unlink(missing_ok=True)
    # the command: a file it cannot read is a message and status 2, never a traceback
    status = main(["compare", str(path), str(path), "--format", "json", "-o", str(compared)])
    assert status in (0, 2)
    if status == 0:
        assert_figures(json.loads(compared.read_text()))
    attempt(lambda: regrade(path, [spec]))
    attempt(lambda: read_index(path))
    attempt(lambda: read_index(path, retry_errors=True))
    attempt(lambda: FileTally().update(path, strict=True))
    for tally in FileTally().update(path).values():  # the end-of-run table: never raises
        assert_figures(vars(tally))
    state = progress_state(path)  # the page: never raises
    write_progress(path, path.with_suffix(".html"))
    assert_figures(
        {
            k: v
            for k, v in vars(state).items()
            if k not in ("arms", "recent", "limits", "now", "window")
        }
    )
    for arm in state.arms.values():
        assert_figures([arm.done, arm.correct, arm.unparseable, arm.errors, list(arm.interval)])


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("untrusted")
    spec = root / "demo.yaml"
    spec.write_text(
        sim_spec(
            3, arms="  good: {provider: sim, accuracy: 1.0}\n  bad: {provider: sim, accuracy: 0.0}"
        )
    )
    return root / "generated.jsonl", spec


@settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
    ],
)
@given(content=files)
def test_every_reader_takes_any_file_without_a_traceback_or_a_bad_figure(
    place: tuple[Path, Path], content: bytes
) -> None:
    path, spec = place
    path.write_bytes(content)
    readers(path, spec)


# --- the examples that found bugs, kept as plain tests --------------------------------------------

def hostile_file(tmp_path: Path, *rows: dict[str, Any], meta: dict[str, Any] | None = None) -> Path:
    path = tmp_path / "hostile.jsonl"
    body = [encoded(meta if meta is not None else META)] + [encoded({**ROW, **r}) for r in rows]
    path.write_bytes(b"\n".join(body) + b"\n")
    return path


@pytest.mark.parametrize("usage", [{"prompt_tokens": math.nan, "completion_tokens": 2},
                                   {"prompt_tokens": "3", "completion_tokens": -2}, [1, 2]])
def test_nan_or_wrong_token_counts_are_unknown_and_counted_in_every_format(
    tmp_path: Path, usage: Any
) -> None:
    path = hostile_file(
        tmp_path,
        {"usage": usage},
        {
            "task_id": "q1",
            "cost_usd": -1.0,
            "wall_seconds": math.inf,
            # float(10**400) overflowed
            "sub_calls": 10**400,
        },
    )
    report = build_report(load_results([path]))
    assert report.unknown_figures == 2
    for fmt in FORMATS:
        text = render(report, fmt)
        assert not re.search(r"\bnan\b|\binf\b", text, re.I), fmt
    assert_figures(report_json(report))
    assert "unknown figures: 2 row(s)" in render(report, "table")


@pytest.mark.parametrize(("field", "value", "message"), [
    ("benchmarks", {"demo": "f"}, "'benchmarks' must be an object of objects"),
    ("spec_files", "demo.yaml", "'spec_files' must be a list of strings"),
    ("arms", {"demo": "good"}, "'arms' must be an object of lists of strings"),
    ("benchmark", ["demo"], "'benchmark' must be a string"),
    ("selection", {"args": "x"}, "'selection' must be an object"),
    ("order", {"order": "random", "scheme": "other", "seed": 1}, "'order' must be an object"),
])
def test_a_meta_line_of_wrong_types_is_refused_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: Any, message: str
) -> None:
    path = hostile_file(tmp_path, {}, meta={**META, field: value})
    for command in (["merge", str(path), "-o", str(tmp_path / "m.jsonl")],
                    ["regrade", str(path), "-o", str(tmp_path / "r.jsonl")], ["report", str(path)]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert f"{path}:1: meta line field {message}" in err and "Traceback" not in err


def test_a_benchmarks_entry_of_wrong_types_is_refused(tmp_path: Path) -> None:
    path = hostile_file(tmp_path, {}, meta={**META, "benchmarks": {"demo": {"fingerprint": 7}}})
    with pytest.raises(
        StoreError, match=r"hostile\.jsonl:1: meta line benchmarks\['demo'\] field 'fingerprint'"
    ):
        merge([path])


@pytest.mark.parametrize(("row", "message"), [
    ({"task_id": 7}, "task_id must be a string, got int 7"),
    ({"arm": None}, "arm must be a string"),
    ({"benchmark": 3}, "benchmark must be a string"),
    ({"epoch": 0}, "epoch must be an integer of 1 or more, got int 0"),
    ({"epoch": -2}, "epoch must be an integer of 1 or more"),
    ({"epoch": True}, "epoch must be an integer of 1 or more, got bool"),
    ({"epoch": 2.0}, "epoch must be an integer of 1 or more, got float"),
    ({"task_id": {"id": "q\ud800"}}, "task_id must be a string, got dict {'id': 'q\\ud800'}"),
    ({"_meta": "yes"}, "not a results row"),
])
def test_a_row_with_a_bad_key_is_refused_by_every_strict_reader_naming_the_line(
    tmp_path: Path, row: dict[str, Any], message: str
) -> None:
    path = hostile_file(tmp_path, {}, row, {"task_id": "q2"})
    for read in (
        lambda: read_index(path),
        lambda: read_records(path),
        lambda: FileTally().update(path, strict=True),
        lambda: load_results([path]),
        lambda: merge([path]),
    ):
        with pytest.raises(StoreError, match=re.escape(f"{path}:3: {message}")):
            read()
    assert (
        len(read_index(path, upto=len(b"".join(path.read_bytes().splitlines(True)[:2]))).keys) == 1
    )
    assert sum(t.items for t in FileTally().update(path).values()) == 2  # the table skips it
    assert progress_state(path).done == 2  # and so does the page


def test_a_wall_that_is_not_a_number_counts_as_unknown_in_the_tally(tmp_path: Path) -> None:
    path = hostile_file(
        tmp_path,
        {"wall_seconds": "slow"},
        {"task_id": "q1", "wall_seconds": -5},
        {"task_id": "q2", "wall_seconds": 1e400},
        {"task_id": "q3", "wall_seconds": {"s": 1}},
        {"task_id": "q4", "wall_seconds": 10**400},
        {"task_id": "q5", "wall_seconds": 2.0},
    )
    tally = FileTally()
    arms = tally.update(path, strict=True)
    assert arms["demo", "good"].items == 6 and arms["demo", "good"].wall == 2.0


def test_a_passed_that_is_not_true_does_not_count_as_correct(tmp_path: Path) -> None:
    path = hostile_file(tmp_path, {"passed": "false", "status": None, "detail": "no"})
    report = build_report(load_results([path]))
    assert report.arms[0].correct == 0
    assert FileTally().update(path)["demo", "good"].correct == 0


def test_retries_and_cost_on_the_page_are_never_negative(tmp_path: Path) -> None:
    path = hostile_file(
        tmp_path,
        {"retries": -3, "cost_usd": -2.0, "usage": {"prompt_tokens": -1}},
        {"task_id": "q1", "retries": "-4", "output": "x\ud800", "status": "wrong", "passed": False},
    )
    state = progress_state(path)
    # the second row's only
    assert state.retries == 0 and state.cost_usd == 0.01 and state.prompt_tokens == 3
    write_progress(path, tmp_path / "page.html")


# --- a long line: the key scan is linear in its length --------------------------------------------

def test_lines_longer_than_many_reads_give_the_same_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a read of 7 bytes, every line spans many reads and a read may end at a newline."""
    path = hostile_file(
        tmp_path, {"output": "x" * 200}, {"task_id": "q1"}, {"task_id": "q2", "output": "y" * 49}
    )
    with path.open("ab") as f:
        # a last line without a newline: a whole row counts
        f.write(encoded({**ROW, "task_id": "q3"}))
    expected = {("demo", r.data["task_id"], r.data["arm"], 1) for r in read_records(path)[1]}
    for chunk in (7, 8, 64, 1 << 20):
        monkeypatch.setattr(keyscan, "CHUNK", chunk)
        assert set(read_index(path).keys) == expected
        assert FileTally().update(path, strict=True)["demo", "good"].items == 4


# --- resume, regrade and merge of hostile files, driven as a user
# would -----------------------------

SPEC = sim_spec(
    3, arms="  good: {provider: sim, accuracy: 1.0}\n  bad: {provider: sim, accuracy: 0.0}"
)


@pytest.mark.parametrize(
    "row",
    [
        {"wall_seconds": "slow"},
        {"wall_seconds": math.nan},
        {"usage": {"prompt_tokens": math.nan}},
        {"cost_usd": -1e308},
        {"output": "\ud800", "answer": "\udfff"},
        {"retries": "many"},
        {"passed": "yes"},
        {"subtask": ["x"]},
        {"extra": "not an object"},
        {"status": 7, "detail": None},
    ],
)
def test_resume_of_a_file_with_odd_figures_resumes(
    pytester: pytest.Pytester, sweep: Sweep, row: dict[str, Any]
) -> None:
    make_spec(
        pytester,
        sim_spec(
            3,
            arms="  good: {provider: sim, accuracy: 1.0}\n  other: {provider: sim, accuracy: 1.0}",
        ),
    )
    _, meta, rows = sweep.run()
    assert meta is not None and len(rows) == 6
    # q2 of both arms left to run, but a hostile row of q2[good]
    kept = [r for r in rows if r["task_id"] != "q2"]
    sweep.out.write_bytes(
        b"".join(encoded(r) + b"\n" for r in [meta, *kept, {**ROW, "task_id": "q2", **row}])
    )
    result, _, rows = sweep.run("--bench-resume", str(sweep.out))
    out = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in out and "Traceback" not in out
    assert result.ret == 0, out
    # q2[other] runs; the hostile row stands for q2[good]
    result.assert_outcomes(passed=1, deselected=5)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"task_id": 7}, "task_id must be a string"),
        ({"epoch": 0}, "epoch must be an integer of 1 or more"),
        ({"arm": ["good"]}, "arm must be a string, got list"),
        ({"benchmark": {"x": 1}}, "benchmark must be"),
    ],
)
def test_resume_of_a_file_with_a_bad_key_is_a_usage_error_naming_the_line(
    pytester: pytest.Pytester, sweep: Sweep, row: dict[str, Any], message: str
) -> None:
    make_spec(pytester, SPEC)
    _, _, rows = sweep.run("-k", "q0")
    with sweep.out.open("ab") as f:
        f.write(encoded({**ROW, "task_id": "q2", **row}) + b"\n")
    result, _, _ = sweep.run("--bench-resume", str(sweep.out))
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "INTERNALERROR" not in out
    assert f"{sweep.out}:{len(rows) + 2}: {message}" in out


def test_resume_of_a_meta_line_of_wrong_types_is_a_usage_error(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, SPEC)
    _, meta, rows = sweep.run()
    assert meta is not None
    sweep.out.write_bytes(encoded({**meta, "benchmarks": {"demo": {"fingerprint": ["f"]}}}) + b"\n"
                          + b"".join(encoded(r) + b"\n" for r in rows))
    result, _, _ = sweep.run("--bench-resume", str(sweep.out))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        f"{sweep.out}:1: meta line benchmarks['demo'] field 'fingerprint' must be a string"
        in result.stderr.str()
    )


MARKER_CONFTEST = """
import pathlib
pathlib.Path({marker!r}).write_text("imported")
"""


@pytest.fixture
def elsewhere(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A folder outside the project with a spec and a conftest.py that
    leaves a marker when imported."""
    hostile = tmp_path_factory.mktemp("hostile")
    marker = tmp_path_factory.mktemp("markers") / "imported"
    (hostile / "conftest.py").write_text(MARKER_CONFTEST.format(marker=str(marker)))
    (hostile / "demo.yaml").write_text(SPEC)
    return hostile, marker


def theirs(sweep: Sweep, meta: dict[str, Any], rows: list[dict[str, Any]], **changes: Any) -> Path:
    path = sweep.out.parent / "theirs.jsonl"
    path.write_bytes(
        encoded({**meta, **changes}) + b"\n" + b"".join(encoded(r) + b"\n" for r in rows)
    )
    return path


def meta_pointing(hostile: Path, how: str, meta: dict[str, Any]) -> dict[str, Any]:
    """The meta line's paths changed to reach the hostile folder:
    absolutely, by '..', or by its rootdir."""
    if how == "rootdir":
        return {
            "rootdir": str(hostile),
            "spec_files": ["demo.yaml"],
            "selection": {**meta["selection"], "args": []},
        }
    spec = (
        str(hostile / "demo.yaml")
        if how == "absolute"
        else f"../../../../../../../../..{hostile}/demo.yaml"
    )
    return {"spec_files": [spec], "selection": {**meta["selection"], "args": [spec]}}


@pytest.mark.parametrize("how", ["absolute", "dotdot", "rootdir"])
def test_resume_never_imports_a_conftest_from_a_path_the_file_names(
        pytester: pytest.Pytester, sweep: Sweep, elsewhere: tuple[Path, Path], how: str) -> None:
    hostile, marker = elsewhere
    make_spec(pytester, SPEC, name="mine")
    _, meta, rows = sweep.run("-k", "q0")
    assert meta is not None
    # nothing of ours to find: the meta line's paths are all there is
    (pytester.path / "mine.yaml").unlink()
    path = theirs(sweep, meta, rows, **meta_pointing(hostile, how, meta))
    result, _, _ = sweep.run(f"--bench-resume={path}")
    assert not marker.exists()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    if how != "rootdir":  # the rootdir is not used at all: the spec is simply not found here
        result.stderr.fnmatch_lines(["*its meta line names*outside*never collects*"])


@pytest.mark.parametrize("how", ["absolute", "dotdot", "rootdir"])
def test_regrade_never_imports_a_conftest_from_a_path_the_file_names(
        pytester: pytest.Pytester, sweep: Sweep, elsewhere: tuple[Path, Path], how: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    hostile, marker = elsewhere
    make_spec(pytester, SPEC, name="mine")
    _, meta, rows = sweep.run()
    assert meta is not None
    (pytester.path / "mine.yaml").unlink()
    path = theirs(sweep, meta, rows, **meta_pointing(hostile, how, meta))
    capsys.readouterr()
    assert main(["regrade", str(path), "-o", str(pytester.path / "new.jsonl")]) == 2
    err = capsys.readouterr().err
    assert not marker.exists()
    assert "demo.yaml" in err and ("--allow-outside-specs" in err or "not found under" in err)
    # the user may say the path is trusted: then it is used, conftest.py and all
    if how == "absolute":
        main(
            ["regrade", str(path), "-o", str(pytester.path / "new.jsonl"), "--allow-outside-specs"]
        )
        assert marker.exists()


def test_merge_refuses_a_file_stripped_of_its_meta_line(pytester: pytest.Pytester, sweep: Sweep,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """A file from a changed spec, its meta line cut off, must not
    take the other file's fingerprint."""
    spec = make_spec(pytester, SPEC)
    _, meta, ours = sweep.run("-k", "q0 or q1")
    assert meta is not None
    ours_path = pytester.path / "ours.jsonl"
    sweep.out.rename(ours_path)
    spec.write_text(SPEC.replace('target: "4"', 'target: "5"'))  # a changed dataset
    _, changed_meta, changed = sweep.run("-k", "q2")
    assert changed_meta is not None
    stripped = pytester.path / "stripped.jsonl"
    stripped.write_bytes(b"".join(encoded(r) + b"\n" for r in changed))
    merged = pytester.path / "merged.jsonl"
    capsys.readouterr()
    assert main(["merge", str(ours_path), str(stripped), "-o", str(merged)]) == 2
    assert (
        f"{stripped}:1: a row of benchmark 'demo', but the file has no meta line"
        in capsys.readouterr().err
    )
    assert not merged.exists()
    real = changed_meta["benchmarks"]["demo"]["fingerprint"]
    assert (
        main(
            [
                "merge",
                str(ours_path),
                str(stripped),
                "-o",
                str(merged),
                "--assume-fingerprint",
                f"demo={real}",
            ]
        )
        == 2
    )
    assert "cannot be merged" in capsys.readouterr().err
    assert (
        main(
            [
                "merge",
                str(ours_path),
                str(stripped),
                "-o",
                str(merged),
                "--assume-fingerprint",
                f"demo={real}",
                "--allow-mismatch",
            ]
        )
        == 0
    )
    merged_meta, _ = read_rows(merged)
    assert merged_meta is not None and merged_meta["benchmarks"]["demo"]["fingerprint"] not in (
        real,
        meta["fingerprint"],
    )
    spec.write_text(SPEC)
    result, _, _ = sweep.run(f"--bench-resume={merged}")
    # the laundered file is not accepted as the spec's own
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*was recorded with fingerprint*--bench-allow-mismatch*"])
    ours_fp = meta["benchmarks"]["demo"]["fingerprint"]
    assert (
        main(
            [
                "merge",
                str(ours_path),
                str(stripped),
                "-o",
                str(merged),
                "--assume-fingerprint",
                f"demo={ours_fp}",
            ]
        )
        == 0
    )


def test_merge_refuses_rows_of_a_benchmark_its_meta_line_does_not_record(tmp_path: Path) -> None:
    path = hostile_file(tmp_path, {}, {"benchmark": "other"})
    with pytest.raises(
        StoreError,
        match=r"hostile\.jsonl:3: a row of benchmark 'other', but the file records no "
        r"fingerprint for benchmark 'other'.*--assume-fingerprint",
    ):
        merge([path])
    assert len(merge([path], {"other": "g"}).lines) == 2


def test_regrade_with_a_spec_given_imports_only_its_own_conftest_chain(
    pytester: pytest.Pytester, elsewhere: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The meta line's rootdir is not where conftest files are imported
    from: the current directory is."""
    hostile, marker = elsewhere
    sub = pytester.path / "sub"
    sub.mkdir()
    (sub / "demo.yaml").write_text(textwrap.dedent(SPEC))
    path = pytester.path / "r.jsonl"
    path.write_bytes(encoded({**META, "rootdir": str(hostile), "benchmarks": {}}) + b"\n"
                     + encoded({**ROW, "task_id": "q0", "target": "4"}) + b"\n")
    assert (
        main(
            [
                "regrade",
                str(path),
                "--spec",
                str(sub / "demo.yaml"),
                "-o",
                str(pytester.path / "n.jsonl"),
            ]
        )
        == 0
    )
    assert not marker.exists()
