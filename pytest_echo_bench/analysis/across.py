"""Two runs compared: each paired arm's figures (both rates with Wilson intervals, the exact
McNemar test on the discordant items, Newcombe's interval of the difference, or a paired t for
judged grades, Holm across the arms), and the gates across runs.

A gate across runs is on CAND's arm minus BASE's on the paired items:

- ``ARM >= base - 0.02 @95`` (non-inferiority: ``analysis.gates``' grammar with ``base`` for the
  same arm in BASE): the lower bound of the interval of CAND - BASE is above -0.02;
- ``no-regression@95``: for every paired arm, the upper bound of that interval is not below 0
  (CAND is not shown worse), each arm's interval at Bonferroni's level (99.5% for ten arms), so
  the chance of any false alarm over all the arms stays at most 5%;
- either with ``anytime`` after the level: the anytime-valid confidence sequence of
  ``analysis.sequential``, for a nightly that looks every night.

A gate over an arm with no paired item fails and says why.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from pytest_echo_bench.analysis import sequential
from pytest_echo_bench.analysis.gates import Anytime, Gate, parse_gate, percent
from pytest_echo_bench.analysis.stats import (
    holm,
    mcnemar_exact,
    newcombe_paired,
    t_quantile,
    t_two_sided_p,
    wilson,
    z_for,
)
from pytest_echo_bench.results.across import ArmPairing, Paired

BASE = "base"  # a gate's name for the arm's BASE run
GATE_FORMS = ("'ARM >= base - 0.02 @95', 'ARM >= base @95', 'no-regression@95', "
              "each optionally followed by 'anytime'")
_NO_REGRESSION = re.compile(r"^\s*no-regression\s*@\s*(?P<level>\d+(?:\.\d+)?)\s*$")
_BASE_RHS = re.compile(rf"^{BASE}(?:\s*[+-]\s*\d+(?:\.\d+)?)?$")
_ANYTIME = re.compile(r"\s+anytime\s*$")


@dataclass(frozen=True)
class ArmFigures:
    """One paired arm's figures, CAND - BASE."""

    pairing: ArmPairing
    label: str  # CAND's arm, ``BENCHMARK/ARM`` when the runs hold several benchmarks
    base_rate: float | None
    cand_rate: float | None
    base_ci: tuple[float, float] | None
    cand_ci: tuple[float, float] | None
    diff: float | None
    diff_ci: tuple[float, float] | None
    p_value: float
    method: str  # "mcnemar" (Newcombe's interval) or "paired-t" (judged grades)
    p_holm: float | None = None


def figures(paired: Paired) -> list[ArmFigures]:
    """Every paired arm's figures at 95%, with Holm's adjustment over all of them.

    An arm is labelled ``BENCHMARK/ARM`` when the runs hold several benchmarks, paired or not: a
    label (and a gate written for the nightly) does not change with the arms that happen to meet."""
    benchmarks = {a.benchmark for a in paired.arms}
    benchmarks.update(b for b, _ in paired.only_base_arms + paired.only_cand_arms)
    several = len(benchmarks) > 1
    found = [_figures(a, f"{a.benchmark}/{a.cand_arm}" if several else a.cand_arm)
             for a in paired.arms]
    adjusted = holm([f.p_value for f in found])
    return [replace(f, p_holm=q) for f, q in zip(found, adjusted, strict=True)]


def _figures(a: ArmPairing, label: str) -> ArmFigures:
    n = a.n
    base_right, cand_right = a.both + a.regressed, a.both + a.fixed
    rates = (base_right / n, cand_right / n) if n else (None, None)
    cis = (wilson(base_right, n), wilson(cand_right, n)) if n else (None, None)
    if a.graded:
        mean, ci, p = _paired_t(a.diffs, 0.95)
        return ArmFigures(a, label, *rates, *cis, mean, ci, p, "paired-t")
    diff = (a.fixed - a.regressed) / n if n else None
    return ArmFigures(a, label, *rates, *cis, diff, interval(a, 0.95),
                      mcnemar_exact(a.fixed, a.regressed), "mcnemar")


def interval(a: ArmPairing, level: float) -> tuple[float, float] | None:
    """The fixed-n interval of CAND - BASE at ``level``; None without a paired item."""
    if a.graded:
        return _paired_t(a.diffs, level)[1]
    return newcombe_paired(a.both, a.fixed, a.regressed, a.neither, z_for(level))


# (mean, interval, p) of paired differences
Tested = tuple[float | None, tuple[float, float] | None, float]


def _paired_t(diffs: Sequence[float], level: float) -> Tested:
    """(mean, interval, p) of grade differences by Student's t: unbounded, a grade's scale being
    the judge's own (``stats.paired_t`` clips to the [-1, 1] of scores)."""
    values = list(diffs)
    n = len(values)
    if n == 0:
        return None, None, 1.0
    mean = math.fsum(values) / n
    if n < 2:
        return mean, None, 1.0
    se = math.sqrt(math.fsum((d - mean) ** 2 for d in values) / (n - 1) / n)
    if se == 0:
        return mean, (mean, mean), 1.0 if mean == 0 else 0.0
    half = t_quantile(level, n - 1) * se
    return mean, (mean - half, mean + half), t_two_sided_p(mean / se, n - 1)


def anytime_interval(a: ArmPairing, level: float) -> tuple[float, float] | None:
    """The anytime-valid confidence sequence of CAND - BASE after every paired item (BASE's
    order), or None when a difference is outside [-1, 1] (grades on a wider scale)."""
    if not a.diffs or any(not -1.0 <= z <= 1.0 for z in a.diffs):
        return None
    return sequential.interval(a.diffs, 1.0 - level)


