"""The end of a process's batches: what is still open is left running (or cancelled, asked to),
and every item still waiting for one ends without a row, saying where its request is."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from concurrent.futures import Future

from pytest_echo_bench.engine.batch_budget import BatchHolds
from pytest_echo_bench.engine.batch_items import Group, OpenBatch, Pending
from pytest_echo_bench.engine.batch_results import give_up
from pytest_echo_bench.engine.failures import Failures
from pytest_echo_bench.engine.outcome import ABORTED, INCOMPLETE, Outcome
from pytest_echo_bench.errors import LocalError, PermanentError, ProviderError
from pytest_echo_bench.providers.batch import UNKNOWN, BatchStatus
from pytest_echo_bench.store.batchlog import BatchState


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


def tell_unknown(status: BatchStatus, ob: OpenBatch) -> BatchStatus:
    """A status word the provider does not document is no end: the batch is polled again; it is
    said once a batch on stderr, so a batch that stays in it is seen."""
    if status.state == UNKNOWN and not ob.told:
        ob.told = True
        print(f"echo-bench: batch {status.batch_id} is in a state this version does not know "
              f"({status.raw!r}): polling it on until it ends", file=sys.stderr, flush=True)
    return status


def unreadable(bid: str, exc: PermanentError) -> PermanentError:
    """Why the requests of an ended batch whose results could not all be read have error rows:
    their answers may be in what could not be read (and billed), so they are not sent again
    unasked; ``--bench-retry-errors`` sends them again."""
    return PermanentError(f"batch {bid}: its results could not all be read ({exc}); this "
                          "request's answer may be among them, so it is not sent again: "
                          "--bench-retry-errors sends it again")


def leave(group: Group, ob: OpenBatch, message: str) -> None:
    """Stop waiting on ``ob`` (left running for a resume): its items end without a row."""
    for p in ob.members.values():
        give_up(p, message, INCOMPLETE)
    group.open.remove(ob)


def end_all(held: list[Pending], futures: list[Future[Outcome]], failures: Failures,
            cause: LocalError) -> None:
    """End every item still waiting when the submitter cannot go on: the first one ``held`` says
    the stop, the others end unrecorded."""
    first = next(iter(held), None)  # the item the stop is said on
    for future in futures:
        if future.done():
            continue
        if first is not None:
            future.set_result(failures.local(first.item, cause))
            first = None
        else:
            future.set_result(Outcome(ABORTED, message=f"not recorded: {cause}"))


def publish(groups: Iterable[Group], to: Callable[[list[BatchState]], None]) -> None:
    """Say what the open batches are doing (a file per process, read by the displays)."""
    groups = list(groups)
    if not groups:  # no batched item: nothing to say
        return
    states = [BatchState(bid, g.runtime.spec.benchmark, g.runtime.name, st.state, st.done,
                         st.total, ob.since)
              for g in groups for ob in g.open for bid, st in ob.status.items()]
    try:
        to(states)
    except OSError:
        pass  # a display's file: the batches go on without it
