"""The decide figures are the same in every output: the stop marker, the summary (while
running and at the end), the end-of-run lines, the progress page (the run's, live and at the
end, and ``echo-bench progress`` on the file) and every report format (text, markdown, JSON,
CSV, HTML), for a sweep that stopped once decided and for one that ran to the end; each says
what the fixed-n figures are worth."""

from __future__ import annotations

import csv
import html
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import Sweep, make_spec
from pytest_echo_bench.cli.main import main

CLEAR = "  strong: {provider: sim, accuracy: 1.0}\n  weak: {provider: sim, accuracy: 0.3}"
EQUAL = (
    "  left: {provider: sim, accuracy: 0.7, seed: 1}\n  right: {provider: sim, accuracy: 0.7, "
    "seed: 2}"
)
# After every item the run's page and summary are copied aside: what a reader saw while it ran.
SNAPSHOTS = """
import pathlib
def pytest_runtest_logfinish(nodeid, location):
    here = pathlib.Path(__file__).parent
    shots = here / "shots"
    shots.mkdir(exist_ok=True)
    n = len(list(shots.glob("*.html")))
    for name, ext in (("page.html", "html"), ("results.jsonl.summary.json", "json")):
        if (here / name).exists():
            (shots / f"{n:04d}.{ext}").write_bytes((here / name).read_bytes())
"""
EARLY_NOTE = "this sweep stopped once these comparisons were decided"
END_NOTE = "this sweep ran to the end: the fixed-n paired comparison is valid"
RUNNING_NOTE = "this sweep is running: these anytime-valid figures hold at every look"


def _spec(n: int, arms: str, decide: str = "") -> str:
    items = "\n".join(
        f'    - {{id: q{i}, input: "2+2=? ({i})", target: "4", subtask: s{i % 4}}}'
        for i in range(n)
    )
    return (
        f"benchmark: demo\ndataset:\n  loader: inline\n  items:\n{items}\nscorer: "
        f"exact\narms:\n{arms}\n{decide}"
    )


def _cells(f: dict[str, Any]) -> list[str]:
    """A pair's row as every table must show it, formatted here, apart from the code under test."""
    lo, hi = f["ci"]
    verdict = f["verdict"] + (f" ({f['note']})" if f.get("note") else "")
    return [
        f["benchmark"],
        f["a"],
        f["b"],
        f["state"],
        str(f["n"]),
        "-" if f["decided_at"] is None else str(f["decided_at"]),
        "-" if f["diff"] is None else f"{f['diff']:+.3f}",
        f"[{lo:+.3f}, {hi:+.3f}]",
        f"{f['p_anytime']:#.4g}",
        f"{f['p_holm']:#.4g}",
        verdict,
    ]


def _line(f: dict[str, Any]) -> str:
    at = "" if f["decided_at"] is None else f", decided at {f['decided_at']} items"
    return (
        f"decide {f['a']} vs {f['b']}: {f['verdict']}{at}; at {f['n']} items anytime-valid p "
        f"{f['p_anytime']:.3g} "
        f"(Holm {f['p_holm']:.3g}), 95% interval of {f['a']} - {f['b']} [{f['ci'][0]:+.3f}, "
        f"{f['ci'][1]:+.3f}]"
    )


def _glob(text: str) -> str:
    """``text`` matched literally by fnmatch_lines (an interval's
    brackets are a character class there)."""
    return re.sub(r"([\[\]*?])", r"[\1]", text)


def _html_cells(page: str, section: str) -> list[list[str]]:
    """The rows of the table inside the element with id ``section``, each cell's text."""
    start = page.index(f'id="{section}"')
    body = page[start:page.index("</section>", start)]
    return [[html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
            for row in re.findall(r"<tr>(.*?)</tr>", body) if "<td" in row]


def _text_rows(out: str, title: str) -> list[list[str]]:
    block = out[out.index(title):].split("\n\n", 1)[0].splitlines()
    return [re.split(r"\s{2,}", line.strip()) for line in block[2:] if line.startswith("demo ")]


def _markdown_rows(out: str) -> list[list[str]]:
    block = out[out.index("### anytime-valid comparison"):].split("\n\n", 2)[1].splitlines()
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in block[2:]]


