"""The report payload: what the controller learns of each item, one typed struct built here.

It travels on ``report.bench`` as plain JSON (``to_wire``): xdist sends a report's attributes
through execnet, which carries only builtin types and only strings UTF-8 can encode. Readers
get it back as a ``Payload`` (``Payload.of``) and read attributes, never string keys.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from pytest_echo_bench.engine.outcome import INCOMPLETE, UNAVAILABLE, Outcome
from pytest_echo_bench.store.files import StopReason
from pytest_echo_bench.store.records import Key
from pytest_echo_bench.store.safe_text import escape_id, shown, unescape_id

if TYPE_CHECKING:
    import pytest

    from pytest_echo_bench.plugin.collect import BenchItem


class StopSent(msgspec.Struct, frozen=True):
    """The stop an item's failure caused: the controller needs why, if
    its marker could not be written."""

    reason: str
    message: str  # shown escaped


class Payload(msgspec.Struct, frozen=True, omit_defaults=True):
    kind: str  # engine.outcome: row, incomplete, aborted, unavailable
    benchmark: str
    # as the node id spells it (``escape_id``, reversible): a lone surrogate cannot travel
    task_id: str
    arm: str
    epoch: int
    status: str  # the row's verdict, else the kind
    wall_seconds: float | None
    retries: int
    message: str  # shown escaped: the controller prints it
    # the endpoint's adaptive limit after this item, for the progress line and page
    limit: int | None = None
    throttled: int = 0  # 429 answers this item met
    pace: float | None = None  # requests a second the endpoint is paced at (None: not paced)
    # the limiters' decisions since this process's last item, shown escaped
    decisions: tuple[str, ...] = ()
    optional: bool = False  # unavailable, and the spec says the sweep is complete without this arm
    stop: StopSent | None = None  # this item's failure stopped the run

    @classmethod
    def of_item(cls, item: BenchItem, outcome: Outcome) -> Payload:
        row = outcome.row
        stop = (
            StopSent(outcome.stop.reason, shown(outcome.stop.message))
            if outcome.stop is not None
            else None
        )
        return cls(
            kind=outcome.kind,
            benchmark=item.spec.benchmark,
            task_id=escape_id(item.example.id),
            arm=item.arm,
            epoch=item.epoch,
            status=row.status if row else outcome.kind,
            wall_seconds=row.wall_seconds if row else None,
            retries=outcome.retries,
            message=shown(outcome.message),
            limit=outcome.limit,
            throttled=outcome.throttled if outcome.limit is not None else 0,
            pace=outcome.pace if outcome.limit is not None else None,
            decisions=tuple(shown(line) for line in outcome.decisions),
            optional=(
                outcome.kind == UNAVAILABLE
                and item.spec.arms[item.arm].optional
                and not outcome.misconfigured
            ),
            stop=stop,
        )

    @classmethod
    def lost(cls, key: Key, message: str) -> Payload:
        """The item a lost xdist worker was running: not recorded, so
        resume runs it (unless it was)."""
        return cls(
            kind=INCOMPLETE,
            benchmark=key[0],
            task_id=escape_id(key[1]),
            arm=key[2],
            epoch=key[3],
            status=INCOMPLETE,
            wall_seconds=None,
            retries=0,
            message=shown(message),
        )

    @classmethod
    def of(cls, report: pytest.TestReport) -> Payload | None:
        """The payload a report carries (None: not a benchmark item's call report)."""
        raw = getattr(report, "bench", None)
        return None if raw is None else msgspec.convert(raw, cls)

    def to_wire(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)  # type: ignore[no-any-return]

    @property
    def key(self) -> Key:
        return (self.benchmark, unescape_id(self.task_id), self.arm, self.epoch)

    @property
    def stop_reason(self) -> StopReason | None:
        return StopReason(self.stop.reason, self.stop.message) if self.stop is not None else None
