"""CI gates: ``--bench-gate "ARM>=0.85"`` or relative
``"judge>=strong-0.02"`` decide the exit status.

``echo-bench report --gate "judge >= strong - 0.02 @95"`` is a non-inferiority gate on the paired
interval: it holds when the lower bound of the 95% interval of judge - strong is above -0.02.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from pytest_echo_bench.analysis.names import ArmNames

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt,
}
_GATE = re.compile(
    r"^\s*(?P<arm>[^<>=]+?)\s*(?P<op>>=|<=|>|<)\s*(?P<rhs>\S.*?)\s*(?:@\s*(?P<level>\d+(?:\."
    r"\d+)?))?\s*$"
)
_DELTA = re.compile(r"^(?P<arm>.+?)\s*(?P<delta>[+-])\s*(?P<margin>\d+(?:\.\d+)?)$")
# The interval of rate(a) - rate(b) at a confidence level (0.95), None when a and b share no items.
Intervals = Callable[[str, str, float], tuple[float, float] | None]
PAIRED_ONLY = (
    "an interval gate ('@95') needs the items both arms answered, which only a results file has: "
    "use it with 'echo-bench report RUN.jsonl --gate RULE'"
)


TOLERANCE = 1e-9


def _snap(value: float, bound: float) -> float:
    """``value``, or ``bound`` itself when the two differ only by float noise."""
    return bound if abs(value - bound) <= TOLERANCE else value


def percent(level: float) -> str:
    """A confidence level as its user wrote it: ``95%``, ``99.6%``, ``99.95%`` (``:.0%`` made
    every level from 99.5 on "100%")."""
    return f"{round(level * 100, 8):.10g}%"


@dataclass(frozen=True)
class Anytime:
    """A sweep that stopped early (``why``): its fixed-n intervals are not valid
    (optional stopping), so an interval gate reads the anytime-valid interval of a
    planned pair at the plan's level, or fails."""

    why: str
    # (a, b) -> (interval of a - b, level)
    pairs: Mapping[tuple[str, str], tuple[tuple[float, float], float]]

    def interval(self, a: str, b: str, level: float) -> tuple[float, float] | None:
        if (a, b) in self.pairs:
            ci, at = self.pairs[a, b]
            return ci if abs(at - level) < TOLERANCE else None
        if (b, a) in self.pairs:
            ci, at = self.pairs[b, a]
            return (-ci[1], -ci[0]) if abs(at - level) < TOLERANCE else None
        return None

    def refusal(self, a: str, b: str) -> str:
        levels = sorted({percent(at) for _, at in self.pairs.values()})
        return (
            f"FAILED: {self.why}: the fixed-n interval is not valid, and {a} vs {b} at this "
            "level has no "
            "anytime-valid one (a planned pair's, at "
            f"{' or '.join(levels) or 'its plan level'}, is)"
        )


