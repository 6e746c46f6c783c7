"""``echo-bench compare``: two runs paired item by item, through ``main(argv)`` on real files.

The discordant counts and p-values are checked against code written here (a binomial sum from
``math.comb``), on generated pairs of runs with known flips."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from results_files import ABSENT, meta, row, write

from pytest_echo_bench.cli.main import main

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None)


def run_file(path: Path, verdicts: dict[str, bool], arm: str = "a", run_id: str = "r1",
             **fields: Any) -> Path:
    """A run of arm ``arm``: one row per item, its digest ``h-<id>`` unless ``fields`` say."""
    rows = [row(t, arm, passed, item_sha256=fields.get("digest", {}).get(t, f"h-{t}"),
                served_model=fields.get("served", "m-1"), answer=f"{run_id}:{t}")
            for t, passed in verdicts.items()]
    return write(path, rows, meta=meta(arms=[arm], run_id=run_id, created_at="2026-01-01"))


def compare(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any], str]:
    status = main(["compare", *argv, "--format", "json"])
    out, err = capsys.readouterr()
    return status, json.loads(out) if out.strip() else {}, err


def binomial_p(b: int, c: int) -> float:
    """Two-sided exact McNemar, written out: twice the smaller tail of Binomial(b + c, 1/2)."""
    n, k = b + c, min(b, c)
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n)


# per item: (in BASE, in CAND, BASE right, CAND right)
ITEMS = st.lists(st.tuples(st.booleans(), st.booleans(), st.booleans(), st.booleans()),
                 min_size=1, max_size=60)


@SETTINGS
@given(ITEMS)
def test_flips_and_p_values_match_an_independent_count(tmp_path_factory: pytest.TempPathFactory,
                                                       items: list[tuple[bool, ...]]) -> None:
    tmp = tmp_path_factory.mktemp("runs")
    base = {f"t{i}": r for i, (inb, _, r, _) in enumerate(items) if inb}
    cand = {f"t{i}": r for i, (_, inc, _, r) in enumerate(items) if inc}
    if not base or not cand:
        return
    b = sum(base[t] and not cand[t] for t in base if t in cand)
    c = sum(cand[t] and not base[t] for t in base if t in cand)
    status, data, _ = compare_files(tmp, base, cand)
    assert status == 0
    arm = data["arms"][0]
    assert (arm["regressed"], arm["fixed"]) == (b, c)
    assert arm["n"] == len(base.keys() & cand.keys())
    assert arm["p_value"] == pytest.approx(binomial_p(b, c), rel=1e-12, abs=1e-300)
    assert len(arm["only_base"]) == len(base.keys() - cand.keys())
    assert len(arm["only_cand"]) == len(cand.keys() - base.keys())
    assert len(arm["flips"]) == b + c and arm["comparable"] == "yes"


def compare_files(tmp: Path, base: dict[str, bool], cand: dict[str, bool],
                  *extra: str) -> tuple[int, dict[str, Any], str]:
    a, b = run_file(tmp / "base.jsonl", base), run_file(tmp / "cand.jsonl", cand, run_id="r2")
    out = tmp / "out.json"
    status = main(["compare", str(a), str(b), "--format", "json", "-o", str(out), *extra])
    return status, json.loads(out.read_text()), ""


def test_shards_on_either_side_are_merged_as_report_merges_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = {f"t{i}": i % 2 == 0 for i in range(10)}
    cand = {f"t{i}": i % 3 == 0 for i in range(10)}
    halves = [dict(list(base.items())[:5]), dict(list(base.items())[5:])]
    b1, b2 = (run_file(tmp_path / f"b{i}.jsonl", h) for i, h in enumerate(halves))
    c1 = run_file(tmp_path / "c1.jsonl", dict(list(cand.items())[:3]), run_id="r2")
    c2 = run_file(tmp_path / "c2.jsonl", dict(list(cand.items())[3:]), run_id="r2")
    status, data, _ = compare(capsys, "--base", str(b1), str(b2), "--cand", str(c1), str(c2))
    whole = compare_files(tmp_path, base, cand)[1]["arms"][0]
    arm = data["arms"][0]
    assert status == 0 and arm["n"] == 10
    assert (arm["regressed"], arm["fixed"], arm["p_value"]) == (
        whole["regressed"], whole["fixed"], whole["p_value"])


def test_a_changed_item_digest_is_counted_apart_and_not_paired(tmp_path: Path) -> None:
    base = {f"t{i}": True for i in range(6)}
    a = run_file(tmp_path / "a.jsonl", base)
    b = run_file(tmp_path / "b.jsonl", {t: False for t in base}, run_id="r2",
                 digest={"t0": "other", "t1": "other"})
    out = tmp_path / "o.json"
    assert main(["compare", str(a), str(b), "--format", "json", "-o", str(out)]) == 0
    arm = json.loads(out.read_text())["arms"][0]
    assert arm["n"] == 4 and arm["changed_items"] == [["t0", 1], ["t1", 1]]
    assert arm["regressed"] == 4 and arm["comparable"] == "no"
    assert arm["why"] == ["items changed since BASE (their digest differs): 2"]


def test_a_changed_served_model_is_named(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    a = run_file(tmp_path / "a.jsonl", {"t0": True, "t1": False})
    b = run_file(tmp_path / "b.jsonl", {"t0": True, "t1": False}, run_id="r2",
                 served="gpt-4o-2024-08-06")
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "comparable: no" in out
    assert "the served model changed: m-1 -> gpt-4o-2024-08-06" in out


def test_a_changed_arm_is_named_by_the_key_that_changed(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    def parts(model: str) -> dict[str, Any]:
        entry = {"spec": "demo.yaml", "fingerprint": model,
                 "parts": {"dataset": "d", "arm/a": f"all-{model}", "arm/a/model": model,
                           "arm/a/provider": "p"}}
        return meta(arms=["a"], benchmarks={"demo": entry})

    a = write(tmp_path / "a.jsonl", [row("t0", "a", True)], meta=parts("m1"))
    b = write(tmp_path / "b.jsonl", [row("t0", "a", True)], meta=parts("m2"))
    assert main(["compare", str(a), str(b)]) == 0
    assert "arm 'a' (key 'model') changed" in capsys.readouterr().out


def test_older_files_pair_by_key_and_say_the_check_is_unknown(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write(tmp_path / "a.jsonl", [row(f"t{i}", "a", i < 3) for i in range(5)], meta=meta())
    b = write(tmp_path / "b.jsonl", [row(f"t{i}", "a", i < 2, item_sha256=ABSENT)
                                     for i in range(5)])
    status, data, _ = compare(capsys, str(a), str(b))
    arm = data["arms"][0]
    assert status == 0 and arm["n"] == 5 and arm["regressed"] == 1
    assert arm["comparable"] == "unknown" and arm["unknown_digest"] == 5


def test_pair_names_arms_of_other_names_and_lists_the_rest(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = run_file(tmp_path / "a.jsonl", {"t0": True}, arm="old")
    b = run_file(tmp_path / "b.jsonl", {"t0": False}, arm="new", run_id="r2")
    status, data, _ = compare(capsys, str(a), str(b))
    assert status == 0 and data["arms"] == []
    assert data["only_base_arms"] == ["demo/old"] and data["only_cand_arms"] == ["demo/new"]
    status, data, _ = compare(capsys, str(a), str(b), "--pair", "old=new")
    assert data["arms"][0]["regressed"] == 1 and data["only_base_arms"] == []


REGRESSED = {**{f"t{i}": True for i in range(200)}}
WORSE = {**{f"t{i}": i >= 40 for i in range(200)}}  # 40 items right then wrong, none fixed


@pytest.mark.parametrize(("gate", "cand", "status"), [
    ("a >= base - 0.02 @95", REGRESSED, 0),
    ("a >= base - 0.02 @95", WORSE, 1),
    ("a>=base-0.5@95", WORSE, 0),
    ("no-regression@95", REGRESSED, 0),
    ("no-regression@95", WORSE, 1),
    ("no-regression@95 anytime", WORSE, 1),
    ("a >= base - 0.3 @95 anytime", WORSE, 0),
    ("missing >= base @95", REGRESSED, 1),
])
def test_gates_decide_the_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      gate: str, cand: dict[str, bool], status: int) -> None:
    a = run_file(tmp_path / "a.jsonl", REGRESSED)
    b = run_file(tmp_path / "b.jsonl", cand, run_id="r2")
    assert main(["compare", str(a), str(b), "--gate", gate]) == status
    err = capsys.readouterr().err
    assert f"gate {gate}: " in err and ("FAILED" in err) == bool(status)


def test_a_gate_over_an_arm_with_no_paired_item_refuses_to_pass(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = run_file(tmp_path / "a.jsonl", {"t0": True, "t1": True})
    b = run_file(tmp_path / "b.jsonl", {"t0": True, "t1": True}, run_id="r2",
                 digest={"t0": "x", "t1": "y"})
    assert main(["compare", str(a), str(b), "--gate", "no-regression@95"]) == 1
    err = capsys.readouterr().err
    assert "a has no paired item (0 only in BASE, 0 only in CAND, 2 changed" in err


@SETTINGS
@given(st.text(max_size=40))
def test_bad_gate_text_is_a_usage_error_naming_what_to_write(text: str) -> None:
    from pytest_echo_bench.analysis.across import parse_across_gate

    try:
        parse_across_gate(text)
    except ValueError as exc:
        assert "no-regression@95" in str(exc) or "between 50 and 100" in str(exc)


def test_bad_gate_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = run_file(tmp_path / "a.jsonl", {"t0": True})
    assert main(["compare", str(a), str(a), "--gate", "a >= 0.8"]) == 2
    assert "write 'ARM >= base - 0.02 @95'" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["ONE"], ["ONE", "ONE", "ONE"], ["ONE", "--base", "ONE"],
                                  ["--base", "ONE"]])
def test_sides_given_wrongly_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         argv: list[str]) -> None:
    a = str(run_file(tmp_path / "a.jsonl", {"t0": True}))
    assert main(["compare", *[a if x == "ONE" else x for x in argv]]) == 2
    assert "echo-bench compare:" in capsys.readouterr().err


@pytest.mark.parametrize("form", ["text", "markdown", "csv", "html"])
def test_every_format_shows_hostile_answers_escaped(tmp_path: Path, form: str) -> None:
    hostile = "\x1b]0;pwned\x07\u202e=cmd|<script>"
    a = write(tmp_path / "a.jsonl", [row("t\x1b[2J", "a", True, answer=hostile)], meta=meta())
    b = write(tmp_path / "b.jsonl", [row("t\x1b[2J", "a", False, answer="=1+1")], meta=meta())
    out = tmp_path / f"o.{form}"
    assert main(["compare", str(a), str(b), "--format", form, "-o", str(out)]) == 0
    text = out.read_text()
    assert "\x1b" not in text and "\u202e" not in text and "regressed" in text
    if form == "html":
        assert "<script>" not in text
    if form == "csv":
        assert ",'=1+1" in text


def test_flips_past_the_first_hundred_are_counted_in_text_and_all_in_json(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = {f"t{i:03}": True for i in range(150)}
    a, b = run_file(tmp_path / "a.jsonl", base), run_file(tmp_path / "b.jsonl",
                                                          dict.fromkeys(base, False), run_id="r2")
    assert main(["compare", str(a), str(b)]) == 0
    assert "... 50 more flips (all in json/csv)" in capsys.readouterr().out
    assert len(compare(capsys, str(a), str(b))[1]["arms"][0]["flips"]) == 150


def test_a_pair_naming_an_arm_a_run_lacks_is_refused(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    a = run_file(tmp_path / "a.jsonl", {"t0": True})
    assert main(["compare", str(a), str(a), "--pair", "a=nope"]) == 2
    assert "--pair a=nope: CAND has no arm 'nope' (its arms: a)" in capsys.readouterr().err


WORDS = st.sampled_from(["--pair", "--gate", "--format", "--base", "--cand", "-o", "A", "B",
                         "a=a", "a=", "=b", "no-regression@95", "a >= base @95 anytime", "html",
                         "json", "a>=base-2@95", "@", "--", ""])


@SETTINGS
@given(st.lists(WORDS, max_size=8))
def test_any_arguments_give_a_status_never_a_traceback(tmp_path_factory: pytest.TempPathFactory,
                                                       words: list[str]) -> None:
    tmp = tmp_path_factory.mktemp("argv")
    a = str(run_file(tmp / "a.jsonl", {"t0": True, "t1": False}))
    b = str(run_file(tmp / "b.jsonl", {"t0": False, "t1": False}, run_id="r2"))
    out = str(tmp / "out")
    argv = [{"A": a, "B": b}.get(w, w) for w in words]
    argv = [out if prev == "-o" else w for prev, w in zip(["", *argv], argv, strict=False)]
    assert main(["compare", *argv]) in (0, 1, 2)


def test_no_regression_holds_its_false_alarms_over_every_arm(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """5 of 100 items right then wrong: shown worse at 95% (Newcombe's upper bound -0.0034), not
    at 97.5% (+0.0031), the level each of two arms gets."""
    base = {f"t{i}": i < 55 for i in range(100)}
    cand = {f"t{i}": i < 50 for i in range(100)}
    rows = [row(t, arm, passed or arm == "b", item_sha256=f"h-{t}")
            for arm in ("a", "b") for t, passed in base.items()]
    again = [row(t, arm, passed or arm == "b", item_sha256=f"h-{t}")
             for arm in ("a", "b") for t, passed in cand.items()]
    one = [write(tmp_path / f"{n}1.jsonl", [r for r in rs if r["arm"] == "a"], meta=meta())
           for n, rs in (("a", rows), ("b", again))]
    two = [write(tmp_path / f"{n}2.jsonl", rs, meta=meta())
           for n, rs in (("a", rows), ("b", again))]
    assert main(["compare", *map(str, one), "--gate", "no-regression@95"]) == 1
    assert "a: FAILED (CAND - BASE 95.00% CI [" in capsys.readouterr().err
    assert main(["compare", *map(str, two), "--gate", "no-regression@95"]) == 0
    assert "a: passed (CAND - BASE 97.50% CI (95% over 2 arms) [" in capsys.readouterr().err


FORGED = "\n\nstrong: 500 paired items, comparable: yes\n  CAND - BASE +0.000"


@pytest.mark.parametrize("form", ["text", "markdown", "csv", "html", "json"])
def test_a_line_feed_in_a_served_model_or_task_id_draws_no_line_of_its_own(
        tmp_path: Path, form: str) -> None:
    """A served model, task ids (flipped, only in BASE, only in CAND) and an arm holding line
    feeds are shown escaped: nothing from a file starts a line of the comparison."""
    base = [row("t\nFORGED flip", "a", True, served_model="m"),
            row("t\nFORGED only base", "a", True), row("t0", "a\nFORGED arm", True)]
    cand = [row("t\nFORGED flip", "a", False, served_model="gpt-4o" + FORGED),
            row("t\nFORGED only cand", "a", True), row("t0", "a\nFORGED arm", True)]
    a = write(tmp_path / "a.jsonl", base, meta=meta())
    b = write(tmp_path / "b.jsonl", cand, meta=meta(run_id="r2"))
    out = tmp_path / f"o.{form}"
    assert main(["compare", str(a), str(b), "--format", form, "-o", str(out)]) == 0
    text = out.read_text()
    if form == "json":  # the exact text, a line feed written as \n inside its string
        data = json.loads(text)
        assert data["arms"][0]["flips"][0]["task_id"] == "t\nFORGED flip"
        return
    assert not [line for line in text.splitlines() if line.lstrip("| -'\"").startswith(
        ("FORGED", "strong: 500", "CAND - BASE +0.000"))]
    for what in ("t\\x0aFORGED flip", "t\\x0aFORGED only base", "t\\x0aFORGED only cand"):
        assert what in text, (form, what)
    if form != "csv":  # CSV has no served model column
        assert "gpt-4o\\x0a\\x0astrong: 500" in text


def test_a_gate_line_names_an_arm_with_a_line_feed_escaped(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [row(f"t{i}", "a\nFORGED", True) for i in range(5)]
    a = write(tmp_path / "a.jsonl", rows, meta=meta())
    assert main(["compare", str(a), str(a), "--gate", "no-regression@95"]) == 0
    err = capsys.readouterr().err
    assert "a\\x0aFORGED: passed" in err and "\nFORGED" not in err


def bench_rows(arms: dict[str, list[str]], n: int = 30) -> list[dict[str, Any]]:
    return [row(f"t{i}", arm, True, benchmark=bench, item_sha256=f"h{i}")
            for bench, names in arms.items() for arm in names for i in range(n)]


def test_a_gate_takes_benchmark_slash_arm_in_every_run_and_a_bare_arm_when_unambiguous(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two benchmarks in BASE, one of them in CAND: the arm keeps its label ``x/a``; one
    benchmark: ``demo/a`` names its arm as ``a`` does."""
    two = write(tmp_path / "two.jsonl", bench_rows({"x": ["a"], "y": ["a"]}), meta=meta("x"))
    one_x = write(tmp_path / "x.jsonl", bench_rows({"x": ["a"]}), meta=meta("x"))
    for gate in ("x/a >= base - 0.5 @95", "a >= base - 0.5 @95"):
        assert main(["compare", str(two), str(one_x), "--gate", gate]) == 0, gate
        assert "x/a: " in capsys.readouterr().out
    demo = write(tmp_path / "demo.jsonl", bench_rows({"demo": ["a", "b"]}), meta=meta())
    for gate in ("demo/a >= base - 0.5 @95", "a >= base - 0.5 @95", "no-regression@95"):
        assert main(["compare", str(demo), str(demo), "--gate", gate]) == 0, gate
        assert "passed" in capsys.readouterr().err
    assert main(["compare", str(demo), str(demo), "--gate", "other/a >= base @95"]) == 1
    assert "no arm 'other/a' is in both runs; paired arms: a, b" in capsys.readouterr().err


def test_a_bare_gate_arm_two_benchmarks_share_is_refused_naming_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    two = write(tmp_path / "two.jsonl", bench_rows({"x": ["a"], "y": ["a"]}), meta=meta("x"))
    assert main(["compare", str(two), str(two), "--gate", "a >= base - 0.5 @95"]) == 1
    assert "'a' names an arm of several benchmarks: give one of x/a, y/a" in (
        capsys.readouterr().err)


def test_a_cand_arm_paired_twice_is_refused_at_the_arguments(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    demo = write(tmp_path / "demo.jsonl", bench_rows({"demo": ["a", "b"]}), meta=meta())
    assert main(["compare", str(demo), str(demo), "--pair", "a=b"]) == 2
    assert ("--pair: CAND's arm 'b' (benchmark 'demo') would meet 2 BASE arms: 'a' (by --pair), "
            "'b' (same name)") in capsys.readouterr().err
    assert main(["compare", str(demo), str(demo), "--pair", "a=b", "--pair", "b=a",
                 "--gate", "demo/b >= base - 0.5 @95"]) == 0  # a swap pairs each arm once
    assert "passed" in capsys.readouterr().err


def test_pair_takes_benchmark_slash_arm_for_one_benchmark(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write(tmp_path / "b.jsonl", bench_rows({"x": ["old"], "y": ["old"]}), meta=meta("x"))
    cand = write(tmp_path / "c.jsonl", bench_rows({"x": ["new"], "y": ["old"]}), meta=meta("x"))
    for pair in ("x/old=x/new", "x/old=new", "old=x/new"):
        status, data, _ = compare(capsys, str(base), str(cand), "--pair", pair)
        assert status == 0, pair
        assert sorted(a["label"] for a in data["arms"]) == ["x/new", "y/old"], pair
    assert main(["compare", str(base), str(cand), "--pair", "y/old=new"]) == 2
    assert "--pair y/old=new: CAND has no arm 'new' in benchmark 'y' (its arms: x/new, y/old)" in (
        capsys.readouterr().err)


def test_an_output_that_is_an_input_by_any_name_is_refused_and_nothing_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = run_file(tmp_path / "a.jsonl", {"t0": True, "t1": False})
    b = run_file(tmp_path / "b.jsonl", {"t0": False, "t1": False}, run_id="r2")
    (tmp_path / "link.jsonl").symlink_to(b)
    os.link(a, tmp_path / "hard.jsonl")
    before = {p: p.read_bytes() for p in (a, b)}
    for out, named in ((a, a), (b, b), (tmp_path / "link.jsonl", b), (tmp_path / "hard.jsonl", a)):
        assert main(["compare", str(a), str(b), "--format", "json", "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"-o {out}: that is the results file {named}, an input" in err, err
        assert {p: p.read_bytes() for p in (a, b)} == before
    assert main(["compare", "--base", str(a), "--cand", str(b), str(b), "-o", str(b)]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl", "b.jsonl", "hard.jsonl",
                                                          "link.jsonl"]


def test_an_output_that_a_live_run_owns_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The lock a sweep's controller takes on its results file (``store.owner``), held here."""
    from pytest_echo_bench.store.owner import Ownership

    a = run_file(tmp_path / "a.jsonl", {"t0": True})
    live = run_file(tmp_path / "live.jsonl", {"t0": True}, run_id="r3")
    before = live.read_bytes()
    run = Ownership(live)
    run.acquire()
    try:
        assert main(["compare", str(a), str(a), "-o", str(live)]) == 2
        err = capsys.readouterr().err
        assert f"{live} is in use by a run (pid {os.getpid()} on " in err, err
        assert "then run echo-bench compare again, or write to another file" in err
        assert live.read_bytes() == before
    finally:
        run.release()
    out = tmp_path / "out.txt"
    assert main(["compare", str(a), str(a), "-o", str(out)]) == 0
    assert "paired items" in out.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl", "live.jsonl", "out.txt"]


@pytest.mark.parametrize(("level", "shown"), [("99.6", "99.6%"), ("99.95", "99.95%"),
                                              ("99.5", "99.5%"), ("95", "95%")])
def test_a_gate_names_its_level_as_written(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           level: str, shown: str) -> None:
    """``:.0%`` made every level from 99.5 on "100%"."""
    demo = write(tmp_path / "demo.jsonl", bench_rows({"demo": ["a", "b"]}), meta=meta())
    assert main(["compare", str(demo), str(demo), "--gate", f"a >= base - 0.5 @{level}",
                 "--gate", f"no-regression@{level}"]) == 0
    err = capsys.readouterr().err
    assert f"(a - base {shown} CI [" in err, err
    assert f" CI ({shown} over 2 arms) [" in err and "100" not in err, err


def test_bonferroni_levels_keep_the_digits_that_tell_them_from_100(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    demo = write(tmp_path / "demo.jsonl", bench_rows({"demo": ["a", "b"]}), meta=meta())
    assert main(["compare", str(demo), str(demo), "--gate", "no-regression@99.99"]) == 0
    assert "b: passed (CAND - BASE 99.995% CI (99.99% over 2 arms) [" in capsys.readouterr().err
