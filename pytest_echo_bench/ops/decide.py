"""Stopping a sweep once its comparisons are decided: the plan, and the monitor that watches rows.

A plan names pairs of arms of one benchmark, ``alpha`` and a ``margin``. The monitor is fed every
graded row in the order it arrives (the controller, serially; the report, in file order); once
both arms have all their samples of an item, the item's paired difference (mean score of a minus
mean score of b, in [-1, 1]) goes to that pair's anytime-valid test (``ops.sequential``) of the
mean difference ``-margin``. Holm's step-down over the pairs' anytime-valid p-values says which
pairs are decided; since those p-values only fall, a pair once decided stays decided, and the
family-wise error over every look is that of Holm at the sweep's last look: at most ``alpha``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_echo_bench.ops.results import Results
from pytest_echo_bench.ops.sequential import Betting
from pytest_echo_bench.ops.stats import holm
from pytest_echo_bench.store.files import DECIDED, read_end, read_json, read_stop, stop_path

ALPHA, MARGIN = 0.05, 0.0
PairKey = tuple[str, str, str]  # (benchmark, a, b)


@dataclass(frozen=True)
class Plan:
    pairs: tuple[PairKey, ...]
    alpha: float = ALPHA
    margin: float = MARGIN  # 0: superiority either way; > 0: non-inferiority of a within the margin

    def to_json(self) -> dict[str, Any]:
        return {"pairs": [list(p) for p in self.pairs], "alpha": self.alpha, "margin": self.margin}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Plan | None:
        """A plan as the meta line records it; None when it records none or one this cannot read."""
        try:
            pairs = tuple((str(b), str(x), str(y)) for b, x, y in data.get("pairs") or ())
            alpha, margin = float(data.get("alpha", ALPHA)), float(data.get("margin", MARGIN))
        except (TypeError, ValueError):
            return None
        if not pairs or not 0 < alpha < 1 or not 0 <= margin < 1:
            return None
        return cls(pairs, alpha, margin)


def resolve_pair(text: str, arms: Mapping[str, Sequence[str]]) -> PairKey:
    """``A,B`` (each ``arm`` or ``benchmark/arm``) as (benchmark, a, b); ValueError naming what is wrong."""
    names = [n.strip() for n in text.split(",")]
    if len(names) != 2 or not all(names):
        raise ValueError(f"a pair is two arms, A,B (each arm or benchmark/arm), got {text!r}")
    found = [_arm(name, arms) for name in names]
    if found[0][0] != found[1][0]:
        raise ValueError(f"{text!r}: both arms must be of one benchmark (items pair up by task id)")
    if found[0][1] == found[1][1]:
        raise ValueError(f"{text!r}: an arm cannot be compared with itself")
    return (found[0][0], found[0][1], found[1][1])


def _arm(name: str, arms: Mapping[str, Sequence[str]]) -> tuple[str, str]:
    bench, sep, arm = name.rpartition("/")
    if sep:
        if arm in arms.get(bench, ()):
            return bench, arm
        raise ValueError(f"unknown arm {name!r}; the specs have: {_known(arms)}")
    owners = [b for b, names in arms.items() if name in names]
    if len(owners) == 1:
        return owners[0], name
    if owners:
        raise ValueError(f"arm {name!r} is in {', '.join(sorted(owners))}: name it benchmark/arm")
    raise ValueError(f"unknown arm {name!r}; the specs have: {_known(arms)}")


def _known(arms: Mapping[str, Sequence[str]]) -> str:
    return ", ".join(f"{b}/{a}" for b, names in sorted(arms.items()) for a in names)


@dataclass
class PairState:
    """One pair's test, and once Holm decides it: at how many items, which way."""

    key: PairKey
    test: Betting
    decided_at: int | None = None
    direction: int = 0  # +1: a above b - margin (a better, or non-inferior); -1: below
    p_holm: float = 1.0

    def verdict(self, margin: float) -> str:
        a, b = self.key[1], self.key[2]
        if self.decided_at is None:
            return "undecided"
        if margin:
            return (f"{a} non-inferior to {b} (margin {margin:g})" if self.direction > 0
                    else f"{a} inferior to {b} by more than {margin:g}")
        return f"{a} better than {b}" if self.direction > 0 else f"{b} better than {a}"


