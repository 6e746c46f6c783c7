"""One call, the way every call goes: an item's own, a composite arm's to a sibling, a judge's.

The response cache is asked first; else the call is held against the budget until it answers,
waits for the arm's turn (``engine.breaker``) and runs through ``engine.calls.call_with_retries``
with the arm's classifier and the run-wide stop; its answer is checked, cached and priced.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from pathlib import Path

from pytest_echo_bench.budget.hold import Budget, Settle
from pytest_echo_bench.engine.arms import JUDGE, ArmRuntime, failure_text, recorded_rows
from pytest_echo_bench.engine.calls import Attempted, call_with_retries
from pytest_echo_bench.engine.failures import Failures
from pytest_echo_bench.engine.stop import StopSignal
from pytest_echo_bench.errors import ArmError, PermanentError, UnavailableError
from pytest_echo_bench.providers import Completion, Request, provider_info
from pytest_echo_bench.providers.answer import checked, finite_cost
from pytest_echo_bench.store.cache import ResponseCache

# (completion, attempts, retries): a cache hit makes no attempt at all.
Called = tuple[Completion, int, int]


class CallPath:
    """The calls of this process: its response cache, its budget, the run's stop."""

    def __init__(self, stop: StopSignal, failures: Failures, cache: ResponseCache | None,
                 budget: Budget | None) -> None:
        self.stop, self.failures, self.cache, self.budget = stop, failures, cache, budget

    def call(self, runtime: ArmRuntime, request: Request) -> Called:
        """The answer to ``request`` from ``runtime``'s provider, or the classified error."""
        hit = self.cached(runtime, request)
        if hit is not None:
            completion, attempts, retries = hit, 0, 0
        else:
            # A real call: held against the budget until it answers.
            with self._spend(runtime, request) as settle:
                done = self._attempt(runtime, request)
                # Whatever the provider handed back: text or this item's error, usage or unknown.
                completion, attempts = checked(done.completion), done.attempts
                retries = len(done.retries)
                settle(priced(runtime, completion))
            self.keep(runtime, request, completion)
        # A cached reply costs nothing against the budget, but has its list price.
        priced(runtime, completion)
        return completion, attempts, retries

    def cached(self, runtime: ArmRuntime, request: Request) -> Completion | None:
        """The response cache's answer to ``request`` (None: none kept)."""
        key = runtime.cache_key(request)
        hit = self.cache.get(key) if self.cache is not None and key else None
        if hit is None:
            return None
        # Checked too: a cache written before these rules may hold any usage. Its served model
        # as stored with it (none for an answer cached without one).
        return checked(Completion(hit.text, hit.usage, cache_hits=1, model=hit.model,
                                  fingerprint=hit.fingerprint))

    def keep(self, runtime: ArmRuntime, request: Request, completion: Completion) -> None:
        """Keep a provider's answer in the response cache (when the arm's answers are kept)."""
        key = runtime.cache_key(request)
        if self.cache is not None and key:
            self.cache.put(key, completion.text, completion.usage, completion.model,
                           completion.fingerprint)

    def _spend(self, runtime: ArmRuntime, request: Request) -> AbstractContextManager[Settle]:
        """The budget's hold on one real call; a routing or Python arm's own call is the calls it
        makes; a judge's is priced as the judge it is."""
        if self.budget is None or provider_info(runtime.conf.provider).composite:
            return contextlib.nullcontext(_no_budget)
        sent = request.prompt if not request.system else f"{request.system}\n\n{request.prompt}"
        judge = runtime.conf if runtime.role == JUDGE else None
        return self.budget.call(runtime.spec, runtime.name, sent, judge)

    def _attempt(self, runtime: ArmRuntime, request: Request) -> Attempted:
        """The call with its retries, in the arm's turn: an arm shown unusable is stopped here."""
        with runtime.breaker.turn(self.stop) as probing:
            try:
                done = call_with_retries(runtime.provider(), request, runtime.spec.retries,
                                         runtime.classifier, self.stop, probing=probing)
            except ArmError as exc:
                down = UnavailableError(self._unusable(runtime, exc), misconfigured=not exc.absent)
                raise runtime.breaker.trip(down) from None
            except PermanentError as exc:
                text = self.failures.text(runtime.spec, exc)
                if probing and runtime.breaker.repeated(text):
                    down = UnavailableError(self._unusable(runtime, exc, True), misconfigured=True)
                    raise runtime.breaker.trip(down) from None
                raise
            runtime.breaker.answered()
            return done

    def _unusable(self, runtime: ArmRuntime, exc: ArmError | PermanentError,
                  repeated: bool = False) -> str:
        # Redacted whole: the endpoint is a base_url, which may carry a user and password.
        recorded = recorded_rows(Path(self.failures.results), runtime.spec.benchmark, runtime)
        return self.failures.text(runtime.spec, failure_text(runtime, exc, repeated, recorded))


def priced(runtime: ArmRuntime, completion: Completion, batch: bool = False) -> float | None:
    """The call's cost: the provider's own figure, else the list price of its usage (None:
    unknown); ``batch``: it was answered in a batch, at the batch price."""
    if completion.cost_usd is None:
        # List price, cached or not: an arm's cost must not depend on what ran before it.
        completion.cost_usd = finite_cost(runtime.spec.cost(runtime.name, completion.usage,
                                                            batch))
    return completion.cost_usd


def _no_budget(cost: float | None) -> None:
    """Settling a call no budget holds."""
