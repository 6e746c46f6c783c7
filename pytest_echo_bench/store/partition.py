"""The stable partition of items into shards: one hash every machine, process and command agrees on.

Below ``plugin/`` so that ``echo-bench estimate --bench-shard K/N`` (which never imports pytest)
counts the same share of a sweep as the run's deselection does.
"""

from __future__ import annotations

import hashlib

from pytest_echo_bench.store.records import Key


def shard_of(key: Key, total: int) -> int:
    """The 1-based shard of ``total`` that owns ``key`` (benchmark, task_id, arm, epoch)."""
    # sha256, not hash(): every machine and process must agree on the partition. Epoch 1 hashes
    # as the key did before epochs existed, so a K = 1 sweep keeps its shards.
    parts = key[:3] if key[3] == 1 else (*key[:3], str(key[3]))
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).digest()  # ids may hold lone surrogates
    return int.from_bytes(digest[:8], "big") % total + 1
