"""Shards: assigned by (benchmark, task id), K/N from Slurm or an Indexed Job, merges and
gates that know they are whole."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import Sweep, make_spec, read_rows, sim_spec
from pytest_echo_bench.cli.main import main
from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.plugin.shard import Shard, auto_shard, parse_shard
from pytest_echo_bench.report.formats.csv import CSV_FIELDS
from pytest_echo_bench.shards.coverage import coverage, part_of
from pytest_echo_bench.shards.env import k_of_n, whole_number
from pytest_echo_bench.store.records import Meta

ARMS = (
    "  a: {provider: sim, accuracy: 0.7}\n  b: {provider: sim, accuracy: 0.4}\n  c: {provider: "
    "sim, accuracy: 0.5}"
)


pytestmark = pytest.mark.usefixtures("no_scheduler")


def keys(path: Path) -> Counter[tuple[str, str, int]]:
    return Counter((r["task_id"], r["arm"], r.get("epoch", 1)) for r in read_rows(path)[1])


def run_shards(sweep: Sweep, path: Path, total: int, *args: str) -> list[Path]:
    files = []
    for k in range(1, total + 1):
        out = path / f"shard{k}.jsonl"
        result, _, _ = sweep.run("--bench-out", str(out), "--bench-shard", f"{k}/{total}", *args)
        assert result.ret == 0, result.stdout.str()[-1500:]
        files.append(out)
    return files


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()  # what in-process pytest runs printed before
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# --- the assignment --------------------------------------------------------------------------

PINNED = {
    "q0": (1, 1),
    "q1": (1, 3),
    "q2": (3, 3),
    "q3": (2, 3),
    "q7": (2, 1),
    "task-\u00e9": (1, 2),
    "q\ud800": (2, 3),
}


@pytest.mark.parametrize("task_id", sorted(PINNED))
def test_the_assignment_is_pinned_and_ignores_arm_and_epoch(task_id: str) -> None:
    """These shards are part of the file format: a sweep sharded on two
    machines (or two Pythons) must agree."""
    of4, of3 = PINNED[task_id]
    for arm, epoch in (("a", 1), ("strong", 3), ("x" * 50, 2)):
        assert [k for k in range(1, 5) if Shard(k, 4).owns(("demo", task_id, arm, epoch))] == [of4]
        assert [k for k in range(1, 4) if Shard(k, 3).owns(("bbh/x", task_id, arm, epoch))] == [of3]
    digest = hashlib.sha256(f"demo\x1f{task_id}".encode("utf-8", "surrogatepass")).digest()
    assert int.from_bytes(digest[:8], "big") % 4 == of4 - 1  # the scheme is exactly this hash


@settings(derandomize=True, database=None, deadline=None, max_examples=150)
@given(task_id=st.text(max_size=20), bench=st.text(min_size=1, max_size=8), total=st.integers(1, 9),
       arms=st.lists(st.text(max_size=5), min_size=1, max_size=4), epoch=st.integers(1, 5))
def test_every_item_is_in_exactly_one_shard_with_all_its_arms(task_id: str, bench: str, total: int,
                                                              arms: list[str], epoch: int) -> None:
    owners = {
        frozenset(k for k in range(1, total + 1) if Shard(k, total).owns((bench, task_id, arm, e)))
        for arm in arms
        for e in range(1, epoch + 1)
    }
    assert len(owners) == 1 and len(next(iter(owners))) == 1


def test_a_sweep_keeps_each_items_arms_and_epochs_in_one_shard(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, sim_spec(20, arms=ARMS, extra="epochs: 2\n"))
    files = run_shards(sweep, pytester.path, 4)
    holders: dict[str, list[int]] = {}
    for k, path in enumerate(files, 1):
        by_task: dict[str, set[tuple[str, int]]] = {}
        for task_id, arm, epoch in keys(path):
            by_task.setdefault(task_id, set()).add((arm, epoch))
        for task_id, pieces in by_task.items():
            # every arm, every epoch
            assert pieces == {(a, e) for a in "abc" for e in (1, 2)}, (k, task_id)
            holders.setdefault(task_id, []).append(k)
    assert sorted(holders) == sorted(f"q{i}" for i in range(20)) and all(
        len(h) == 1 for h in holders.values()
    )
    assert sum(len(keys(f)) for f in files) == 120 and all(keys(f) for f in files)
    meta, _ = read_rows(files[1])
    assert meta is not None and meta["selection"]["shard"] == "2/4" and meta["shard_scheme"] == 2


# --- auto ------------------------------------------------------------------------------------

FAMILIES = {
    "slurm from 0": {
        "SLURM_ARRAY_TASK_ID": "2",
        "SLURM_ARRAY_TASK_MIN": "0",
        "SLURM_ARRAY_TASK_COUNT": "4",
    },
    "slurm from 1": {
        "SLURM_ARRAY_TASK_ID": "3",
        "SLURM_ARRAY_TASK_MIN": "1",
        "SLURM_ARRAY_TASK_COUNT": "4",
    },
    "slurm as it sets it": {
        "SLURM_ARRAY_TASK_ID": "6",
        "SLURM_ARRAY_TASK_MIN": "4",
        "SLURM_ARRAY_TASK_COUNT": "4",
        "SLURM_ARRAY_TASK_MAX": "7",
        "SLURM_ARRAY_TASK_STEP": "1",
    },
    "indexed job": {"JOB_COMPLETION_INDEX": "2", "ECHO_BENCH_SHARD_COUNT": "4"},
    "stray newline": {"JOB_COMPLETION_INDEX": " 2\n", "ECHO_BENCH_SHARD_COUNT": "4\n"},
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_auto_selects_exactly_what_k_of_n_selects(
    pytester: pytest.Pytester, sweep: Sweep, monkeypatch: pytest.MonkeyPatch, family: str
) -> None:
    make_spec(pytester, sim_spec(12, arms=ARMS))
    explicit = pytester.path / "explicit.jsonl"
    sweep.run("--bench-out", str(explicit), "--bench-shard", "3/4")
    for name, value in FAMILIES[family].items():
        monkeypatch.setenv(name, value)
    auto = pytester.path / "auto.jsonl"
    result, _, _ = sweep.run("--bench-out", str(auto), "--bench-shard", "auto")
    assert result.ret == 0
    assert keys(auto) == keys(explicit) and len(keys(auto)) > 0
    # recorded resolved: resume and merge need K/N
    assert read_rows(auto)[0]["selection"]["shard"] == "3/4"


def test_auto_from_the_environment_variable(pytester: pytest.Pytester, sweep: Sweep,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    make_spec(pytester, sim_spec(12, arms=ARMS))
    explicit = pytester.path / "explicit.jsonl"
    sweep.run("--bench-out", str(explicit), "--bench-shard", "1/3")
    monkeypatch.setenv("ECHO_BENCH_SHARD", "auto")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "10")
    monkeypatch.setenv("SLURM_ARRAY_TASK_MIN", "10")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "3")
    auto = pytester.path / "auto.jsonl"
    # ECHO_BENCH_SHARD=auto, resolved as every option
    result, _, _ = sweep.run("--bench-out", str(auto))
    assert result.ret == 0, result.stdout.str()[-1500:]
    assert keys(auto) == keys(explicit)
    monkeypatch.delenv("ECHO_BENCH_SHARD")
    pytester.makeini("[pytest]\nbench_shard = 1/3\n")
    ini = pytester.path / "ini.jsonl"
    assert sweep.run("--bench-out", str(ini))[0].ret == 0 and keys(ini) == keys(explicit)


BROKEN = {
    "nothing": ({}, "neither a Slurm array task"),
    "slurm without count": (
        {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_MIN": "0"},
        "found SLURM_ARRAY_TASK_ID but not SLURM_ARRAY_TASK_COUNT",
    ),
    "slurm without min": (
        {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "4"},
        "found SLURM_ARRAY_TASK_ID but not SLURM_ARRAY_TASK_MIN",
    ),
    "count only": (
        {"SLURM_ARRAY_TASK_COUNT": "4", "ECHO_BENCH_SHARD_COUNT": "4"},
        "found: SLURM_ARRAY_TASK_COUNT, ECHO_BENCH_SHARD_COUNT",
    ),
    "index without count": (
        {"JOB_COMPLETION_INDEX": "0"},
        "found JOB_COMPLETION_INDEX but not ECHO_BENCH_SHARD_COUNT",
    ),
    "blank count": (
        {"JOB_COMPLETION_INDEX": "0", "ECHO_BENCH_SHARD_COUNT": " \n"},
        "but not ECHO_BENCH_SHARD_COUNT",
    ),
    "both": (
        {"SLURM_ARRAY_TASK_ID": "0", "JOB_COMPLETION_INDEX": "0"},
        "both SLURM_ARRAY_TASK_ID and JOB_COMPLETION_INDEX",
    ),
    "not a number": (
        {"JOB_COMPLETION_INDEX": "one", "ECHO_BENCH_SHARD_COUNT": "4"},
        "JOB_COMPLETION_INDEX='one' is not",
    ),
    "unicode digit": (
        {"JOB_COMPLETION_INDEX": "\u0663", "ECHO_BENCH_SHARD_COUNT": "4"},
        "is not a whole number",
    ),
    "underscore": (
        {"JOB_COMPLETION_INDEX": "1", "ECHO_BENCH_SHARD_COUNT": "1_0"},
        "is not a whole number",
    ),
    "negative": (
        {"JOB_COMPLETION_INDEX": "-1", "ECHO_BENCH_SHARD_COUNT": "4"},
        "is not a whole number",
    ),
    "index = count": (
        {"JOB_COMPLETION_INDEX": "4", "ECHO_BENCH_SHARD_COUNT": "4"},
        "gives index 4, outside",
    ),
    "zero count": (
        {"JOB_COMPLETION_INDEX": "0", "ECHO_BENCH_SHARD_COUNT": "0"},
        "gives index 0, outside",
    ),
    "below min": (
        {"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "4"},
        "gives index -1, outside",
    ),
    "stepped array": (
        {"SLURM_ARRAY_TASK_ID": "8", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_COUNT": "4"},
        "must be contiguous",
    ),
    # --array=0-6:2 (tasks 0, 2, 4, 6): refused on every task, not only on
    # those whose index is past the count
    **{
        f"step 2, task {i}": (
            {
                "SLURM_ARRAY_TASK_ID": str(i),
                "SLURM_ARRAY_TASK_MIN": "0",
                "SLURM_ARRAY_TASK_COUNT": "4",
                "SLURM_ARRAY_TASK_MAX": "6",
                "SLURM_ARRAY_TASK_STEP": "2",
            },
            "SLURM_ARRAY_TASK_STEP=2: a stepped array leaves gaps",
        )
        for i in (0, 2, 4, 6)
    },
    # --array=0,3,5,7: Slurm sets no step for a list; MAX - MIN + 1 != COUNT says it has gaps
    **{
        f"list, task {i}": (
            {
                "SLURM_ARRAY_TASK_ID": str(i),
                "SLURM_ARRAY_TASK_MIN": "0",
                "SLURM_ARRAY_TASK_COUNT": "4",
                "SLURM_ARRAY_TASK_MAX": "7",
            },
            "SLURM_ARRAY_TASK_MAX=7 but SLURM_ARRAY_TASK_COUNT=4: the task ids have gaps",
        )
        for i in (0, 3, 5, 7)
    },
    "step not a number": (
        {
            "SLURM_ARRAY_TASK_ID": "0",
            "SLURM_ARRAY_TASK_MIN": "0",
            "SLURM_ARRAY_TASK_COUNT": "4",
            "SLURM_ARRAY_TASK_STEP": "two",
        },
        "SLURM_ARRAY_TASK_STEP='two' is not a whole number",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_auto_refuses_an_incomplete_or_wrong_environment(case: str) -> None:
    environ, message = BROKEN[case]
    with pytest.raises(pytest.UsageError, match="--bench-shard auto") as info:
        auto_shard(environ)
    assert message in str(info.value)


@pytest.mark.parametrize("env", [{}, {"JOB_COMPLETION_INDEX": "7", "ECHO_BENCH_SHARD_COUNT": "4"}])
def test_auto_errors_are_usage_errors_before_anything_runs(
    pytester: pytest.Pytester, sweep: Sweep, monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> None:
    make_spec(pytester, sim_spec(4, arms=ARMS))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result, _, _ = sweep.run("--bench-shard", "auto")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*--bench-shard auto: *JOB_COMPLETION_INDEX*"])
    assert not sweep.out.exists()


@pytest.mark.parametrize(
    "given", [("--bench-shard=",), ("--bench-shard", ""), ("--bench-shard", " \n")]
)
def test_an_empty_shard_is_refused_not_read_as_the_whole_sweep(
    pytester: pytest.Pytester, sweep: Sweep, given: tuple[str, ...]
) -> None:
    make_spec(pytester, sim_spec(4, arms=ARMS))
    result, _, _ = sweep.run(*given)
    assert result.ret == 4 and not sweep.out.exists()
    result.stderr.fnmatch_lines(["*--bench-shard is empty: give K/N (e.g. 2/4) or auto*"])


@pytest.mark.parametrize(
    "text", ["0/4", "5/4", "1/0", "a/b", "1_0/20", "\u0662/4", "+1/4", "2", "2/4/6", "1/1000001"]
)
def test_explicit_shards_take_ascii_k_of_n_only(text: str) -> None:
    with pytest.raises(pytest.UsageError, match="K/N"):
        parse_shard(text)


def test_explicit_shards_allow_surrounding_whitespace() -> None:
    assert parse_shard(" 2/4\n") == Shard(2, 4) and parse_shard(
        "AUTO", {"JOB_COMPLETION_INDEX": "1", "ECHO_BENCH_SHARD_COUNT": "2"}
    ) == Shard(2, 2)
    assert whole_number("007") == 7 and whole_number("") is None and k_of_n("4/4") == (4, 4)


@settings(derandomize=True, database=None, deadline=None, max_examples=200)
@given(text=st.text(st.sampled_from("0123456789 \t\n\r/+-_\u0663\u00a0ab"), max_size=12))
def test_only_ascii_digits_with_outer_whitespace_are_numbers(text: str) -> None:
    core = text.strip(" \t\r\n")
    expected = (
        int(core) if core and len(core) <= 7 and all(c in "0123456789" for c in core) else None
    )
    assert whole_number(text) == expected
    head, sep, tail = text.partition("/")
    k, n = whole_number(head), whole_number(tail)
    assert k_of_n(text) == (
        (k, n) if sep and k is not None and n is not None and 1 <= k <= n <= 1_000_000 else None
    )


# --- resume ----------------------------------------------------------------------------------

def _resume(sweep: Sweep, path: Path, *args: str) -> pytest.RunResult:
    return sweep.run("--bench-resume", str(path), *args)[0]


def test_a_shard_file_of_the_old_assignment_is_not_resumed(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, sim_spec(8, arms=ARMS))
    shard = pytester.path / "old.jsonl"
    sweep.run("--bench-out", str(shard), "--bench-shard", "2/3")
    lines = shard.read_text().splitlines()
    meta = json.loads(lines[0])
    del meta["shard_scheme"]  # what an earlier version wrote
    shard.write_text("\n".join([json.dumps(meta), *lines[1:-2]]) + "\n")
    before = shard.read_bytes()
    for args in ((), ("--bench-shard", "2/3"), (str(pytester.path),)):
        result = _resume(sweep, shard, *args)
        assert result.ret == 4
        result.stderr.fnmatch_lines(
            [
                f"*--bench-resume {shard}: shard 2/3 was written by an earlier version*"
                "mix the two assignments*--bench-out NEW.jsonl*"
            ]
        )
    assert shard.read_bytes() == before
    meta["shard_scheme"] = 99  # what a newer version might write
    shard.write_text("\n".join([json.dumps(meta), *lines[1:-2]]) + "\n")
    result = _resume(sweep, shard)
    assert result.ret == 4 and "earlier" not in result.stderr.str()
    result.stderr.fnmatch_lines(
        [
            f"*--bench-resume {shard}: shard 2/3 was written by a newer version (shard_scheme 99;"
            " this one knows 2)*"
        ]
    )


def test_a_shard_file_resumes_as_its_own_shard_only(pytester: pytest.Pytester, sweep: Sweep,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    make_spec(pytester, sim_spec(8, arms=ARMS))
    whole, shard = pytester.path / "whole.jsonl", pytester.path / "s.jsonl"
    sweep.run("--bench-out", str(whole))
    sweep.run("--bench-out", str(shard), "--bench-shard", "2/3")
    complete = keys(shard)
    shard.write_text("\n".join(shard.read_text().splitlines()[:-2]) + "\n")  # killed: two rows lost
    for args in (("--bench-shard", "1/3"), ("--bench-shard", "2/4")):
        result = _resume(sweep, shard, *args)
        assert (
            result.ret == 4
            and "the file holds shard 2/3, but --bench-shard gives" in result.stderr.str()
        )
    assert _resume(sweep, whole, "--bench-shard", "1/3").ret == 4  # an unsharded file stays whole
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "1")  # the pod replaced with the same index
    monkeypatch.setenv("ECHO_BENCH_SHARD_COUNT", "3")
    # positional args: still its shard
    result = _resume(sweep, shard, "--bench-shard", "auto", str(pytester.path))
    assert result.ret == 0 and keys(shard) == complete


# --- merge and gates -------------------------------------------------------------------------

def report_json(path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    status, out, _ = cli(capsys, "report", str(path), "--format", "json")
    assert status == 0
    data: dict[str, Any] = json.loads(out)
    return data


def test_a_merge_of_three_of_four_shards_says_so_and_fails_gates(
    pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]
) -> None:
    make_spec(pytester, sim_spec(24, arms=ARMS))
    files = run_shards(sweep, pytester.path, 4)
    partial = pytester.path / "partial.jsonl"
    status, out, _ = cli(
        capsys, "merge", str(files[0]), str(files[1]), str(files[3]), "-o", str(partial)
    )
    assert status == 0 and "shards 1/4, 2/4, 4/4; missing 3/4" in out and "marked incomplete" in out
    meta, _ = read_rows(partial)
    assert meta is not None and meta["complete"] is False and meta["missing_shards"] == ["3/4"]
    assert meta["shards"] == ["1/4", "2/4", "4/4"]
    data = report_json(partial, capsys)
    assert data["complete"] is False and data["missing_shards"] == ["3/4"]
    status, out, err = cli(capsys, "report", str(partial), "--gate", "a>=0")
    assert (
        status == 1 and "FAILED: the sweep is incomplete (shards 1/4, 2/4, 4/4; missing 3/4)" in err
    )
    assert "incomplete: shards 1/4, 2/4, 4/4; missing 3/4" in out
    status, _, err = cli(capsys, "report", str(partial), "--gate", "a>=0", "--allow-partial")
    assert status == 0 and "allowed on a partial sweep" in err and "gate a>=0: passed" in err
    assert cli(capsys, "report", str(partial))[0] == 0  # no gate: the report itself is not refused
    result = _resume(sweep, partial)
    assert (
        result.ret == 4
        and "a merge of shards 1, 2, 4 of 4; resume each shard's own file" in result.stderr.str()
    )
    # The missing shard, merged in later, makes it whole.
    whole = pytester.path / "whole.jsonl"
    status, out, _ = cli(capsys, "merge", str(partial), str(files[2]), "-o", str(whole))
    assert status == 0 and "shards 1/4, 2/4, 3/4, 4/4: all of them" in out
    assert read_rows(whole)[0]["complete"] is True  # type: ignore[index]
    assert report_json(whole, capsys)["complete"] is True
    assert cli(capsys, "report", str(whole), "--gate", "a>=0")[0] == 0


def test_html_csv_and_the_progress_page_mark_an_incomplete_merge(
    pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]
) -> None:
    make_spec(pytester, sim_spec(12, arms=ARMS))
    files = run_shards(sweep, pytester.path, 4)
    partial, whole = pytester.path / "partial.jsonl", pytester.path / "whole.jsonl"
    assert (
        cli(capsys, "merge", str(files[0]), str(files[1]), str(files[3]), "-o", str(partial))[0]
        == 0
    )
    assert cli(capsys, "merge", *map(str, files), "-o", str(whole))[0] == 0
    said = "shards 1/4, 2/4, 4/4; missing 3/4"
    for path, marked in ((partial, True), (whole, False)):
        status, html, _ = cli(capsys, "report", str(path), "--format", "html")
        assert status == 0 and ('id="incomplete"' in html and said in html) is marked
        status, text, _ = cli(capsys, "report", str(path), "--format", "csv")
        lines = list(csv.DictReader(io.StringIO(text)))
        # how each shard file ended
        parts = ["part_shard", "part_file", "part_ended", "part_items", "part_expected"]
        assert (
            status == 0
            and lines
            and len(lines[0]) == len(CSV_FIELDS) + (2 if marked else 0) + len(parts)
        )
        assert [line["part_shard"] for line in lines if line["kind"] == "part"] == \
            [f"shard {k}/4" for k in ((1, 2, 4) if marked else (1, 2, 3, 4))]
        assert all(
            (line.get("complete"), line.get("shards"))
            == (("false", said) if marked else (None, None))
            for line in lines
        )
        page = pytester.path / "page.html"
        assert cli(capsys, "progress", str(path), "-o", str(page))[0] == 0
        shown = page.read_text(encoding="utf-8")
        assert ('id="incomplete-sweep"' in shown and said in shown) is marked


def test_a_single_shard_file_gated_is_partial_and_an_unsharded_one_is_whole(
        pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]) -> None:
    make_spec(pytester, sim_spec(8, arms=ARMS))
    shard = run_shards(sweep, pytester.path, 2)[1]
    status, _, err = cli(capsys, "report", str(shard), "--gate", "a>=0")
    assert status == 1 and "shards 2/2; missing 1/2" in err
    assert report_json(shard, capsys)["missing_shards"] == ["1/2"]
    assert cli(capsys, "report", str(shard), "--gate", "a>=0", "--allow-partial")[0] == 0
    unsharded = pytester.path / "unsharded.jsonl"
    sweep.run("--bench-out", str(unsharded))
    data = report_json(unsharded, capsys)
    assert data["complete"] is True and data["missing_shards"] == [] and data["shards"] == []
    assert cli(capsys, "report", str(unsharded), "--gate", "a>=0")[0] == 0
    status, _, err = cli(
        capsys, "report", str(pytester.path / "shard1.jsonl"), str(shard), "--gate", "a>=0"
    )
    assert status == 0 and "incomplete" not in err  # both shards given to the report: whole


def test_all_four_shards_merge_to_the_unsharded_verdicts_with_duplicates_once(
        pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]) -> None:
    make_spec(pytester, sim_spec(16, arms=ARMS, extra="epochs: 2\n"))
    unsharded = pytester.path / "unsharded.jsonl"
    sweep.run("--bench-out", str(unsharded))
    files = run_shards(sweep, pytester.path, 4)
    merged = pytester.path / "merged.jsonl"
    twice = len(keys(files[1]))
    status, out, _ = cli(capsys, "merge", *map(str, files), str(files[1]), "-o", str(merged))
    assert (
        status == 0
        and f"96 rows, {twice} duplicates removed, 0 conflicts" in out
        and "all of them" in out
    )
    assert keys(merged) == keys(unsharded)
    def strip(d: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {
            arm: {k: v for k, v in s.items() if not k.startswith("wall")}
            for arm, s in d["arms"].items()
        }

    ours, theirs = report_json(merged, capsys), report_json(unsharded, capsys)
    assert (
        strip(ours) == strip(theirs)
        and ours["pairs"] == theirs["pairs"]
        and ours["complete"] is True
    )


def test_a_complete_merge_or_a_whole_run_beside_a_re_run_shard_stays_complete(
        pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]) -> None:
    """A complete file covers every shard of its sweep: merging a shard
    run again adds nothing missing."""
    make_spec(pytester, sim_spec(12, arms=ARMS))
    files = run_shards(sweep, pytester.path, 4)
    unsharded = pytester.path / "unsharded.jsonl"
    sweep.run("--bench-out", str(unsharded))
    merged, again = pytester.path / "m4.jsonl", pytester.path / "re.jsonl"
    assert cli(capsys, "merge", *map(str, files), "-o", str(merged))[0] == 0
    for whole in (merged, unsharded):
        status, out, _ = cli(capsys, "merge", str(whole), str(files[3]), "-o", str(again))
        assert status == 0 and "missing" not in out and "incomplete" not in out, out
        assert read_rows(again)[0]["complete"] is True  # type: ignore[index]
        status, _, err = cli(capsys, "report", str(again), "--gate", "a>=0")
        assert status == 0 and "incomplete" not in err, err
    # another selection's whole run covers none of these shards
    picked = pytester.path / "picked.jsonl"
    sweep.run("--bench-out", str(picked), "-k", "a")
    status, out, _ = cli(
        capsys, "merge", str(picked), str(files[3]), "--allow-mismatch", "-o", str(again)
    )
    assert status == 0 and "missing 1/4, 2/4, 3/4" in out


def test_merge_refuses_shards_of_different_sweeps(pytester: pytest.Pytester, sweep: Sweep,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    make_spec(pytester, sim_spec(8, arms=ARMS))
    of2 = run_shards(sweep, pytester.path, 2)[0]
    of3 = pytester.path / "of3.jsonl"
    sweep.run("--bench-out", str(of3), "--bench-shard", "2/3")
    picked = pytester.path / "picked.jsonl"
    sweep.run("--bench-out", str(picked), "--bench-shard", "2/2", "-k", "a")
    old = pytester.path / "old.jsonl"
    lines = of3.read_text().splitlines()
    meta = json.loads(lines[0])
    del meta["shard_scheme"]
    meta["selection"]["shard"] = "2/2"
    old.write_text("\n".join([json.dumps(meta), *lines[1:]]) + "\n")
    out = pytester.path / "out.jsonl"
    for other, why in (
        (of3, "is shard(s) of 3, but"),
        (picked, "selected"),
        (old, "by scheme 1, but"),
    ):
        status, _, err = cli(capsys, "merge", str(of2), str(other), "-o", str(out))
        assert status == 2 and why in err and "not shards of one sweep" in err and not out.exists()
    status, stdout, _ = cli(capsys, "merge", str(of2), str(of3), "--allow-mismatch", "-o", str(out))
    assert status == 0 and "missing 2/2, 1/3, 3/3" in stdout
    assert read_rows(out)[0]["complete"] is False  # type: ignore[index]


def test_coverage_of_parts() -> None:
    def part(shard: str, **extra: Any) -> Any:
        return part_of(
            "f",
            Meta.from_json(
                {"_meta": True, "selection": {"shard": shard}, "shard_scheme": 2, **extra}
            ),
        )

    assert coverage([part("1/2"), part("2/2")]).complete
    # whole files
    assert coverage(
        [
            part_of("w", Meta.from_json({"_meta": True, "selection": {"shard": ""}})),
            part_of("none", None),
        ]
    ).complete
    # A whole file covers every shard of its own sweep, none of another
    # one; no meta line covers none.
    assert coverage(
        [part("1/2"), part_of("w", Meta.from_json({"_meta": True, "selection": {"shard": ""}}))]
    ).complete
    assert coverage(
        [
            part("1/2"),
            part_of(
                "w", Meta.from_json({"_meta": True, "selection": {"shard": "", "keyword": "a"}})
            ),
        ]
    ).missing == ["2/2"]
    assert coverage([part("1/2"), part_of("none", None)]).missing == ["2/2"]
    assert coverage(
        [part("2/4"), part("", shards=["1/4", "2/4", "3/4", "4/4"], complete=True)]
    ).shards == ["1/4", "2/4", "3/4", "4/4"]
    assert coverage([part("1/3"), part("", shards=["2/3", "3/3"])]).complete
    assert coverage([part("1/3"), part("", shards=["2/3"], complete=False)]).missing == ["3/3"]
    # every sweep must be whole
    assert coverage([part("1/2"), part("2/2"), part("1/4")]).missing == ["2/4", "3/4", "4/4"]
    # a complete merge is whole
    assert coverage([part("1/1"), part("", shards=["1/2"], complete=True)]).complete
    assert coverage([]).complete
    with pytest.raises(StoreError, match="not K/N of one N"):
        part_of("f", Meta.from_json({"_meta": True, "shards": ["1/2", "1/3"]}))


def test_a_meta_line_with_broken_shard_fields_is_refused_naming_the_file(
        pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]) -> None:
    make_spec(pytester, sim_spec(4, arms=ARMS))
    shard = run_shards(sweep, pytester.path, 2)[0]
    lines = shard.read_text().splitlines()
    for field, value, why in (
        ("complete", "yes", "'complete' must be true or false"),
        ("shards", ["1/2", 3], "'shards' must be a list of strings"),
        ("selection", {"shard": "1 of 2"}, "records shards 1 of 2, which are not K/N"),
        ("shard_scheme", 0, "'shard_scheme' must be an integer of 1 or more"),
    ):
        meta = {**json.loads(lines[0]), field: value}
        broken = pytester.path / "broken.jsonl"
        broken.write_text("\n".join([json.dumps(meta), *lines[1:]]) + "\n")
        for argv in (
            ("report", str(broken)),
            ("merge", str(broken), "-o", str(pytester.path / "m.jsonl")),
        ):
            status, _, err = cli(capsys, *argv)
            assert status == 2 and f"{broken}:1" in err and why in err, err


def test_a_gate_during_a_shard_run_is_refused_unless_partial(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, sim_spec(4, arms=ARMS))
    result, _, _ = sweep.run("--bench-shard", "1/2", "--bench-gate", "a>=0")
    assert result.ret == 4 and not sweep.out.exists()
    result.stderr.fnmatch_lines(
        [
            "*--bench-gate with --bench-shard 1/2: a shard holds part of the "
            "sweep*--bench-allow-partial*"
        ]
    )
    result, _, _ = sweep.run(
        "--bench-shard", "1/2", "--bench-gate", "a>=0", "--bench-allow-partial"
    )
    assert result.ret == 0
    # the file's own shard
    result, _, _ = sweep.run("--bench-resume", str(sweep.out), "--bench-gate", "a>=0")
    assert result.ret == 4 and "--bench-gate with --bench-shard 1/2" in result.stderr.str()
