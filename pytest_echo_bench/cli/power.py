"""``echo-bench power``: the items a paired comparison needs, from assumed shares or from a pilot
run."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_echo_bench.analysis.design import (
    Design,
    PairedItem,
    estimate_design,
    items_clustered,
    items_needed,
    paired_items,
)
from pytest_echo_bench.analysis.power import mde, n_for_power
from pytest_echo_bench.cli.args import Command, input_file, number, say, whole
from pytest_echo_bench.store.files import UNGRADED

if TYPE_CHECKING:
    from pytest_echo_bench.analysis.compare import Pair
    from pytest_echo_bench.analysis.names import ArmRef
    from pytest_echo_bench.report.figures import Report
    from pytest_echo_bench.results.read import Results

METHOD = "paired, exact McNemar planned by Connor's (1987) normal approximation"
# A smaller difference needs more items than any benchmark has (n grows as 1/diff^2).
MIN_DIFF = 1e-4
DESIGN = ("planned by the normal approximation with clusters and repeats of Miller (2024, arXiv "
          "2411.00640)")
SHARE = number(0, 1, open_low=True, open_high=True)
# Below 1e-12, 1 - alpha/2 rounds towards 1.0, whose normal quantile does not exist.
ALPHA = number(1e-12, 1, open_high=True)


def arguments(w: argparse.ArgumentParser) -> None:
    w.add_argument("files", nargs="*", type=input_file, help="Pilot results file(s); with --pair")
    w.add_argument("--pair", metavar="A,B",
                   help="The two arms of the pilot to plan for (ARM or BENCHMARK/ARM)")
    w.add_argument("--diff", type=number(-1, 1),
                   help="Expected difference of pass rates (e.g. 0.03)")
    w.add_argument("--discordant", type=number(0, 1, open_low=True),
                   help="Expected share of items the arms disagree on (e.g. 0.12)")
    w.add_argument("--alpha", type=ALPHA, default=0.05,
                   help="Two-sided significance level (default 0.05)")
    w.add_argument("--power", type=SHARE, default=0.80, help="Power wanted (default 0.80)")
    w.add_argument("--repeats", type=whole(1, 1000), metavar="K",
                   help="With a pilot: the items needed with K samples of each arm per item "
                        "(epochs: K)")


def handle(args: argparse.Namespace) -> int:
    lines, status = power_lines(args)
    for line in lines:
        say(line, err=status != 0)
    return status


class _Refused(Exception):
    """A pilot that does not answer the question asked: the line saying why, and status 2."""


def power_lines(args: argparse.Namespace) -> tuple[list[str], int]:
    """The lines to print and the exit status (2 for arguments that do not make a question)."""
    if not (0 < args.alpha < 1 and 0 < args.power < 1):
        return ["echo-bench power: --alpha and --power must be between 0 and 1"], 2
    if args.diff is not None and 0 < abs(args.diff) < MIN_DIFF:
        return [f"echo-bench power: --diff {args.diff:g} is below {MIN_DIFF:g}: no sweep has the "
                "items it needs (give a difference of 0.0001 or more)"], 2
    if args.files and args.discordant is not None:
        return ["echo-bench power: --discordant plans without a pilot; a pilot file gives its own "
                "discordant share: give one or the other"], 2
    if args.files:
        return _from_pilot(args)
    if args.repeats is not None:  # the within-item variance comes from a pilot's epochs only
        return ["echo-bench power: --repeats K plans from a pilot file: give one with --pair "
                "A,B"], 2
    if args.diff is None or args.discordant is None:
        return ["echo-bench power: give --diff and --discordant, or a pilot file with --pair "
                "A,B"], 2
    return _planned(args.diff, args.discordant, args.alpha, args.power)


def _planned(diff: float, psi: float, alpha: float, power: float) -> tuple[list[str], int]:
    if not 0 < psi <= 1 or abs(diff) > psi:
        return [f"echo-bench power: need 0 < discordant <= 1 and |diff| <= discordant (got "
                f"{diff:g}, {psi:g}): the difference is the difference of the two discordant "
                "shares"], 2
    n = n_for_power(diff, psi, alpha, power)
    if n is None:
        return [f"echo-bench power: a difference of {diff:g} cannot be detected at any n"], 2
    return [f"n = {n} items for diff {diff:+.4f} with {psi:.1%} discordant "
            f"(two-sided alpha {alpha:g}, power {power:.0%}; {METHOD})"], 0


def _from_pilot(args: argparse.Namespace) -> tuple[list[str], int]:
    from pytest_echo_bench.report.figures import build_report, load_results

    names = [a for a in (args.pair or "").split(",") if a]
    try:
        _check_names(names)
        results = load_results(args.files)
        p, picked = _pilot_pair(build_report(results), names, args.files)
    except _Refused as exc:
        return [str(exc)], 2
    sign = 1 if p.a == picked[0][1] else -1
    psi = (p.a_only + p.b_only) / p.n if p.n else 0.0
    diff = args.diff if args.diff is not None else sign * (p.diff or 0.0)
    pilot = (f"pilot {p.benchmark or '-'}: {names[0]} - {names[1]} = {sign * (p.diff or 0.0):+.4f} "
             f"on {p.n} items, {psi:.1%} discordant ({p.a_only + p.b_only} items)")
    detect = _detectable(p.n, psi, args.alpha, args.power)
    if psi == 0:
        return [pilot, "the arms never disagree in the pilot: give --discordant to plan"], 2
    planned, status = _planned(diff, psi, args.alpha, args.power)
    items = _paired(results, p.benchmark, picked[0][1], picked[1][1])
    design = design_lines(items, diff, args.alpha, args.power, args.repeats)
    return [pilot, detect, *planned, *design], status


def _detectable(n: int, psi: float, alpha: float, power: float) -> str:
    at_n = mde(n, psi, alpha, power)
    if at_n is None:
        return f"no difference is detectable at n = {n}"
    return f"mde at n = {n}: {at_n:.4f}"


def _paired(results: Results, benchmark: str, a: str, b: str) -> list[PairedItem]:
    """The pilot's graded rows of the two arms, paired by item (error and unjudged rows, which
    hold no grade, left out)."""
    rows = ((r.task_id, r.arm, r.subtask, r.epoch, 1.0 if r.passed else 0.0)
            for r in results.rows if r.benchmark == benchmark and r.status not in UNGRADED)
    return paired_items(rows, a, b)


def _check_names(names: list[str]) -> None:
    """``--pair A,B`` names two arms, not one twice (else ``_Refused``, before a file is read)."""
    if len(names) != 2:
        raise _Refused("echo-bench power: a pilot file needs --pair A,B (two arm names)")
    if names[0] == names[1]:
        raise _Refused(f"echo-bench power: --pair {names[0]},{names[1]}: an arm cannot be compared "
                       "with itself")


def _pilot_pair(report: Report, names: list[str],
                files: Sequence[Path]) -> tuple[Pair, list[ArmRef]]:
    """The pilot's pair of the two arms named, and the arms as ``(benchmark, arm)`` in their
    order."""
    from pytest_echo_bench.analysis.names import ArmNames

    known = ArmNames({b.name: b.arms for b in report.benchmarks})
    try:  # ARM or BENCHMARK/ARM; a bare name two benchmarks share is refused with the choices
        picked = [known.resolve(name) for name in names]
    except ValueError as exc:
        raise _Refused(f"echo-bench power: --pair: {exc}") from None
    found = [p for p in report.pairs if {(p.benchmark, p.a), (p.benchmark, p.b)} == set(picked)]
    if not found:
        apart = ("" if picked[0][0] == picked[1][0]
                 else " (the two arms are of different benchmarks)")
        raise _Refused(f"echo-bench power: no pair {names[0]},{names[1]} in "
                       f"{', '.join(map(str, files))}{apart}")
    return found[0], picked


def design_lines(items: list[PairedItem], diff: float, alpha: float, power: float,
                 repeats: int | None) -> list[str]:
    """The design from the pilot's items (Miller 2024): paired variance, clusters, repeats."""
    design = estimate_design(items)
    if design is None or diff == 0:
        return []
    k = f"{design.samples:g} sample{'s' if design.samples != 1 else ''} per item and arm"
    lines = [f"paired variance per item {design.var_diff:.4f} (sd {design.var_diff ** 0.5:.4f}) "
             f"on {design.n} items, {k}; {DESIGN}"]
    plain = items_needed(design.variance(), diff, alpha, power)
    lines.append(f"without clustering: n = {_count(plain)} items for diff {diff:+.4f}")
    lines.append(_clustered(design, design.variance(), design.icc, diff, alpha, power, "")
                 if design.clusters > 1
                 else "with clustering: one subtask only, no clusters to account for")
    if design.samples > 1:  # two plans for one question: say which counts what
        lines.append(f"two plans: McNemar's n above counts each item as one right/wrong pair; the "
                     f"design's n (Miller) scores each item by the mean of its {design.samples:g} "
                     "samples, and is the one for a sweep with repeats")
    if repeats is not None:
        lines += _repeats(design, repeats, diff, alpha, power)
    return lines


