"""Running one item: its completion obtained (``engine.obtain``), then graded and recorded
(``engine.grading``).

Each process owns one ``Runner``: the runtimes of the arms and judges it calls (``engine.arms``),
the one call path they share (``engine.calling``) and what a failure does (``engine.failures``).
``pool`` decides which items are in flight.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping

from pytest_echo_bench.budget.hold import Budget, Judged
from pytest_echo_bench.budget.judged import PAIRWISE, judges_worst
from pytest_echo_bench.datasets.prompts import Prompter, render_for
from pytest_echo_bench.engine.arms import JUDGE, ArmRuntime
from pytest_echo_bench.engine.batch_budget import BatchHolds
from pytest_echo_bench.engine.batch_items import ByArm
from pytest_echo_bench.engine.batch_ports import BatchRun, Ports
from pytest_echo_bench.engine.batching import Batching
from pytest_echo_bench.engine.calling import CallPath
from pytest_echo_bench.engine.declared import declared
from pytest_echo_bench.engine.failures import Failures
from pytest_echo_bench.engine.grading import Grading
from pytest_echo_bench.engine.judging import ItemJudges
from pytest_echo_bench.engine.limiter import Limits
from pytest_echo_bench.engine.obtain import ItemCall, Obtain
from pytest_echo_bench.engine.outcome import ABORTED, ROW, Job, Outcome
from pytest_echo_bench.engine.stop import StopSignal
from pytest_echo_bench.errors import ExhaustedError, LocalError, PermanentError
from pytest_echo_bench.providers import PROVIDERS, Completion, Provider, Request
from pytest_echo_bench.providers.batch import BatchAPI
from pytest_echo_bench.scoring.registry import takes_judges
from pytest_echo_bench.spec.load import ArmSpec, Spec
from pytest_echo_bench.store.batchlog import Journal, read_journal, write_states
from pytest_echo_bench.store.cache import ResponseCache
from pytest_echo_bench.store.records import row_from_json
from pytest_echo_bench.store.runrows import RunRows
from pytest_echo_bench.store.writer import ResultsWriter


class Runner:
    """This process's items: ``run`` obtains an item's completion (``obtainer``), then grades and
    records it (``grading``); ``on_stop`` tells pytest when a failure stops the run;
    ``judge_later``: a judged scorer's judges are not asked (``Grading``)."""

    def __init__(self, writer: ResultsWriter, stop: StopSignal, run_id: str, worker: str,
                 on_stop: Callable[[str], None], cache: ResponseCache | None = None,
                 recorded: RunRows | None = None, budget: Budget | None = None,
                 limits: Limits | None = None, judge_later: bool = False,
                 batch: BatchRun | None = None) -> None:
        self.cache, self.recorded, self.budget = cache, recorded, budget
        self.failures = Failures(stop, writer.path, worker, on_stop)
        self.calls = CallPath(stop, self.failures, cache, budget)
        # Per endpoint: the adaptive concurrency limit and the arms' rate limits (alone: defaults).
        self.limits = limits if limits is not None else Limits(stop)
        self.obtainer: Obtain = ItemCall(self.arm, self.calls, self.failures)
        # The batched arms' items: sent through their provider's batch API (engine.batching).
        self.batching: Batching | None = None
        if batch is not None:
            self.batching = self._batching(writer, batch)
            self.obtainer = ByArm(self.obtainer, self.batching.obtain, self.batching.takes)
        self.grading = Grading(writer, run_id, worker, self.failures, budget, self.arm, self.judges,
                               judge_later)
        self._arms: dict[tuple[str, str], ArmRuntime] = {}
        self._judges: dict[str, dict[str, ArmRuntime]] = {}  # spec path -> its scorer's judges
        # spec path -> its arms' prompts, from its items
        self._prompters: dict[str, Mapping[str, Prompter]] = {}
        self._lock = threading.Lock()

    @property
    def stop(self) -> StopSignal:
        """The run-wide stop (the call path's)."""
        return self.calls.stop

    def close(self) -> None:
        """Once the calls are done: close what the providers and the cache hold open (sockets,
        SQLite)."""
        with self._lock:
            judges = [runtime for each in self._judges.values() for runtime in each.values()]
            built = [runtime.built for runtime in [*self._arms.values(), *judges]]
        for provider in built:
            if provider is None:
                continue
            provider.close()  # network providers' sockets; the limiter's wrapper passes it on
        if self.cache is not None:
            self.cache.close()

    def _batching(self, writer: ResultsWriter, batch: BatchRun) -> Batching:
        ports = Ports(Journal(writer.path, writer.holding), self.stop, self.calls, self.failures,
                      self.arm, self._batch_api, lambda name: PROVIDERS[name].batch,
                      record=lambda item, obtained: self.run(item, arrived=True),
                      publish=lambda states: write_states(writer.path, self.failures.worker,
                                                          states))
        budget = self.budget
        if budget is not None:
            ports.holds = BatchHolds(budget, lambda item: self._judged(budget, item))
        return Batching(batch, ports, read_journal(writer.path))

    def _batch_api(self, runtime: ArmRuntime) -> BatchAPI:
        """The arm's batch API, from a provider of its own (outside the endpoint's limiter: a
        batch is a few calls, whatever it holds)."""
        conf, spec = runtime.conf, runtime.spec
        provider = PROVIDERS[conf.provider].build(conf, spec, self.caller_for(spec))
        make = getattr(provider, "batch_api", None)
        if make is None:
            raise PermanentError(f"provider {conf.provider!r} has no batch API; remove "
                                 f"batch: from arm {conf.name!r}")
        api: BatchAPI = make()
        return api

    def arm(self, spec: Spec, name: str) -> ArmRuntime:
        key = (str(spec.path), name)
        # Asked for every item by every calling thread: once built, an arm is found without the
        # lock (a dict read is atomic), which 256 threads would otherwise queue on.
        runtime = self._arms.get(key)
        if runtime is not None:
            return runtime
        with self._lock:
            if key not in self._arms:
                build, cached = self._builder(spec), self.cache is not None
                self._arms[key] = ArmRuntime(spec, spec.arms[name], build, cached)
            return self._arms[key]

    def judges(self, item: Job) -> ItemJudges:
        """The judges ``item``'s scorer may ask, sent through this process's call path."""
        spec = item.spec
        with self._lock:
            runtimes = self._judges.get(str(spec.path))
            if runtimes is None:
                build, cached = self._builder(spec), self.cache is not None
                runtimes = {name: ArmRuntime(spec, conf, build, cached, JUDGE)
                            for name, conf in declared(spec).items()}
                self._judges[str(spec.path)] = runtimes
        return ItemJudges(item, runtimes, self.calls, self.failures)

    def _builder(self, spec: Spec) -> Callable[[ArmSpec], Provider]:
        def build(conf: ArmSpec) -> Provider:
            made = PROVIDERS[conf.provider].build(conf, spec, self.caller_for(spec))
            # Behind its endpoint's adaptive limit (network providers only): see engine.limiter.
            return self.limits.wrap(made, conf, spec.retries.max_wait_s)

        return build

    def caller_for(self, spec: Spec) -> Callable[[str, Request], Completion]:
        """How a composite arm calls a sibling arm: the same slots, retries and classification."""

        def call(arm_name: str, request: Request) -> Completion:
            if arm_name not in spec.arms:
                known = ", ".join(spec.arms)
                raise PermanentError(f"arm {arm_name!r} is not in {spec.path.name}; known: {known}")
            prompters = self._prompters.get(str(spec.path))
            prompt = render_for(prompters, arm_name, request.example, request.prompt)
            runtime = self.arm(spec, arm_name)
            try:
                with runtime.slot():
                    asked = dataclasses.replace(request, prompt=prompt, timeout_s=spec.timeout_s)
                    return self.calls.call(runtime, asked)[0]
            except ExhaustedError as exc:
                # Stopped here, not only where the error lands: a Python arm that catches it and
                # falls back to another arm must not go on calling an exhausted provider.
                text = self.failures.text(spec, exc)
                where = f"{request.example.id} (arm {arm_name})"
                self.failures.exhausted(spec, request.example.id, arm_name, where, text, exc)
                raise

        return call

    def run(self, item: Job, arrived: bool = False) -> Outcome:
        """Obtain, grade and record one item; never raises for provider trouble. ``arrived``: a
        batched item whose batch brought its answer (recorded even as the run stops: it is paid)."""
        # A spec's items share one mapping.
        self._prompters.setdefault(str(item.spec.path), item.prompters)
        if self.budget is None:
            return self._run(item, arrived)
        # The item's calls (its judges' too) draw on one hold on the budget, settled when it ends.
        try:
            prompt = render_for(item.prompters, item.arm, item.example)
            pair = (item.spec.benchmark, item.example.id, item.epoch)
            judged = self._judged(self.budget, item)
            holds = self.batching.ports.holds if self.batching is not None else None
            ticket = holds.ticket(item) if arrived and holds is not None else None
            with self.budget.item(item.spec, item.arm, prompt, pair, judged, ticket):
                return self._run(item, arrived)
        except LocalError as exc:  # the ledger could not be written: stop, as for any file of ours
            return self.failures.local(item, exc)

    def _judged(self, budget: Budget, item: Job) -> Judged | None:
        """The worst case of ``item``'s judge calls, by the arm answering (None: no judge, or none
        asked in the sweep: judging deferred by ``--bench-judge later``, or ``pairwise``, which
        is judged from a results file)."""
        spec = item.spec
        if self.grading.judge_later or spec.scorer == PAIRWISE:
            return None
        plan = budget.panel(spec, lambda: declared(spec) if takes_judges(spec.scorer) else {})
        return None if plan is None else (
            lambda arm: judges_worst(spec, plan, item.example, arm))

    def _run(self, item: Job, arrived: bool = False) -> Outcome:
        if self.stop.is_set() and not arrived:
            said = "the run is stopping (see the stop marker); not attempted"
            return Outcome(ABORTED, message=said)
        found = None
        if self.recorded:
            found = self.recorded.find((item.spec.benchmark, item.example.id, item.arm, item.epoch))
        if found is not None:  # a lost worker recorded it, xdist handed it on: never record twice
            said = "recorded before its worker was lost; not run again"
            return Outcome(ROW, row_from_json(found), message=said)
        obtained = self.obtainer.obtain(item)
        if isinstance(obtained, Outcome):
            return obtained
        return self.grading.finish(item, obtained)
