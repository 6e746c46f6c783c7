"""Shards: a stable partition of items by a hash of (benchmark, task_id, arm[, epoch])."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from pytest_echo_bench.store.partition import shard_of


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based, as CI matrices count
    total: int

    def __str__(self) -> str:
        return f"{self.index}/{self.total}"

    def owns(self, key: tuple[str, str, str, int]) -> bool:
        return shard_of(key, self.total) == self.index  # the hash lives in store/: the estimate uses it too


def parse_shard(text: str | None) -> Shard | None:
    """``"K/N"`` with 1 <= K <= N; None when unset; UsageError otherwise."""
    if not text:
        return None
    head, sep, tail = text.partition("/")
    try:
        shard = Shard(int(head), int(tail))
    except ValueError:
        shard = Shard(0, 0)
    if not sep or not 1 <= shard.index <= shard.total:
        raise pytest.UsageError(f"--bench-shard must be K/N with 1 <= K <= N (e.g. 2/4), got {text!r}")
    return shard
