"""``echo-bench report``: the figures of results files in one format, and the gates judged on
them."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_echo_bench.analysis.epochs import REDUCERS
from pytest_echo_bench.analysis.gates import Anytime, Gate, parse_gate
from pytest_echo_bench.analysis.names import ArmNames
from pytest_echo_bench.cli.args import Command, input_file, say
from pytest_echo_bench.report.formats import FORMATS
from pytest_echo_bench.report.formats.text import paired_intervals

if TYPE_CHECKING:
    from pytest_echo_bench.report.figures import Report
    from pytest_echo_bench.results.ending import Collection
    from pytest_echo_bench.shards.coverage import Coverage


def _gate(text: str) -> Gate:
    try:
        return parse_gate(text, paired=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def arguments(r: argparse.ArgumentParser) -> None:
    r.add_argument("files", nargs="+", type=input_file)
    r.add_argument("--format", choices=FORMATS, default="table")
    r.add_argument("--oracle", metavar="ARM,ARM",
                   help="Arms of the oracle row, as ARM or BENCHMARK/ARM (default: all)")
    r.add_argument("--reduce", choices=REDUCERS, default="mean",
                   help="How the samples of an item recorded with epochs make its score: mean "
                        "(default; the share correct), majority (more than half correct) or "
                        "pass_at_k (any correct)")
    r.add_argument("--gate", metavar="RULE", action="append", default=[], type=_gate,
                   help="Exit 1 unless the rule holds, e.g. 'strong>=0.85', 'judge>=strong-0.02', "
                        "or on the paired interval 'judge >= strong - 0.02 @95' (repeatable)")
    r.add_argument("--labels", metavar="LABELS.jsonl", type=input_file,
                   help="People's labels, one {task_id, arm, label} a line: each judge's "
                        "agreement with them, its confusion matrix and mean bias")
    r.add_argument("--allow-partial", action="store_true",
                   help="Let --gate judge files missing some shards of their sweep (by default "
                        "such a gate fails)")


def handle(args: argparse.Namespace) -> int:
    from pytest_echo_bench.budget.spend import run_budget
    from pytest_echo_bench.report.figures import build_report, load_results
    from pytest_echo_bench.report.formats import render
    from pytest_echo_bench.report.labels import read_labels
    from pytest_echo_bench.results.read import paused_gc

    oracle = _oracle(args.oracle)
    results = load_results(args.files)
    # An empty table (and JSON saying complete) would read as a sweep.
    if not results.rows and not results.metas:
        raise ValueError(f"no results in {', '.join(map(str, args.files))}: no meta line and no "
                         "row (an empty file?)")
    budgets = [b for b in map(run_budget, args.files) if b is not None]
    labels = None if args.labels is None else (str(args.labels), read_labels(args.labels))
    with paused_gc():  # a million rows' figures make no cycle for a collection to find
        report = build_report(results, oracle, args.reduce, ended=_ended(args.files),
                              budgets=budgets, labels=labels)
    names = ArmNames({b.name: b.arms for b in report.benchmarks})
    gates = [gate.bind(names) for gate in args.gate]  # a misspelt or ambiguous name: exit 2
    say(render(report, args.format))
    return 1 if _judge(report, gates, args) else 0


def _oracle(text: str | None) -> list[str] | None:
    oracle = None if text is None else text.split(",")
    # "," must not read as "every arm".
    if oracle is not None and not all(a.strip() for a in oracle):
        raise ValueError(f"--oracle {text!r}: give arm names separated by commas, e.g. "
                         "demo/cheap_a,demo/cheap_b (leave --oracle out for every arm)")
    return oracle


def _judge(report: Report, gates: list[Gate], args: argparse.Namespace) -> int:
    """The gates that fail, each said on stderr; with a gate, a partial sweep fails too."""
    from pytest_echo_bench.report.formats.text import report_json

    arms = report_json(report)["arms"].items()
    rates = {label: arm["pass_rate"] for label, arm in arms if arm["n"]}
    intervals = paired_intervals(report)
    failed = _partial(report.coverage, args.allow_partial) if args.gate else 0
    anytime = _anytime(report)
    for gate in gates:
        ok, line = gate.check(rates, intervals, anytime)
        failed += not ok
        say(line, err=True)
    return failed


def _partial(cover: Coverage, allowed: bool) -> int:
    """A gate judges the whole sweep: a missing shard is a failure unless allowed."""
    if cover.complete:
        return 0
    said = "allowed on a partial sweep" if allowed else "FAILED: the sweep is incomplete"
    say(f"gates: {said} ({cover.describe()})"
        + ("" if allowed else "; merge every shard, or pass --allow-partial"), err=True)
    return 0 if allowed else 1


def _anytime(report: Report) -> Anytime | None:
    """A sweep whose fixed-n figures are not valid (it stopped when decided, or parts merged into
    it did): interval gates read its anytime-valid intervals (``gates.Anytime``)."""
    seq = report.sequential
    if seq is None or seq.fixed_n_valid or seq.plan is None:
        return None
    one = len(report.benchmarks) == 1
    pairs = {(f.a if one else f"{f.benchmark}/{f.a}", f.b if one else f"{f.benchmark}/{f.b}"):
             (f.ci, f.level) for f in seq.pairs}
    from pytest_echo_bench.report.decision import why_not_valid

    return Anytime(why_not_valid(seq), pairs)


def _ended(files: Sequence[Path]) -> Collection:
    """How the files' sweep ended (decided, another early stop, or to its end), as the files
    record it."""
    from pytest_echo_bench.results.ending import collection

    return collection(files)


COMMAND = Command("report", "Pass rates with intervals, paired comparisons, per arm and subtask",
                  arguments, handle)
