"""Python arms: routing strategies written as functions in a ``conftest.py``.

Register with the decorator and name the function in a spec::

    # conftest.py
    from pytest_echo_bench import ArmContext, arm

    @arm("escalate")
    def escalate(ctx: ArmContext) -> str:
        a, b = ctx.call("cheap"), ctx.call("cheap_b")
        return a if ctx.answer(a) == ctx.answer(b) else ctx.call("strong")

    # bench_specs/demo.yaml
    arms:
      escalate: {provider: python, function: escalate}

``ctx.call(arm)`` runs another arm of the same spec through the same retries, error
classification and accounting as a top-level item; ``sub_calls`` counts every call.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.errors import UnavailableError
from pytest_echo_bench.providers.base import BaseProvider, Caller, Completion, ProviderInfo, Request
from pytest_echo_bench.registry import Registry
from pytest_echo_bench.registry import resolve as resolve_ref
from pytest_echo_bench.scoring.verdict import Scorer
from pytest_echo_bench.spec.load import ArmSpec, Spec

ArmFunction = Callable[["ArmContext"], "str | Completion"]
ARMS: Registry[ArmFunction] = Registry("python arm", {})  # the functions ``@arm`` registered
_JOIN = ", "  # between a composite arm's calls' served models, as its row records them


def arm(name: str) -> Callable[[ArmFunction], ArmFunction]:
    """Register ``fn`` as the Python arm ``name`` (use ``provider: python, function: name``)."""

    def register(fn: ArmFunction) -> ArmFunction:
        ARMS.register(name, fn)
        return fn

    return register


@dataclass
class ArmContext:
    """What a Python arm sees: the item, and ``call`` to ask another arm of the spec."""

    example: Example
    prompt: str
    caller: Caller
    scorer: Scorer
    scorer_options: dict[str, Any]
    sub_calls: int = 0
    usage: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    cost_usd: float | None = None
    cache_hits: int = 0
    # the served models and fingerprints its calls' replies gave, each once, in order
    served: dict[str, None] = field(default_factory=dict)
    fingerprints: dict[str, None] = field(default_factory=dict)
    _asked: dict[tuple[str, str], int] = field(default_factory=dict)
    epoch: int = 1  # the item's epoch: every sub-call samples within it
    judged: bool = False  # the spec's scorer asks a judge model: ``answer`` cannot use it

    def call(self, arm_name: str, prompt: str | None = None) -> str:
        """Ask ``arm_name`` (an arm of this spec) and return its text.

        Asking the same arm the same prompt again is a new sample (its own cache entry); the
        first ask shares the answer the arm gave as an arm of its own.
        """
        text = self.prompt if prompt is None else prompt
        sample = self._asked.get((arm_name, text), 0)
        self._asked[(arm_name, text)] = sample + 1
        done = self.caller(
            arm_name, Request(self.example, arm_name, text, sample=sample, epoch=self.epoch)
        )
        self.sub_calls += done.sub_calls
        self.cache_hits += done.cache_hits
        for key, value in (done.usage or {}).items():
            self.usage[key] = self.usage.get(key, 0) + value
        if done.cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + done.cost_usd
        for seen, given in ((self.served, done.model), (self.fingerprints, done.fingerprint)):
            if given:  # a composite sub-arm's are joined already: each of its names once
                seen.update(dict.fromkeys(given.split(_JOIN)))
        return done.text

    def completion(self, text: str) -> Completion:
        """The composite answer: ``text`` with every sub-call's accounting, and the served models
        and fingerprints its calls' replies gave (None: none gave one)."""
        return Completion(
            text, self.usage or None, self.sub_calls, self.extra, self.cost_usd, self.cache_hits,
            _JOIN.join(self.served) or None, _JOIN.join(self.fingerprints) or None,
        )

    def answer(self, output: str) -> str | None:
        """The answer the spec's scorer would extract from ``output`` (None if unparseable)."""
        if self.judged:  # extracting an answer must not call a model behind the arm's back
            raise ValueError("ctx.answer cannot grade with a scorer that asks a judge model")
        return self.scorer(output, self.example, self.scorer_options).answer


@dataclass
class PythonArm(BaseProvider):
    fn: ArmFunction
    caller: Caller
    scorer: Scorer
    scorer_options: dict[str, Any]
    judged: bool = False

    def complete(self, request: Request) -> Completion:
        ctx = ArmContext(
            request.example,
            request.prompt,
            self.caller,
            self.scorer,
            self.scorer_options,
            epoch=request.epoch,
            judged=self.judged,
        )
        result = self.fn(ctx)
        if isinstance(result, Completion):
            result.sub_calls = max(result.sub_calls, ctx.sub_calls)
            made = ctx.completion(result.text)  # what served its calls, unless it says itself
            result.model = result.model or made.model
            result.fingerprint = result.fingerprint or made.fingerprint
            return result
        return ctx.completion(str(result))


def resolve(name: str) -> ArmFunction | None:
    """A registered arm, or ``module:function``."""
    found = ARMS.get(name)
    if found is None and ":" in name:
        try:
            found = resolve_ref(name)
        except (ImportError, AttributeError):
            return None
    return found


def source_digest(fn: ArmFunction) -> str:
    """A digest of the function's source: editing a routing strategy changes the fingerprint."""
    try:
        text = inspect.getsource(fn)
    except (OSError, TypeError):
        text = getattr(fn, "__qualname__", repr(fn))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build(arm_spec: ArmSpec, spec: Spec, caller: Caller) -> PythonArm:
    from pytest_echo_bench.scoring.registry import get_scorer, takes_judges

    name = arm_spec.options.get("function")
    if not isinstance(name, str):
        raise spec.error(
            "a python arm needs 'function': a name registered with @arm or module:function",
            "arms",
            arm_spec.name,
        )
    fn = resolve(name)
    if fn is None:
        known = ", ".join(ARMS.names()) or "none registered"
        raise UnavailableError(f"python arm function {name!r} not found (registered: {known}); "
                               "register it with @pytest_echo_bench.arm in a conftest.py")
    scorer = get_scorer(spec.scorer)
    assert scorer is not None  # validated when the spec was collected
    return PythonArm(fn, caller, scorer, spec.scorer_options, takes_judges(spec.scorer))


# Its calls are its code's: the budget finds no worst case, an estimate counts it as one call.
PROVIDER = ProviderInfo(build, opaque=True)
