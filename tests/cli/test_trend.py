"""``echo-bench trend``: runs in time order, each arm's rate with its Wilson interval, the paired
test against the run before (checked against independent code: the exact binomial test, Holm and
Wilson written out here), shards of one run grouped, hostile inputs refused naming the file,
and the HTML page in a real browser."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import subprocess
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from results_files import meta, row, write

from pytest_echo_bench.cli.main import main

CHROMIUM = Path("/usr/bin/chromium")


def binomial_p(k: int, n: int) -> float:
    """The exact two-sided binomial test of ``k`` of ``n`` at one half, from its definition: the
    probability of an outcome no likelier than ``k`` (for one half, twice the smaller tail)."""
    low = min(k, n - k)
    tail = sum(math.comb(n, i) for i in range(low + 1))
    return min(1.0, float(Fraction(2 * tail, 2 ** n)))
ATTACK = '<script>document.title="pwned"</script><b id="pwned-b">b</b>'
Z95 = 1.959963984540054


def run_file(path: Path, run_id: str, created: str, verdicts: dict[str, Sequence[bool]],
             benchmark: str = "demo", **meta_fields: Any) -> Path:
    """A results file of run ``run_id``: per arm, item ``t{i}`` right when ``verdicts[arm][i]``."""
    rows = [row(f"t{i}", arm, ok, benchmark=benchmark, run_id=run_id)
            for arm, oks in verdicts.items() for i, ok in enumerate(oks)]
    head = meta(benchmark, arms=list(verdicts), run_id=run_id, created_at=created, **meta_fields)
    return write(path, rows, meta=head)


def trend_json(capsys: pytest.CaptureFixture[str], *args: str | Path) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["trend", *map(str, args), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def wilson(k: float, n: int) -> tuple[float, float]:
    """Wilson's score interval written out from its formula (Wilson 1927)."""
    p = k / n
    centre = (p + Z95**2 / (2 * n)) / (1 + Z95**2 / n)
    half = Z95 / (1 + Z95**2 / n) * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def holm(ps: list[float]) -> list[float]:
    """Holm's step-down adjustment, by its definition: max over the smaller ones of (m - j) p."""
    m = len(ps)
    ranked = sorted(range(m), key=lambda i: ps[i])
    out = [0.0] * m
    for r, i in enumerate(ranked):
        out[i] = min(1.0, max((m - j) * ps[ranked[j]] for j in range(r + 1)))
    return out


def flips(n: int, worse: int, better: int, both: int) -> tuple[list[bool], list[bool]]:
    """Two runs of one arm over ``n`` items with exactly these discordant and concordant counts."""
    before = [True] * worse + [False] * better + [True] * both
    after = [False] * worse + [True] * better + [True] * both
    rest = n - len(before)
    return before + [False] * rest, after + [False] * rest


