"""``echo-bench judge``: the stored outputs of a sweep graded with the spec's judges, no arm called
(``results.judge``); resumable, exactly once per (key, judge), budgeted."""

from __future__ import annotations

import argparse
import shlex
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_echo_bench.cli.args import Command, input_file, number, output_file, say, whole

BAD_INPUT = 2  # as ``cli.main``'s: a stopped pass is resumable, as a sweep's exit 2 is
PROGRESS_EVERY_S = 5.0  # at most one progress line this often
MAX_USD = 1e12  # as the sweep's --bench-budget-usd: a cost above it is unknown to every reader

if TYPE_CHECKING:
    from pytest_echo_bench.results.judge import Tally


def arguments(d: argparse.ArgumentParser) -> None:
    d.add_argument("files", nargs="+", type=input_file, metavar="RUN.jsonl",
                   help="Results file(s) of the sweep whose outputs to judge (shards: each one)")
    d.add_argument("--spec", type=Path, action="append", required=True,
                   help="The spec the sweep was recorded with, its scorer and judges as they "
                        "should grade now (one per benchmark)")
    d.add_argument("-o", "--output", type=output_file,
                   help="The judged results file (default: RUN.judged.jsonl beside RUN); run "
                        "again, it judges only what it does not hold yet")
    d.add_argument("--cache", metavar="PATH|off",
                   help="Response cache of the judge calls (default: cache/cache.sqlite beside "
                        "the output, as a sweep's; off disables it)")
    d.add_argument("-j", "--concurrency", type=whole(1, 1024),
                   help="Items judged at once (default: the judges' largest concurrency, else 8)")
    d.add_argument("--budget-usd", "--bench-budget-usd", dest="budget_usd", metavar="USD",
                   type=usd_amount,
                   help="Never spend more than USD on judge calls, counting what the output's "
                        "rows already spent; the pass stops (exit 2) and a re-run does the rest")
    d.add_argument("--retry-unjudged", action="store_true",
                   help="Judge again the rows the output holds without a grade")


def usd_amount(text: str) -> float:
    """An argparse type: US dollars above 0 and below 10^12, a ``$`` in front allowed (as the
    sweep's ``--bench-budget-usd`` takes them)."""
    return number(0, MAX_USD, open_low=True, open_high=True)(text.strip().removeprefix("$"))


def default_output(source: Path) -> Path:
    """``RUN.judged.jsonl`` beside ``RUN.jsonl``."""
    return source.with_name(f"{source.name.removesuffix('.jsonl')}.judged.jsonl")


def handle(args: argparse.Namespace) -> int:
    from pytest_echo_bench.results.judge import JudgeOptions, JudgingPass, concurrency
    from pytest_echo_bench.results.judge_source import (
        JudgeError,
        load_judge_specs,
        read_sources,
        refuse_unpriced,
    )
    from pytest_echo_bench.store.files import default_cache

    output: Path = args.output or default_output(args.files[0])
    if any(output.resolve() == f.resolve() for f in args.files):
        raise JudgeError(f"{output} is a source file: a judging pass writes a file of its own; "
                         "give another -o")
    specs = load_judge_specs(args.spec)
    if args.budget_usd is not None:
        refuse_unpriced(specs)
    sources = read_sources(args.files, specs)  # it refuses before anything is written
    for note in sources.notes:
        say(note)
    cache = None if args.cache == "off" else (
        Path(args.cache) if args.cache else default_cache(output.parent, True))
    opts = JudgeOptions(output, cache, args.concurrency, args.budget_usd, args.retry_unjudged)
    say(f"echo-bench judge: {len(sources.rows)} rows of {len(args.files)} file(s) -> {output} "
        f"({concurrency(specs, args.concurrency)} at once; no arm is called)")
    tally = JudgingPass(specs, sources, opts, Progress()).run()
    return _end(args, output, tally)


class Progress:
    """One line at most every ``PROGRESS_EVERY_S``: items written of the total, and spend."""

    def __init__(self) -> None:
        self.last = time.monotonic()

    def __call__(self, tally: Tally) -> None:
        now = time.monotonic()
        if now - self.last < PROGRESS_EVERY_S:
            return
        self.last = now
        say(f"echo-bench judge: {_counts(tally)}")


def _counts(tally: Tally) -> str:
    from pytest_echo_bench.budget.money import usd

    # Keys an earlier pass only carried over are not called judged; keys whose source row
    # changed since (a resumed sweep) are judged again, and said so.
    kept = f", {tally.kept} error rows carried over before" if tally.kept else ""
    changed = (f" ({tally.changed} judged again: their source rows changed since)"
               if tally.changed else "")
    return (f"{tally.written + tally.skipped + tally.kept} of {tally.total} rows: "
            f"{tally.judged} judged{changed}, {tally.unjudged} unjudged, {tally.failed} scorer "
            f"errors, {tally.carried} error rows carried over, {tally.skipped} skipped as already "
            f"judged{kept}; judge spend ${usd(tally.spent)}")


def _end(args: argparse.Namespace, output: Path, tally: Tally) -> int:
    """The end summary and, when the pass stopped early, why and the command that resumes it."""
    from pytest_echo_bench.budget.money import usd

    for message in tally.messages:
        say(message, err=True)
    say(f"echo-bench judge: {_counts(tally)} -> {output}")
    budget = tally.budget
    if budget is not None:
        say(f"echo-bench judge: budget: spent ${usd(budget.spent)} of ${usd(budget.limit)}"
            + (f"; {budget.refused} judge calls not sent, which need up to "
               f"${usd(budget.needed)} more" if budget.refused else ""))
    if tally.stop is None and not tally.left:
        return 0
    why = tally.stop.reason if tally.stop is not None else "stopped"
    usd_next = budget.suggested() if why == "budget" and budget is not None else None
    say(f"echo-bench judge: stopped ({why}): {tally.left} rows left to judge; resume with: "
        f"{resume_command(args, output, usd_next)}")
    return BAD_INPUT


def resume_command(args: argparse.Namespace, output: Path, budget_usd: float | None) -> str:
    """The command that judges the rest into the same output, with this pass's options."""
    argv = ["echo-bench", "judge", *map(str, args.files)]
    for spec in args.spec:
        argv += ["--spec", str(spec)]
    argv += ["-o", str(output)]
    if args.cache:
        argv += ["--cache", args.cache]
    if args.concurrency:
        argv += ["-j", str(args.concurrency)]
    usd = budget_usd if budget_usd is not None else args.budget_usd
    if usd is not None:
        argv += ["--budget-usd", f"{usd:g}"]
    if args.retry_unjudged:
        argv.append("--retry-unjudged")
    return shlex.join(argv)


COMMAND = Command("judge", "Grade stored outputs with the spec's judges (no arm called); "
                  "resumable, cached and budgeted, into a judged results file of its own",
                  arguments, handle)
