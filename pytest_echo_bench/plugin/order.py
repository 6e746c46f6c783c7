"""The order items run in: a seeded permutation stratified over subtasks, or the file's order.

Why random: a sweep stopped early (decided, quota, budget, Ctrl-C) is a prefix, and in file order
a prefix is the first subtasks only. Here every prefix holds each subtask of each benchmark in
proportion: within a (benchmark, subtask) the items are shuffled, the k-th of n (from 0) gets the
position (k + 1/2) / n, and all items are merged by position (ties drawn by a seeded hash), as
Sainte-Lague's divisors share seats. A prefix that reaches position t holds each subtask's
t * n items to within 1/2, so its share of any prefix of k items is off by less than
1/2 + S * n / (2 N) items (S subtasks, N items): under one item when subtasks are of
a size. An item's arms and epochs stay together, in collection order, so the pairs
of a comparison complete early.

The permutation is a function of the seed and each benchmark's examples alone (``random.Random``
seeded by a string is the same in every process): every xdist worker collects the same order, which
is the order xdist's load scheduler hands out; a resume or a shard deselects from it and keeps it.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.store.meta import FILE, RANDOM, OrderRecord

if TYPE_CHECKING:
    from pytest_echo_bench.plugin.collect import BenchItem

DEFAULT_SEED = 0
SCHEME = "stratified-subtask"  # what the meta line's ``order.scheme`` says the random order is


def order_meta(order: str, seed: int) -> OrderRecord:
    """The meta line's ``order``: how this sweep's items are ordered, for resumes to keep."""
    return OrderRecord(FILE) if order == FILE else OrderRecord(RANDOM, SCHEME, seed)


def ordered(items: Sequence[BenchItem], meta: OrderRecord | None,
            universe: Mapping[str, Sequence[Example]] | None = None) -> list[BenchItem]:
    """The benchmark ``items`` in the order ``meta`` (the meta line's ``order``) says; ``universe``:
    every example of each benchmark, so that -k, -m, a shard or a
    resume leave the order as it is."""
    if meta is None or not meta.random:
        return list(items)
    return stratified(items, int(DEFAULT_SEED if meta.seed is None else meta.seed), universe)


def stratified(items: Sequence[BenchItem], seed: int,
               universe: Mapping[str, Sequence[Example]] | None = None) -> list[BenchItem]:
    """``items`` grouped by (benchmark, task id), the groups in the stratified random order of the
    benchmark's examples (``universe``; else those of ``items``)."""
    groups: dict[tuple[str, str], list[BenchItem]] = {}
    for item in items:
        groups.setdefault((item.spec.benchmark, item.example.id), []).append(item)
    position: dict[tuple[str, str], tuple[float, bytes]] = {}
    for bench in dict.fromkeys(b for b, _ in groups):
        examples = universe[bench] if universe and bench in universe else _examples(items, bench)
        position.update(positions(bench, examples, seed))
    # an item its benchmark's examples do not list (none should): after the others
    last = (2.0, b"")
    return [
        item
        for unit in sorted(groups, key=lambda u: position.get(u, last))
        for item in groups[unit]
    ]


def positions(
    bench: str, examples: Sequence[Example], seed: int
) -> dict[tuple[str, str], tuple[float, bytes]]:
    """Each example's place in [0, 1]: the k-th (from 0) of its subtask's n
    shuffled ones at (k + 1/2) / n."""
    strata: dict[str, list[str]] = {}
    for ex in examples:
        strata.setdefault(ex.subtask or "", []).append(ex.id)
    out: dict[tuple[str, str], tuple[float, bytes]] = {}
    for subtask, ids in strata.items():
        ids = list(dict.fromkeys(ids))
        random.Random(f"{seed}\x1f{bench}\x1f{subtask}").shuffle(ids)
        for k, task_id in enumerate(ids):
            out[(bench, task_id)] = ((k + 0.5) / len(ids), _tie(seed, (bench, task_id)))
    return out


def _examples(items: Sequence[BenchItem], bench: str) -> list[Example]:
    return [item.example for item in items if item.spec.benchmark == bench]


def _tie(seed: int, unit: tuple[str, str]) -> bytes:
    # Subtasks of the same size put items at the same positions: which goes first is drawn (by a
    # seeded hash), not left to the subtasks' names.
    return hashlib.sha256(
        "\x1f".join((str(seed), *unit)).encode("utf-8", "surrogatepass")
    ).digest()[:8]