@dataclass(frozen=True)
class AcrossGate:
    """A gate across runs: ``gate`` on one arm (None: ``no-regression``, every arm)."""

    text: str
    level: float
    anytime: bool
    gate: Gate | None

    def check(self, arms: list[ArmFigures]) -> list[tuple[bool, str]]:
        """(passed, line) per arm the gate is over; a missing arm is one failed line."""
        if self.gate is None:
            if not arms:
                return [(False, f"gate {self.text}: FAILED: no arm is in both runs")]
            # every arm at once: Bonferroni's levels keep the chance of any false alarm at 1 - level
            each = 1.0 - (1.0 - self.level) / len(arms)
            return [self._no_regression(f, each, len(arms)) for f in arms]
        found = _named(arms, self.gate.arm)
        if len(found) != 1:
            known = ", ".join(f.label for f in arms) or "none"
            why = (f"no arm {self.gate.arm!r} is in both runs" if not found else
                   f"{self.gate.arm!r} names an arm of several benchmarks: give one of "
                   + ", ".join(_full(f) for f in found))
            return [(False, f"gate {self.text}: FAILED: {why}; paired arms: {known}")]
        return [self._relative(found[0])]

    def _interval(self, f: ArmFigures,
                  level: float) -> tuple[tuple[float, float] | None, str | None]:
        """The interval the gate reads, or why there is none."""
        a = f.pairing
        if a.n == 0:
            return None, (f"{f.label} has no paired item ({len(a.only_base)} only in BASE, "
                          f"{len(a.only_cand)} only in CAND, {len(a.changed)} changed, "
                          f"{a.unjudged} unjudged): the gate cannot pass")
        ci = anytime_interval(a, level) if self.anytime else interval(a, level)
        if ci is None:
            return None, (f"{f.label}: no interval (an anytime gate needs differences in "
                          "[-1, 1], a fixed one two paired items)")
        return ci, None

    def _relative(self, f: ArmFigures) -> tuple[bool, str]:
        assert self.gate is not None
        ci, why = self._interval(f, self.level)
        if ci is None:
            return False, f"gate {self.text}: FAILED: {why}"
        gate = replace(self.gate, arm=f.label)
        rates = {f.label: f.cand_rate or 0.0, BASE: f.base_rate or 0.0}
        if self.anytime:
            return gate.check(rates, lambda _a, _b, _level: ci, Anytime("looked at every run", {
                (f.label, BASE): (ci, self.level)}))
        return gate.check(rates, lambda _a, _b, _level: ci)

    def _no_regression(self, f: ArmFigures, level: float, arms: int) -> tuple[bool, str]:
        ci, why = self._interval(f, level)
        if ci is None:
            return False, f"gate {self.text}: FAILED: {why}"
        ok = ci[1] >= 0.0
        kind = " anytime-valid" if self.anytime else ""
        family = f" ({percent(self.level)} over {arms} arms)" if arms > 1 else ""
        each = _each(level, self.level if arms > 1 else None)
        return ok, (f"gate {self.text}: {f.label}: {'passed' if ok else 'FAILED'} (CAND - BASE "
                    f"{each}{kind} CI{family} [{ci[0]:+.3f}, {ci[1]:+.3f}]; the upper "
                    "bound must not be below +0.000)")


def _full(f: ArmFigures) -> str:
    return f"{f.pairing.benchmark}/{f.pairing.cand_arm}"


def _named(arms: list[ArmFigures], name: str) -> list[ArmFigures]:
    """The paired arms ``name`` picks: ``BENCHMARK/ARM`` in every run (one benchmark or several),
    a bare CAND arm in whichever benchmarks have it (more than one: the caller refuses)."""
    exact = [f for f in arms if _full(f) == name]
    return exact or [f for f in arms if f.pairing.cand_arm == name]


def _each(level: float, family: float | None) -> str:
    """An arm's Bonferroni level, to two decimals (``97.50%``), more while two would show it as
    100% or as the family's level (99.99% over two arms is 99.995% each, not "99.99%")."""
    for digits in range(2, 9):
        text = f"{level:.{digits}%}"
        if not text.startswith("100") and (family is None or text != f"{family:.{digits}%}"):
            return text
    return percent(level)


def parse_across_gate(text: str) -> AcrossGate:
    """A gate across runs; ValueError naming the forms it takes for anything else."""
    body = _ANYTIME.sub("", text)
    anytime = body != text
    m = _NO_REGRESSION.match(body)
    if m is not None:
        return AcrossGate(text, _level(text, m.group("level")), anytime, None)
    gate: Gate | None
    try:
        gate = parse_gate(body, paired=True)
    except ValueError:
        gate = None
    if gate is None or gate.level is None or not _BASE_RHS.match(gate.rhs.strip()):
        raise ValueError(f"gate {text!r}: a gate across runs compares an arm with itself in BASE "
                         f"on the paired interval: write {GATE_FORMS}")
    return AcrossGate(text, gate.level, anytime, replace(gate, text=text, rhs=_spaced(gate.rhs)))


def _spaced(rhs: str) -> str:
    """``base-0.02`` as ``base - 0.02``, the form ``Gate`` reads a margin in."""
    m = re.match(rf"^{BASE}\s*([+-])\s*(\S+)$", rhs.strip())
    return f"{BASE} {m.group(1)} {m.group(2)}" if m else rhs.strip()


def _level(text: str, level: str) -> float:
    if not 50 <= float(level) < 100:
        raise ValueError(f"gate {text!r}: the level after '@' is a percentage between 50 and "
                         "100, e.g. @95")
    return float(level) / 100