def _report(capsys: pytest.CaptureFixture[str], results: Path, fmt: str) -> str:
    capsys.readouterr()
    assert main(["report", str(results), "--format", fmt]) == 0
    return capsys.readouterr().out


def _csv_pairs(text: str) -> list[dict[str, str]]:
    return [row for row in csv.DictReader(io.StringIO(text)) if row["kind"] == "decide"]


def _check_csv(
    rows: list[dict[str, str]], pairs: list[dict[str, Any]], seq: dict[str, Any]
) -> None:
    assert len(rows) == len(pairs)
    for row, f in zip(rows, pairs, strict=True):
        assert (
            row["benchmark"],
            row["a"],
            row["b"],
            row["state"],
            row["direction"],
            row["verdict"],
        ) == (f["benchmark"], f["a"], f["b"], f["state"], f["direction"], f["verdict"])
        assert int(row["n"]) == f["n"] and row["decided_at"] == (
            "" if f["decided_at"] is None else str(f["decided_at"])
        )
        numbers = {
            "p_anytime": f["p_anytime"],
            "p_holm": f["p_holm"],
            "anytime_ci_lo": f["ci"][0],
            "anytime_ci_hi": f["ci"][1],
            "alpha": f["alpha"],
            "margin": f["margin"],
            "diff": f["diff"],
        }
        assert {k: float(row[k]) for k in numbers} == numbers  # the numbers themselves, not rounded
        assert (row["collection"], row["fixed_n_valid"]) == (
            seq["collection"],
            str(seq["fixed_n_valid"]),
        )


def _every_format(capsys: pytest.CaptureFixture[str], sweep: Sweep, pairs: list[dict[str, Any]],
                  seq: dict[str, Any], note: str) -> None:
    """Every report format and the pages show ``pairs`` as the report's
    JSON gives them, with ``note``."""
    expected = [_cells(f) for f in pairs]
    text = _report(capsys, sweep.out, "table")
    assert _text_rows(text, "anytime-valid comparison (stop") == expected and note in text
    markdown = _report(capsys, sweep.out, "markdown")
    assert [
        r[:-1] + [r[-1].replace("\\|", "|")] for r in _markdown_rows(markdown)
    ] == expected and note in markdown
    _check_csv(_csv_pairs(_report(capsys, sweep.out, "csv")), pairs, seq)
    report_page = _report(capsys, sweep.out, "html")
    assert _html_cells(report_page, "sequential") == expected and html.escape(note) in report_page
    assert f'data-collection="{seq["collection"]}"' in report_page
    run_page = (sweep.pytester.path / "page.html").read_text()
    assert _html_cells(run_page, "decide-figures") == expected and html.escape(note) in run_page
    capsys.readouterr()
    assert main(["progress", str(sweep.out), "-o", str(sweep.pytester.path / "replayed.html")]) == 0
    replayed = (sweep.pytester.path / "replayed.html").read_text()
    assert _html_cells(replayed, "decide-figures") == expected and html.escape(note) in replayed


def _snapshots(sweep: Sweep) -> list[tuple[str, dict[str, Any]]]:
    shots = sorted((sweep.pytester.path / "shots").glob("*.html"))
    return [
        (p.read_text(), json.loads(p.with_suffix(".json").read_text()))
        for p in shots
        if p.with_suffix(".json").exists()
    ]


