"""Arm names as users write them in gates, ``--oracle`` and
``--pair``: ``arm`` or ``benchmark/arm``.

A bare ``arm`` is enough while one benchmark has an arm of that name; when two benchmarks share it
(a merged file of ``bbh`` and ``demo``, both with ``strong``), the name alone would pick one of them
silently, so it is refused with the choices listed. ``benchmark/arm`` is accepted in every run,
one benchmark or several, so a rule written for the nightly merge also holds on one shard.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

ArmRef = tuple[str, str]  # (benchmark, arm)


class ArmNames:
    """The arms of a run or a results file, and the names that pick them."""

    def __init__(self, arms: Mapping[str, Iterable[str]]) -> None:
        self.pairs: list[ArmRef] = [(b, a) for b, names in arms.items() for a in names]
        self.several = len(arms) > 1

    def label(self, pair: ArmRef) -> str:
        """The key reports, summaries and live tallies give an arm (as ``gates.arm_key``)."""
        return f"{pair[0]}/{pair[1]}" if self.several else pair[1]

    def labels(self) -> list[str]:
        return sorted(self.label(p) for p in self.pairs)

    def find(self, name: str) -> ArmRef | None:
        """The arm ``name`` picks; None when none has it; ValueError when it could be several."""
        exact = [p for p in self.pairs if f"{p[0]}/{p[1]}" == name]
        bare = [p for p in self.pairs if p[1] == name]
        # an arm called 'x/y' may also read as benchmark x, arm y
        found = list(dict.fromkeys(exact + bare))
        if len(found) > 1:
            choices = ", ".join(sorted(f"{b}/{a}" for b, a in found))
            raise ValueError(
                f"arm name {name!r} is ambiguous: {len(found)} benchmarks have it; write one "
                f"of {choices}"
            )
        return found[0] if found else None

    def resolve(self, name: str, what: str = "arm") -> ArmRef:
        """The arm ``name`` picks, or ValueError naming the arms there are."""
        pair = self.find(name)
        if pair is None:
            raise ValueError(
                f"no {what} {name!r}; known arms: {', '.join(self.labels()) or '(none)'}"
            )
        return pair
