"""Stopping a sweep once its comparisons are decided: the plan, and the monitor that watches rows.

A plan names pairs of arms of one benchmark, ``alpha`` and a ``margin``. The monitor is fed every
graded row in the order it arrives (the controller, serially; the report, in file order); once
both arms have all their samples of an item, the item's paired difference (mean score of a minus
mean score of b, in [-1, 1]) goes to that pair's anytime-valid test (``analysis.sequential``) of the
mean difference ``-margin``. Holm's step-down over the pairs' anytime-valid p-values says which
pairs are decided; since those p-values only fall, a pair once decided stays decided, and the
family-wise error over every look is that of Holm at the sweep's last look: at most ``alpha``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_echo_bench.analysis.sequential import Betting
from pytest_echo_bench.analysis.stats import holm
from pytest_echo_bench.store.files import UNGRADED
from pytest_echo_bench.store.meta import DecideRecord
from pytest_echo_bench.store.records import Meta

ALPHA, MARGIN = 0.05, 0.0
PairKey = tuple[str, str, str]  # (benchmark, a, b)


@dataclass(frozen=True)
class Plan:
    pairs: tuple[PairKey, ...]
    alpha: float = ALPHA
    margin: float = MARGIN  # 0: superiority either way; > 0: non-inferiority of a within the margin

    def record(self) -> DecideRecord:
        """The plan as the meta line records it."""
        return DecideRecord([list(p) for p in self.pairs], self.alpha, self.margin)

    @classmethod
    def read(cls, record: DecideRecord) -> Plan | str:
        """The plan of a meta line's ``decide``, or why it cannot be used
        (a report says so, in one line)."""
        try:
            pairs = tuple((str(b), str(x), str(y)) for b, x, y in record.pairs or ())
            alpha = float(ALPHA if record.alpha is None else record.alpha)
            margin = float(MARGIN if record.margin is None else record.margin)
        except (TypeError, ValueError):
            return "its pairs must be [benchmark, a, b] and its alpha and margin numbers"
        if not pairs:
            return "it names no pair"
        same = next((p for p in pairs if p[1] == p[2]), None)
        if same is not None:
            return f"its pair {list(same)} compares an arm with itself"
        if not 0 < alpha < 1:  # NaN included: no comparison holds it
            return f"its alpha must be between 0 and 1, got {alpha!r}"
        if not 0 <= margin < 1:
            return f"its margin must be at least 0 and below 1, got {margin!r}"
        return cls(pairs, alpha, margin)


def resolve_pair(text: str, arms: Mapping[str, Sequence[str]]) -> PairKey:
    """``A,B`` (each ``arm`` or ``benchmark/arm``) as (benchmark, a, b);
    ValueError naming what is wrong."""
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
    # benchmark -> samples per item, when more than 1
    epochs: Mapping[str, int] = field(default_factory=dict)
    pairs: list[PairState] = field(init=False)
    _scores: dict[tuple[str, str, str], dict[int, float]] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.pairs = [PairState(key, Betting(-self.plan.margin)) for key in self.plan.pairs]
        # Each arm's pairs, so that a row costs its own pairs only (a
        # report replays a million rows).
        self._by_arm: dict[tuple[str, str], list[PairState]] = {}
        for state in self.pairs:
            # a pair of one arm twice (a hand-edited plan): once
            for arm in dict.fromkeys(state.key[1:]):
                self._by_arm.setdefault((state.key[0], arm), []).append(state)

    def add(self, benchmark: str, task_id: str, arm: str, epoch: int, score: float | None) -> bool:
        """One row (score 1 correct, 0 wrong or unparseable, None an error: ``score_of``); True when
        it completed an item of a pair. An error row was never graded: it is not counted, so a
        retried row of its key can be."""
        states = self._by_arm.get((benchmark, arm))
        if states is None or score is None:
            return False
        samples = self._scores.setdefault((benchmark, task_id, arm), {})
        if epoch in samples:  # the first row of a key counts: a look already used it
            return False
        samples[epoch] = score
        # An item of a pair is complete, once, when the later of its arms gets its last sample:
        # no set of the pairs done is needed (it held a tuple per pair and item).
        want = self.epochs.get(benchmark, 1)
        if len(samples) != want:
            return False
        fed = moved = False
        for state in states:
            _, a, b = state.key
            if len(self._scores.get((benchmark, task_id, b if arm == a else a), ())) >= want:
                test = state.test
                best = (test.best_up, test.best_down)
                test.update(self._mean(benchmark, task_id, a) - self._mean(benchmark, task_id, b))
                fed = True
                moved = moved or (test.best_up, test.best_down) != best
        if moved:  # a p-value only changes with a new best wealth: else Holm would say what it said
            self._holm()
        return fed

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

    def figures(self) -> list[PairFigures]:
        """Each pair's anytime-valid figures: what the summary, the stop
        marker, the page and the report show."""
        out = []
        for s in self.pairs:
            lo, hi = s.test.interval(self.plan.alpha)
            out.append(
                PairFigures(
                    s.key[0],
                    s.key[1],
                    s.key[2],
                    s.test.n,
                    s.test.mean(),
                    s.test.p_value(),
                    s.p_holm,
                    (lo, hi),
                    self.plan.alpha,
                    self.plan.margin,
                    s.decided_at,
                    DIRECTIONS[
                        (bool(self.plan.margin), s.direction if s.decided_at is not None else 0)
                    ],
                    s.verdict(self.plan.margin),
                    self._empty(s) if not s.test.n else "",
                )
            )
        return out

    def _empty(self, state: PairState) -> str:
        """Why a pair has no item yet: an arm without a graded row, or
        no task id both arms answered."""
        bench, a, b = state.key
        graded = {arm for (bn, _, arm) in self._scores if bn == bench}
        missing = [arm for arm in (a, b) if arm not in graded]
        if missing:
            return f"no graded row of {' or '.join(missing)}: nothing to compare yet"
        every = " (with every sample)" if self.epochs.get(bench, 1) > 1 else ""
        return f"no item both {a} and {b} answered{every}: nothing to compare yet"


# (margin given, direction) -> how a decided pair went; 0: not decided.
DIRECTIONS = {
    (False, 1): "a-better",
    (False, -1): "b-better",
    (True, 1): "a-non-inferior",
    (True, -1): "a-inferior",
    (False, 0): "none",
    (True, 0): "none",
}
DECIDED_STATE, UNDECIDED_STATE = "decided", "undecided"


@dataclass(frozen=True)
class PairFigures:
    """One planned pair's anytime-valid figures at one moment: every format
    shows these, none recomputes them."""

    benchmark: str
    a: str
    b: str
    n: int  # items both arms answered, fed to the test
    diff: float | None  # mean of score(a) - score(b) over them
    p_anytime: float
    p_holm: float
    ci: tuple[float, float]  # the (1 - alpha) confidence sequence of a - b
    alpha: float
    margin: float
    decided_at: int | None  # items at the look that decided it
    direction: str  # one of DIRECTIONS' values: which way it was decided, "none" while undecided
    verdict: str
    note: str = ""  # why there is nothing to compare yet (n == 0)

    @property
    def state(self) -> str:
        return UNDECIDED_STATE if self.decided_at is None else DECIDED_STATE

    @property
    def level(self) -> float:
        return 1 - self.alpha

    def to_json(self) -> dict[str, Any]:
        return {
            "benchmark": self.benchmark,
            "a": self.a,
            "b": self.b,
            "state": self.state,
            "direction": self.direction,
            "n": self.n,
            "diff": self.diff,
            "p_anytime": self.p_anytime,
            "p_holm": self.p_holm,
            "ci": list(self.ci),
            "alpha": self.alpha,
            "level": self.level,
            "margin": self.margin,
            "decided_at": self.decided_at,
            "verdict": self.verdict,
            **({"note": self.note} if self.note else {}),
        }


# How a sweep with a decide plan was collected, which says what its fixed-n figures are worth.
RUNNING, STOPPED_EARLY, RAN_TO_END, STOPPED_OTHER = (
    "running",
    "stopped-when-decided",
    "ran-to-end",
    "stopped-before-end",
)


def collection_of(stop_reason: str | None, running: bool = False) -> str:
    """The collection of a sweep whose stop marker gives ``stop_reason`` (None: no marker); a marker
    wins over ``running``: rows of calls in flight still land after a stop."""
    if stop_reason is not None:
        return STOPPED_EARLY if stop_reason == "decided" else STOPPED_OTHER
    return RUNNING if running else RAN_TO_END


def score_of(status: str, passed: bool) -> float | None:
    """A row's score for the decision: 1 passed, 0 graded otherwise (wrong;
    unparseable, as the fixed-n report counts it), None for an error row (the provider
    or the scorer failed) or an unjudged one (a judge gave no grade): nothing was graded."""
    return None if status in UNGRADED else float(passed)


@dataclass(frozen=True)
class Sequential:
    """The anytime-valid figures of a sweep that had a decide plan, and how it was collected; or,
    with ``problem``, why its plan could not be used."""

    collection: str  # RUNNING, STOPPED_EARLY, RAN_TO_END or STOPPED_OTHER
    plan: Plan | None
    pairs: list[PairFigures]
    stop: str = ""  # the stop marker's reason, when it is not "decided"
    problem: str = ""
    # A merged file (stop "merged") of parts one of which stopped when decided: which parts stopped,
    # and why. Each part stopped on its own rows, so neither the merged rows' fixed-n figures nor
    # their anytime-valid ones are valid.
    merged_parts: str = ""
    # Where an earlier run of this file stopped when decided, before a resume that ended
    # otherwise: the fixed-n figures stay not valid (optional stopping); the
    # anytime-valid ones hold at every look.
    earlier: str = ""

    @property
    def fixed_n_valid(self) -> bool:
        """Whether the McNemar p-values and Newcombe intervals of the planned pairs mean what
        they say: not once the sweep (or a part merged into it) stopped on its own decision
        (optional stopping), ever, nor before it ended; a stop the comparison did not decide
        (a quota, -x) leaves them valid."""
        return (
            self.collection in (RAN_TO_END, STOPPED_OTHER)
            and not self.merged_parts
            and not self.earlier
        )


def monitor_of(meta: Meta) -> Monitor | str | None:
    """The monitor of a meta line's decide plan; why the plan cannot be used; None: it has none."""
    if meta.decide is None:
        return None
    plan = Plan.read(meta.decide)
    if isinstance(plan, str):
        return f"the meta line's decide plan cannot be used: {plan}"
    unknown = next(
        (
            f"{b}/{arm}"
            for b, x, y in plan.pairs
            for arm in (x, y)
            if meta.arms and arm not in meta.arms.get(b, ())
        ),
        None,
    )
    if unknown is not None:  # a hand-edited line: its figures would compare an arm no row can be of
        return (
            f"the meta line's decide plan cannot be used: it names arm {unknown!r}, which the "
            "meta line's arms do not hold"
        )
    return Monitor(plan, {name: entry.samples for name, entry in meta.benchmarks.items()})


def sequential(
    watch: Monitor | str,
    stop_reason: str | None,
    running: bool = False,
    figures: list[PairFigures] | None = None,
    merged_parts: str = "",
    earlier: str = "",
) -> Sequential:
    """What every output shows of a plan: ``watch``'s figures (or ``figures``, already computed from
    it) with how the sweep was collected (``earlier``: where an earlier run of it stopped when
    decided); or why the plan cannot be used."""
    stop = stop_reason if stop_reason not in (None, "decided") else None
    collection = collection_of(stop_reason, running)
    decided = merged_parts if collection != RUNNING else ""
    before = earlier if collection != STOPPED_EARLY else ""  # a decided stop says so itself
    if isinstance(watch, str):
        return Sequential(collection, None, [], stop or "", watch, decided, before)
    return Sequential(
        collection,
        watch.plan,
        watch.figures() if figures is None else figures,
        stop or "",
        "",
        decided,
        before,
    )
