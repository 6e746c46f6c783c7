"""Running one item: the provider call with retries and the cache, grading, and recording.

Each process owns one ``Runner``. A row is appended the moment its item is graded (from
whichever thread made the call), so a crash loses at most the calls still in flight; ``pool``
decides which items are in flight.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager

from pytest_echo_bench.budget.hold import Budget, Settle
from pytest_echo_bench.budget.worst import COMPOSITE
from pytest_echo_bench.datasets.prompts import Prompter, render_for
from pytest_echo_bench.engine.breaker import REPEATS, ArmBreaker
from pytest_echo_bench.engine.calls import Attempted, call_with_retries
from pytest_echo_bench.engine.fingerprint import cache_descriptor
from pytest_echo_bench.engine.limiter import Limits
from pytest_echo_bench.engine.outcome import (
    ABORTED,
    INCOMPLETE,
    ROW,
    UNAVAILABLE,
    Job,
    Outcome,
    utcnow,
)
from pytest_echo_bench.engine.scope import (
    CREDENTIALS_HINT,
    LOCAL_HINT,
    Classifier,
    described,
    local_cause,
)
from pytest_echo_bench.engine.stop import StopSignal
from pytest_echo_bench.errors import (
    AbortedError,
    ArmError,
    ExhaustedError,
    IncompleteError,
    LocalError,
    PermanentError,
    StoreError,
    UnavailableError,
)
from pytest_echo_bench.providers import PROVIDERS, Completion, Provider, Request, endpoint
from pytest_echo_bench.providers.answer import checked, finite_cost
from pytest_echo_bench.providers.base import DEFAULT_KEY_ENV
from pytest_echo_bench.providers.secrets import spec_secrets
from pytest_echo_bench.scoring.registry import IN_PROCESS, get_scorer
from pytest_echo_bench.scoring.verdict import Verdict
from pytest_echo_bench.spec.load import ArmSpec, Spec
from pytest_echo_bench.store.cache import CACHEABLE, ResponseCache, cache_key
from pytest_echo_bench.store.files import StopReason
from pytest_echo_bench.store.records import Row, row_from_json
from pytest_echo_bench.store.redaction import Secrets, redact
from pytest_echo_bench.store.runrows import RunRows
from pytest_echo_bench.store.safe_text import shown
from pytest_echo_bench.store.writer import ResultsWriter


class ArmRuntime:
    """Per (spec, arm): the provider (built once, lazily) and its concurrency limit."""

    def __init__(self, runner: Runner, spec: Spec, arm: str) -> None:
        self.runner, self.spec, self.arm = runner, spec, arm
        limit = spec.arms[arm].concurrency
        self.slots = threading.BoundedSemaphore(limit) if limit else None
        self.classifier = Classifier(spec.exhaustion_patterns, spec.transient_patterns)
        cacheable = runner.cache is not None and spec.arms[arm].provider in CACHEABLE
        self.descriptor = cache_descriptor(spec, arm) if cacheable else None
        self.breaker = ArmBreaker()
        self._provider: Provider | None = None
        self._lock = threading.Lock()

    def cache_key(self, request: Request) -> str | None:
        if self.descriptor is None:
            return None
        return cache_key(self.descriptor, request.prompt, request.sample, request.epoch)

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        """One of the arm's ``concurrency:`` slots (no limit when unset)."""
        if self.slots is None:
            yield
            return
        with self.slots:
            yield

    @functools.cached_property
    def instant(self) -> bool:
        """Nothing to wait for: the provider answers at once and grading is a text check.

        Such items run on pytest's own thread; a pool thread would add only hand-offs (about
        0.7 ms of CPU per item, more than pytest spends on the item itself).
        """
        if self.spec.scorer not in IN_PROCESS:  # a sandbox run or a user's scorer may take time
            return False
        try:
            return bool(getattr(self.provider(), "instant", False))
        except UnavailableError:
            return True  # it fails at once, with its reason

    def provider(self) -> Provider:
        with self._lock:
            if self.breaker.broken:
                raise self.breaker.broken
            if self._provider is None:
                factory = PROVIDERS[self.spec.arms[self.arm].provider]
                try:
                    conf = self.spec.arms[self.arm]
                    # Behind its endpoint's adaptive limit (network
                    # providers only): see engine.limiter.
                    made = factory(conf, self.spec, self.runner.caller_for(self.spec))
                    self._provider = self.runner.limits.wrap(
                        made, conf, self.spec.retries.max_wait_s
                    )
                except UnavailableError as exc:
                    raise self.breaker.trip(exc) from None
            return self._provider


