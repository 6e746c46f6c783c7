"""Shards: a stable partition of items by a hash of (benchmark, task_id, arm[, epoch])."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based, as CI matrices count
    total: int

    def __str__(self) -> str:
        return f"{self.index}/{self.total}"

    def owns(self, key: tuple[str, str, str, int]) -> bool:
        # sha256, not hash(): every machine and process must agree on the partition. Epoch 1 hashes
        # as the key did before epochs existed, so a K = 1 sweep keeps its shards.
        parts = key[:3] if key[3] == 1 else (*key[:3], str(key[3]))
        digest = hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).digest()  # ids may hold lone surrogates
        return int.from_bytes(digest[:8], "big") % self.total == self.index - 1


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