def _check_live(sweep: Sweep, last: str, items: int) -> None:
    """While the sweep ran, the page showed what the summary said at that moment, as
    running, each item's look as it came; after the last item (before the end's own page)
    it said ``last``, at ``items``."""
    shots = _snapshots(sweep)
    running = [
        (page, s)
        for page, s in shots
        if s["decide"]["collection"] == "running" and s["decide"]["pairs"][0]["n"]
    ]
    assert len(running) >= 5
    for page, summary in running:
        assert _html_cells(page, "decide-figures") == [
            _cells(f) for f in summary["decide"]["pairs"]
        ]
        assert (
            html.escape(RUNNING_NOTE) in page
            and summary["partial"]
            and not summary["decide"]["fixed_n_valid"]
        )
    counts = [s["decide"]["pairs"][0]["n"] for _, s in running]
    assert counts == sorted(counts) and counts[-1] > counts[0]  # the figures moved as items came in
    page, summary = shots[-1]
    assert summary["decide"]["collection"] == last and summary["decide"]["pairs"][0]["n"] == items
    assert _html_cells(page, "decide-figures") == [_cells(f) for f in summary["decide"]["pairs"]]


@pytest.fixture
def watched(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    # the page after every item
    monkeypatch.setattr("pytest_echo_bench.plugin.live.FILE_EVERY_S", 0.0)
    # each page with the newest look
    monkeypatch.setattr("pytest_echo_bench.plugin.deciding.LIVE_SHARE", 0)
    pytester.makeconftest(SNAPSHOTS)
    return pytester


def test_a_sweep_that_stopped_once_decided_shows_one_set_of_anytime_valid_figures_everywhere(
        watched: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]) -> None:
    make_spec(watched, _spec(120, CLEAR))
    result, _, rows = sweep.run(
        "--bench-stop-when-decided", "strong,weak", "--bench-html", str(watched.path / "page.html")
    )
    assert result.ret == 0 and 0 < len(rows) < 240
    marker = json.loads(Path(f"{sweep.out}.stop.json").read_text())
    summary = json.loads(Path(f"{sweep.out}.summary.json").read_text())
    seq = json.loads(_report(capsys, sweep.out, "json"))["sequential"]
    (pair,) = seq["pairs"]
    # One set of figures: the marker's (at the decision), the summary's and
    # the report's replay of the file.
    assert marker["pairs"] == summary["decide"]["pairs"] == seq["pairs"]
    assert (
        summary["decide"] == seq
        and seq["collection"] == "stopped-when-decided"
        and not seq["fixed_n_valid"]
    )
    assert (pair["state"], pair["direction"], pair["alpha"], pair["margin"]) == (
        "decided",
        "a-better",
        0.05,
        0.0,
    )
    assert (
        pair["decided_at"] == pair["n"] == len(rows) // 2
        and pair["p_holm"] <= 0.05 < 1
        and pair["ci"][0] > 0
    )
    # Which way, at how many items, with the interval, and what the fixed-n figures are worth.
    result.stdout.fnmatch_lines(
        [f"*{_glob(_line(pair))}", f"*{EARLY_NOTE}*not (optional stopping)"]
    )
    _every_format(capsys, sweep, seq["pairs"], seq, EARLY_NOTE)
    _check_live(sweep, "stopped-when-decided", pair["decided_at"])
    # The fixed-n figures of the decided pair are marked, in each format that shows them.
    text = _report(capsys, sweep.out, "table")
    assert "not valid for strong vs weak: the sweep stopped once they were decided" in text
    (fixed,) = json.loads(_report(capsys, sweep.out, "json"))["pairs"]
    assert fixed["fixed_n_valid"] is False
    page = _report(capsys, sweep.out, "html")
    # both cells of the pair
    assert page.count('class="pair invalid"') == 2 and 'id="fixed-n-not-valid"' in page


