"""A budget's hold on batched items: each request's worst case, at the batch price, held from
before its batch is sent until its result is read (``budget.hold.Ticket`` with ``batch``).

A request that does not fit is not sent (its item is left for a resume with a larger budget, as
a live call's would be); one whose result brought no answer (an error, expired) is charged
nothing; the item's ticket is then the one its grading draws on, or is closed when it ends
without a row.

A request an earlier run sent (its batch adopted on a resume) holds nothing: its answer was
already bought, so what it cost is charged when it is read, whether or not it fits what is left,
and is its row's ``charged_usd``. When that run was killed under a budget, the resume already
carries the call's worst case among its lost holds: the answer's cost replaces it, never adds to it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

from pytest_echo_bench.budget.hold import Budget, Judged, Settle, Ticket, pair_name
from pytest_echo_bench.budget.ledger import LedgerState
from pytest_echo_bench.budget.worst import call_worst
from pytest_echo_bench.datasets.prompts import render_for
from pytest_echo_bench.engine.batch_items import Pending
from pytest_echo_bench.engine.outcome import Job


class BatchHolds:
    """The holds of this process's batched items, by node id."""

    def __init__(self, budget: Budget, judged: Callable[[Job], Judged | None]) -> None:
        self.budget, self.judged = budget, judged
        self._tickets: dict[str, Ticket] = {}
        self._open: dict[str, tuple[contextlib.ExitStack, Settle]] = {}
        # node id -> the ticket and worst case of a request an earlier run sent (adopted)
        self._adopted: dict[str, tuple[Ticket, float]] = {}
        self._lock = threading.Lock()

    def take(self, p: Pending) -> None:
        """Hold ``p``'s worst case before it is sent (raises ``BudgetError`` when it does not
        fit)."""
        item = p.item
        prompt = render_for(item.prompters, item.arm, item.example)
        ticket = self._ticket(item, prompt)
        stack = contextlib.ExitStack()
        settle = stack.enter_context(ticket.call(item.arm, prompt))
        with self._lock:
            self._open[item.nodeid] = (stack, settle)

    def adopt(self, p: Pending) -> None:
        """``p``'s request is in an earlier run's batch: nothing is held, its answer is charged
        as it is read (``pay``)."""
        item = p.item
        prompt = render_for(item.prompters, item.arm, item.example)
        worst = call_worst(item.spec, item.arm, prompt, batch=True) or 0.0
        ticket = self._ticket(item, prompt)
        with self._lock:
            self._adopted[item.nodeid] = (ticket, worst)

    def _ticket(self, item: Job, prompt: str) -> Ticket:
        with self._lock:
            ticket = self._tickets.get(item.nodeid)
            if ticket is None:
                pair = (item.spec.benchmark, item.example.id, item.epoch)
                ticket = self._tickets[item.nodeid] = self.budget.batched(
                    item.spec, item.arm, prompt, pair, self.judged(item))
            return ticket

    def pay(self, item: Job, cost: float | None) -> None:
        """``item``'s result is read: charge ``cost`` (None: unknown, its worst case stands)."""
        with self._lock:
            held = self._open.pop(item.nodeid, None)
            adopted = self._adopted.pop(item.nodeid, None)
        if held is not None:
            stack, settle = held
            settle(cost)
            stack.close()
        elif adopted is not None:
            self._bought(*adopted, cost)

    def _bought(self, ticket: Ticket, worst: float, cost: float | None) -> None:
        """An adopted request's answer: already spent, so charged whole (None: its worst case)
        whether or not it fits; the item's ticket starts (taking its pledge, if another arm
        made one) so its close charges it, and the row says it."""

        def change(state: LedgerState) -> bool:
            if not ticket.started:
                if ticket.pair is not None:
                    ticket._take_pledge(state, pair_name(ticket.pair))
                ticket.started = True
            return state.counted_lost(ticket.names, worst)

        counted = self.budget.ledger_change(change)
        spent = worst if cost is None else cost
        with ticket._lock:
            ticket.spent += spent
            if counted:  # the ledger charged its worst case as that run's lost hold: not again
                ticket.carried += min(spent, worst)

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