def _clustered(design: Design, variance: float, icc: float, diff: float, alpha: float, power: float,
               tail: str) -> str:
    n = items_clustered(variance, icc, design.clusters, diff, alpha, power)
    if n is None:
        return (f"with {design.clusters} subtasks as clusters{tail}: ICC {icc:.3f}; no number of "
                "items suffices, the subtasks' own differences alone are too variable: add "
                "subtasks")
    deff = 1 + (n / design.clusters - 1) * icc
    return (f"with {design.clusters} subtasks as clusters{tail}: ICC {icc:.3f}, design effect "
            f"{deff:.2f} at {n / design.clusters:.1f} items per subtask on average: n = {n} items")


def _repeats(design: Design, repeats: int, diff: float, alpha: float, power: float) -> list[str]:
    if design.within_a is None or design.within_b is None:
        return [f"with {repeats} repeat{'s' if repeats != 1 else ''} per item: unknown, the pilot "
                "has one sample per item: the within-item variance needs a pilot with epochs: 2 or "
                "more"]
    variance = design.variance(repeats)
    n = items_needed(variance, diff, alpha, power)
    said = f"{repeats} repeat{'s' if repeats != 1 else ''}"
    tail = f" and {said}"
    return [f"with {said} per item: within-item variance ({design.within_a:.4f} + "
            f"{design.within_b:.4f}) / {repeats}, paired variance {variance:.4f}: n = {_count(n)} "
            f"items ({_count(n * repeats if n else None)} calls per arm)",
            _clustered(design, variance, design.icc_at(repeats), diff, alpha, power, tail)
            if design.clusters > 1 else f"with {said}, clustered: one subtask only"]


def _count(n: int | None) -> str:
    return "no finite number of" if n is None else str(n)


COMMAND = Command("power", "Items needed for 80%% power (paired McNemar), from assumed shares or a "
                  "pilot file", arguments, handle)
