"""The batch submitter of one process: the items of batched arms sent through their provider's
batch API, each request once, whatever stops the run.

Items are fed in ahead of time (``feed``: the ones this process will run); their requests wait,
grouped by spec and arm, until a batch is full or the run waits on one of them, then go out in
batches of the arm's ``batch: {size}``, at most ``open`` at once. Before a batch is sent its
requests are written to the journal (``store.batchlog``); its batch id once the provider accepts
it; and, once its results are recorded, that they are done. One thread makes every call to the
providers: it sends, polls (soon at first, then every ``poll_s``), reads an ended batch's results
and records each answer the moment it is read (``engine.batch_results``).

On a resume, an item whose request an earlier run's batch still holds is not sent: it joins that
batch, which is polled and read; a submission whose outcome was never recorded is looked up with
the provider first (``BatchAPI.find``). A stop leaves the open batches running (a resume collects
them); ``cancel`` cancels them instead.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
import uuid
from collections.abc import Iterable
from concurrent.futures import Future

from pytest_echo_bench.datasets.prompts import render_for
from pytest_echo_bench.engine import batch_end
from pytest_echo_bench.engine.batch_end import cancel_open, end_all, end_group, leave, names
from pytest_echo_bench.engine.batch_items import (
    FIRST_POLL_S,
    BatchObtain,
    Group,
    OpenBatch,
    Pending,
    custom_id,
)
from pytest_echo_bench.engine.batch_ports import BatchRun, Earlier, Ports
from pytest_echo_bench.engine.batch_results import AGAIN, DONE, settle
from pytest_echo_bench.engine.calling import priced
from pytest_echo_bench.engine.obtain import Obtained
from pytest_echo_bench.engine.outcome import ROW, Job, Outcome, utcnow
from pytest_echo_bench.errors import (
    AbortedError,
    ExhaustedError,
    LocalError,
    PermanentError,
    ProviderError,
    StoreError,
)
from pytest_echo_bench.providers.base import Completion, Request
from pytest_echo_bench.providers.batch import FAILED, BatchResult
from pytest_echo_bench.spec.batching import DEFAULT, BatchSpec
from pytest_echo_bench.spec.load import Spec
from pytest_echo_bench.store.batchlog import JournalState

MAX_SLEEP_S = 1.0  # the thread looks at its work at least this often
PUBLISH_EVERY_S = 1.0  # what the open batches are doing is written at most this often
MAX_POLL_ERRORS = 50  # failed polls in a row before a batch is left for a resume
MAX_BATCH_AGE_S = 26 * 3600.0  # the providers' 24 h window, and time to finalize
LEFT = "left running on the provider: a resume collects it"


class Batching:
    """This process's batches (``ports``: what they reach); ``state``: the journal as the run
    found it."""

    def __init__(self, run: BatchRun, ports: Ports, state: JournalState) -> None:
        self.run, self.ports = run, ports
        self._published = 0.0
        self._earlier = Earlier(state.holding())  # an earlier run's open batches
        self._settings: dict[tuple[str, str], BatchSpec | None] = {}
        self._futures: dict[str, Future[Outcome]] = {}  # node id -> its outcome
        self._arrived: dict[str, Obtained] = {}
        self._groups: dict[tuple[str, str], Group] = {}
        self._inbox: list[Pending] = []
        # The run waits on a batched item: nothing more is fed until it has its answer, so what
        # has gathered (of every arm) is sent now.
        self._urgent = False
        self._cond = threading.Condition()
        self._closed = False  # once: a second close does nothing, the thread ends
        self._thread: threading.Thread | None = None

    @functools.cached_property
    def obtain(self) -> BatchObtain:
        """The ``Obtain`` of its items: the answer their batch brought."""
        return BatchObtain(self._take_arrived)

    # -- the items' side (any thread) ------------------------------------------------------------
    def takes(self, item: Job) -> bool:
        """Whether ``item``'s arm is batched, or an earlier run's open batch holds its request: it
        is collected from that batch whatever the arm says now, and never sent again live."""
        if self.setting(item.spec, item.arm) is not None:
            return True
        held = self._earlier.joins.get(item.nodeid)
        if held is None:  # decided once: the item's path must not change while it runs
            cid = custom_id(item.spec.benchmark, item.example.id, item.arm, item.epoch)
            held = self._earlier.joins[item.nodeid] = cid in self._earlier.holding
        return held

    def setting(self, spec: Spec, arm: str) -> BatchSpec | None:
        key = (str(spec.path), arm)
        if key not in self._settings:
            conf = spec.arms[arm]
            chosen = conf.batch
            if chosen is None and self.run.every and self.ports.batchable(conf.provider):
                chosen = DEFAULT
            self._settings[key] = chosen if isinstance(chosen, BatchSpec) else None
        return self._settings[key]

    def feed(self, items: Iterable[Job]) -> None:
        """Items this process will run: their requests gather for the next batches."""
        for item in items:
            if self.takes(item):
                self.future(item)

    def wait(self, item: Job) -> Future[Outcome]:
        """The outcome of ``item``; the requests gathered so far are sent now."""
        future = self.future(item)
        with self._cond:
            self._urgent = True
            self._cond.notify()
        return future

    def future(self, item: Job) -> Future[Outcome]:
        with self._cond:
            known = self._futures.get(item.nodeid)
            if known is not None:
                return known
            future: Future[Outcome] = Future()
            self._futures[item.nodeid] = future
            self._inbox.append(self._pending(item, future))
            self._start()
            self._cond.notify()
        return future

    def _pending(self, item: Job, future: Future[Outcome]) -> Pending:
        prompt = render_for(item.prompters, item.arm, item.example)
        request = Request(item.example, item.arm, prompt, timeout_s=item.spec.timeout_s,
                          epoch=item.epoch)
        cid = custom_id(item.spec.benchmark, item.example.id, item.arm, item.epoch)
        return Pending(item, cid, request, future)

    def recorded(self, items: Iterable[Job]) -> None:
        """Items the results file already records: an earlier run's open batches are done with
        them (their rows were appended before it stopped)."""
        done: dict[str, list[str]] = {}
        for item in items:
            cid = custom_id(item.spec.benchmark, item.example.id, item.arm, item.epoch)
            sub = self._earlier.holding.pop(cid, None)
            if sub is not None:
                done.setdefault(sub.local, []).append(cid)
        for local, ids in done.items():
            self.ports.journal.done(local, ids)

    def _take_arrived(self, item: Job) -> Obtained | None:
        with self._cond:
            return self._arrived.pop(item.nodeid, None)

    def _start(self) -> None:
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._loop, name="echo-bench-batches",
                                            daemon=True)
            self._thread.start()

    # -- the submitter's thread ------------------------------------------------------------------
    def _loop(self) -> None:
        while True:  # bounded in time: it ends with the run (``close``)
            with self._cond:
                if self._closed:
                    return
                self._cond.wait(self._sleep())
                inbox, self._inbox = self._inbox, []
                urgent, self._urgent = self._urgent, False
            try:
                self._tick(inbox, urgent)
            except Exception as exc:  # never a silent end: the run stops, resumably
                if not self._closed:  # (a call that outlived the run's end: the run is over)
                    self._local_failure(exc if isinstance(exc, (StoreError, LocalError)) else
                                        LocalError(f"the batch submitter failed: {exc!r}"))
                return

    def _sleep(self) -> float:
        if self._inbox or self._urgent or any(
                g.urgent and g.waiting and len(g.open) < g.conf.open
                for g in self._groups.values()):
            return 0.0
        now = time.monotonic()
        polls = [ob.next_poll for g in self._groups.values() for ob in g.open]
        return max(0.0, min([MAX_SLEEP_S, *(t - now for t in polls)]))

    def _tick(self, inbox: list[Pending], urgent: bool) -> None:
        for p in inbox:
            self._place(p)
        for group in list(self._groups.values()):
            group.urgent = group.urgent or urgent
            if not self.ports.stop.is_set():
                self._send(group)
            for ob in list(group.open):
                if time.monotonic() >= ob.next_poll:
                    self._poll(group, ob)
        if time.monotonic() - self._published >= PUBLISH_EVERY_S:
            self._publish()

    def _publish(self) -> None:
        """Say what the open batches are doing (a file per process, read by the displays)."""
        self._published = time.monotonic()
        if self.ports.publish is not None:
            batch_end.publish(self._groups.values(), self.ports.publish)

    def _group(self, item: Job) -> Group:
        key = (str(item.spec.path), item.arm)
        group = self._groups.get(key)
        if group is None:
            runtime = self.ports.arm(item.spec, item.arm)
            conf = self.setting(item.spec, item.arm)
            group = self._groups[key] = Group(runtime, conf or DEFAULT, self.ports.apis(runtime))
        return group

    def _place(self, p: Pending) -> None:
        """A new request: answered by the cache, held by an earlier run's batch, or waiting."""
        try:
            group = self._group(p.item)
        except ProviderError as exc:  # the arm cannot be built here (no key, no SDK)
            self._failed(p, exc)
            return
        hit = self.ports.calls.cached(group.runtime, p.request)
        if hit is not None:
            # priced as a live hit is: the list price of the call it stands for (the batch's)
            priced(group.runtime, hit, batch=True)
            self._record(p, Obtained(hit, utcnow(), time.perf_counter(), 0, 0))
            return
        sub = self._earlier.holding.get(p.cid)
        if sub is None:
            group.waiting[p.cid] = p
            return
        ob = self._earlier.adopted.get(sub.local)
        if ob is None:
            ob = self._earlier.adopted[sub.local] = OpenBatch(
                sub.local, sub.tag, sub.at, {}, own=False,
                batch_ids=None if sub.batch_ids is None else list(sub.batch_ids),
                opened=time.monotonic())
            group.open.append(ob)
        elif ob not in group.open:
            # Collected before this item was placed (the process places its items as it comes
            # to them, and the batch may end first): its results are read again for this one.
            ob.next_poll = 0.0
            group.open.append(ob)
        p.tries, p.started, p.t0 = 1, utcnow(), time.perf_counter()
        if self.ports.holds is not None:  # sent and paid for by that run: charged once read
            self.ports.holds.adopt(p)
        ob.members[p.cid] = p

    def _send(self, group: Group) -> None:
        """Batches of what has gathered: full ones, or all of it once an item of it is waited on."""
        for _ in range(len(group.waiting)):  # bounded: each batch takes at least one request
            full = len(group.waiting) >= group.size
            if not group.waiting or len(group.open) >= group.conf.open or not (
                    full or group.urgent):
                break
            members = [group.waiting.pop(cid) for cid in list(group.waiting)[: group.size]]
            self._submit(group, members)
        group.urgent = group.urgent and bool(group.waiting)

    def _submit(self, group: Group, members: list[Pending]) -> None:
        spec, arm = group.runtime.spec, group.runtime.name
        members = self._held(members)
        if not members:
            return
        local, at = uuid.uuid4().hex[:16], time.time()
        ob = OpenBatch(local, self.run.tag, at, {p.cid: p for p in members}, own=True,
                       opened=time.monotonic())
        self.ports.journal.submit(local, spec.benchmark, arm, self.run.tag, at, list(ob.members))
        for p in members:
            p.tries += 1
            if not p.started:
                p.started, p.t0 = utcnow(), time.perf_counter()
        group.open.append(ob)
        sent = [(p.cid, dataclasses.replace(p.request, attempt=p.tries)) for p in members]
        try:
            batch_id = group.api.submit(sent, self.run.tag)
        except PermanentError as exc:  # refused whole (a 4xx): nothing was accepted
            self.ports.journal.found(local, [])
            group.open.remove(ob)
            for p in members:
                self._failed(p, exc)
            self.ports.journal.done(local, None)
            return
        except ExhaustedError as exc:
            # The run stops; the resume looks the batch up first. The item the stop is said on
            # has its outcome: it leaves the batch.
            self._failed(ob.members.pop(members[0].cid), exc)
            return
        except Exception:  # its outcome is unknown (a timeout, a 5xx): looked up before resending
            ob.next_poll = time.monotonic() + FIRST_POLL_S
            return
        self.ports.journal.accepted(local, batch_id)
        ob.batch_ids = [batch_id]
        ob.interval = min(FIRST_POLL_S, group.conf.poll_s)
        ob.next_poll = time.monotonic() + ob.interval

    def _held(self, members: list[Pending]) -> list[Pending]:
        """The members whose worst case the budget holds (the others end: a resume with a larger
        budget sends them)."""
        if self.ports.holds is None:
            return members
        kept = []
        for p in members:
            try:
                self.ports.holds.take(p)
            except (AbortedError, LocalError) as exc:  # BudgetError, or the ledger's file
                self._failed(p, exc)
                continue
            kept.append(p)
        return kept

    def _poll(self, group: Group, ob: OpenBatch) -> None:
        try:
            if ob.batch_ids is None:
                found = group.api.find(ob.tag, frozenset(self._ids_of(ob)), ob.since)
                self.ports.journal.found(ob.local, found)
                ob.batch_ids = list(found)
            for bid in ob.batch_ids:
                if bid not in ob.status or ob.status[bid].state not in ("ended", FAILED):
                    ob.status[bid] = batch_end.tell_unknown(group.api.status(bid), ob)
            if ob.ended():
                self._collect(group, ob)
                return
            ob.errors = 0
        except ExhaustedError as exc:
            self._stop_on(ob, exc)
            return
        except PermanentError as exc:
            # the provider does not know the batch: it never ran (a 404 an HTTP provider reads as
            # a live call's is an ArmError: another account's batch may still run, so polled on)
            if exc.status == 404:
                self._lost(group, ob)
                return
            ob.errors += 1  # any other refusal: the batch may still run; polled again, or left
        except ProviderError:
            ob.errors += 1
        self._next_poll(group, ob)

    def _next_poll(self, group: Group, ob: OpenBatch) -> None:
        now = time.monotonic()
        if ob.errors >= MAX_POLL_ERRORS or now - ob.opened > MAX_BATCH_AGE_S:
            leave(group, ob, f"batch {names(ob)} not ended or not reachable; {LEFT}")
            return
        ob.interval = min(group.conf.poll_s, ob.interval * 2)
        ob.next_poll = now + min(ob.interval, group.conf.poll_s)

    def _ids_of(self, ob: OpenBatch) -> set[str]:
        """Every request of the submission (an adopted one's, as the journal holds them)."""
        return set(ob.members) | {cid for cid, sub in self._earlier.holding.items()
                                  if sub.local == ob.local}

    def _collect(self, group: Group, ob: OpenBatch) -> None:
        """Read each ended batch's results: every answer recorded as it is read."""
        done: list[str] = []
        broken: PermanentError | None = None
        assert ob.batch_ids is not None
        for bid in ob.batch_ids:
            status = ob.status[bid]
            if status.state == FAILED:
                if ob.own:  # refused whole at validation: every request's error row
                    why = PermanentError(f"batch {bid} failed: {status.error or status.raw}")
                    for cid, p in list(ob.members.items()):
                        del ob.members[cid]
                        self._failed(p, why)
                        done.append(cid)
                continue
            try:
                self._read(group, ob, bid, done)
            except PermanentError as exc:  # (a TransientError: polled and read again)
                broken = batch_end.unreadable(bid, exc)
        for cid, p in list(ob.members.items()):  # no result of its own: it never ran
            del ob.members[cid]
            if broken is not None:  # its answer may be in what could not be read: not resent
                self._failed(p, broken)
                done.append(cid)
                continue
            if self._take(group, p, BatchResult(cid), "") == AGAIN:
                group.waiting[cid] = p
            done.append(cid)
        self.ports.journal.done(ob.local, None if ob.own and not ob.kept else done)
        group.open.remove(ob)
        group.urgent = group.urgent or bool(group.waiting)

    def _read(self, group: Group, ob: OpenBatch, bid: str, done: list[str]) -> None:
        limit = group.api.max_requests + 1
        for n, result in enumerate(group.api.results(bid)):
            if n >= limit:  # bounded: a batch holds at most its provider's limit
                break
            p = ob.members.pop(result.custom_id, None)
            if p is None:
                continue
            how = self._take(group, p, result, bid)
            if how == AGAIN:
                group.waiting[p.cid] = p
            if how in (DONE, AGAIN):
                done.append(p.cid)
            else:
                ob.kept = True

    def _take(self, group: Group, p: Pending, result: BatchResult, bid: str) -> str:
        """Settle ``p`` with ``result`` (``engine.batch_results``), and the budget's hold on it."""
        how = settle(p, result, bid, group.runtime, self.ports.calls, self.ports.failures,
                     self._rec)
        self._unhold(p, how)
        return how

    def _rec(self, item: Job, obtained: Obtained) -> Outcome:
        holds = self.ports.holds
        if holds is not None:  # what the answer cost, before its row says what was charged
            holds.pay(item, obtained.completion.cost_usd if obtained.failed is None else 0.0)
        with self._cond:
            self._arrived[item.nodeid] = obtained
        assert self.ports.record is not None
        return self.ports.record(item, obtained)

    def _unhold(self, p: Pending, how: str) -> None:
        """A request read without an answer costs nothing; an item ended without a row closes its
        ticket."""
        if self.ports.holds is None:
            return
        if how == AGAIN:
            self.ports.holds.pay(p.item, 0.0)
        elif p.future.done() and p.future.result().kind != ROW:
            self.ports.holds.end(p)

    def _record(self, p: Pending, obtained: Obtained) -> None:
        p.future.set_result(self._rec(p.item, obtained))

    def _failed(self, p: Pending, exc: BaseException) -> None:
        ended = self.ports.failures.outcome(p.item, exc)
        if isinstance(ended, Outcome):
            p.future.set_result(ended)
            if self.ports.holds is not None:
                self.ports.holds.end(p)
            return
        obtained = Obtained(Completion(""), p.started or utcnow(), p.t0 or time.perf_counter(),
                            max(p.tries, 1), len(p.retries), failed=ended)
        self._record(p, obtained)

    def _lost(self, group: Group, ob: OpenBatch) -> None:
        """The provider says it does not know the batch (a 404: never billed): its requests are
        sent again."""
        moved = list(ob.members)
        group.waiting.update(ob.members)
        ob.members.clear()
        self.ports.journal.done(ob.local, None if ob.own else moved)
        group.open.remove(ob)

    def _stop_on(self, ob: OpenBatch, exc: ExhaustedError) -> None:
        first = next(iter(ob.members), None)
        if first is not None:
            self._failed(ob.members.pop(first), exc)

    def _local_failure(self, exc: StoreError | LocalError) -> None:
        """The submitter cannot go on: the run stops, resumably, and every item still waiting
        (gathered, sent, or not yet placed) ends now, so none waits for a thread that is gone."""
        cause = exc if isinstance(exc, LocalError) else LocalError(str(exc))
        with self._cond:
            held = [*self._inbox, *(p for g in self._groups.values() for p in g.waiting.values()),
                    *(p for g in self._groups.values() for ob in g.open
                      for p in ob.members.values())]
            futures = [f for f in self._futures.values() if not f.done()]
        end_all(held, futures, self.ports.failures, cause)

    # -- the end ---------------------------------------------------------------------------------
    def open_batches(self) -> list[str]:
        """The provider's ids of the batches still open in this process."""
        return [bid for g in self._groups.values() for ob in g.open for bid in ob.batch_ids or ()]

    def close(self, stopping: bool, grace: float) -> list[str]:
        """Stop the thread; on a stop, cancel the open batches when asked; end every item still
        waiting. The batches left open (running, or cancelled), by id."""
        with self._cond:
            if self._closed:
                return []
            self._closed = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(grace)
        left = self.open_batches()
        self._publish()
        cancelled = stopping and self.run.cancel
        if cancelled:
            cancel_open(self._groups.values())
        said = "cancelled on the stop" if cancelled else LEFT
        for group in self._groups.values():
            end_group(group, said, self.ports.holds)
        return left



