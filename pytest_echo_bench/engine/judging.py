"""The engine's side of the judge seam (``scoring.judging``): each ask of a scorer sent the way
an arm's call goes (``engine.calling``): the judge's own slots and breaker, its endpoint's
limiter, the retries with the spec's classifier, the response cache, the item's hold on the
budget and the run-wide stop. Which judges there are is ``engine.declared``'s.
"""

from __future__ import annotations

from collections.abc import Mapping

from pytest_echo_bench.engine.arms import ArmRuntime
from pytest_echo_bench.engine.calling import CallPath
from pytest_echo_bench.engine.failures import CallFailure, Failures
from pytest_echo_bench.engine.outcome import Job
from pytest_echo_bench.errors import ExhaustedError, PermanentError
from pytest_echo_bench.providers import Request, provider_info
from pytest_echo_bench.scoring.judging import Reply


class ItemJudges:
    """The judges one item's scorer may ask (a ``scoring.judging.Judges``).

    ``failure``: the first ask that failed, and how. It decides the item (``engine.grading``)
    whatever the scorer does with the exception, so a judge's failure is never a wrong answer.
    """

    def __init__(self, item: Job, runtimes: Mapping[str, ArmRuntime], calls: CallPath,
                 failures: Failures) -> None:
        self.item, self.runtimes, self.calls, self.failures = item, runtimes, calls, failures
        self.failure: tuple[str, BaseException] | None = None
        self._asked: dict[tuple[str, str], int] = {}  # (judge, prompt) -> times asked
        self._answered: list[tuple[str, str]] = []  # (judge, cache key) of each reply

    def ask(self, name: str, prompt: str, system: str | None = None) -> Reply:
        runtime = self.runtimes.get(name)
        if runtime is None:
            known = ", ".join(sorted(self.runtimes)) or "none"
            unknown = PermanentError(f"no judge {name!r} is declared (declared: {known})")
            self._failed(name, unknown)
            raise unknown
        # Asking the same judge the same prompt again is a new sample, with its own cache entry.
        sample = self._asked.get((name, prompt), 0)
        self._asked[(name, prompt)] = sample + 1
        item = self.item
        if system and not provider_info(runtime.conf.provider).system:
            prompt, system = f"{system}\n\n{prompt}", None  # its provider has no system text
        request = Request(item.example, name, prompt, timeout_s=item.spec.timeout_s, sample=sample,
                          epoch=item.epoch, system=system or None)
        try:
            with runtime.slot():
                completion = self.calls.call(runtime, request)[0]
        except CallFailure as exc:
            self._failed(name, exc)
            raise
        key = runtime.cache_key(request)
        if key:
            self._answered.append((name, key))
        served = completion.model or _declared_model(runtime)
        return Reply(completion.text, completion.usage, served, completion.cost_usd,
                     completion.cache_hits > 0)

    def forget(self, judges: set[str] | None = None) -> None:
        """Drop from the response cache the replies of ``judges`` (None: every judge asked) for
        this item: a reply that gave no grade must not answer the retry of the item again."""
        cache = self.calls.cache
        if cache is None:
            return
        for name, key in self._answered:
            if judges is None or name in judges:
                cache.forget(key)

    def answer_of(self, arm: str) -> str | None:
        """A live sweep has no other arm's stored output for this item."""
        return None

    def _failed(self, name: str, exc: BaseException) -> None:
        """Note the failure: the first decides the item."""
        if self.failure is None:
            self.failure = (name, exc)
        if isinstance(exc, ExhaustedError):
            # Stopped here, not only once grading ends: a scorer that catches it and asks again
            # must not go on calling an exhausted provider.
            item, text = self.item, self.failures.text(self.item.spec, exc)
            where = f"{item.nodeid} (judge {name})"
            self.failures.exhausted(item.spec, item.example.id, name, where, text, exc)


def _declared_model(runtime: ArmRuntime) -> str | None:
    model = runtime.conf.options.get("model")
    return model if isinstance(model, str) else None
