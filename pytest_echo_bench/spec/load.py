"""Benchmark specs: YAML files loaded safely, validated with file/line/key in every error."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_echo_bench.errors import SpecError
from pytest_echo_bench.spec.batching import BatchSpec, batch_setting
from pytest_echo_bench.spec.parse import KeyPath, nearest_line, parse_yaml, read_spec
from pytest_echo_bench.spec.pricing import Price, parse_pricing
from pytest_echo_bench.spec.prompting import Prompting, prompt_keys, prompting
from pytest_echo_bench.spec.values import (
    MAX_NUMBER,
    MAX_SECONDS,
    mapping,
    non_negative,
    optional_int,
    positive,
    shown,
    strings,
)

TOP_KEYS = {
    "benchmark",
    "description",
    "dataset",
    "scorer",
    "arms",
    "retries",
    "timeout_s",
    "errors",
    "concurrency",
    "pricing",
    "epochs",
    "budget",
    "budget_unpriced",
    "decide",
    "judges",
}
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
# An arm's endpoint: where its calls go and how, not what they ask (left out of the fingerprint).
ENDPOINT_KEYS = frozenset({"base_url", "proxy", "ca_file", "ca_dir", "client"})
MAX_EPOCHS = 1000  # samples per item; every epoch is an item of its own
MAX_CONCURRENCY = 1024  # as --bench-concurrency
MAX_ATTEMPTS = 100


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 4
    backoff_s: float = 1.0
    max_backoff_s: float = 60.0
    # an item's rate-limit waits (429) end after this long: left for a resume
    max_wait_s: float = 600.0


@dataclass(frozen=True)
class RateLimit:
    """An arm's ``rate_limit:``: the provider's published limits, kept to on our side."""

    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None


@dataclass(frozen=True)
class ArmSpec:
    name: str
    provider: str
    options: dict[str, Any]
    line: int
    concurrency: int | None = None
    # when it cannot run here (no key, not logged in), the sweep still counts as complete
    optional: bool = False
    rate_limit: RateLimit | None = None
    # ``budget: {usd: X}``: this arm's calls never spend more than X
    budget_usd: float | None = None
    # ``prompt:`` and ``fewshot:`` (spec.prompting); None: the item's input as it is
    prompt: Prompting | None = None
    # ``batch:`` (spec.batching): None when unset (``--bench-batch`` decides), False when off
    batch: BatchSpec | bool | None = None


@dataclass(frozen=True)
class DecideSpec:
    """``decide: {pairs: [[A, B]], alpha, margin}``: stop the sweep once every pair is decided."""

    pairs: tuple[tuple[str, str], ...]
    alpha: float = 0.05
    margin: float = 0.0


@dataclass(frozen=True)
class Spec:
    path: Path
    benchmark: str
    dataset: dict[str, Any]
    scorer: str
    scorer_options: dict[str, Any]
    arms: dict[str, ArmSpec]
    retries: RetryPolicy = field(default_factory=RetryPolicy)
    timeout_s: float = 180.0
    exhaustion_patterns: tuple[str, ...] = ()
    transient_patterns: tuple[str, ...] = ()
    concurrency: int | None = None
    # arm or judge -> its prices (spec.pricing)
    pricing: dict[str, Price] = field(default_factory=dict)
    cost_unit_usd: float | None = None  # the reference call's cost: "cost units" divide by it
    epochs: int = 1  # samples of every (task_id, arm); epochs are numbered 1..epochs
    # ``budget: {usd: X}``: the benchmark's calls never spend more than X
    budget_usd: float | None = None
    # ``budget_unpriced: allow``: arms without a worst case run unreserved
    budget_unpriced: bool = False
    decide: DecideSpec | None = None
    # ``judges:``: each judge's name -> its provider settings, as written (``engine.declared``
    # checks and builds them as it does an arm's)
    judges: dict[str, Any] = field(default_factory=dict)
    lines: dict[KeyPath, int] = field(default_factory=dict, repr=False, compare=False)
    # The environment variables whose values ``${VAR}`` put into the
    # spec: error texts never show them.
    env_names: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    def cost(self, arm: str, usage: dict[str, int] | None, batch: bool = False) -> float | None:
        """USD of one call of ``arm`` with ``usage`` (a batch call's at the batch price), when
        the spec prices that arm (``spec.pricing.Price.cost``)."""
        if arm not in self.pricing or not usage:
            return None
        return self.pricing[arm].cost(usage, batch)

    def line_of(self, *keys: Any) -> int | None:
        return nearest_line(self.lines, keys)

    def error(self, message: str, *keys: Any) -> SpecError:
        """A SpecError pointing at the line of ``keys`` (or its nearest parent)."""
        return SpecError(message, str(self.path), self.line_of(*keys), ".".join(map(str, keys)))


def load_spec(
    path: Path, environ: os._Environ[str] | dict[str, str] | None = None, calls: bool = True
) -> Spec:
    """Parse and validate one spec file; raise SpecError naming file, line and key. ``calls=False``
    (regrade, which calls nothing) leaves out an endpoint key whose
    ``${VAR}`` is unset, not refused."""
    env = os.environ if environ is None else environ
    data, lines = parse_yaml(read_spec(path), str(path))
    if not calls:
        data = _without_unset_endpoints(data, env)
    return _build(path, data, lines, env)


def _without_unset_endpoints(data: Any, env: Any) -> Any:
    arms = data.get("arms") if isinstance(data, dict) else None
    if not isinstance(arms, dict):
        return data
    def unset(value: Any) -> bool:
        return isinstance(value, str) and any(
            m.group(1) not in env and m.group(2) is None for m in _ENV.finditer(value)
        )

    kept = {
        name: {k: v for k, v in conf.items() if not (k in ENDPOINT_KEYS and unset(v))}
        if isinstance(conf, dict)
        else conf
        for name, conf in arms.items()
    }
    return {**data, "arms": kept}


def expand_env(
    value: Any, env: Any, where: KeyPath, fail: Any, used: set[str] | None = None
) -> Any:
    """Expand ``${VAR}`` / ``${VAR:-default}`` in every string of ``value``; ``used`` collects the
    names whose values came from ``env``."""
    if isinstance(value, str):
        def sub(m: re.Match[str]) -> str:
            name, default = m.group(1), m.group(2)
            if name in env:
                if used is not None:
                    used.add(name)
                return str(env[name])
            if default is not None:
                return default
            raise fail(
                f"environment variable {name} is not set (use ${{{name}:-default}} for a default)",
                *where,
            )
        return _ENV.sub(sub, value)
    if isinstance(value, dict):
        return {k: expand_env(v, env, where + (k,), fail, used) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env(v, env, where + (i,), fail, used) for i, v in enumerate(value)]
    return value


def _build(path: Path, data: Any, lines: dict[KeyPath, int], env: Any) -> Spec:
    def fail(message: str, *keys: Any) -> SpecError:
        # Every node has a line; only an empty document has none, and its line 1 is what is wrong.
        return SpecError(
            message, str(path), nearest_line(lines, keys) or 1, ".".join(map(str, keys))
        )

    if not isinstance(data, dict):
        raise fail("a spec must be a mapping with benchmark, dataset, scorer and arms")
    used: set[str] = set()
    data = expand_env(data, env, (), fail, used)
    unknown = sorted(set(map(str, data)) - TOP_KEYS)
    if unknown:
        raise fail(
            f"unknown key {unknown[0]!r}; known keys: {', '.join(sorted(TOP_KEYS))}", unknown[0]
        )
    for key in ("benchmark", "dataset", "scorer", "arms"):
        if key not in data:
            raise fail(f"missing required key {key!r}")
    benchmark = data["benchmark"]
    if not isinstance(benchmark, str) or not _NAME.match(benchmark):
        raise fail("benchmark must be a name of letters, digits, '_', '-' or '.'", "benchmark")
    dataset = data["dataset"]
    if not isinstance(dataset, dict) or "loader" not in dataset:
        raise fail(
            "dataset must be a mapping with a 'loader' key (inline, jsonl, parquet, hf, bbh, "
            "mmlu_pro, ...)",
            "dataset",
        )
    scorer, scorer_options = _scorer(data["scorer"], path, fail)
    errors = mapping(data.get("errors", {}), "errors", fail)
    arms = _arms(data["arms"], lines, fail)
    judges = _judges(data.get("judges", {}), arms, fail)
    pricing, unit = parse_pricing(data.get("pricing", {}), {*arms, *judges}, fail)
    return Spec(
        path=path,
        benchmark=benchmark,
        dataset=dataset,
        scorer=scorer,
        scorer_options=scorer_options,
        arms=arms,
        retries=_retries(data.get("retries", {}), fail),
        timeout_s=positive(data.get("timeout_s", 180.0), "timeout_s", fail, MAX_SECONDS),
        exhaustion_patterns=strings(errors.get("exhaustion", []), ("errors", "exhaustion"), fail),
        transient_patterns=strings(errors.get("transient", []), ("errors", "transient"), fail),
        concurrency=optional_int(data.get("concurrency"), ("concurrency",), fail, MAX_CONCURRENCY),
        pricing=pricing,
        cost_unit_usd=unit,
        epochs=optional_int(data.get("epochs", 1), ("epochs",), fail, MAX_EPOCHS) or 1,
        budget_usd=_budget(data.get("budget"), ("budget",), fail),
        budget_unpriced=_unpriced(data.get("budget_unpriced"), fail),
        decide=_decide(data.get("decide"), benchmark, arms, fail),
        judges=judges,
        lines=lines,
        env_names=frozenset(used),
    )


def _scorer(value: Any, path: Path, fail: Any) -> tuple[str, dict[str, Any]]:
    if isinstance(value, str):
        return value, {}
    if isinstance(value, dict) and isinstance(value.get("name"), str):
        options = {k: v for k, v in value.items() if k != "name"}
        template = options.get("template_file")
        if isinstance(template, str) and template:
            # Beside the spec, wherever the run starts; the fingerprint takes the file's text,
            # not this path (``engine.fingerprint.scorer_descriptor``).
            options["template_file"] = str(path.parent / Path(template).expanduser())
        return value["name"], options
    raise fail("scorer must be a name (exact, bbh, ...) or a mapping with a 'name' key", "scorer")


def arm_name_problem(name: object) -> str | None:
    """Why ``name`` cannot name an arm (of a spec, or ``echo-bench import --arm``), or None."""
    # fullmatch: "$" would let a final newline in
    if isinstance(name, str) and _NAME.fullmatch(name):
        return None
    return f"arm name {name!r} must be letters, digits, '_', '-' or '.'"


def _arms(value: Any, lines: dict[KeyPath, int], fail: Any) -> dict[str, ArmSpec]:
    if not isinstance(value, dict) or not value:
        raise fail("arms must be a non-empty mapping of arm name to provider settings", "arms")
    arms: dict[str, ArmSpec] = {}
    for name, conf in value.items():
        problem = arm_name_problem(name)
        if problem:
            raise fail(problem, "arms", name)
        if not isinstance(conf, dict) or not isinstance(conf.get("provider"), str):
            raise fail("an arm needs a 'provider' (sim, openai, python, ...)", "arms", name)
        # Run settings, not what the arm answers: kept out of its options (and its fingerprint).
        # The prompt is the arm's too, but read by the runner, not the provider (spec.prompting).
        taken = ("provider", "concurrency", "optional", "rate_limit", "budget", "batch",
                 *prompt_keys(conf))
        options = {k: v for k, v in conf.items() if k not in taken}
        concurrency = optional_int(
            conf.get("concurrency"), ("arms", name, "concurrency"), fail, MAX_CONCURRENCY
        )
        optional = conf.get("optional", False)
        if not isinstance(optional, bool):
            raise fail(
                f"optional must be true or false, got {optional!r}", "arms", name, "optional"
            )
        line = nearest_line(lines, ("arms", name)) or 0
        rate_limit = _rate_limit(conf.get("rate_limit"), name, fail)
        budget = _budget(conf.get("budget"), ("arms", name, "budget"), fail)
        arms[name] = ArmSpec(
            name,
            conf["provider"],
            options,
            line,
            concurrency,
            optional,
            rate_limit,
            budget,
            prompting(conf, name, fail),
            batch_setting(conf.get("batch"), name, fail),
        )
    return arms


def _judges(value: Any, arms: dict[str, ArmSpec], fail: Any) -> dict[str, Any]:
    """``judges:``: a mapping of judge names (never an arm's: its prices and cache entries would be
    the arm's) to provider settings; what a judge's settings must hold is ``engine.declared``'s."""
    conf = mapping(value, "judges", fail)
    for name, settings in conf.items():
        problem = arm_name_problem(name)
        if problem:
            raise fail(problem.replace("arm name", "judge name"), "judges", name)
        if name in arms:
            raise fail(f"judge {name!r} has the name of an arm; give it one of its own",
                       "judges", name)
        if not isinstance(settings, dict):
            raise fail(f"judge {name!r} needs a mapping with a 'provider' (openai, anthropic, "
                       "...)", "judges", name)
    return dict(conf)


def _decide(value: Any, benchmark: str, arms: dict[str, ArmSpec], fail: Any) -> DecideSpec | None:
    """Pairs of this spec's arms (``arm`` or ``benchmark/arm``),
    alpha in (0, 1), margin in [0, 1)."""
    if value is None:
        return None
    conf = mapping(value, "decide", fail)
    unknown = sorted(set(conf) - {"pairs", "alpha", "margin"})
    if unknown:
        raise fail(f"unknown key {unknown[0]!r}; use pairs, alpha, margin", "decide", unknown[0])
    pairs = conf.get("pairs")
    if not isinstance(pairs, list) or not pairs:
        raise fail("pairs must be a list of [A, B] pairs of arms", "decide", "pairs")
    found = []
    for i, entry in enumerate(pairs):
        if not isinstance(entry, list) or len(entry) != 2:
            raise fail("each pair must be [A, B]", "decide", "pairs", i)
        a, b = names = [str(n).removeprefix(f"{benchmark}/") for n in entry]
        missing = [n for n in names if n not in arms]
        if missing or a == b:
            why = (f"arm {missing[0]!r} is not an arm of this spec" if missing
                   else "an arm cannot be compared with itself")
            raise fail(why, "decide", "pairs", i)
        if not {(a, b), (b, a)}.isdisjoint(found):  # listed already: one test decides both ways
            raise fail(f"the pair [{a}, {b}] is listed already (a pair is compared both ways)",
                       "decide", "pairs", i)
        found.append((a, b))
    alpha = positive(conf.get("alpha", 0.05), "decide.alpha", fail, 0.5)
    margin = non_negative(conf.get("margin", 0.0), "decide.margin", fail, 0.99)
    return DecideSpec(tuple(found), alpha, margin)


def _retries(value: Any, fail: Any) -> RetryPolicy:
    conf = mapping(value, "retries", fail)
    unknown = set(conf) - {"attempts", "backoff_s", "max_backoff_s", "max_wait_s"}
    if unknown:
        raise fail(
            f"unknown key {sorted(unknown)[0]!r}; use attempts, backoff_s, max_backoff_s, "
            "max_wait_s",
            "retries",
        )
    attempts = (
        optional_int(conf.get("attempts", 4), ("retries", "attempts"), fail, MAX_ATTEMPTS) or 1
    )
    backoff = non_negative(conf.get("backoff_s", 1.0), "retries.backoff_s", fail, MAX_SECONDS)
    max_backoff = non_negative(
        conf.get("max_backoff_s", 60.0), "retries.max_backoff_s", fail, MAX_SECONDS
    )
    max_wait = non_negative(conf.get("max_wait_s", 600.0), "retries.max_wait_s", fail, MAX_SECONDS)
    return RetryPolicy(attempts, backoff, max_backoff, max_wait)


def _rate_limit(value: Any, arm: str, fail: Any) -> RateLimit | None:
    """``rate_limit: {requests_per_minute, tokens_per_minute}``,
    each a positive number or absent."""
    if value is None:
        return None
    where = ("arms", arm, "rate_limit")
    known = {"requests_per_minute", "tokens_per_minute"}
    if not isinstance(value, dict) or not value or set(value) - known:
        raise fail(
            "rate_limit must be a mapping with requests_per_minute and/or tokens_per_minute", *where
        )
    for key, limit in value.items():
        if (
            isinstance(limit, bool)
            or not isinstance(limit, (int, float))
            or not 0 < limit <= MAX_NUMBER
        ):
            raise fail(
                f"must be a positive number up to {MAX_NUMBER:g}, got {shown(limit)}", *where, key
            )
    return RateLimit(value.get("requests_per_minute"), value.get("tokens_per_minute"))


def _budget(value: Any, where: KeyPath, fail: Any) -> float | None:
    """``budget: {usd: X}``: a ceiling in US dollars, a number > 0 (a run
    setting, not in the fingerprint)."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"usd"}:
        raise fail(
            "budget must be a mapping with one key, usd (US dollars), e.g. budget: {usd: 5}", *where
        )
    return positive(value["usd"], ".".join(map(str, (*where, "usd"))), fail)


def _unpriced(value: Any, fail: Any) -> bool:
    if value is None:
        return False
    if value != "allow":
        raise fail(
            f"budget_unpriced must be 'allow' (or absent), got {shown(value)}", "budget_unpriced"
        )
    return True
