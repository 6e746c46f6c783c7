"""The end of a process's batches: what is still open is left running (or cancelled, asked to),
and every item still waiting for one ends without a row, saying where its request is."""

from __future__ import annotations

from collections.abc import Iterable

from pytest_echo_bench.engine.batch_budget import BatchHolds
from pytest_echo_bench.engine.batch_items import Group, OpenBatch
from pytest_echo_bench.engine.batch_results import give_up
from pytest_echo_bench.errors import ProviderError


def cancel_open(groups: Iterable[Group]) -> None:
    """Cancel every open batch the provider knows the id of."""
    for group in groups:
        for bid in [b for ob in group.open for b in ob.batch_ids or ()]:
            try:
                group.api.cancel(bid)
            except ProviderError:
                pass  # a resume reads what it ran, and sends the rest again


def end_group(group: Group, said: str, holds: BatchHolds | None) -> None:
    """End every item of ``group`` still waiting (not sent, or in a batch left open: ``said``)."""
    for p in group.waiting.values():
        give_up(p, "the run is stopping; not sent in a batch")
        if holds is not None:
            holds.end(p)
    for ob in group.open:
        for p in ob.members.values():
            give_up(p, f"in batch {names(ob)}, {said}")
    group.api.close()


def names(ob: OpenBatch) -> str:
    """The provider's ids of a batch (or, unknown yet, the journal's name for it)."""
    return ", ".join(ob.batch_ids or ()) or f"(submission {ob.local}, outcome unknown)"
