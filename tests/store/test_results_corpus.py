"""Every results file ever written still reads: the corpus in ``tests/data/results`` (the harness
this project grew from, and each older version of our own writer) goes through every reader.

Each reader is checked on its figures (rows, correct, unparseable and errors per arm; the items and
the pair the report and ``power`` see), not only on its exit status: a file read as some other
file (a benchmark lost, an arm split in two, a verdict misread) would still exit 0.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conftest import Sweep, read_rows
from pytest_echo_bench.cli.main import main
from pytest_echo_bench.plugin.live import end_table
from pytest_echo_bench.report.page.state import progress_state
from pytest_echo_bench.store.tally import FileTally

CORPUS = Path(__file__).parents[1] / "data" / "results"
SPEC = (CORPUS / "arith.yaml.txt").read_text()
PRICING = "pricing:\n  weak: {input: 0.8, output: 4.0}\n  strong: {input: 3.0, output: 15.0}\n"
PARENT_BBH_SPEC = """\
benchmark: bbh
dataset:
  loader: inline
  items: [{id: bbh/navigate/0, input: a, target: 'No'}]
scorer: exact
arms:
  haiku: {provider: sim}
  sonnet: {provider: sim}
  vote_escalate: {provider: sim}
"""

Counts = tuple[int, int, int, int]  # rows, correct rows, unparseable, errors
OURS = {("arith", "weak"): (6, 2, 0, 0), ("arith", "strong"): (6, 6, 0, 0)}
# The sweep graded by a judge (the simulator) that gave no grade on two items in three.
JUDGED = SPEC.replace("scorer: bbh\n", """judges:
  grader: {provider: sim, accuracy: 0.5, unparseable_rate: 1.0, seed: "g",
           template: 'Rating: [[8]]'}
scorer:
  name: model_graded
  judge: grader
  template: "Question: {question}\\nAnswer: {answer}\\nRate 1-10 as [[n]]."
  grade: {pattern: '\\[\\[(\\d+)\\]\\]', scale: [1, 10], pass_at: 7}
