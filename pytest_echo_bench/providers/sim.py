"""The built-in offline simulator: deterministic per (task_id, arm),
with optional injected faults."""

from __future__ import annotations

import hashlib
import random
import re
import threading
import time
from dataclasses import dataclass

from pytest_echo_bench.errors import ExhaustedError, TransientError
from pytest_echo_bench.providers.base import (
    BaseProvider,
    Caller,
    Completion,
    ProviderInfo,
    Request,
    check_options,
    option,
)
from pytest_echo_bench.providers.sim_batch import SimBatchAPI
from pytest_echo_bench.spec.load import ArmSpec, Spec

_KNOWN = {"accuracy", "latency_s", "faults", "seed", "template", "unparseable_rate"}


@dataclass
class SimProvider(BaseProvider):
    arm: str
    accuracy: float
    latency_s: float
    transient_rate: float
    exhaustion_after: int | None
    unparseable_rate: float
    template: str
    seed: str
    calls: int = 0
    expire_rate: float = 0.0  # in a batch: the share of requests that expire unrun, per attempt

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        # A transient fault means a backoff wait.
        self.instant = not self.latency_s and not self.transient_rate

    def complete(self, request: Request) -> Completion:
        self.count_call()
        if self.latency_s:
            time.sleep(self.latency_s)
        return self.answer(request)

    def answer(self, request: Request) -> Completion:
        """The simulated answer (or fault) to ``request``, without counting or waiting: what a
        live call returns after its latency, and what a batch (``sim_batch``) holds."""
        ex = request.example
        if (
            self.transient_rate
            and _rng(self.seed, ex.id, self.arm, f"fault{request.attempt}").random()
            < self.transient_rate
        ):
            raise TransientError("simulated 529 overloaded", status=529)
        # A repeated ask (sample > 0, or epoch > 1) is an independent draw, as a model sampled again
        # would be; epoch 1's first ask draws as a spec without epochs does.
        again = ([f"sample{request.sample}"] if request.sample else []) + (
            [f"epoch{request.epoch}"] if request.epoch > 1 else []
        )
        rng = _rng(self.seed, ex.id, self.arm, *again)
        roll = rng.random()
        if roll < self.accuracy:
            answer = ex.target
        elif roll < self.accuracy + self.unparseable_rate * (1 - self.accuracy):
            return Completion(
                "I am not sure.",
                {"prompt_tokens": len(request.prompt) // 4, "completion_tokens": 4},
            )
        else:
            answer = wrong_answer(ex.target, rng)
        text = self.template.replace("{answer}", answer)
        return Completion(
            text,
            {
                "prompt_tokens": len(request.prompt) // 4,
                "completion_tokens": max(1, len(text) // 4),
            },
        )

    def batch_api(self) -> SimBatchAPI:
        """Its batch API: offline, in this process (``providers.sim_batch``)."""
        return SimBatchAPI(self, self.expire_rate, self.latency_s)

    def count_call(self) -> None:
        with self._lock:
            self.calls += 1
            over = self.exhaustion_after is not None and self.calls > self.exhaustion_after
        if over:
            raise ExhaustedError(
                f"simulated usage limit reached after {self.exhaustion_after} calls", status=429
            )


def _rng(*parts: str) -> random.Random:
    # sha256, not hash(): Python salts str hashes per process, and every xdist worker must agree.
    # surrogatepass: a task id may hold a lone surrogate (JSON's "\ud800"), which plain UTF-8
    # refuses; every other text encodes to the same bytes, so no draw changes.
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def wrong_answer(target: str, rng: random.Random) -> str:
    """A plausible wrong answer of the same shape as ``target``."""
    t = target.strip()
    flips = {
        "Yes": "No",
        "No": "Yes",
        "True": "False",
        "False": "True",
        "valid": "invalid",
        "invalid": "valid",
    }
    if t in flips:
        return flips[t]
    m = re.fullmatch(r"\(([A-R])\)", t)
    if m:
        letters = [c for c in "ABCD" if c != m.group(1)]
        return f"({rng.choice(letters)})"
    if re.fullmatch(r"-?\d+", t):
        return str(int(t) + rng.choice([-2, -1, 1, 2]))
    words = t.split()
    if len(words) > 1:
        rng.shuffle(words)
        shuffled = " ".join(words)
        if shuffled != t:
            return shuffled
    return t[::-1] + "?" if t else "?"


def build(arm: ArmSpec, spec: Spec, caller: Caller) -> SimProvider:
    check_options(arm, spec, "sim", _KNOWN)
    accuracy = float(option(arm, "accuracy", (int, float), 0.8, spec))
    if not 0 <= accuracy <= 1:
        raise spec.error("accuracy must be between 0 and 1", "arms", arm.name, "accuracy")
    faults = option(arm, "faults", dict, {}, spec)
    bad = sorted(set(faults) - {"transient_rate", "exhaustion_after", "expire_rate"})
    if bad:
        raise spec.error(
            f"unknown fault {bad[0]!r}; known: transient_rate, exhaustion_after, expire_rate",
            "arms",
            arm.name,
            "faults",
        )
    after = faults.get("exhaustion_after")
    if after is not None and (isinstance(after, bool) or not isinstance(after, int) or after < 0):
        raise spec.error("exhaustion_after must be a whole number >= 0", "arms", arm.name, "faults")
    return SimProvider(
        arm=arm.name,
        accuracy=accuracy,
        latency_s=float(option(arm, "latency_s", (int, float), 0.0, spec)),
        transient_rate=float(faults.get("transient_rate", 0.0)),
        exhaustion_after=after,
        unparseable_rate=float(option(arm, "unparseable_rate", (int, float), 0.0, spec)),
        template=str(option(arm, "template", str, "{answer}", spec)),
        seed=str(arm.options.get("seed", "0")),
        expire_rate=_rate(faults, "expire_rate", arm, spec),
    )


def _rate(faults: dict[str, object], name: str, arm: ArmSpec, spec: Spec) -> float:
    value = faults.get(name, 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise spec.error(f"{name} must be a number from 0 to below 1, got {value!r}",
                         "arms", arm.name, "faults", name)
    return float(value)


PROVIDER = ProviderInfo(build, batch=True)
