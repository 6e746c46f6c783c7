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

from pytest_echo_bench.engine.breaker import REPEATS, ArmBreaker
from pytest_echo_bench.engine.fingerprint import call_descriptor
from pytest_echo_bench.engine.scope import CREDENTIALS_HINT, Classifier
from pytest_echo_bench.errors import ArmError, PermanentError, UnavailableError
from pytest_echo_bench.providers import Provider, Request, endpoint, provider_info
from pytest_echo_bench.scoring.registry import IN_PROCESS
from pytest_echo_bench.spec.load import ArmSpec, Spec
from pytest_echo_bench.store.cache import cache_key

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
                 repeated: bool = False) -> str:
    """Which arm, where it calls, what went wrong and what a person should do (not yet redacted)."""
    conf = runtime.conf
    hint = (exc.hint if isinstance(exc, ArmError) else "") or _hint(exc.status, conf, repeated)
    why = f"the same error on its first {REPEATS} calls: " if repeated else ""
    # A fix in the spec (a model) changes its fingerprint, which a resume checks; an endpoint or a
    # key or a login does not. The arm recorded nothing, so no row is at odds with such a fix.
    credentials = exc.status in (401, 403) or hint == CREDENTIALS_HINT or "log in" in hint
    then = "" if credentials else f"; after changing its settings in the spec, resume with {ALLOW}"
    rest = "its other items are not called" if runtime.role == ARM else "it is not called again"
    return (f"{runtime.role} {conf.name!r} cannot work as configured ({endpoint(conf)}): "
            f"{why}{exc}; {hint}{then}; {rest}")


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