class Runner:
    def __init__(self, writer: ResultsWriter, stop: StopSignal, run_id: str, worker: str,
                 on_stop: Callable[[str], None], cache: ResponseCache | None = None,
                 recorded: RunRows | None = None, budget: Budget | None = None,
                 limits: Limits | None = None) -> None:
        self.writer, self.stop, self.run_id, self.worker = writer, stop, run_id, worker
        self.on_stop, self.cache, self.recorded, self.budget = on_stop, cache, recorded, budget
        self._arms: dict[tuple[str, str], ArmRuntime] = {}
        # spec path -> its top-level ``concurrency:``
        self._spec_slots: dict[str, threading.BoundedSemaphore] = {}
        self._secrets: dict[str, Secrets] = {}  # spec path -> what its error texts must not show
        # spec path -> its arms' prompts, from its items
        self._prompters: dict[str, Mapping[str, Prompter]] = {}
        # Per endpoint: the adaptive concurrency limit and the arms' rate
        # limits (on its own: the defaults).
        self.limits = limits if limits is not None else Limits(stop)
        self._lock = threading.Lock()

    def close(self) -> None:
        """Once the calls are done: close what the providers and the
        cache hold open (sockets, SQLite)."""
        with self._lock:
            providers = [arm._provider for arm in self._arms.values() if arm._provider is not None]
        for provider in providers:
            # network providers; the limiter's wrapper passes it on
            close = getattr(provider, "close", None)
            if close is not None:
                close()
        if self.cache is not None:
            self.cache.close()

    def arm(self, spec: Spec, name: str) -> ArmRuntime:
        with self._lock:
            key = (str(spec.path), name)
            if key not in self._arms:
                self._arms[key] = ArmRuntime(self, spec, name)
            return self._arms[key]

    @contextlib.contextmanager
    def spec_slot(self, spec: Spec) -> Iterator[None]:
        """One of the spec's top-level ``concurrency:`` slots, shared by all
        its arms (no limit when unset).

        Taken only around an item's own call: a composite arm's calls to its siblings run inside
        the composite's slot, since taking a second one could wait on slots the composites hold.
        """
        if spec.concurrency is None:
            yield
            return
        with self._lock:
            slots = self._spec_slots.setdefault(
                str(spec.path), threading.BoundedSemaphore(spec.concurrency)
            )
        with slots:
            yield

    def error_text(self, spec: Spec, exc: BaseException | str) -> str:
        """An error's text as a row or a message may carry it: the spec's secrets redacted
        (``providers.secrets``: keys, proxy credentials, the variables it names).

        Servers, proxies and CLIs quote what they were sent (a header, a body that echoes it), so
        any error text may hold a key; this is the one place error texts pass on their way out.
        """
        secrets = self._secrets.get(str(spec.path))
        if secrets is None:
            secrets = self._secrets[str(spec.path)] = spec_secrets(spec)
        return redact(str(exc), secrets)

    def caller_for(self, spec: Spec) -> Callable[[str, Request], Completion]:
        """How a composite arm calls a sibling arm: the same slots, retries and classification."""

        def call(arm_name: str, request: Request) -> Completion:
            if arm_name not in spec.arms:
                raise PermanentError(
                    f"arm {arm_name!r} is not in {spec.path.name}; known: {', '.join(spec.arms)}"
                )
            prompt = render_for(
                self._prompters.get(str(spec.path)), arm_name, request.example, request.prompt
            )
            try:
                with self.arm(spec, arm_name).slot():
                    return self._call(
                        spec,
                        arm_name,
                        dataclasses.replace(request, prompt=prompt, timeout_s=spec.timeout_s),
                    )[0]
            except ExhaustedError as exc:
                # Stopped here, not only where the error lands: a Python arm that catches it and
                # falls back to another arm must not go on calling an exhausted provider.
                text = self.error_text(spec, exc)
                self._stop_exhausted(
                    spec,
                    request.example.id,
                    arm_name,
                    f"{request.example.id} (arm {arm_name})",
                    text,
                    exc,
                )
                raise

        return call

    def _call(self, spec: Spec, arm: str, request: Request) -> tuple[Completion, int, int]:
        """(completion, attempts, retries); a cache hit makes no attempt at all."""
        runtime = self.arm(spec, arm)
        key = runtime.cache_key(request)
        hit = self.cache.get(key) if self.cache is not None and key else None
        if hit is not None:  # checked too: a cache written before these rules may hold any usage
            completion, attempts, retries = checked(Completion(hit[0], hit[1], cache_hits=1)), 0, 0
        else:
            # a real call: held against the budget until it answers
            with self._spend(spec, arm, request) as settle:
                done = self._attempt(spec, arm, runtime, request)
                # Whatever the provider handed back: text or this item's
                # error, usage counts or unknown.
                completion, attempts, retries = (
                    checked(done.completion),
                    done.attempts,
                    len(done.retries),
                )
                settle(_priced(spec, arm, completion))
            if self.cache is not None and key:
                self.cache.put(key, completion.text, completion.usage)
        # a cached reply costs nothing against the budget, but has its list price
        _priced(spec, arm, completion)
        return completion, attempts, retries

    def _spend(self, spec: Spec, arm: str, request: Request) -> AbstractContextManager[Settle]:
        """The budget's hold on one real call; a routing or Python arm's
        own call is the calls it makes."""
        if self.budget is None or spec.arms[arm].provider in COMPOSITE:
            return contextlib.nullcontext(_no_budget)
        return self.budget.call(spec, arm, request.prompt)

    def _attempt(self, spec: Spec, arm: str, runtime: ArmRuntime, request: Request) -> Attempted:
        """The call with its retries, in the arm's turn: an arm shown unusable is stopped here."""
        with runtime.breaker.turn(self.stop) as probing:
            try:
                done = call_with_retries(
                    runtime.provider(),
                    request,
                    spec.retries,
                    runtime.classifier,
                    self.stop,
                    probing=probing,
                )
            except ArmError as exc:
                down = UnavailableError(
                    self._arm_failure(spec, arm, exc), misconfigured=not exc.absent
                )
                raise runtime.breaker.trip(down) from None
            except PermanentError as exc:
                if probing and runtime.breaker.repeated(self.error_text(spec, exc)):
                    down = UnavailableError(
                        self._arm_failure(spec, arm, exc, True), misconfigured=True
                    )
                    raise runtime.breaker.trip(down) from None
                raise
            runtime.breaker.answered()
            return done

    def _arm_failure(
        self, spec: Spec, arm: str, exc: ArmError | PermanentError, repeated: bool = False
    ) -> str:
        """Which arm, where it calls, what went wrong and what a person should do."""
        conf = spec.arms[arm]
        hint = (exc.hint if isinstance(exc, ArmError) else "") or _hint(exc.status, conf, repeated)
        why = f"the same error on its first {REPEATS} calls: " if repeated else ""
        # A fix in the spec (a model) changes its fingerprint, which a resume checks; an endpoint or
        # a key or a login does not. The arm recorded nothing, so no row is at odds with such a fix.
        credentials = exc.status in (401, 403) or hint == CREDENTIALS_HINT or "log in" in hint
        then = (
            "" if credentials else f"; after changing its settings in the spec, resume with {ALLOW}"
        )
        # Redacted whole: the endpoint is a base_url, which may carry a user and password.
        return self.error_text(
            spec,
            f"arm {arm!r} cannot work as configured ({endpoint(conf)}): {why}{exc}; "
            f"{hint}{then}; its other items are not called",
        )

    def run(self, item: Job) -> Outcome:
        """Call, grade and record one item; never raises for provider trouble."""
        # a spec's items share one mapping
        self._prompters.setdefault(str(item.spec.path), item.prompters)
        if self.budget is None:
            return self._run(item)
        try:  # the item's calls draw on one hold on the budget, settled when it ends
            prompt = render_for(item.prompters, item.arm, item.example)
            with self.budget.item(
                item.spec, item.arm, prompt, (item.spec.benchmark, item.example.id, item.epoch)
            ):
                return self._run(item)
        except LocalError as exc:  # the ledger could not be written: stop, as for any file of ours
            return self._local(item, exc)

    def _run(self, item: Job) -> Outcome:
        if self.stop.is_set():
            return Outcome(
                ABORTED, message="the run is stopping (see the stop marker); not attempted"
            )
        found = (
            self.recorded.find((item.spec.benchmark, item.example.id, item.arm, item.epoch))
            if self.recorded
            else None
        )
        # a lost worker recorded it; xdist handed it on: report it, never record it twice
        if found is not None:
            return Outcome(
                ROW,
                row_from_json(found),
                message="recorded before its worker was lost; not run again",
            )
        request = Request(
            item.example,
            item.arm,
            render_for(item.prompters, item.arm, item.example),
            timeout_s=item.spec.timeout_s,
            epoch=item.epoch,
        )
        with self.spec_slot(item.spec), self.arm(item.spec, item.arm).slot():
            # Timed from the moment the arm's slot is ours: waiting for
            # a slot is not the model's time.
            started, t0 = utcnow(), time.perf_counter()
            try:
                completion, attempts, retries = self._call(item.spec, item.arm, request)
            except UnavailableError as exc:
                return Outcome(
                    UNAVAILABLE,
                    message=self.error_text(item.spec, exc),
                    misconfigured=exc.misconfigured,
                )
            except AbortedError as exc:
                return Outcome(ABORTED, message=self.error_text(item.spec, exc))
            except IncompleteError as exc:
                text = self.error_text(item.spec, exc)
                return Outcome(
                    INCOMPLETE, message=f"not completed after {exc.attempts} attempts: {text}"
                )
            except ExhaustedError as exc:
                text = self.error_text(item.spec, exc)
                return Outcome(
                    ABORTED,
                    message=f"provider exhausted: {text}",
                    stop=self._exhausted(item, text, exc),
                )
            except LocalError as exc:
                return self._local(item, exc)
            except PermanentError as exc:
                text = self.error_text(item.spec, exc)
                # One prefix: a message that already says "error:" is not told so twice.
                verdict = Verdict(
                    "error", None, text if text.lower().startswith("error:") else f"error: {text}"
                )
                return self._record(item, Completion(""), verdict, started, t0, 1, 0)
        try:
            verdict = self._grade(item, completion.text)
        except LocalError as exc:
            return self._local(item, exc)
        # the scorer cannot grade this arm here (isolation required): the arm stops
        except UnavailableError as exc:
            down = self.arm(item.spec, item.arm).breaker.trip(exc)
            return Outcome(
                UNAVAILABLE,
                message=self.error_text(item.spec, down),
                misconfigured=down.misconfigured,
            )
        return self._record(item, completion, verdict, started, t0, attempts, retries)

    def _grade(self, item: Job, output: str) -> Verdict:
        scorer = get_scorer(item.spec.scorer)
        assert scorer is not None  # checked at collection
        try:
            return scorer(output, item.example, item.spec.scorer_options)
        except UnavailableError:
            raise
        except Exception as exc:  # a scorer crash is this item's failure, not the run's
            local = local_cause(exc)
            if local is not None:  # ... unless it is our machine's (a full disk under the sandbox)
                raise LocalError(
                    f"scorer {item.spec.scorer}: {described(local)}; {LOCAL_HINT}"
                ) from exc
            text = self.error_text(item.spec, exc)
            return Verdict(
                "error",
                None,
                f"error: scorer {item.spec.scorer} crashed: {type(exc).__name__}: {text}",
            )

    def _record(self, item: Job, done: Completion, verdict: Verdict, started: str, t0: float,
                attempts: int, retries: int) -> Outcome:
        row = Row(
            task_id=item.example.id,
            arm=item.arm,
            passed=verdict.passed,
            detail=verdict.detail,
            wall_seconds=round(time.perf_counter() - t0, 4),
            sub_calls=done.sub_calls,
            benchmark=item.spec.benchmark,
            status=verdict.status,
            output=done.text,
            answer=verdict.answer,
            target=item.example.target,
            attempts=attempts,
            started_at=started,
            finished_at=utcnow(),
            worker=self.worker,
            run_id=self.run_id,
            subtask=item.example.subtask,
            usage=done.usage,
            retries=retries,
            extra={**done.extra, **verdict.extra, **_over(self.budget)},
            cost_usd=done.cost_usd,
            cost_units=_units(done.cost_usd, item.spec.cost_unit_usd),
            cache_hits=done.cache_hits,
            epoch=item.epoch if item.spec.epochs > 1 else None,
            charged_usd=self.budget.charged() if self.budget is not None else None,
        )
        try:
            self.writer.append(row.to_line())
        except AbortedError as exc:
            return Outcome(ABORTED, message=str(exc))
        except StoreError as exc:
            # Disk full, read-only directory...: stop the run; the rows already written stay intact.
            reason = StopReason("store-error", str(exc))
            self.stop.trigger(reason, at=utcnow(), results=str(self.writer.path))
            self.on_stop(f"echo-bench: {exc}")
            return Outcome(ABORTED, message=f"not recorded: {exc}", stop=reason)
        return Outcome(ROW, row, retries=retries)

    def _exhausted(self, item: Job, text: str, exc: ExhaustedError) -> StopReason:
        return self._stop_exhausted(item.spec, item.example.id, item.arm, item.nodeid, text, exc)

    def _stop_exhausted(self, spec: Spec, task_id: str, arm: str, where: str, text: str,
                        exc: ExhaustedError) -> StopReason:
        reason = StopReason("exhausted", text)
        resume_at = exc.resume_at if exc.resume_at is not None else _after(exc.retry_after)
        # When the provider says when its window resets, the supervisor waits until then.
        when = {"resume_at": resume_at} if resume_at is not None else {}
        self.stop.trigger(reason, benchmark=spec.benchmark, task_id=task_id, arm=arm,
                          worker=self.worker, at=utcnow(), results=str(self.writer.path), **when)
        # pytest prints this line as it is ("Interrupted: ..."): the server's text, shown escaped.
        self.on_stop(shown(f"echo-bench: provider exhausted on {where}: {text}", newlines=False))
        return reason

    def _local(self, item: Job, exc: LocalError) -> Outcome:
        """Our machine failed the item: stop the run resumably; nothing is recorded."""
        text = self.error_text(item.spec, exc)
        reason = StopReason("local-error", text)
        self.stop.trigger(
            reason,
            benchmark=item.spec.benchmark,
            task_id=item.example.id,
            arm=item.arm,
            worker=self.worker,
            at=utcnow(),
            results=str(self.writer.path),
        )
        self.on_stop(shown(f"echo-bench: local error on {item.nodeid}: {text}", newlines=False))
        return Outcome(ABORTED, message=f"not recorded: {text}", stop=reason)


