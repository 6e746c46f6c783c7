"""An arm's ``batch:`` key: its calls sent through the provider's batch API, and how.

``batch: true`` takes the defaults; a mapping sets them (and turns batching on); ``batch: false``
keeps the arm live even under ``--bench-batch``. A run setting, never an arm change: the key is
left out of the arm's options, so the fingerprint is the same with batches on or off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_echo_bench.spec.values import positive, shown

BATCH_KEYS = ("size", "poll_s", "open")
MAX_BATCH_SIZE = 100_000  # Anthropic's limit; a provider's own (``max_requests``) may cut it
MAX_OPEN = 100
MAX_POLL_S = 3600.0


@dataclass(frozen=True)
class BatchSpec:
    """How an arm's batches are made: at most ``size`` requests each (the provider's own limit
    caps it), polled every ``poll_s`` seconds (sooner at first: a short batch is not waited on for
    a whole interval), ``open`` of them submitted and not yet collected at once."""

    size: int = 1000
    poll_s: float = 30.0
    open: int = 4


DEFAULT = BatchSpec()


def batch_setting(value: Any, arm: str, fail: Any) -> BatchSpec | bool | None:
    """The arm's ``batch:`` as given: None when absent, False when off, else how to batch."""
    where = ("arms", arm, "batch")
    if value is None:
        return None
    if isinstance(value, bool):
        return DEFAULT if value else False
    if not isinstance(value, dict):
        raise fail(f"batch must be true, false or a mapping of {', '.join(BATCH_KEYS)}, "
                   f"got {shown(value)}", *where)
    unknown = sorted(set(map(str, value)) - set(BATCH_KEYS))
    if unknown:
        raise fail(f"unknown batch key {unknown[0]!r}; known: {', '.join(BATCH_KEYS)}",
                   *where, unknown[0])
    return BatchSpec(
        size=_whole(value.get("size", DEFAULT.size), (*where, "size"), fail, MAX_BATCH_SIZE),
        poll_s=positive(value.get("poll_s", DEFAULT.poll_s), ".".join((*where, "poll_s")), fail,
                        MAX_POLL_S),
        open=_whole(value.get("open", DEFAULT.open), (*where, "open"), fail, MAX_OPEN),
    )


def _whole(value: Any, where: tuple[str, ...], fail: Any, most: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise fail(f"must be a whole number from 1 to {most:,}, got {shown(value)}", *where)
    return value