@dataclass
class Monitor:
    """Fed graded rows; keeps each planned pair's test and says when every pair is decided."""

    plan: Plan
    epochs: Mapping[str, int] = field(default_factory=dict)  # benchmark -> samples per item, when more than 1
    pairs: list[PairState] = field(init=False)
    _scores: dict[tuple[str, str, str], dict[int, float]] = field(default_factory=dict, init=False)
    _paired: set[tuple[PairKey, str]] = field(default_factory=set, init=False)

    def __post_init__(self) -> None:
        self.pairs = [PairState(key, Betting(-self.plan.margin)) for key in self.plan.pairs]
        self._arms = {(b, arm) for b, x, y in self.plan.pairs for arm in (x, y)}

    def add(self, benchmark: str, task_id: str, arm: str, epoch: int, score: float | None) -> bool:
        """One row (score 1 correct, 0 wrong or unparseable, None an error: ``score_of``); True when it
        completed an item of a pair. An error row was never graded: it is not counted, so a retried row
        of its key can be."""
        if (benchmark, arm) not in self._arms or score is None:
            return False
        samples = self._scores.setdefault((benchmark, task_id, arm), {})
        samples.setdefault(epoch, score)  # the first row of a key counts: a look already used it
        fed = False
        for state in self.pairs:
            bench, a, b = state.key
            if bench == benchmark and arm in (a, b) and self._complete(state.key, task_id):
                state.test.update(self._mean(bench, task_id, a) - self._mean(bench, task_id, b))
                fed = True
        if fed:
            self._holm()
        return fed

    def _complete(self, key: PairKey, task_id: str) -> bool:
        want = self.epochs.get(key[0], 1)
        done = all(len(self._scores.get((key[0], task_id, arm), ())) >= want for arm in key[1:])
        if done and (key, task_id) not in self._paired:
            self._paired.add((key, task_id))
            return True
        return False

    def _mean(self, bench: str, task_id: str, arm: str) -> float:
        scores = self._scores[(bench, task_id, arm)]
        return math.fsum(scores.values()) / len(scores)

    def _holm(self) -> None:
        adjusted = holm([s.test.p_value() for s in self.pairs])
        for state, q in zip(self.pairs, adjusted, strict=True):
            state.p_holm = q
            if state.decided_at is None and q <= self.plan.alpha:
                state.decided_at, state.direction = state.test.n, state.test.direction()

    def all_decided(self) -> bool:
        return all(s.decided_at is not None for s in self.pairs)

    def figures(self) -> list[dict[str, Any]]:
        """Each pair's anytime-valid figures, as the summary, the stop marker and the report give them."""
        out = []
        for s in self.pairs:
            lo, hi = s.test.interval(self.plan.alpha)
            out.append({"benchmark": s.key[0], "a": s.key[1], "b": s.key[2], "n": s.test.n,
                        "diff": s.test.mean(), "p_anytime": s.test.p_value(), "p_holm": s.p_holm,
                        "ci": [lo, hi], "level": 1 - self.plan.alpha, "margin": self.plan.margin,
                        "decided_at": s.decided_at, "verdict": s.verdict(self.plan.margin)})
        return out


def score_of(status: str, passed: bool) -> float | None:
    """A row's score for the decision: 1 passed, 0 graded otherwise (wrong; unparseable, as the fixed-n
    report counts it), None for an error row: the provider or the scorer failed, nothing was graded."""
    return None if status == "error" else float(passed)


# How a report names the way a sweep with a decide plan ended, and what that makes valid.
STOPPED_EARLY, RAN_TO_END = "stopped-when-decided", "ran-to-end"
SEQ_EARLY = ("this sweep stopped once these comparisons were decided, looking after every item: only these anytime-valid "
             "p-values and intervals are valid for them; the fixed-n p-values and intervals of the paired comparison "
             "(McNemar, Newcombe) are not (optional stopping)")
SEQ_END = ("this sweep ran to the end: the fixed-n paired comparison is valid, and so are these anytime-valid figures "
           "(wider: they hold at every look)")
