"""What the calls of one arm (or one judge) of a spec share in a process, and what an arm shown
unusable is told.

An ``ArmRuntime`` holds the provider (built once, lazily, behind its endpoint's limiter), the
arm's ``concurrency:`` slots, the classifier, the response cache's descriptor and the breaker.
A judge a scorer asks (``engine.judging``) has one of its own, so its calls take the same path.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from pytest_echo_bench.engine.breaker import REPEATS, ArmBreaker
from pytest_echo_bench.engine.fingerprint import call_descriptor
from pytest_echo_bench.engine.scope import CREDENTIALS_HINT, Classifier
from pytest_echo_bench.errors import ArmError, EchoBenchError, PermanentError, UnavailableError
from pytest_echo_bench.providers import Provider, Request, endpoint, provider_info
from pytest_echo_bench.scoring.registry import IN_PROCESS
from pytest_echo_bench.spec.load import ArmSpec, Spec
from pytest_echo_bench.store.cache import cache_key
from pytest_echo_bench.store.keyscan import RowScan, ScanRow
from pytest_echo_bench.store.reader import parse_line
from pytest_echo_bench.store.records import KeySet, row_key

ALLOW = "--bench-allow-mismatch (this arm recorded nothing)"
ARM, JUDGE = "arm", "judge"  # what a runtime calls for: an item's arm, or a scorer's judge


class ArmRuntime:
    """One arm (or judge, by ``role``) of one spec, as this process calls it; ``build`` makes its
    provider, ``cached``: the run has a response cache."""

    def __init__(self, spec: Spec, conf: ArmSpec, build: Callable[[ArmSpec], Provider],
                 cached: bool, role: str = ARM) -> None:
        self.spec, self.conf, self.role = spec, conf, role
        self.slots = threading.BoundedSemaphore(conf.concurrency) if conf.concurrency else None
        self.classifier = Classifier(spec.exhaustion_patterns, spec.transient_patterns)
        cacheable = cached and provider_info(conf.provider).cacheable
        self.descriptor = call_descriptor(spec, conf) if cacheable else None
        self.breaker = ArmBreaker()
        self._build = build
        self._provider: Provider | None = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.conf.name

    @property
    def built(self) -> Provider | None:
        """The provider, once a call has made it (what the runner closes when the run ends)."""
        return self._provider

    def cache_key(self, request: Request) -> str | None:
        if self.descriptor is None:
            return None
        call = self.descriptor if request.system is None else {
            **self.descriptor, "request_system": request.system}
        return cache_key(call, request.prompt, request.sample, request.epoch)

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
            return self.provider().instant
        except UnavailableError:
            return True  # it fails at once, with its reason

    def provider(self) -> Provider:
        with self._lock:
            if self.breaker.broken:
                raise self.breaker.broken
            if self._provider is None:
                try:
                    self._provider = self._build(self.conf)
                except UnavailableError as exc:
                    raise self.breaker.trip(exc) from None
            return self._provider


def failure_text(runtime: ArmRuntime, exc: ArmError | PermanentError,
                 repeated: bool = False, recorded: int | None = 0) -> str:
    """Which arm, where it calls, what went wrong and what a person should do (not yet redacted);
    ``recorded``: the rows the results file holds of the arm (None: unknown)."""
    conf = runtime.conf
    hint = (exc.hint if isinstance(exc, ArmError) else "") or _hint(exc.status, conf, repeated)
    why = f"the same error on its first {REPEATS} calls: " if repeated else ""
    rest = "its other items are not called" if runtime.role == ARM else "it is not called again"
    return (f"{runtime.role} {conf.name!r} cannot work as configured ({endpoint(conf)}): "
            f"{why}{exc}; {hint}{_then(runtime, exc.status, hint, recorded)}; {rest}")


def _then(runtime: ArmRuntime, status: int | None, hint: str, recorded: int | None) -> str:
    """What a change to the arm's settings does to the results file.

    A fix in the spec (a model) changes its fingerprint, which a resume checks; an endpoint or a
    key or a login does not. An arm that recorded nothing has no row at odds with such a fix; one
    that did (a deployment or a model withdrawn mid-run) would mix two settings' rows under one
    name, so it is told to become a new arm instead.
    """
    if recorded:
        rows = f"{recorded} row{'s' if recorded != 1 else ''}"
        if runtime.role == JUDGE:  # its verdicts are in the rows of every arm it grades
            return (f"; {rows} of this benchmark in the results file were graded as it was: "
                    "with its settings changed, start a new results file")
        return (f"; its {rows} recorded in the results file answer the settings as they were: "
                "changing the arm's settings makes a new arm (rename it in the spec, or start a "
                "new results file)")
    if recorded is None:
        return ("; if the results file holds its rows, changing its settings makes a new "
                f"{runtime.role} (rename it in the spec, or start a new results file)")
    credentials = status in (401, 403) or hint == CREDENTIALS_HINT or "log in" in hint
    return "" if credentials else f"; after changing its settings in the spec, resume with {ALLOW}"


def recorded_rows(results: Path, benchmark: str, runtime: ArmRuntime) -> int | None:
    """The rows ``results`` holds of the runtime's arm in ``benchmark`` (a judge's: every row of
    the benchmark, which its verdicts grade), resumed ones and this run's; None: unreadable.

    Read when an arm is stopped (once per arm and run), so the count is what every process of
    the run and every earlier run recorded, not what this process saw."""
    keys = KeySet()
    scan = RowScan(results, ScanRow, lambda raw, lineno, strict: parse_line(
        raw, results, lineno, False))
    try:
        for fast, slow in scan.batches():
            keys.add_rows(fast, benchmark)
            for record in slow:
                if not record.get("_meta"):
                    keys.add(row_key(record, benchmark))
    except FileNotFoundError:
        return 0
    except (OSError, EchoBenchError, KeyError):
        return None
    return sum(len(ids) for (bench, arm, _), ids in keys.by_arm.items()
               if bench == benchmark and (runtime.role == JUDGE or arm == runtime.name))


def _hint(status: int | None, arm: ArmSpec, repeated: bool) -> str:
    """What to do about an arm-scope failure its provider gave no hint for."""
    if status in (401, 403):
        names = (arm.options.get("api_key_env") or ", ".join(provider_info(arm.provider).key_env)
                 or "its key variable")
        return (f"the key was refused: check the key in {names} (and that it may use this model), "
                "then resume")
    if status == 404:
        return ("check the model name and base_url (an OpenAI-compatible base_url ends in /v1), "
                "then resume")
    if status is not None and 300 <= status < 400:
        return ("base_url must be the API's address, not a web page, a redirect or a login; "
                "fix it, then resume")
    if repeated:
        return ("fix the arm's settings in the spec (or the server), "
                "then resume with --bench-retry-errors")
    return "fix the arm's settings in the spec (or its credentials), then resume"
