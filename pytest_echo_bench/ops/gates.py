"""CI gates: ``--bench-gate "ARM>=0.85"`` or relative ``"judge>=strong-0.02"`` decide the exit status."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt,
}
_GATE = re.compile(r"^\s*(?P<arm>[^<>=]+?)\s*(?P<op>>=|<=|>|<)\s*(?P<rhs>\S.*?)\s*$")
_DELTA = re.compile(r"^(?P<arm>.+?)(?P<delta>[+-]\d+(?:\.\d+)?)$")


@dataclass(frozen=True)
class Gate:
    text: str
    arm: str
    op: str
    rhs: str

    def check(self, rates: Mapping[str, float]) -> tuple[bool, str]:
        """(passed, explanation) against pass rates by arm key."""
        if self.arm not in rates:
            return False, f"gate {self.text}: arm {self.arm!r} has no results"
        bound = self._bound(rates)
        if bound is None:
            return False, f"gate {self.text}: {self.rhs!r} is neither a number nor an arm with results"
        ok = _OPS[self.op](rates[self.arm], bound)
        verdict = "passed" if ok else "FAILED"
        return ok, f"gate {self.text}: {verdict} ({self.arm} = {rates[self.arm]:.3f}, bound {bound:.3f})"

    def _bound(self, rates: Mapping[str, float]) -> float | None:
        try:
            return float(self.rhs)
        except ValueError:
            pass
        if self.rhs in rates:  # arm names may contain '-' and digits: the whole name wins
            return rates[self.rhs]
        m = _DELTA.match(self.rhs)
        if m and m.group("arm") in rates:
            return rates[m.group("arm")] + float(m.group("delta"))
        return None


def parse_gate(text: str) -> Gate:
    """A gate rule; ValueError (the message says what a rule looks like) for anything else."""
    m = _GATE.match(text)
    if not m:
        raise ValueError(f"--bench-gate must look like 'ARM>=0.85' or 'ARM>=OTHER-0.02', got {text!r}")
    return Gate(text, m.group("arm"), m.group("op"), m.group("rhs"))
