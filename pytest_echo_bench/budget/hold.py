"""The budget's reservations: before a real call its worst case is held, once it answers what it
cost is charged, and a call whose worst case does not fit is not sent (``BudgetError``).

Every process of a run shares one ``budget.ledger.Ledger``. A call is charged to the accounts of
the item it serves ("run", "bench:<benchmark>", "arm:<benchmark>/<arm>", those that have a
limit): a routing arm's calls to its sub-arms are the routing item's.

An item's hold covers its scorer's judges too: the item's worst case is its arm's and, when the
scorer asks judges, theirs (``budget.judged``); a judge's call is charged to the item's accounts.

Pairs are kept whole: an item (benchmark, task id, epoch) starts only when the worst cases of all
the arms this run runs for it fit at once; then each of its other arms' worst case stays pledged
to it, so once the budget runs short the items already started still finish and no new one
starts (the first new item refused closes its benchmark to new items).

Each process's holds are marked with its name (``budget.holders``): a call that finds no room
settles the holds of processes that are gone (a worker killed mid-call) before it waits or is
refused, so a lost worker's holds block no one for longer than a look at ``/proc``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from pytest_echo_bench.budget import holders
from pytest_echo_bench.budget.judged import Panel, panel
from pytest_echo_bench.budget.judged import call_worst as judge_worst
from pytest_echo_bench.budget.ledger import EPSILON_USD, Ledger, LedgerState
from pytest_echo_bench.budget.worst import call_worst, item_worst
from pytest_echo_bench.errors import BudgetError, LocalError, StoreError
from pytest_echo_bench.spec.load import ArmSpec, Spec

Pair = tuple[str, str, int]  # (benchmark, task_id, epoch): the item every compared arm answers
T = TypeVar("T")
# (compared by identity) ``_cover``'s answer when the room is held by
# calls in flight: ask again shortly
WAIT = "wait"
POLL_S = 0.01
# a call waits this long at most for room the calls in flight hold, then is refused
MAX_WAIT_S = 600.0
# a waiting call looks for holders that are gone at most this often (each a read of /proc)
LOOK_EVERY_S = 0.1
# a call waiting on started items' pledges decides once nothing in the run settled for this long
STILL_S = 3.0
Settle = Callable[["float | None"], None]
# An item's judges' worst case for the answer of the arm named (``budget.judged.judges_worst``)
Judged = Callable[[str], "float | None"]


def accounts(spec: Spec, arm: str) -> list[str]:
    return ["run", f"bench:{spec.benchmark}", f"arm:{spec.benchmark}/{arm}"]


def pair_name(pair: Pair) -> str:
    return f"{pair[0]}\t{pair[1]}\t{pair[2]}"


@dataclass
class Ticket:
    """One item's hold on the budget: what it holds, what it spent,
    and the calls it has in flight."""

    budget: Budget
    spec: Spec
    arm: str
    prompt: str
    pair: Pair | None  # None: a call outside any item's ticket (a Python arm's own thread)
    judged: Judged | None = None  # the item's judges' worst case, by arm (None: no judge)
    held: float = 0.0
    spent: float = 0.0
    in_flight: float = 0.0  # worst cases of calls sent and not yet answered
    # worst cases of every call sent: what the ledger charges if this process is lost
    exposed: float = 0.0
    # what replies reported beyond their calls' worst cases (charged all the same)
    over: float = 0.0
    carried: float = 0.0  # of ``spent``, what the ledger had charged already (a lost hold's)
    started: bool = False
    batch: bool = False  # its arm's calls go in batches: at the batch price, never waited for
    _deadline: float = 0.0  # until when the current call may wait for room (``_wait_or_refuse``)
    # the run's spent, held and pledges when they last changed
    _seen: tuple[float, float, int] | None = None
    _still_since: float = 0.0  # since when they have not changed
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def names(self) -> list[str]:
        return accounts(self.spec, self.arm)

    @contextlib.contextmanager
    def call(self, arm: str, prompt: str, judge: ArmSpec | None = None) -> Iterator[Settle]:
        """Around one real call (of ``judge``, when it is the scorer's judge ``arm``): held before
        it is sent; ``settle(cost)`` once it answers (None: the reply said no usage, so its worst
        case stands as spent, as it does when no reply comes)."""
        worst = (call_worst(self.spec, arm, prompt, self.batch and arm == self.arm)
                 if judge is None else judge_worst(self.spec, arm, judge, prompt))
        deadline = time.monotonic() + (0.0 if self.batch else self.budget.max_wait_s)
        with self._lock:
            self._seen = None
            while (
                refused := self.budget.ledger_change(
                    lambda state: self._cover(state, worst or 0.0, deadline)
                )
            ) is WAIT:
                time.sleep(POLL_S)  # bounded: calls in flight settle, or the deadline refuses
            if refused:
                raise BudgetError(refused)
            self.in_flight += worst or 0.0
        settled = False

        def settle(cost: float | None) -> None:
            nonlocal settled
            excess = (
                cost - worst
                if cost is not None and worst is not None and cost > worst + EPSILON_USD
                else 0.0
            )
            with self._lock:
                self.in_flight -= worst or 0.0
                self.spent += cost if cost is not None else (worst or 0.0)
                self.over += excess
            settled = True
            # what the reply says was spent: charged whole, said at once
            if cost is not None and worst is not None and excess:
                text = self._over_text(arm, cost, worst, judge is not None)
                self.budget.ledger_change(lambda state: state.note_over(text, excess))

        try:
            yield settle
        finally:
            if not settled:
                with self._lock:  # no reply: what it held stands as spent
                    self.in_flight -= worst or 0.0
                    self.spent += worst or 0.0

    def _over_text(self, arm: str, cost: float, worst: float, judge: bool = False) -> str:
        """The warning for a reply that reported more than its request allows."""
        item = (
            f", item {self.pair[1]}" + (f" epoch {self.pair[2]}" if self.pair[2] > 1 else "")
            if self.pair
            else ""
        )
        who = (f"judge {arm} of arm {self.spec.benchmark}/{self.arm}" if judge
               else f"arm {self.spec.benchmark}/{arm}")
        return (
            f"budget: {who}{item}: the reply reported usage worth "
            f"${cost:.6f}, more than "
            f"its request allows (${worst:.6f} at most): charged as reported, "
            f"${cost - worst:.6f} beyond what "
            "the budget held for it"
        )

    def _cover(self, state: LedgerState, worst: float, deadline: float) -> str | None:
        """Hold ``worst`` for the next call; the refusal's text when it does not fit (the state
        keeps the count of refusals, so a refusal is written too), or ``WAIT``."""
        self._deadline = deadline
        if not self.started:
            refused = self._start(state)
            if refused:
                return refused
            self.started = True
        short = worst - (self.held - self.in_flight - self.spent)
        # the estimate fell short (a judge quoting long answers): more, if it fits
        if short > EPSILON_USD:
            if not state.fits(self.names, short):
                # A resume runs the whole item again: it needs the item's
                # worst case, not this call's alone.
                again = self.worst(self.arm) or self.spent + self.in_flight + short
                return self._wait_or_refuse(
                    state,
                    {n: short for n in self.names},
                    again,
                    "its next call's worst case",
                    short,
                )
            state.hold(self.names, short, self.budget.holder)
            self.held += short
        state.own(self.names, self.budget.holder, 0.0, worst)
        self.exposed += worst
        return None

    def _start(self, state: LedgerState) -> str | None:
        """The item's first call: take its pledge, or start it whole, or refuse it."""
        key = pair_name(self.pair) if self.pair is not None else None
        if key is not None and self._take_pledge(state, key):
            return None
        if key is None or key in state.pledged:  # a call of its own, or started elsewhere without
            return self._start_alone(state)  # this arm's share: it alone must fit
        shares = self.budget.shares(self.spec, self.pair, self.arm, self.worst)
        return self._start_whole(state, key, shares)

    def worst(self, arm: str) -> float:
        """The most an item of ``arm`` may cost: its own calls and its judges' (a part without a
        worst case counts 0: it runs unreserved, ``budget_unpriced: allow``)."""
        judges = self.judged(arm) if self.judged is not None else 0.0
        own = item_worst(self.spec, arm, self.prompt, self.batch and arm == self.arm)
        return (own or 0.0) + (judges or 0.0)

    def _take_pledge(self, state: LedgerState, key: str) -> bool:
        """Whether an arm started elsewhere pledged this arm's share to the item: now it is held."""
        pledged = state.pledged.get(key, {})
        if self.arm not in pledged:
            return False
        self.held = pledged.pop(self.arm)
        if not pledged:
            del state.pledged[key]
        # The item's pledge, now this process's hold.
        state.own(self.names, self.budget.holder, self.held)
        return True

    def _start_alone(self, state: LedgerState) -> str | None:
        """This arm's worst case alone must fit."""
        own = self.worst(self.arm)
        if not state.fits(self.names, own):
            need = {n: own for n in self.names}
            return self._wait_or_refuse(state, need, own, "this item's worst case")
        state.hold(self.names, own, self.budget.holder)
        self.held = own
        return None

    def _start_whole(self, state: LedgerState, key: str, shares: dict[str, float]) -> str | None:
        """The worst case of all the item's arms must fit at once: this arm's is held, the others'
        pledged to the item."""
        need = _by_account(self.spec, shares)
        benchmark = self.spec.benchmark
        if benchmark in state.closed or not all(state.fits([n], v) for n, v in need.items()):
            refused = self._wait_or_refuse(
                state,
                need,
                shares[self.arm],
                "the worst case of all its arms",
                sum(shares.values()),
                new=True,
            )
            if refused is not WAIT and benchmark not in state.closed:
                _close(state, benchmark)
            return refused
        for arm, share in shares.items():
            state.hold(accounts(self.spec, arm), share)
        self.held = shares.pop(self.arm)
        # The other arms' shares stay the item's.
        state.own(self.names, self.budget.holder, self.held)
        if shares:
            state.pledged[key] = shares
        return None

    def _wait_or_refuse(self, state: LedgerState, need: Mapping[str, float], own: float, what: str,
                        shown: float | None = None, new: bool = False) -> str:
        """``WAIT`` while the room is held by calls in flight or pledged to started items (it comes
        back as they settle); else refused.

        Only what is spent never comes back. A pledge comes back once its arm's call settles, but
        that call may wait behind this one in the same process: a wait on pledges ends once
        nothing in the run settled for ``STILL_S``. A benchmark closed to new items refuses them
        at once. Without the wait, 16 calls in flight whose worst cases are 12 times what they
        cost held the whole budget at the start, and the first new item closed it; counting
        pledges as spent, one started pair's worst case closed a budget 1.5 times as large after
        7% of it was spent (``-n 2``).
        """
        if not (new and self.spec.benchmark in state.closed):
            pledged = _pledged(state)
            # This item's own hold does not come back while it waits.
            settling = all(
                _room_later(state, n, pledged) - self.held + EPSILON_USD >= amount
                for n, amount in need.items()
            )
            started = all(
                _room_later(state, n, {}) - self.held + EPSILON_USD >= amount
                for n, amount in need.items()
            )
            moving = not settling and started and self._watch_changes(state)  # asked only then
            waiting = (settling or moving) and time.monotonic() < self._deadline
            if self.budget.release_gone(state, now=not waiting):
                return WAIT  # a lost process's holds are settled: ask again with them
            if waiting:
                return WAIT
        return self._refuse(state, own, what, shown, need)

    def _watch_changes(self, state: LedgerState) -> bool:
        """Note the run's spend, holds and pledges as they are now; True while they changed within
        the last ``STILL_S``."""
        run = state.accounts["run"]
        seen, now = (run.spent, run.held, len(state.pledged)), time.monotonic()
        if seen != self._seen:
            self._seen, self._still_since = seen, now
        return now - self._still_since < STILL_S

    def _refuse(self, state: LedgerState, need: float, what: str, shown: float | None = None,
                by_account: Mapping[str, float] | None = None) -> str:
        """Count a call not sent (``need``: its own worst case, what a resume needs for it), and
        note which limits it did not fit: the refusal names them, and the resume advice depends on
        them."""
        state.refused += 1
        state.needed += need
        short = self._binding(state, by_account or {n: need for n in self.names})
        state.short.extend(n for n in short if n not in state.short)
        if all(n.startswith("arm:") for n in short):
            # Only this arm's own budget binds: its own worst case counts.
            what, shown = "this item's worst case", None
        return _refusal(state, short, what, need if shown is None else shown)

    def _binding(self, state: LedgerState, amounts: Mapping[str, float]) -> list[str]:
        """The accounts a refused call did not fit. A benchmark closed to new items fits, but is
        refused: the limits that closed it bind (else any of the item's that has a limit)."""
        known = state.accounts
        return ([n for n, amount in amounts.items() if n in known and not state.fits([n], amount)]
                or [n for n in state.short if n in self.names]
                or [n for n in self.names if n in known and known[n].limit is not None])

    def close(self, state: LedgerState) -> None:
        """The item is done: what it spent is charged, the rest of its hold goes back."""
        if not self.started and self.pair is not None:
            pledged = state.pledged.get(pair_name(self.pair), {})
            # answered from the cache, or never called: its share is free
            self.held = pledged.pop(self.arm, 0.0)
            if not pledged:
                state.pledged.pop(pair_name(self.pair), None)
            # a pledge: no process held it
            state.settle(self.names, self.held, self.spent + self.in_flight)
            return
        state.settle(self.names, self.held, self.spent + self.in_flight - self.carried,
                     self.budget.holder, self.exposed)