""") + PRICING + "  grader: {input: 2.5, output: 10.0}\n"


@dataclass(frozen=True)
class Case:
    """A corpus file and what every reader must make of it."""

    name: str
    arms: dict[tuple[str, str], Counts]  # (benchmark, arm) -> counts of its rows
    # the spec it was written with; None: the parent harness's, no spec of ours
    spec: str | None = SPEC
    epochs: int = 1
    resumed: int | None = 0  # rows a resume adds; None: the resume is refused
    refusal: str = (
        "*--bench-resume*: the file has *, as files of the harness this project grew from do*Run "
        "the sweep into a new file*"
    )
    # (benchmark, arm) -> its unjudged rows (of ``arms``' rows: out of n and the pass rate)
    unjudged: dict[tuple[str, str], int] = field(default_factory=dict)

    def graded(self, key: tuple[str, str]) -> int:
        """The rows of ``key`` a pass rate is of: every row but the unjudged ones."""
        return self.arms[key][0] - self.unjudged.get(key, 0)


CASES = [
    Case(
        "parent_no_meta",
        {("", "haiku"): (5, 2, 1, 1), ("", "sonnet"): (5, 4, 0, 0)},
        spec=None,
        resumed=None,
    ),
    Case(
        "parent_bbh_sweep",
        {
            ("bbh", "haiku"): (6, 3, 1, 0),
            ("bbh", "sonnet"): (6, 5, 0, 0),
            ("bbh", "vote_escalate"): (6, 4, 0, 1),
        },
        spec=None,
        resumed=None,
    ),
    Case("first_format", OURS),
    Case("merged_first", OURS),
    Case("costs", OURS, SPEC + PRICING),
    Case("rootdir_parts", OURS, SPEC + PRICING),
    Case(
        "epochs",
        {("arith", "weak"): (12, 5, 0, 0), ("arith", "strong"): (12, 12, 0, 0)},
        SPEC + PRICING + "epochs: 2\n",
        epochs=2,
    ),
    Case(
        "shard_part",
        {("arith", "weak"): (2, 0, 0, 0), ("arith", "strong"): (2, 2, 0, 0)},
        SPEC + PRICING,
    ),
    Case("merged_shards", OURS, SPEC + PRICING),
    Case("decide_plan", OURS, SPEC + PRICING),
    Case("charged", OURS, SPEC + PRICING + "budget_unpriced: allow\n"),
    Case(
        "run_end",
        {("arith", "weak"): (4, 1, 0, 0), ("arith", "strong"): (3, 3, 0, 0)},
        SPEC + PRICING,
        resumed=5,
    ),
    Case("regraded", OURS, SPEC + PRICING),
    Case(
        "judged",
        {("arith", "weak"): (6, 2, 0, 0), ("arith", "strong"): (6, 2, 0, 0)},
        JUDGED,
        unjudged={("arith", "weak"): 4, ("arith", "strong"): 4},
    ),
    # Rows and a meta line from Inspect logs: a fingerprint of the logs', not of a spec, so a resume
    # with the spec is a fingerprint mismatch.
    Case(
        "imported",
        OURS,
        resumed=None,
        refusal="*--bench-resume*: benchmark 'arith' was recorded with fingerprint*",
    ),
]
IDS = [case.name for case in CASES]


def test_the_corpus_holds_every_file_and_only_those() -> None:
    assert sorted(p.stem for p in CORPUS.glob("*.jsonl")) == sorted(IDS)


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory to run the command in, holding nothing but what a test puts there."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def copy(case: Case, into: Path) -> Path:
    """The corpus file, copied: a reader that wrote beside it (a torn-tail repair, a
    marker) would change the corpus."""
    path = into / f"{case.name}.jsonl"
    shutil.copyfile(CORPUS / path.name, path)
    return path


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def report_figures(capsys: pytest.CaptureFixture[str], *paths: Path) -> dict[str, Any]:
    status, out, err = cli(capsys, "report", "--format", "json", *map(str, paths))
    assert status == 0, err
    return dict(json.loads(out))


def assert_report(case: Case, data: dict[str, Any]) -> None:
    """The report's arms are the case's, each with its items, correct
    items (or samples) and verdicts."""
    arms = {(a["benchmark"], a["arm"]): a for a in data["arms"].values()}
    assert set(arms) == set(case.arms)
    for key, (rows, correct, unparseable, errors) in case.arms.items():
        arm = arms[key]
        assert (arm["unparseable"], arm["errors"]) == (unparseable, errors), key
        assert arm["unjudged"] == case.unjudged.get(key, 0), key
        if case.epochs == 1:
            assert (arm["n"], arm["correct"]) == (case.graded(key), correct), key
            assert arm["pass_rate"] == pytest.approx(correct / case.graded(key))
        else:  # an item is its epochs' samples: the report counts items and samples apart
            assert (arm["n"], arm["samples"], arm["correct_samples"]) == (
                rows // case.epochs,
                rows,
                correct,
            ), key


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_report_in_every_format(case: Case, here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = copy(case, here)
    assert_report(case, report_figures(capsys, path))
    status, table, err = cli(capsys, "report", str(path))
    assert status == 0, err
    for (benchmark, arm), (_, correct, _, _) in case.arms.items():
        # benchmark, arm, n, correct, pass rate: the row of the pass rates table
        n = case.graded((benchmark, arm))
        if case.epochs == 1:
            assert re.search(
                rf"^{re.escape(benchmark)}\s+{arm}\s+{n}\s+{correct}\s+{correct / n:.3f}\s",
                table,
                re.M,
            )
    status, markdown, err = cli(capsys, "report", "--format", "markdown", str(path))
    assert status == 0 and all(f"| {arm} |" in markdown for _, arm in case.arms), err
    status, csv, err = cli(capsys, "report", "--format", "csv", str(path))
    assert status == 0, err
    lines = [line.split(",") for line in csv.splitlines()]
    header, arm_lines = lines[0], [line for line in lines[1:] if line[0] == "arm"]
    by_arm = {
        (line[header.index("benchmark")], line[header.index("arm")]): line for line in arm_lines
    }
    assert set(by_arm) == set(case.arms)
    for key, (_, _, unparseable, errors) in case.arms.items():
        line = by_arm[key]
        assert (int(line[header.index("n")]), int(line[header.index("unparseable")]),
                int(line[header.index("errors")]), int(line[header.index("unjudged")])) == (
            case.graded(key) // case.epochs, unparseable, errors, case.unjudged.get(key, 0))
    status, html, err = cli(capsys, "report", "--format", "html", str(path))
    assert (
        status == 0
        and html.lstrip().lower().startswith("<!doctype html")
        and all(arm in html for _, arm in case.arms)
    ), err


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_merge(case: Case, here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file merged on its own holds the same rows: the merged file reads as the file did."""
    path = copy(case, here)
    status, _, err = cli(capsys, "merge", str(path), "-o", str(here / "merged.jsonl"))
    assert status == 0, err
    assert_report(case, report_figures(capsys, here / "merged.jsonl"))
    meta, _ = read_rows(here / "merged.jsonl")
    if case.name == "parent_bbh_sweep":  # the list of arms is written as today's object
        assert meta is not None and meta["arms"] == {"bbh": ["haiku", "sonnet", "vote_escalate"]}


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_compare_with_itself(case: Case, here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file compared with itself: every arm paired over its graded items, nothing flipped."""
    path = copy(case, here)
    status, out, err = cli(capsys, "compare", str(path), str(path), "--format", "json")
    assert status == 0, err
    arms = {(arm["benchmark"], arm["base_arm"]): arm for arm in json.loads(out)["arms"]}
    assert set(arms) == set(case.arms)
    for key, arm in arms.items():
        assert arm["cand_arm"] == key[1] and (arm["regressed"], arm["fixed"]) == (0, 0), key
        assert arm["diff"] == 0 and arm["base_rate"] == arm["cand_rate"], key


# A judged sweep's scorer asks a model: regrade, which calls none, refuses it (its own test).
REGRADED = [c for c in CASES if c.spec is not None and not c.unjudged]


@pytest.mark.parametrize("case", REGRADED, ids=[c.name for c in REGRADED])
def test_regrade(case: Case, here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The scorer of today on the stored outputs gives the verdicts the file holds (the parent's
    rows hold no output: nothing to regrade)."""
    path = copy(case, here)
    (here / "arith.yaml").write_text(case.spec or "")
    status, out, err = cli(
        capsys, "regrade", str(path), "--spec", "arith.yaml", "-o", str(here / "regraded.jsonl")
    )
    assert status == 0, err
    assert ": 0 verdicts changed" in out
    assert_report(case, report_figures(capsys, here / "regraded.jsonl"))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_export(case: Case, here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One Inspect log per benchmark and arm, a sample per row, the correct ones
    scored C, the errors unscored, the unjudged ones Inspect's unscored score (NaN)."""
    path = copy(case, here)
    if case.spec is not None:
        (here / "arith.yaml").write_text(case.spec)
    status, _, err = cli(capsys, "export", str(path), "-o", str(here / "logs"))
    assert status == 0, err
    found = {}
    for log in (here / "logs").glob("*.json"):
        data = json.loads(log.read_text())
        # an error: none
        scores = [
            (s.get("scores") or {}).get("echo_bench", {}).get("value") for s in data["samples"]
        ]
        found[data["eval"]["task"], data["eval"]["model"]] = (
            len(scores),
            scores.count("C"),
            scores.count(None),
            sum(isinstance(v, float) and v != v for v in scores),  # NaN: unscored
        )
    assert found == {
        key: (rows, correct, errors, case.unjudged.get(key, 0))
        for key, (rows, correct, _, errors) in case.arms.items()
    }


# The judged sweep's judge gave both arms the same grade on every item it graded: a pilot with no
# discordant pair, which power refuses to plan from (tests/cli covers that refusal).
PILOTS = [c for c in CASES if c.name != "judged"]


@pytest.mark.parametrize("case", PILOTS, ids=[c.name for c in PILOTS])
def test_power_reads_the_pair_the_report_sees(
    case: Case, here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = copy(case, here)
    pair = report_figures(capsys, path)["pairs"][0]  # the first pair of the first benchmark
    status, out, err = cli(capsys, "power", str(path), "--pair", f"{pair['a']},{pair['b']}")
    assert status == 0, err
    pilot = re.search(r"pilot .*: (\S+) - (\S+) = ([-+]?[\d.]+) on (\d+) items", out)
    assert pilot is not None, out
    assert (pilot[1], pilot[2], int(pilot[4])) == (pair["a"], pair["b"], pair["n"])
    assert float(pilot[3]) == pytest.approx(pair["diff"], abs=1e-4)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_progress_page_and_end_table(
    case: Case, here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = copy(case, here)
    status, _, err = cli(capsys, "progress", str(path), "-o", str(here / "page.html"))
    assert status == 0 and (here / "page.html").stat().st_size > 0, err
    state = progress_state(path)
    assert {arm: (a.done, a.correct, a.unparseable, a.errors) for arm, a in state.arms.items()} == \
        {arm: counts for (_, arm), counts in case.arms.items()}
    assert {arm: a.unjudged for arm, a in state.arms.items()} == {
        arm: case.unjudged.get((b, arm), 0) for b, arm in case.arms}
    tally = FileTally().update(path)
    assert {
        key: (t.items, t.correct, t.unparseable, t.errors) for key, t in tally.items()
    } == case.arms
    assert {key: t.unjudged for key, t in tally.items()} == {
        key: case.unjudged.get(key, 0) for key in case.arms}
    header, *lines = end_table(path, {})
    assert len(lines) == len(case.arms) + bool(case.unjudged)  # and the note on unjudged rows
    assert header.split()[:2] == ["benchmark", "arm"]


def seconds_per_item(path: Path, arm: str) -> float:
    walls = [
        r["wall_seconds"] for r in read_rows(path)[1] if r["arm"] == arm and not r.get("cache_hits")
    ]
    return sum(walls) / len(walls)


@pytest.mark.parametrize("case", [c for c in CASES if c.name != "parent_no_meta"],
                         ids=[c.name for c in CASES if c.name != "parent_no_meta"])
def test_estimate_takes_its_seconds_from_the_file(
    case: Case, here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``estimate --results`` learns each arm's seconds an item from the file (the parent's file
    without a meta line names no benchmark: nothing in it applies to an estimate)."""
    path = copy(case, here)
    (here / "spec.yaml").write_text(case.spec or PARENT_BBH_SPEC)
    status, out, err = cli(
        capsys, "estimate", "spec.yaml", "--format", "json", "--results", str(path)
    )
    assert status == 0, err
    arms = json.loads(out)["arms"]
    for _, arm in case.arms:
        assert arms[arm]["seconds_per_item"] == pytest.approx(seconds_per_item(path, arm), abs=1e-6)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_resume(case: Case, sweep: Sweep) -> None:
    """Our files resume (adding only what they miss); the parent's, which record no fingerprint to
    check the spec against, are refused as a usage error (exit status 4) saying why and what to do,
    as an imported file is (its fingerprint is its logs')."""
    path = copy(case, sweep.pytester.path)
    sweep.out = path
    before = len(read_rows(path)[1])
    (sweep.pytester.path / "arith.yaml").write_text(case.spec or SPEC)
    result, _, rows = sweep.run("--bench-resume", str(path), "arith.yaml")
    if case.resumed is None:
        assert result.ret == pytest.ExitCode.USAGE_ERROR and len(rows) == before
        result.stderr.fnmatch_lines([case.refusal])
        # refused before anything was changed
        assert path.read_bytes() == (CORPUS / path.name).read_bytes()
    else:
        assert result.ret == 0, result.stdout.str()
        assert len(rows) == before + case.resumed


def test_files_of_every_era_read_and_merge_together(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same sweep written by eight versions of the writer merges into one (the fingerprint never
    changed), each key once and no verdict in conflict; a report reads
    the parent's files beside ours."""
    ours = [
        copy(c, here)
        for c in CASES
        if c.spec is not None and c.name not in ("epochs", "shard_part", "imported", "judged")
    ]
    status, out, err = cli(capsys, "merge", *map(str, ours), "-o", str(here / "all.jsonl"))
    assert status == 0, err
    assert f"merged {len(ours)} files: 12 rows" in out and ", 0 conflicts" in out
    assert_report(Case("all", OURS), report_figures(capsys, here / "all.jsonl"))
    parents = [copy(c, here) for c in CASES if c.spec is None]
    every = {key: counts for c in CASES if c.spec is None for key, counts in c.arms.items()}
    assert_report(
        Case("every", {**OURS, **every}), report_figures(capsys, here / "all.jsonl", *parents)
    )
