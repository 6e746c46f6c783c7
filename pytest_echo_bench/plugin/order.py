"""The order items run in: a seeded permutation stratified over subtasks, or the file's order.

Why random: a sweep stopped early (decided, quota, budget, Ctrl-C) is a prefix, and in file order
a prefix is the first subtasks only. Here every prefix holds each subtask of each benchmark in
proportion: within a (benchmark, subtask) the items are shuffled, the k-th of n gets the position
(k + u) / n (u one uniform draw per subtask), and all items are merged by position. An item's arms
and epochs stay together, in collection order, so the pairs of a comparison complete early.

The permutation is a function of the seed and the items alone (``random.Random`` seeded by a
string is the same in every process): every xdist worker collects the same order, which is the
order xdist's load scheduler hands out; a resume or a shard deselects from it and keeps it.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_echo_bench.plugin.collect import BenchItem

RANDOM, FILE = "random", "file"
DEFAULT_SEED = 0
SCHEME = "stratified-subtask"  # what the meta line's ``order.scheme`` says the random order is


def order_meta(order: str, seed: int) -> dict[str, Any]:
    """The meta line's ``order``: how this sweep's items are ordered, for resumes to keep."""
    return {"order": FILE} if order == FILE else {"order": RANDOM, "scheme": SCHEME, "seed": seed}


def ordered(items: Sequence[BenchItem], meta: dict[str, Any]) -> list[BenchItem]:
    """The benchmark ``items`` in the order ``meta`` (the meta line's ``order``) says."""
    if meta.get("order") != RANDOM:
        return list(items)
    return stratified(items, int(meta.get("seed", DEFAULT_SEED)))


def stratified(items: Sequence[BenchItem], seed: int) -> list[BenchItem]:
    """``items`` grouped by (benchmark, task id), the groups in the stratified random order."""
    groups: dict[tuple[str, str], list[BenchItem]] = {}
    strata: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for item in items:
        unit = (item.spec.benchmark, item.example.id)
        if unit not in groups:
            groups[unit] = []
            strata.setdefault((unit[0], item.example.subtask or ""), []).append(unit)
        groups[unit].append(item)
    position: dict[tuple[str, str], tuple[float, bytes]] = {}
    for (bench, subtask), units in strata.items():
        rng = random.Random(f"{seed}\x1f{bench}\x1f{subtask}")
        rng.shuffle(units)
        offset, n = rng.random(), len(units)
        for k, unit in enumerate(units):
            position[unit] = ((k + offset) / n, _tie(unit))
    return [item for unit in sorted(groups, key=position.__getitem__) for item in groups[unit]]


def _tie(unit: tuple[str, str]) -> bytes:
    # Two subtasks of the same size can put items at the same position: broken by a hash, not by name.
    return hashlib.sha256("\x1f".join(unit).encode("utf-8", "surrogatepass")).digest()[:8]