def _close(state: LedgerState, benchmark: str) -> None:
    """The first new item refused closes its benchmark to new items, at what its binding limit
    had spent and held then (what the stop says closed it)."""
    state.closed.append(benchmark)
    binding = state.accounts.get(state.short[0] if state.short else "run", state.accounts["run"])
    state.closed_at = [binding.spent, binding.held]


def _refusal(state: LedgerState, short: list[str], what: str, amount: float) -> str:
    """The refusal's text: what did not fit, which limits (where they are set), the room left."""
    room = min((state.accounts[n].room() for n in short), default=0.0)
    whose = " and ".join(_named(n, state.where.get(n, "")) for n in short)
    return (f"budget: not sent: {what} (${amount:.6f}) does not fit what {whose} has left "
            f"(${max(room, 0.0):.6f}); {_advice(short, state.where)}")


def _named(account: str, where: str) -> str:
    """An account as a person reads it: the run's budget, or a
    spec's, with the line that sets it."""
    kind, _, name = account.partition(":")
    at = f" ({where})" if where else ""
    return (
        "the run's budget"
        if kind == "run"
        else f"the budget of {'arm' if kind == 'arm' else 'benchmark'} {name}{at}"
    )


def _advice(short: list[str], where: Mapping[str, str]) -> str:
    if "run" in short:
        return "resume with a larger budget to run it"
    return (
        "raise budget: usd in the spec ("
        + ", ".join(where.get(n, n) for n in short)
        + ") to run it"
    )


