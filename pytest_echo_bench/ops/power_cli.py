"""``echo-bench power``: the items a paired comparison needs, from assumed shares or from a pilot run."""

from __future__ import annotations

import argparse

from pytest_echo_bench.ops.power import mde, n_for_power

METHOD = "paired, exact McNemar planned by Connor's (1987) normal approximation"


def power_lines(args: argparse.Namespace) -> tuple[list[str], int]:
    """The lines to print and the exit status (2 for arguments that do not make a question)."""
    if not (0 < args.alpha < 1 and 0 < args.power < 1):
        return ["echo-bench power: --alpha and --power must be between 0 and 1"], 2
    if args.files:
        return _from_pilot(args)
    if args.diff is None or args.discordant is None:
        return ["echo-bench power: give --diff and --discordant, or a pilot file with --pair A,B"], 2
    return _planned(args.diff, args.discordant, args.alpha, args.power)


def _planned(diff: float, psi: float, alpha: float, power: float) -> tuple[list[str], int]:
    if not 0 < psi <= 1 or abs(diff) > psi:
        return [f"echo-bench power: need 0 < discordant <= 1 and |diff| <= discordant (got {diff:g}, {psi:g}): "
                "the difference is the difference of the two discordant shares"], 2
    n = n_for_power(diff, psi, alpha, power)
    if n is None:
        return [f"echo-bench power: a difference of {diff:g} cannot be detected at any n"], 2
    return [f"n = {n} items for diff {diff:+.4f} with {psi:.1%} discordant "
            f"(two-sided alpha {alpha:g}, power {power:.0%}; {METHOD})"], 0


def _from_pilot(args: argparse.Namespace) -> tuple[list[str], int]:
    from pytest_echo_bench.ops.names import ArmNames
    from pytest_echo_bench.ops.report import build_report, load_results

    names = [a for a in (args.pair or "").split(",") if a]
    if len(names) != 2:
        return ["echo-bench power: a pilot file needs --pair A,B (two arm names)"], 2
    report = build_report(load_results(args.files))
    known = ArmNames({b.name: b.arms for b in report.benchmarks})
    try:  # ARM or BENCHMARK/ARM; a bare name two benchmarks share is refused with the choices
        picked = [known.resolve(name) for name in names]
    except ValueError as exc:
        return [f"echo-bench power: --pair: {exc}"], 2
    found = [p for p in report.pairs if {(p.benchmark, p.a), (p.benchmark, p.b)} == set(picked)]
    if not found:
        return [f"echo-bench power: no pair {names[0]},{names[1]} in {', '.join(map(str, args.files))}"
                + (" (the two arms are of different benchmarks)" if picked[0][0] != picked[1][0] else "")], 2
    p = found[0]
    sign = 1 if p.a == picked[0][1] else -1
    psi = (p.a_only + p.b_only) / p.n if p.n else 0.0
    diff = args.diff if args.diff is not None else sign * (p.diff or 0.0)
    pilot = (f"pilot {p.benchmark or '-'}: {names[0]} - {names[1]} = {sign * (p.diff or 0.0):+.4f} on {p.n} items, "
             f"{psi:.1%} discordant ({p.a_only + p.b_only} items)")
    at_n = mde(p.n, psi, args.alpha, args.power)
    detect = f"mde at n = {p.n}: {at_n:.4f}" if at_n is not None else f"no difference is detectable at n = {p.n}"
    if psi == 0:
        return [pilot, "the arms never disagree in the pilot: give --discordant to plan"], 2
    planned, status = _planned(diff, psi, args.alpha, args.power)
    return [pilot, detect, *planned], status
