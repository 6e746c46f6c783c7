"""The stable partition of items into shards: one hash every machine, process and command agrees on.

Below ``plugin/`` so that ``echo-bench estimate --bench-shard K/N`` (which never imports pytest)
counts the same share of a sweep as the run's deselection does.
"""

from __future__ import annotations

import hashlib

from pytest_echo_bench.store.records import Key


def shard_of(key: Key, total: int) -> int:
    """The 1-based shard of ``total`` that owns ``key`` (benchmark, task_id, arm, epoch)."""
    # sha256, not hash(): every machine and process must agree on the partition. The arm and
    # the epoch are left out, so a shard's report has whole pairs and a lost shard whole items.
    # ids may hold lone surrogates
    digest = hashlib.sha256(f"{key[0]}\x1f{key[1]}".encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % total + 1
