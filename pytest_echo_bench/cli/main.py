"""The ``echo-bench`` command: a thin layer over pure functions (report, power, estimate,
progress, run, regrade, merge)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_echo_bench.analysis.epochs import REDUCERS
from pytest_echo_bench.analysis.gates import Anytime, Gate, parse_gate
from pytest_echo_bench.analysis.names import ArmNames
from pytest_echo_bench.cli.args import (
    OutputClosed,
    Parser,
    arm_name,
    flush_stdout,
    input_file,
    number,
    output_dir,
    output_file,
    say,
    whole,
)
from pytest_echo_bench.errors import EchoBenchError
from pytest_echo_bench.report.formats.text import FORMATS, paired_intervals
from pytest_echo_bench.store.safe_text import shown

if TYPE_CHECKING:
    from pytest_echo_bench.results.ending import Collection

# a file or value the command cannot use (missing, unreadable, not a results file, refused)
BAD_INPUT = 2
BUG = 3  # an exception no bad input explains
# what a shell reports of a command SIGPIPE ended, as ``cat F | head`` does
OUTPUT_CLOSED = 128 + 13
DEBUG_ENV = "ECHO_BENCH_DEBUG"  # set, and not to 0: exceptions propagate, traceback and all
DAY_S = 86400.0
MAX_BACKOFF_S = 8 * DAY_S  # as far ahead as the supervisor trusts a provider's reset time
SHARE = number(0, 1, open_low=True, open_high=True)
# Below 1e-12, 1 - alpha/2 rounds towards 1.0, whose normal quantile does not exist.
ALPHA = number(1e-12, 1, open_high=True)


def _report(args: argparse.Namespace) -> int:
    from pytest_echo_bench.budget.spend import run_budget
    from pytest_echo_bench.report.figures import build_report, load_results
    from pytest_echo_bench.report.formats.text import render, report_json

    oracle = None if args.oracle is None else args.oracle.split(",")
    # "," must not read as "every arm"
    if oracle is not None and not all(a.strip() for a in oracle):
        raise ValueError(
            f"--oracle {args.oracle!r}: give arm names separated by commas, e.g. "
            "demo/cheap_a,demo/cheap_b "
            "(leave --oracle out for every arm)"
        )
    results = load_results(args.files)
    # an empty table (and JSON saying complete) would read as a sweep
    if not results.rows and not results.metas:
        raise ValueError(
            f"no results in {', '.join(map(str, args.files))}: no meta line and no row (an "
            "empty file?)"
        )
    budgets = [b for b in map(run_budget, args.files) if b is not None]
    report = build_report(results, oracle, args.reduce, ended=_ended(args.files), budgets=budgets)
    names = ArmNames({b.name: b.arms for b in report.benchmarks})
    # a misspelt or ambiguous name: one line, exit 2
    gates = [gate.bind(names) for gate in args.gate]
    say(render(report, args.format))
    rates = {
        label: arm["pass_rate"] for label, arm in report_json(report)["arms"].items() if arm["n"]
    }
    intervals = paired_intervals(report)
    failed = 0
    cover = report.coverage
    # a gate judges the whole sweep: a missing shard is a failure
    if args.gate and not cover.complete:
        failed += not args.allow_partial
        partial = (
            "allowed on a partial sweep"
            if args.allow_partial
            else "FAILED: the sweep is incomplete"
        )
        say(
            f"gates: {partial} ({cover.describe()})"
            + ("" if args.allow_partial else "; merge every shard, or pass --allow-partial"),
            err=True,
        )
    anytime = _anytime(report)
    for gate in gates:
        ok, line = gate.check(rates, intervals, anytime)
        failed += not ok
        say(line, err=True)
    return 1 if failed else 0


def _anytime(report: Any) -> Anytime | None:
    """A sweep whose fixed-n figures are not valid (it stopped when decided, or parts merged into it
    did): interval gates read its anytime-valid intervals (``gates.Anytime``)."""
    seq = report.sequential
    if seq is None or seq.fixed_n_valid or seq.plan is None:
        return None
    one = len(report.benchmarks) == 1
    pairs = {
        (f.a if one else f"{f.benchmark}/{f.a}", f.b if one else f"{f.benchmark}/{f.b}"): (
            f.ci,
            f.level,
        )
        for f in seq.pairs
    }
    from pytest_echo_bench.report.decision import why_not_valid

    return Anytime(why_not_valid(seq), pairs)


def _ended(files: Sequence[Path]) -> Collection:
    """How the files' sweep ended (decided, another early stop, or to
    its end), as the files record it."""
    from pytest_echo_bench.results.ending import collection

    return collection(files)


def _power(args: argparse.Namespace) -> int:
    from pytest_echo_bench.cli.power import power_lines

    lines, status = power_lines(args)
    for line in lines:
        say(line, err=status != 0)
    return status


def _estimate(args: argparse.Namespace) -> int:
    import json

    from pytest_echo_bench.cli.estimate import Options, default_cache, estimate, text_lines

    opts = Options(
        args.keyword,
        args.bench_shard,
        tuple(args.results),
        default_cache(args.rootdir, args.cache),
        args.rootdir,
        args.concurrency,
        args.workers,
    )
    data = estimate(args.specs, opts)
    # as the run: which arms there are, exit 5
    if not data["items"] and (args.keyword or args.bench_shard):
        from pytest_echo_bench.cli.empty_selection import NOTHING_SELECTED, estimate_note

        say(estimate_note(args.specs, args.keyword, args.bench_shard), err=True)
        return NOTHING_SELECTED
    say(json.dumps(data, indent=2) if args.format == "json" else "\n".join(text_lines(data)))
    return 0


def _progress(args: argparse.Namespace) -> int:
    from pytest_echo_bench.report.page.html import watch, write_progress

    if args.watch:
        watch(args.file, args.output, args.interval)
    else:
        write_progress(args.file, args.output)
    say(f"echo-bench: wrote {args.output}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from pytest_echo_bench.cli.supervise import supervise

    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        say(
            "echo-bench run: give the pytest command after --, e.g. echo-bench run -- pytest "
            "bench_specs -n 4",
            err=True,
        )
        return 4
    if args.retry_errors:
        # Every resume the supervisor starts keeps the command's other options, this one included.
        if not any(a == "--bench-resume" or a.startswith("--bench-resume=") for a in command):
            say(
                "echo-bench run: --retry-errors re-runs the error rows of a results file: "
                "give the pytest command "
                "--bench-resume PATH",
                err=True,
            )
            return 4
        command = (
            [*command, "--bench-retry-errors"] if "--bench-retry-errors" not in command else command
        )

    def log(line: str) -> None:
        # A closed terminal or pipe must not end supervision while the run it supervises goes on.
        with contextlib.suppress(OSError):
            say(line)
            sys.stdout.flush()

    return supervise(command, args.max_retries, args.backoff, log=log, grace_s=args.grace)


def _regrade(args: argparse.Namespace) -> int:
    from pytest_echo_bench.results.regrade import regrade
    from pytest_echo_bench.store.owner import held
    from pytest_echo_bench.store.writer import write_whole

    # no run appends to the output while it is read and replaced
    with held(args.output, "echo-bench regrade"):
        # refuses before anything is written
        result = regrade(args.file, args.spec, args.allow_outside_specs)
        write_whole(args.output, result.meta, result.lines)
    for change in result.changes:
        say(change)
    for note in result.notes:
        say(note)
    rows = len(result.lines)
    say(f"echo-bench: regraded {rows} rows ({result.kept} provider errors kept as they were): "
        f"{len(result.changes)} verdicts changed -> {args.output}")
    return 0


def _merge(args: argparse.Namespace) -> int:
    from pytest_echo_bench.results.merge import merge
    from pytest_echo_bench.store.owner import held
    from pytest_echo_bench.store.writer import write_whole

    # no run appends to the output (an input too, maybe) meanwhile
    with held(args.output, "echo-bench merge"):
        merged = merge(args.files, dict(args.assume_fingerprint), args.allow_mismatch)
        for conflict in merged.conflicts:
            say(f"conflict: {conflict}", err=True)
        write_whole(args.output, merged.meta, merged.lines)
    say(
        f"echo-bench: merged {len(args.files)} files: {len(merged.lines)} rows, "
        f"{merged.duplicates} duplicates "
        f"removed, {len(merged.conflicts)} conflicts -> {args.output}"
    )
    cover = merged.coverage
    for end in cover.ends:  # how each shard file ended (a reason is a file's text: shown escaped)
        say(shown(f"echo-bench: {end.text()}", newlines=False))
    if cover.shards:
        say(shown(f"echo-bench: {cover.describe()}", newlines=False) + ("" if cover.complete else
            f"; {args.output} is marked incomplete, and a gate on it fails unless --allow-partial"))
    return 0


def _import(args: argparse.Namespace) -> int:
    from pytest_echo_bench.interop.inspect.importer import import_logs, write_new

    imported = import_logs(args.logs, args.arm, args.scorer)  # refuses before anything is written
    write_new(args.output, imported.meta, imported.lines)
    for note in imported.notes:
        say(note, err=True)
    # Names from the logs, escaped here with their line ends: say() keeps a CR LF (CSV's), and a
    # task named "x\r\n===== 2 passed =====" would draw a line of its own.
    arms = sorted(
        shown(f"{b}[{a}]", newlines=False)
        for b, names in imported.meta["arms"].items()
        for a in names
    )
    say(
        f"echo-bench: imported {len(args.logs)} Inspect logs: {len(imported.lines)} rows of "
        f"{', '.join(arms)} "
        f"-> {args.output}"
    )
    return 0


def _export(args: argparse.Namespace) -> int:
    from pytest_echo_bench.interop.inspect.exporter import export_inspect

    done = export_inspect(args.file, args.output, args.spec)
    for note in done.notes:
        say(note, err=True)
    for path in done.paths:
        say(f"echo-bench: wrote {path}")
    say(
        f"echo-bench: exported {done.samples} samples as {len(done.paths)} Inspect logs -> "
        f"{args.output}"
    )
    return 0


def _pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not (sep and name and value):
        raise argparse.ArgumentTypeError(f"expected BENCHMARK=FINGERPRINT, got {text!r}")
    return name, value


def _gate(text: str) -> Gate:
    try:
        return parse_gate(text, paired=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="echo-bench", description="Reports and operations for pytest-echo-bench sweeps")
    sub = p.add_subparsers(dest="command_name", required=True)
    p.commands = sub.choices
    r = sub.add_parser(
        "report", help="Pass rates with intervals, paired comparisons, per arm and subtask"
    )
    r.add_argument("files", nargs="+", type=input_file)
    r.add_argument("--format", choices=FORMATS, default="table")
    r.add_argument(
        "--oracle",
        metavar="ARM,ARM",
        help="Arms of the oracle row, as ARM or BENCHMARK/ARM (default: all)",
    )
    r.add_argument(
        "--reduce",
        choices=REDUCERS,
        default="mean",
        help="How the samples of an item recorded with epochs make its score: mean (default; the "
        "share "
        "correct), majority (more than half correct) or pass_at_k (any correct)",
    )
    r.add_argument(
        "--gate",
        metavar="RULE",
        action="append",
        default=[],
        type=_gate,
        help="Exit 1 unless the rule holds, e.g. 'strong>=0.85', 'judge>=strong-0.02', or on the "
        "paired "
        "interval 'judge >= strong - 0.02 @95' (repeatable)",
    )
    r.add_argument(
        "--allow-partial",
        action="store_true",
        help="Let --gate judge files missing some shards of their sweep (by default such a gate "
        "fails)",
    )
    r.set_defaults(func=_report)
    w = sub.add_parser(
        "power",
        help="Items needed for 80%% power (paired McNemar), from assumed shares or a pilot file",
    )
    w.add_argument("files", nargs="*", type=input_file, help="Pilot results file(s); with --pair")
    w.add_argument(
        "--pair", metavar="A,B", help="The two arms of the pilot to plan for (ARM or BENCHMARK/ARM)"
    )
    w.add_argument(
        "--diff", type=number(-1, 1), help="Expected difference of pass rates (e.g. 0.03)"
    )
    w.add_argument("--discordant", type=number(0, 1, open_low=True),
                   help="Expected share of items the arms disagree on (e.g. 0.12)")
    w.add_argument(
        "--alpha", type=ALPHA, default=0.05, help="Two-sided significance level (default 0.05)"
    )
    w.add_argument("--power", type=SHARE, default=0.80, help="Power wanted (default 0.80)")
    w.add_argument(
        "--repeats",
        type=whole(1, 1000),
        metavar="K",
        help="With a pilot: the items needed with K samples of each arm per item (epochs: K)",
    )
    w.set_defaults(func=_power)
    _estimate_parser(sub)
    g = sub.add_parser("progress", help="Write the self-contained progress page of a results file")
    g.add_argument("file", type=input_file)
    g.add_argument("-o", "--output", type=output_file, required=True)
    g.add_argument("--watch", action="store_true", help="Keep rewriting it until the run ends")
    g.add_argument("--interval", type=number(0, DAY_S, open_low=True), default=5.0,
                   help="Seconds between rewrites with --watch")
    g.set_defaults(func=_progress)
    u = sub.add_parser(
        "run",
        help="Run a sweep unattended, resuming after exhaustion: echo-bench run -- pytest ...",
    )
    u.add_argument(
        "--max-retries",
        type=whole(0, 10_000),
        default=10,
        help="Resumes after exhaustion (default 10)",
    )
    u.add_argument("--backoff", type=number(0, MAX_BACKOFF_S), default=3600.0,
                   help="Seconds to wait before resuming (default 3600)")
    u.add_argument(
        "--grace",
        type=number(0, DAY_S),
        default=30.0,
        help="Seconds the run has to stop after Ctrl-C or SIGTERM before it gets SIGTERM, "
        "then SIGKILL (default 30)",
    )
    u.add_argument(
        "--retry-errors",
        action="store_true",
        help="Pass --bench-retry-errors to the run and every resume (the command must use "
        "--bench-resume)",
    )
    u.add_argument("command", nargs=argparse.REMAINDER)
    u.set_defaults(func=_run)
    d = sub.add_parser(
        "regrade",
        help="Re-score stored outputs with the current scorer (no model calls); "
        "refuses a spec whose dataset or arms differ from the file's",
    )
    d.add_argument("file", type=input_file)
    d.add_argument(
        "--spec",
        type=Path,
        action="append",
        default=[],
        help="Spec file(s); default: the meta line's",
    )
    d.add_argument("-o", "--output", type=output_file, required=True)
    d.add_argument(
        "--allow-outside-specs",
        action="store_true",
        help="Use spec paths of the meta line outside the current directory (and import their "
        "conftest.py)",
    )
    d.set_defaults(func=_regrade)
    m = sub.add_parser("merge", help="Merge results files (e.g. shards) into one")
    m.add_argument("files", nargs="+", type=input_file)
    m.add_argument("-o", "--output", type=output_file, required=True)
    m.add_argument(
        "--assume-fingerprint",
        metavar="BENCHMARK=FINGERPRINT",
        action="append",
        default=[],
        type=_pair,
        help="Rows of BENCHMARK in a file that records no fingerprint for it (no meta line) were "
        "recorded "
        "with FINGERPRINT (repeatable); without it such a file is refused",
    )
    m.add_argument(
        "--allow-mismatch",
        action="store_true",
        help="Merge files whose fingerprints of a benchmark differ; the merged file gets a "
        "fingerprint no "
        "spec gives, so resuming it needs --bench-allow-mismatch",
    )
    m.set_defaults(func=_merge)
    i = sub.add_parser(
        "import",
        help="Inspect eval logs (.eval, .json) as a new results file: a sample's epochs are "
        "rows, its model the arm, its task the benchmark",
    )
    i.add_argument("logs", nargs="+", type=Path)
    i.add_argument(
        "-o",
        "--output",
        type=output_file,
        required=True,
        help="The new results file (never an existing one)",
    )
    i.add_argument(
        "--arm",
        action="append",
        default=[],
        type=arm_name,
        help="The arm instead of the log's model: once for every "
        "log, or once per log in their order",
    )
    i.add_argument(
        "--scorer", help="The scorer whose value is the verdict (default: the log's first)"
    )
    i.set_defaults(func=_import)
    x = sub.add_parser(
        "export", help="A results file as Inspect eval logs, one per benchmark and arm"
    )
    x.add_argument("file", type=input_file)
    x.add_argument("--format", choices=["inspect"], default="inspect")
    x.add_argument(
        "-o", "--output", type=output_dir, required=True, help="The directory of the logs"
    )
    x.add_argument(
        "--spec",
        type=Path,
        action="append",
        default=[],
        help="Spec file(s) whose datasets give the samples' inputs (rows do not store the prompt; "
        "default: "
        "the specs the meta line names); a dataset other than the file's is refused",
    )
    x.set_defaults(func=_export)
    return p


def _estimate_parser(sub: Any) -> None:
    from pytest_echo_bench.cli.estimate import shard_arg

    e = sub.add_parser(
        "estimate", help="Calls, cost and wall time of a sweep before anything is sent"
    )
    e.add_argument("specs", nargs="+", type=Path, help="Spec file(s)")
    e.add_argument(
        "-k", dest="keyword", metavar="EXPR", help="Only the items pytest's -k EXPR selects"
    )
    e.add_argument(
        "--bench-shard",
        metavar="K/N|auto",
        type=shard_arg,
        help="Only shard K of N, or auto from a Slurm array's or an Indexed Job's environment (as "
        "the "
        "run's --bench-shard)",
    )
    e.add_argument("--format", choices=("text", "json"), default="text")
    e.add_argument("--results", type=input_file, nargs="+", default=[],
                   help="Earlier results file(s): replies' lengths and latencies seen")
    e.add_argument(
        "--cache",
        metavar="PATH|off",
        help="The response cache to read (default: the run's, "
        "bench_results/cache/cache.sqlite under --rootdir, or an earlier "
        "bench_results/cache.sqlite "
        "if there is one); cached replies are not sent",
    )
    e.add_argument(
        "--rootdir",
        type=Path,
        default=Path("."),
        help="The run's rootdir (default: the current directory)",
    )
    e.add_argument(
        "--concurrency",
        type=whole(1, 1024),
        default=8,
        help="--bench-concurrency of the run (default 8)",
    )
    e.add_argument(
        "-n",
        "--workers",
        type=whole(1, 1024),
        default=1,
        help="xdist processes of the run, as its -n N (default 1)",
    )
    e.set_defaults(func=_estimate)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; its exit status. Bad arguments: argparse's usage line and status 2. A
    file or value the command cannot use: one line naming it, status 2 (``BAD_INPUT``). Anything
    else is a bug of ours: one line and status 3, or with ``ECHO_BENCH_DEBUG=1`` its traceback."""
    try:
        args = parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2): argparse has printed it
        return exc.code if isinstance(exc.code, int) else 2
    try:
        status = int(args.func(args))
        flush_stdout()
        return status
    except OutputClosed:
        _quiet_stdout()
        return OUTPUT_CLOSED
    except KeyboardInterrupt:
        say(f"echo-bench {args.command_name}: interrupted", err=True)
        return 2  # as pytest says it of an interrupted run
    except (EchoBenchError, OSError, ValueError, RecursionError) as exc:  # what bad input raises
        if _debugging():
            raise
        say(f"echo-bench {args.command_name}: {_one_line(exc)}", err=True)
        return BAD_INPUT
    except Exception as exc:
        if _debugging():
            raise
        say(
            f"echo-bench {args.command_name}: internal error ({type(exc).__name__}: "
            f"{_one_line(exc)}); "
            f"a bug: {DEBUG_ENV}=1 shows the traceback",
            err=True,
        )
        return BUG


def _quiet_stdout() -> None:
    """Python's recipe for a closed pipe: point stdout at devnull, so the flush at the exit cannot
    fail a second time and print "Exception ignored ... BrokenPipeError"."""
    with contextlib.suppress(OSError, ValueError):  # a stdout without a file descriptor (captured)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _debugging() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def _one_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return shown(text, newlines=False)  # a multi-line message must not draw lines of its own


if __name__ == "__main__":
    sys.exit(main())