def _by_account(spec: Spec, shares: Mapping[str, float]) -> dict[str, float]:
    """What the shares need of each account ("run" takes every arm's)."""
    need: dict[str, float] = {}
    for arm, share in shares.items():
        for name in accounts(spec, arm):
            need[name] = need.get(name, 0.0) + share
    return need


def _pledged(state: LedgerState) -> dict[str, float]:
    """Per account, what started items hold for their other arms."""
    found: dict[str, float] = {}
    for key, shares in state.pledged.items():
        benchmark = key.split("\t", 1)[0]
        for arm, share in shares.items():
            for name in ("run", f"bench:{benchmark}", f"arm:{benchmark}/{arm}"):
                found[name] = found.get(name, 0.0) + share
    return found


def _room_later(state: LedgerState, name: str, pledged: Mapping[str, float]) -> float:
    """An account's room once every call in flight has settled, at no cost
    (``pledged``: what still counts)."""
    account = state.accounts.get(name)
    if account is None or account.limit is None:
        return float("inf")
    return account.limit - account.spent - pledged.get(name, 0.0)


class Budget:
    """This process's side of the run's budget; ``plan`` is the arms the run runs for each item."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.plan: dict[Pair, tuple[str, ...]] = {}
        self.max_wait_s = MAX_WAIT_S
        self._local = threading.local()
        self._looked_at = -LOOK_EVERY_S  # when this process last looked for holders that are gone
        self.gone: Callable[[str], bool] = holders.gone  # whether a holder's process has exited
        self._panels: dict[str, Panel | None] = {}  # spec path -> what its scorer asks an item

    @property
    def holder(self) -> str:
        """This process's name in the ledger (``budget.holders``)."""
        return holders.me()

    def release_gone(self, state: LedgerState, now: bool) -> int:
        """Settle the holds of processes that are gone (under the ledger's lock); ``now``: before a
        refusal, always look; while waiting, at most every LOOK_EVERY_S."""
        at = time.monotonic()
        if not state.holders or (not now and at - self._looked_at < LOOK_EVERY_S):
            return 0
        self._looked_at = at
        return state.release_gone(self.gone)

    def ledger_change(self, fn: Callable[[LedgerState], T]) -> T:
        try:
            return self.ledger.change(fn)
        except StoreError as exc:  # our own file: a local failure stops the run, resumably
            raise LocalError(str(exc)) from exc

    def panel(self, spec: Spec, judges: Callable[[], Mapping[str, ArmSpec]]) -> Panel | None:
        """What ``spec``'s scorer asks of its ``judges`` (those it may ask) per item, read once."""
        key = str(spec.path)
        if key not in self._panels:  # a race reads it twice, to the same value
            self._panels[key] = panel(spec, judges())
        return self._panels[key]

    def shares(self, spec: Spec, pair: Pair | None, arm: str,
               worst: Callable[[str], float]) -> dict[str, float]:
        """The worst case of each arm this run runs for ``pair`` (``worst``: an item's, by arm)."""
        arms = self.plan.get(pair, (arm,)) if pair is not None else (arm,)
        return {a: worst(a) for a in dict.fromkeys((*arms, arm))}

    def batched(self, spec: Spec, arm: str, prompt: str, pair: Pair,
                judges: Judged | None = None) -> Ticket:
        """A batched item's ticket: ``call`` holds from its submit to its result; ``item(...,
        ticket=)`` then grades on it, or ``end`` closes it."""
        return Ticket(self, spec, arm, prompt, pair, judges, batch=True)

    def end(self, ticket: Ticket) -> None:
        """Close an item's ticket that never reached ``item``: the item ended without a row."""
        if ticket.started or len(self.plan.get(ticket.pair, ())) > 1:  # type: ignore[arg-type]
            self.ledger_change(ticket.close)

    @contextlib.contextmanager
    def item(self, spec: Spec, arm: str, prompt: str, pair: Pair,
             judges: Judged | None = None, ticket: Ticket | None = None) -> Iterator[None]:
        """Around one item: its calls (its scorer's judges' too, whose worst case by arm is
        ``judges``) draw on one ticket (``ticket``: a batched item's, held since its submit),
        closed (settled) when the item ends."""
        ticket = ticket or Ticket(self, spec, arm, prompt, pair, judges)
        self._local.ticket = ticket
        try:
            yield
        finally:
            self._local.ticket = None
            # else it never touched the ledger
            if ticket.started or len(self.plan.get(pair, ())) > 1:
                self.ledger_change(ticket.close)

    def over(self) -> float:
        """What the current item's replies reported beyond their calls' worst cases."""
        ticket: Ticket | None = getattr(self._local, "ticket", None)
        return round(ticket.over, 9) if ticket is not None else 0.0

    def charged(self) -> float:
        """What the current item's calls have been charged so far (a reply
        without usage: its worst case)."""
        ticket: Ticket | None = getattr(self._local, "ticket", None)
        if ticket is None:
            return 0.0
        with ticket._lock:
            return round(ticket.spent + ticket.in_flight, 9)

    @contextlib.contextmanager
    def call(self, spec: Spec, arm: str, prompt: str,
             judge: ArmSpec | None = None) -> Iterator[Settle]:
        """Around one real call (``judge``: of the scorer's judge ``arm``), under the current
        item's ticket (or one of its own)."""
        ticket: Ticket | None = getattr(self._local, "ticket", None)
        if ticket is not None and ticket.spec is spec:
            with ticket.call(arm, prompt, judge) as settle:
                yield settle
            return
        alone = Ticket(self, spec, arm, prompt, None)
        try:
            with alone.call(arm, prompt, judge) as settle:
                yield settle
        finally:
            if alone.started:
                self.ledger_change(alone.close)