def test_a_sweep_that_ran_to_the_end_shows_both_the_fixed_n_and_the_anytime_valid_figures(
        watched: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]) -> None:
    make_spec(watched, _spec(40, EQUAL, "decide: {pairs: [[left, right]], alpha: 0.05}\n"))
    result, _, rows = sweep.run("--bench-html", str(watched.path / "page.html"))
    assert result.ret == 0 and len(rows) == 80 and not Path(f"{sweep.out}.stop.json").exists()
    summary = json.loads(Path(f"{sweep.out}.summary.json").read_text())
    report = json.loads(_report(capsys, sweep.out, "json"))
    seq = report["sequential"]
    assert summary["decide"] == seq and seq["collection"] == "ran-to-end" and seq["fixed_n_valid"]
    (pair,) = seq["pairs"]
    assert (pair["state"], pair["direction"], pair["decided_at"], pair["n"]) == (
        "undecided",
        "none",
        None,
        40,
    )
    result.stdout.fnmatch_lines([f"*{_glob(_line(pair))}", f"*{END_NOTE}*"])
    _every_format(capsys, sweep, seq["pairs"], seq, END_NOTE)
    _check_live(sweep, "running", 40)
    # The fixed-n comparison stands, unmarked.
    (fixed,) = report["pairs"]
    assert "fixed_n_valid" not in fixed and fixed["p_value"] is not None
    assert "not valid" not in _report(capsys, sweep.out, "table")
    assert 'class="pair invalid"' not in _report(capsys, sweep.out, "html")


def test_a_sweep_stopped_by_its_quota_before_a_decision_says_so_and_keeps_the_fixed_n_figures(
        pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]) -> None:
    arms = CLEAR.replace("accuracy: 0.3}", "accuracy: 0.3, faults: {exhaustion_after: 6}}")
    make_spec(pytester, _spec(120, arms))
    result, _, _ = sweep.run("--bench-stop-when-decided", "strong,weak")
    assert result.ret == 2
    seq = json.loads(_report(capsys, sweep.out, "json"))["sequential"]
    assert (seq["collection"], seq["fixed_n_valid"], seq["stop"]) == (
        "stopped-before-end",
        True,
        "exhausted",
    )
    assert json.loads(Path(f"{sweep.out}.summary.json").read_text())["decide"] == seq
    out = _report(capsys, sweep.out, "table")
    assert (
        "this sweep stopped before its end (exhausted), not on its decision" in out
        and "not valid for" not in out
    )
    result.stdout.fnmatch_lines(
        ["*this sweep stopped before its end (exhausted), not on its decision*"]
    )


def test_a_running_sweep_redraws_its_figures_only_as_often_as_they_are_cheap(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The live summary and page take figures at most every LIVE_SHARE times their cost; each says
    its items, so a stale one is still true; the stop and the end always take them fresh."""
    from pytest_echo_bench.analysis.decide.monitor import Plan
    from pytest_echo_bench.plugin.deciding import Deciding

    results = tmp_path / "r.jsonl"
    meta = {
        "_meta": True,
        "benchmark": "demo",
        "benchmarks": {"demo": {}},
        "arms": {"demo": ["a", "b"]},
    }
    results.write_text(json.dumps(meta) + "\n")
    deciding = Deciding(Plan((("demo", "a", "b"),)), {})
    deciding.start(results, resumed=False)
    # never again while running
    monkeypatch.setattr("pytest_echo_bench.plugin.deciding.LIVE_SHARE", 10**9)
    first = deciding.sequential(None, running=True).pairs[0]
    with results.open("a") as f:
        for t in range(5):
            f.writelines(
                json.dumps({"task_id": f"q{t}", "arm": arm, "passed": arm == "a"}) + "\n"
                for arm in "ab"
            )
    assert deciding.feed is not None and deciding.feed.update()
    # stale, and says so
    assert deciding.sequential(None, running=True).pairs[0] == first and first.n == 0
    fresh = deciding.sequential(None, running=False).pairs[0]
    assert (
        fresh.n == 5
        and fresh.diff == 1.0
        and deciding.lines(None)[0].startswith("decide a vs b: undecided; at 5 items")
    )