def test_known_flips_rates_and_holm_match_independent_code(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # strong: 30 items went right to wrong, 4 wrong to right (a real drop); weak: 6 and 5.
    s1, s2 = flips(200, 30, 4, 120)
    w1, w2 = flips(200, 6, 5, 60)
    run_file(tmp_path / "b.jsonl", "night2", "2026-03-02T02:00:00Z", {"strong": s2, "weak": w2})
    run_file(tmp_path / "a.jsonl", "night1", "2026-03-01T02:00:00Z", {"strong": s1, "weak": w1})

    found = trend_json(capsys, tmp_path)

    assert [r["run_id"] for r in found["runs"]] == ["night1", "night2"]
    ps = [binomial_p(4, 34), binomial_p(5, 11)]
    adjusted = holm(ps)
    for (arm, one, two), p, p_holm in zip((("strong", s1, s2), ("weak", w1, w2)), ps, adjusted,
                                          strict=True):
        first, second = found["arms"][arm]["runs"]
        assert first["pass_rate"] == pytest.approx(sum(one) / 200)
        assert (first["ci95_lo"], first["ci95_hi"]) == pytest.approx(wilson(sum(one), 200))
        assert second["n"] == 200 and second["paired"] == 200
        assert second["right_to_wrong"] == sum(a and not b for a, b in zip(one, two, strict=True))
        assert second["wrong_to_right"] == sum(b and not a for a, b in zip(one, two, strict=True))
        assert second["p"] == pytest.approx(p, rel=1e-9)
        assert second["p_holm"] == pytest.approx(p_holm, rel=1e-9)
        assert first["paired"] is None and first["changed"] is None
    assert found["arms"]["strong"]["runs"][1]["changed"] == "down"
    assert found["arms"]["weak"]["runs"][1]["changed"] == "no"


def main_json(*args: str | Path) -> dict[str, Any]:
    """``echo-bench trend ARGS --format json`` run in-process, its output read (capsys cannot serve
    a Hypothesis test: each example needs its own)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["trend", *map(str, args), "--format", "json"]) == 0
    return json.loads(out.getvalue())


@settings(max_examples=30, deadline=None, derandomize=True, database=None)
@given(st.lists(st.lists(st.tuples(st.booleans(), st.booleans(), st.booleans()), min_size=1,
                         max_size=40), min_size=1, max_size=3),
       st.lists(st.integers(0, 5), min_size=3, max_size=3))
def test_generated_pairs_of_runs(tmp_path_factory: pytest.TempPathFactory,
                                 arms: list[list[tuple[bool, bool, bool]]],
                                 missing: list[int]) -> None:
    """Per arm, items (right before, right after, kept after); the first ``missing`` items not
    kept are left out of the second run. The counts, p and Holm of the step agree with this test's
    exact binomial test and Holm; items one run lacks are never paired."""
    where = tmp_path_factory.mktemp("gen")
    before = {f"arm{k}": [b for b, _, _ in items] for k, items in enumerate(arms)}

    def present(k: int, i: int, kept: bool) -> bool:
        return kept or i >= missing[k]

    after = [row(f"t{i}", f"arm{k}", a, run_id="r2") for k, items in enumerate(arms)
             for i, (_, a, kept) in enumerate(items) if present(k, i, kept)]
    run_file(where / "one.jsonl", "r1", "2026-01-01T00:00:00+00:00", before)
    write(where / "two.jsonl", after,
          meta=meta(arms=list(before), run_id="r2", created_at="2026-01-02T00:00:00Z"))

    found = main_json(where)

    expected: dict[str, tuple[int, int, int]] = {}
    for k, items in enumerate(arms):
        pairs = [(b, a) for i, (b, a, kept) in enumerate(items) if present(k, i, kept)]
        if pairs:
            expected[f"arm{k}"] = (len(pairs), sum(b and not a for b, a in pairs),
                                   sum(a and not b for b, a in pairs))
    ps = [binomial_p(w, w + b) if w + b else 1.0 for _, w, b in expected.values()]
    adjusted = dict(zip(expected, holm(ps), strict=True))
    for arm, (n, worse, better) in expected.items():
        step = found["arms"][arm]["runs"][1]
        assert (step["paired"], step["right_to_wrong"], step["wrong_to_right"]) == (
            n, worse, better)
        assert step["p_holm"] == pytest.approx(adjusted[arm], rel=1e-9, abs=1e-300)
        assert 0 <= step["p"] <= step["p_holm"] <= 1
        assert found["arms"][arm]["runs"][1]["n"] == n
    for arm in set(before) - set(expected):
        assert found["arms"][arm]["runs"][1]["paired"] is None


def test_files_of_one_run_id_are_one_run_merged_as_report_merges_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Night 1 in two files of one run (a shard resumed into a second file, or a regraded copy):
    # t0..t9 in the first, t10..t19 in the second, and t0 again there (the newest row wins).
    night = tmp_path / "night1"
    night.mkdir()
    (night / "part").mkdir()
    run_file(night / "a.jsonl", "n1", "2026-03-01T02:00:00Z", {"x": [True] * 10})
    rows = [row(f"t{i}", "x", i % 2 == 0, run_id="n1") for i in range(10, 20)]
    rows.append(row("t0", "x", False, run_id="n1"))
    write(night / "part" / "b.jsonl", rows,
          meta=meta(arms=["x"], run_id="n1", created_at="2026-03-01T03:00:00Z"))
    run_file(tmp_path / "n2.jsonl", "n2", "2026-03-02T02:00:00Z", {"x": [True] * 20})

    found = trend_json(capsys, night, tmp_path / "n2.jsonl")

    assert [r["run_id"] for r in found["runs"]] == ["n1", "n2"]
    assert found["runs"][0]["created_at"] == "2026-03-01T02:00:00Z"  # the run began with its first
    assert len(found["runs"][0]["files"]) == 2
    first, second = found["arms"]["x"]["runs"]
    assert (first["n"], first["pass_rate"]) == (20, pytest.approx(14 / 20))
    assert (second["paired"], second["right_to_wrong"], second["wrong_to_right"]) == (20, 0, 6)


def test_runs_are_ordered_by_the_meta_date_not_by_name_or_argument_order(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 01:30+02:00 is 23:30 UTC of the day before: the oldest of the three.
    dates = {"a": "2026-05-02T00:00:00Z", "b": "2026-05-02T01:30:00+02:00",
             "c": "2026-05-01T23:45:00"}
    for name, date in dates.items():
        run_file(tmp_path / f"{name}.jsonl", f"run-{name}", date, {"x": [True, False]})
    found = trend_json(capsys, *(tmp_path / f"{n}.jsonl" for n in "cab"))
    assert [r["run_id"] for r in found["runs"]] == ["run-b", "run-c", "run-a"]


def test_an_item_whose_digest_changed_or_a_side_left_unjudged_is_not_paired(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The step pairs as ``echo-bench compare`` does: t0 asked something else in night 2 (its
    digest differs), t1 unjudged in night 2, t2..t5 paired; older rows without a digest pair."""
    one = [row(f"t{i}", "x", True, run_id="r1", item_sha256=f"h{i}") for i in range(6)]
    two = [row("t0", "x", False, run_id="r2", item_sha256="other"),
           row("t1", "x", status="unjudged", run_id="r2", item_sha256="h1"),
           *(row(f"t{i}", "x", i != 2, run_id="r2", item_sha256=f"h{i}") for i in range(2, 5)),
           row("t5", "x", False, run_id="r2")]
    write(tmp_path / "1.jsonl", one, meta=meta(arms=["x"], run_id="r1",
                                               created_at="2026-01-01T00:00:00Z"))
    write(tmp_path / "2.jsonl", two, meta=meta(arms=["x"], run_id="r2",
                                               created_at="2026-01-02T00:00:00Z"))
    second = trend_json(capsys, tmp_path)["arms"]["x"]["runs"][1]
    assert (second["paired"], second["right_to_wrong"], second["wrong_to_right"],
            second["item_changed"]) == (4, 2, 0, 1)
    assert second["n"] == 5  # the rate is the run's own: every graded item, t0 as well
    capsys.readouterr()
    assert main(["trend", str(tmp_path)]) == 0
    assert "item changed" in capsys.readouterr().out


def test_an_arm_whose_every_item_changed_is_a_step_counting_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No item is paired, yet the step is there: ten items changed, no p (nothing tested); the
    other arm's p is Holm-adjusted over the tested arm alone."""
    one = [row(f"t{i}", arm, True, run_id="r1", item_sha256=f"old{i}" if arm == "x" else "h")
           for arm in ("x", "y") for i in range(10)]
    two = [row(f"t{i}", arm, arm == "x" or i > 5, run_id="r2",
               item_sha256=f"new{i}" if arm == "x" else "h")
           for arm in ("x", "y") for i in range(10)]
    for n, rows in ((1, one), (2, two)):
        write(tmp_path / f"{n}.jsonl", rows, meta=meta(arms=["x", "y"], run_id=f"r{n}",
                                                       created_at=f"2026-01-0{n}T00:00:00Z"))
    arms = trend_json(capsys, tmp_path)["arms"]
    x, y = arms["x"]["runs"][1], arms["y"]["runs"][1]
    assert (x["paired"], x["item_changed"], x["p"], x["p_holm"], x["changed"]) == (
        0, 10, None, None, "no")
    assert y["p_holm"] == y["p"] == pytest.approx(binomial_p(0, 6))
    for fmt in ("text", "markdown", "csv", "html"):
        assert main(["trend", str(tmp_path), "--format", fmt]) == 0, fmt
        assert capsys.readouterr().out


def test_repeats_are_rated_per_item_and_paired_per_epoch(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 3 items x 2 epochs; run 1: t0 1/2, t1 2/2, t2 0/2; run 2: every sample right.
    one = [row(f"t{i}", "x", ok, run_id="r1", epoch=e)
           for i, oks in enumerate([(True, False), (True, True), (False, False)])
           for e, ok in enumerate(oks, 1)]
    two = [row(f"t{i}", "x", True, run_id="r2", epoch=e) for i in range(3) for e in (1, 2)]
    write(tmp_path / "1.jsonl", one, meta=meta(arms=["x"], epochs=2, run_id="r1",
                                               created_at="2026-01-01T00:00:00Z"))
    write(tmp_path / "2.jsonl", two, meta=meta(arms=["x"], epochs=2, run_id="r2",
                                               created_at="2026-01-02T00:00:00Z"))
    first, second = trend_json(capsys, tmp_path)["arms"]["x"]["runs"]
    assert first["n"] == 3 and first["pass_rate"] == pytest.approx(0.5)
    assert (first["ci95_lo"], first["ci95_hi"]) == pytest.approx(wilson(1.5, 3))
    assert (second["paired"], second["right_to_wrong"], second["wrong_to_right"]) == (6, 0, 3)
    # the same rate ``echo-bench report`` gives the run
    capsys.readouterr()
    assert main(["report", str(tmp_path / "1.jsonl"), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["arms"]["x"]["pass_rate"] == pytest.approx(0.5)


def test_a_shard_alone_is_a_partial_run_said_in_every_format(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shard = {"selection": {"args": [], "keyword": "", "markexpr": "", "shard": "1/4"},
             "shard_scheme": 2, "shard_items": 4}
    run_file(tmp_path / "s1.jsonl", "s1", "2026-01-01T00:00:00Z", {"x": [True] * 4}, **shard)
    run_file(tmp_path / "w.jsonl", "w", "2026-01-02T00:00:00Z", {"x": [True] * 4})
    found = trend_json(capsys, tmp_path)
    assert "missing 2/4, 3/4, 4/4" in found["runs"][0]["partial"]
    assert found["runs"][1]["partial"] is None
    for fmt in ("text", "markdown", "html"):
        assert main(["trend", str(tmp_path), "--format", fmt]) == 0
        assert "partial" in capsys.readouterr().out, fmt


@pytest.mark.parametrize(("lines", "said"), [
    ("", "no meta line"),
    (json.dumps(row("t0", "x")) + "\n", "no meta line"),
    (json.dumps(meta(arms=["x"], run_id="r")) + "\n", ":1: the meta line has no created_at"),
    (json.dumps(meta(arms=["x"], run_id="r", created_at="last tuesday")) + "\n",
     ":1: created_at 'last tuesday' is not an ISO 8601 date"),
    (json.dumps(meta(arms=["x"], run_id="r", created_at="2026-01-01T00:00:00Z")) + "\n{oops\n",
     ":2"),
])
def test_hostile_files_are_refused_naming_the_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], lines: str, said: str) -> None:
    good = run_file(tmp_path / "good.jsonl", "g", "2026-01-01T00:00:00Z", {"x": [True]})
    bad = tmp_path / "bad.jsonl"
    bad.write_text(lines)
    assert main(["trend", str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and said in err, err


def test_a_directory_without_results_and_paths_that_are_not_files(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("no results here")
    assert main(["trend", str(empty)]) == 2
    assert f"{empty}: no results file (*.jsonl) in this directory" in capsys.readouterr().err
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    assert main(["trend", str(fifo)]) == 2  # refused at once, never opened (it would wait)
    assert "fifo.jsonl" in capsys.readouterr().err
    assert main(["trend", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl" in capsys.readouterr().err


def test_a_name_too_long_to_examine_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    # found by tests/cli/test_cli_boundaries.py: stat raised ENAMETOOLONG out of argparse
    assert main(["trend", "9" * 5000]) == 2
    assert "cannot be examined" in capsys.readouterr().err


def test_untrusted_names_are_escaped_in_every_format(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for day in (1, 2):
        run_file(tmp_path / f"{day}.jsonl", f"=run{day}|\x1b[2J",
                 f"2026-01-0{day}T00:00:00Z", {ATTACK: [True, day == 1], "=HYPERLINK()": [True]})
    outs = {}
    for fmt in ("text", "markdown", "json", "csv", "html"):
        assert main(["trend", str(tmp_path), "--format", fmt]) == 0
        outs[fmt] = capsys.readouterr().out
        assert "\x1b" not in outs[fmt], fmt
    assert "<script" not in outs["html"] and "&lt;script&gt;" in outs["html"]
    assert "\n'=HYPERLINK()," in outs["csv"]  # a spreadsheet reads it as text, not a formula
    assert "=run1\\|" in outs["markdown"]  # the pipe does not split the cell


def test_a_line_feed_in_an_arm_or_run_id_draws_no_line_of_its_own(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for day in (1, 2):
        run_file(tmp_path / f"{day}.jsonl", f"r{day}\nFORGED run", f"2026-01-0{day}T00:00:00Z",
                 {"a\nFORGED arm": [True, day == 1]})
    for fmt in ("text", "markdown", "csv"):
        assert main(["trend", str(tmp_path), "--format", fmt]) == 0
        out = capsys.readouterr().out
        assert "a\\x0aFORGED arm" in out and "r1\\x0aFORGED run" in out, fmt
        assert not [x for x in out.splitlines() if x.startswith("FORGED")], fmt


def test_text_marks_the_changed_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one, two = flips(100, 0, 30, 40)
    run_file(tmp_path / "1.jsonl", "r1", "2026-01-01T00:00:00Z", {"x": one})
    run_file(tmp_path / "2.jsonl", "r2", "2026-01-02T00:00:00Z", {"x": two})
    assert main(["trend", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "2 run(s), 1 arm(s), 1 changed step(s)" in out
    line = next(x for x in out.splitlines() if x.startswith("x ") and " r2 " in x)
    assert re.search(r"\b100\s+0\s+30\b", line) and line.rstrip().endswith("up"), line


# ---------------------------------------------------------------- a real browser


def chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu",
           "--disable-dev-shm-usage", "--no-first-run", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=False)


def test_trend_page_in_a_real_browser(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium package: apt-get install chromium")
    runs = tmp_path / "runs"
    runs.mkdir()
    # four nights of three arms; "strong" drops on night 3, the attack-named arm only wobbles
    for night, drop in enumerate((0, 0, 40, 0), 1):
        strong = [i >= drop if night >= 3 else True for i in range(120)]
        strong = [ok and i % 5 != 0 for i, ok in enumerate(strong)]
        run_file(runs / f"n{night}.jsonl", f"night{night}", f"2026-04-0{night}T02:00:00Z",
                 {"strong": strong, "weak": [i % 2 == 0 for i in range(120)],
                  ATTACK: [(i + night) % 3 == 0 for i in range(120)]})
    capsys.readouterr()
    assert main(["trend", str(runs), "--format", "html"]) == 0
    page = tmp_path / "trend.html"
    page.write_text(capsys.readouterr().out)

    dumped = chromium(tmp_path / "profile-dom", "--dump-dom", page.as_uri())
    dom = dumped.stdout
    assert dumped.returncode == 0 and "</html>" in dom, dumped.stderr[-2000:]
    assert dom.count('class="trend-plot"') == 3 and dom.count("<svg") == 3
    assert dom.count('class="band"') == 3 and dom.count('class="rate"') == 3
    assert dom.count('class="run-point') == 12
    assert dom.count('class="run-point changed down"') == 1  # strong, night 3
    assert "<script" not in dom and '<b id="pwned-b"' not in dom
    title = re.search(r"<title>(.*?)</title>", dom, re.S)
    assert title is not None and "pwned" not in title.group(1)

    shot = tmp_path / "shot.png"
    taken = chromium(tmp_path / "profile-shot", f"--screenshot={shot}",
                     "--window-size=1200,2000", page.as_uri())
    assert shot.exists(), taken.stderr[-2000:]
    data = shot.read_bytes()
    # a blank page compresses to a few kilobytes; this one has three plots and tables
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 40_000, len(data)


CORPUS = Path(__file__).parents[1] / "data" / "results"


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.jsonl")), ids=lambda p: p.name)
def test_every_older_file_reads_with_the_rates_report_gives(
        path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each file of the corpus: trend's rate of each arm is ``report``'s; a file without a meta line
    (the first harness's) is refused, naming it, as undatable."""
    capsys.readouterr()
    status = main(["trend", str(path), "--format", "json"])
    out, err = capsys.readouterr()
    if status == 2:
        assert f"{path}: no meta line" in err
        return
    assert status == 0, err
    found = json.loads(out)
    assert main(["report", str(path), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)["arms"]
    for label, arm in found["arms"].items():
        (point,) = arm["runs"]
        assert point["pass_rate"] == pytest.approx(report[label]["pass_rate"]), label
        assert point["n"] == report[label]["n"], label


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(created=st.one_of(st.text(max_size=40), st.integers(), st.none(), st.floats(),
                         st.dates().map(str), st.datetimes().map(lambda d: d.isoformat())),
       run_id=st.one_of(st.text(max_size=20), st.none()))
def test_generated_meta_dates_and_ids_are_read_or_refused_naming_the_file(
        tmp_path_factory: pytest.TempPathFactory, created: object, run_id: object) -> None:
    where = tmp_path_factory.mktemp("dates")
    path = write(where / "run.jsonl", [row("t0", "x", True)],
                 meta=meta(arms=["x"], created_at=created, run_id=run_id))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = main(["trend", str(path)])
    assert status in (0, 2), err.getvalue()
    if status == 2:
        assert str(path) in err.getvalue() and "Traceback" not in err.getvalue()