SEQ_HINT = ("p anytime: Ville's inequality on betting wealth (Waudby-Smith & Ramdas 2024), two-sided; p holm: Holm over "
            "the planned pairs; interval: the confidence sequence of a - b at that level")


def seq_early(reason: str, message: str) -> str:
    """What a sweep that stopped early for ``reason`` makes valid (not decided: a budget, -x, a signal)."""
    return (f"this sweep stopped early ({reason}: {message})".replace(": )", ")") + " before it ran to the end: the fixed-n "
            "p-values and intervals of the paired comparison (McNemar, Newcombe) are not valid for it (its n was not "
            "fixed in advance); these anytime-valid figures are")


SEQ_MERGED = ("parts of this merged file stopped early ({why}): neither the fixed-n comparison nor these anytime-valid "
              "figures of the merged rows are valid (each part stopped on its own rows, not the merged ones); each "
              "part's own figures are: echo-bench report PART")


@dataclass(frozen=True)
class Collection:
    """How the sweep of a report's files ended, as the files record it (``store.files.RUN_END``), or
    for a file without that record, its stop marker."""

    reason: str = ""  # "": ran to the end; else the first stopped file's reason ("merged": its parts')
    message: str = ""
    pairs: tuple[dict[str, Any], ...] = ()  # a decided stop's figures, as the run recorded them at the stop

    @property
    def early(self) -> bool:
        return bool(self.reason)

    def note(self) -> str:
        if not self.reason:
            return SEQ_END
        if self.reason == DECIDED:
            return SEQ_EARLY
        if self.reason == "merged":
            return SEQ_MERGED.format(why=self.message)
        return seq_early(self.reason, self.message)


def collection(files: Sequence[Path]) -> Collection:
    """The one reading of how a sweep ended: every report format takes it from here."""
    for path in files:
        found, stopped = read_end(path)
        if not found:  # a file written before the end record: its marker, when it is beside it
            stop = read_stop(path)
            stopped = {**read_json(stop_path(path)), "reason": stop.reason, "message": stop.message} if stop else None
        if stopped:
            pairs = stopped.get("pairs") if stopped.get("reason") == DECIDED else None
            return Collection(str(stopped.get("reason") or "stopped"), str(stopped.get("message") or ""),
                              tuple(p for p in pairs if isinstance(p, dict)) if isinstance(pairs, list) else ())
    return Collection()


@dataclass(frozen=True)
class Sequential:
    """A report's anytime-valid figures of a sweep that had a decide plan, and how it ended."""

    stopped_early: bool  # the sweep stopped before its end: fixed-n tests of these pairs are not valid
    plan: Plan
    pairs: list[dict[str, Any]]
    note: str = SEQ_END  # what its ending makes valid (``Collection.note``)
    reason: str = ""  # why it stopped early ("decided", "budget", ..., "merged"); "": it ran to the end


def replay(results: Results, ended: Collection | None = None) -> Sequential | None:
    """The plan of the first meta line that has one, run over the rows in file order (as the
    controller fed them, a serial run exactly; under xdist in the order the rows were appended, which
    may differ from the controller's by a row or two: a decided stop's ``decided_at`` is the one the
    run recorded when it stopped)."""
    meta = next((m for m in results.metas if m.decide), None)
    plan = Plan.from_json(meta.decide) if meta is not None else None
    if meta is None or plan is None:
        return None
    ended = ended or Collection()
    epochs = {name: int(info.get("epochs") or 1) for name, info in meta.benchmarks.items()}
    monitor = Monitor(plan, epochs)
    for item in results.rows:
        monitor.add(item.benchmark, item.task_id, item.arm, item.epoch, score_of(item.status, item.passed))
    figures = monitor.figures()
    recorded = {(p.get("benchmark"), p.get("a"), p.get("b")): p for p in ended.pairs}
    for f in figures:
        at = recorded.get((f["benchmark"], f["a"], f["b"]), {}).get("decided_at")
        if isinstance(at, int) and not isinstance(at, bool):
            f["decided_at"] = at
    return Sequential(ended.early, plan, figures, ended.note(), ended.reason)