ALLOW = "--bench-allow-mismatch (this arm recorded nothing)"


def _hint(status: int | None, arm: ArmSpec, repeated: bool) -> str:
    """What to do about an arm-scope failure its provider gave no hint for."""
    if status in (401, 403):
        names = (
            arm.options.get("api_key_env")
            or ", ".join(DEFAULT_KEY_ENV.get(arm.provider, ()))
            or "its key variable"
        )
        return (
            f"the key was refused: check the key in {names} (and that it may use this model), "
            "then resume"
        )
    if status == 404:
        return (
            "check the model name and base_url (an OpenAI-compatible base_url ends in /v1), then "
            "resume"
        )
    if status is not None and 300 <= status < 400:
        return (
            "base_url must be the API's address, not a web page, a redirect or a login; fix it, "
            "then resume"
        )
    if repeated:
        return (
            "fix the arm's settings in the spec (or the server), then resume with "
            "--bench-retry-errors"
        )
    return "fix the arm's settings in the spec (or its credentials), then resume"


def _after(seconds: float | None) -> float | None:
    return time.time() + seconds if seconds else None


def _priced(spec: Spec, arm: str, completion: Completion) -> float | None:
    """The call's cost: the provider's own figure, else the list
    price of its usage (None: unknown)."""
    if completion.cost_usd is None:
        # List price, cached or not: an arm's cost must not depend on what ran before it.
        completion.cost_usd = finite_cost(spec.cost(arm, completion.usage))
    return completion.cost_usd


def _over(budget: Budget | None) -> dict[str, float]:
    """The row's note of what its replies reported beyond their worst
    cases (the budget charged it)."""
    over = budget.over() if budget is not None else 0.0
    return {"budget_over_usd": over} if over > 0 else {}


def _no_budget(cost: float | None) -> None:
    """Settling a call no budget holds."""


def _units(cost: float | None, unit: float | None) -> float | None:
    # Within the readers' limit (``finite_cost``): a cost over a tiny unit must not be
    # recorded as a figure no reader reads.
    return finite_cost(round(cost / unit, 6)) if cost is not None and unit else None