@dataclass(frozen=True)
class Gate:
    text: str
    arm: str
    op: str
    rhs: str
    level: float | None = None  # 0.95 for '@95': the rule is about the paired interval's bound

    def check(self, rates: Mapping[str, float], intervals: Intervals | None = None,
              anytime: Anytime | None = None) -> tuple[bool, str]:
        """(passed, explanation) against pass rates by arm key, and paired intervals for an '@' gate
        (``anytime``: the sweep stopped early, only anytime-valid intervals count)."""
        if self.level is not None:
            return self._check_interval(rates, intervals, anytime)
        if self.arm not in rates:
            return False, f"gate {self.text}: arm {self.arm!r} has no results"
        bound = self._bound(rates)
        if bound is None:
            return (
                False,
                f"gate {self.text}: {self.rhs!r} is neither a number nor an arm with results",
            )
        # Rates are ratios of counts; a bound computed as 'b - 0.02' carries float noise: closer
        # than TOLERANCE counts as equal, so a gate does not flip on the last bit.
        ok = _OPS[self.op](_snap(rates[self.arm], bound), bound)
        verdict = "passed" if ok else "FAILED"
        return (
            ok,
            f"gate {self.text}: {verdict} ({self.arm} = {rates[self.arm]:.3f}, bound {bound:.3f})",
        )

    def _check_interval(self, rates: Mapping[str, float], intervals: Intervals | None,
                        anytime: Anytime | None) -> tuple[bool, str]:
        other = self._relative(rates)
        if intervals is None:
            return False, f"gate {self.text}: {PAIRED_ONLY}"
        if self.arm not in rates or other is None:
            return (
                False,
                f"gate {self.text}: needs two arms with results, got {self.arm!r} and {self.rhs!r}",
            )
        level = self.level or 0.95
        ci = (
            intervals(self.arm, other[0], level)
            if anytime is None
            else anytime.interval(self.arm, other[0], level)
        )
        if ci is None and anytime is not None:
            return False, f"gate {self.text}: {anytime.refusal(self.arm, other[0])}"
        if ci is None:
            return False, f"gate {self.text}: {self.arm} and {other[0]} answered no item in common"
        lower = self.op in (">=", ">")  # "a >= b - m": the lower bound of a - b must be above -m
        bound = ci[0] if lower else ci[1]
        ok = bound > other[1] if lower else bound < other[1]
        verdict = "passed" if ok else "FAILED"
        need = (
            f"{'lower' if lower else 'upper'} bound must be {'above' if lower else 'below'} "
            f"{other[1]:+.3f}"
        )
        # the sweep stopped early: the only valid one
        kind = "" if anytime is None else " anytime-valid"
        return ok, (
            f"gate {self.text}: {verdict} ({self.arm} - {other[0]} {percent(level)}{kind} CI "
            f"[{ci[0]:+.3f}, {ci[1]:+.3f}]; "
            f"the {need})"
        )

    def bind(self, names: ArmNames) -> Gate:
        """This gate with its arms named as the rates are keyed (``arm`` or ``benchmark/arm``).

        ValueError, naming the gate, for an arm no benchmark has or a
        bare name two benchmarks share.
        """
        try:
            arm = names.label(names.resolve(self.arm))
            return replace(
                self, arm=arm, rhs=self.rhs if _is_number(self.rhs) else self._bound_rhs(names)
            )
        except ValueError as exc:
            raise ValueError(f"gate {self.text!r}: {exc}") from None

    def _bound_rhs(self, names: ArmNames) -> str:
        whole = names.find(self.rhs)  # arm names may contain '-' and digits: the whole name wins
        if whole is not None:
            return names.label(whole)
        m = _DELTA.match(self.rhs)
        if m is None:
            return names.label(names.resolve(self.rhs))  # raises: no such arm, with the known ones
        return (
            f"{names.label(names.resolve(m.group('arm')))} {m.group('delta')} {m.group('margin')}"
        )

    def _relative(self, rates: Mapping[str, float]) -> tuple[str, float] | None:
        """(other arm, margin) of a right-hand side ``OTHER`` or ``OTHER - 0.02``."""
        if self.rhs in rates:  # arm names may contain '-' and digits: the whole name wins
            return self.rhs, 0.0
        m = _DELTA.match(self.rhs)
        if m and m.group("arm") in rates:
            return m.group("arm"), float(m.group("delta") + m.group("margin"))
        return None

    def _bound(self, rates: Mapping[str, float]) -> float | None:
        try:
            return float(self.rhs)
        except ValueError:
            pass
        other = self._relative(rates)
        return None if other is None else rates[other[0]] + other[1]


def parse_gate(text: str, paired: bool = False) -> Gate:
    """A gate rule; ValueError (the message says what a rule looks like) for anything else.

    An interval gate (``@95``) is accepted only when ``paired``: the caller has the items both
    arms answered (``echo-bench report``); a running sweep's gate sees pass rates alone.
    """
    m = _GATE.match(text)
    if not m:
        raise ValueError(
            "--bench-gate must look like 'ARM>=0.85', 'ARM>=OTHER-0.02' or 'ARM>=OTHER-0.02 "
            f"@95', got {text!r}"
        )
    level = m.group("level")
    if level is None:
        _check_bound(text, m.group("rhs"))
        return Gate(text, m.group("arm"), m.group("op"), m.group("rhs"))
    if not paired:
        raise ValueError(f"gate {text!r}: {PAIRED_ONLY}")
    if not 50 <= float(level) < 100:
        raise ValueError(
            f"gate {text!r}: the level after '@' is a percentage between 50 and 100, e.g. @95"
        )
    if _is_number(m.group("rhs")):
        raise ValueError(
            f"gate {text!r}: an interval gate compares two arms, e.g. 'judge >= strong - 0.02 @95'"
        )
    return Gate(text, m.group("arm"), m.group("op"), m.group("rhs"), float(level) / 100)


def _check_bound(text: str, rhs: str) -> None:
    """A number on the right is a pass rate: finite, from 0 to 1. ``float`` takes 'nan', 'inf' and
    '1e309' (inf), against which every comparison is fixed whatever the sweep gives: such a gate
    would only be found wrong after the sweep, so it is refused before anything runs."""
    if _is_number(rhs) and not (math.isfinite(float(rhs)) and 0.0 <= float(rhs) <= 1.0):
        raise ValueError(
            f"gate {text!r}: the bound {rhs!r} is not a pass rate; give a number from 0 to "
            "1, e.g. 0.85"
        )


def arm_key(benchmark: str, arm: str, benchmarks: Iterable[str]) -> str:
    """The name a gate (and the live tallies) give an arm: prefixed by its benchmark
    only when the run has several."""
    return arm if len(set(benchmarks)) <= 1 else f"{benchmark}/{arm}"


def bind_gates(gates: Iterable[Gate], arms: Mapping[str, Iterable[str]]) -> tuple[Gate, ...]:
    """Every gate with its names checked and bound (``Gate.bind``);
    ``arms``: benchmark -> its arm names.

    The plugin calls it before the first item runs: a misspelt or ambiguous arm would otherwise be
    found only after the whole sweep, as a failed gate.
    """
    names = ArmNames(arms)
    return tuple(gate.bind(names) for gate in gates)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
