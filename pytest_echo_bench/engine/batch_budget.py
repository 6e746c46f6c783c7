"""A budget's hold on batched items: each request's worst case, at the batch price, held from
before its batch is sent until its result is read (``budget.hold.Ticket`` with ``batch``).

A request that does not fit is not sent (its item is left for a resume with a larger budget, as
a live call's would be); one whose result brought no answer (an error, expired) is charged
nothing; the item's ticket is then the one its grading draws on, or is closed when it ends
without a row.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

from pytest_echo_bench.budget.hold import Budget, Judged, Settle, Ticket
from pytest_echo_bench.datasets.prompts import render_for
from pytest_echo_bench.engine.batch_items import Pending
from pytest_echo_bench.engine.outcome import Job


class BatchHolds:
    """The holds of this process's batched items, by node id."""

    def __init__(self, budget: Budget, judged: Callable[[Job], Judged | None]) -> None:
        self.budget, self.judged = budget, judged
        self._tickets: dict[str, Ticket] = {}
        self._open: dict[str, tuple[contextlib.ExitStack, Settle]] = {}
        self._lock = threading.Lock()

    def take(self, p: Pending) -> None:
        """Hold ``p``'s worst case before it is sent (raises ``BudgetError`` when it does not
        fit)."""
        item = p.item
        prompt = render_for(item.prompters, item.arm, item.example)
        with self._lock:
            ticket = self._tickets.get(item.nodeid)
            if ticket is None:
                pair = (item.spec.benchmark, item.example.id, item.epoch)
                ticket = self._tickets[item.nodeid] = self.budget.batched(
                    item.spec, item.arm, prompt, pair, self.judged(item))
        stack = contextlib.ExitStack()
        settle = stack.enter_context(ticket.call(item.arm, prompt))
        with self._lock:
            self._open[item.nodeid] = (stack, settle)

    def pay(self, item: Job, cost: float | None) -> None:
        """``item``'s result is read: charge ``cost`` (None: unknown, its worst case stands)."""
        with self._lock:
            held = self._open.pop(item.nodeid, None)
        if held is not None:
            stack, settle = held
            settle(cost)
            stack.close()

    def ticket(self, item: Job) -> Ticket | None:
        """The ticket ``item``'s grading draws on (taken: the item is ending)."""
        with self._lock:
            return self._tickets.pop(item.nodeid, None)

    def end(self, p: Pending) -> None:
        """``p``'s item ended without a row: nothing more is charged for its request."""
        self.pay(p.item, 0.0)
        ticket = self.ticket(p.item)
        if ticket is not None:
            self.budget.end(ticket)
