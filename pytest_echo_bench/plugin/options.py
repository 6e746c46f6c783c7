"""Command-line options and ini keys, resolved CLI -> environment -> ini -> default.

Loaded into every pytest run with the entry module, so it imports nothing else of ours at import
time; ``resolve`` runs only once a run has specs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_echo_bench.analysis.gates import Gate
    from pytest_echo_bench.plugin.shard import Shard

FSYNC_POLICIES = ("always", "end", "never")
# The options whose values are paths, by dest: pytest may take any of them
# for a test path (plugin.rootdir).
PATH_OPTIONS = {"bench_out": "--bench-out", "bench_resume": "--bench-resume",
                "bench_cache": "--bench-cache", "bench_html": "--bench-html"}
# random: stratified over subtasks, seeded (plugin.order); file: as collected
ORDERS = ("random", "file")
# now: a judged scorer grades as the sweep goes; later: outputs are recorded for `echo-bench judge`
JUDGE_WHEN = ("now", "later")
MAX_SEED = 2**63 - 1


@dataclass(frozen=True)
class BenchOptions:
    out: str | None
    resume: str | None
    allow_mismatch: bool
    concurrency: int
    fsync: str
    strict: bool
    shard: Shard | None = None
    gates: tuple[Gate, ...] = ()
    html: str | None = None
    progress_every: float = 30.0
    cache: str | None = ""  # "" = the default file under bench_results/; None = off
    retry_errors: bool = False  # resume also runs again the keys whose newest row is an error
    # a scorer that runs code stops an arm whose sandbox lacks a layer
    require_isolation: bool = False
    allow_partial: bool = False  # a gate may judge one shard alone
    # the run (its shard) never spends more than this, in US dollars
    budget_usd: float | None = None
    # None: not given (random for a new sweep; a resume keeps its meta line's)
    order: str | None = None
    seed: int | None = None
    decide: tuple[str, ...] = ()  # --bench-stop-when-decided pairs, as given ("A,B")
    judge: str = "now"  # JUDGE_WHEN: when a judged scorer's judges are asked
    batch: bool = False  # every arm whose provider has a batch API sends its calls in batches
    batch_cancel: bool = False  # a stop cancels the batches still open (default: left running)


def addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("echo-bench", "Benchmark sweeps (pytest-echo-bench)")
    group.addoption("--bench-out", metavar="PATH", help="Results JSONL to write (default: "
                    "bench_results/<UTC timestamp>_<benchmark>.jsonl under the rootdir)")
    group.addoption("--bench-resume", metavar="PATH", help="Continue the sweep recorded in PATH: "
                    "skip every recorded (task_id, arm, epoch) and append to the same file")
    group.addoption(
        "--bench-retry-errors",
        action="store_true",
        default=None,
        help="With --bench-resume: also run again every item whose newest row is an error or "
        "unjudged (the old rows stay; the newest row of each item counts)",
    )
    group.addoption(
        "--bench-allow-mismatch",
        action="store_true",
        default=None,
        help="Resume even if the spec's fingerprint differs from the one in the results file",
    )
    group.addoption(
        "--bench-concurrency", metavar="N", help="Provider calls in flight per process (default 8)"
    )
    group.addoption("--bench-fsync", choices=FSYNC_POLICIES, help="When to fsync the results file: "
                    "always (every row), end (default: when each process finishes) or never")
    group.addoption("--bench-strict", action="store_true", default=None,
                    help="Exit 1 on any wrong answer (default: 0 when the sweep completed)")
    group.addoption(
        "--bench-shard",
        metavar="K/N",
        help="Run only shard K of N (a stable partition by "
        "hash of benchmark and task_id: a shard has all arms and epochs of its items), e.g. 2/4; "
        "auto: K/N from a Slurm job array or a Kubernetes Indexed Job (JOB_COMPLETION_INDEX "
        "and ECHO_BENCH_SHARD_COUNT)",
    )
    group.addoption(
        "--bench-gate",
        metavar="RULE",
        action="append",
        default=[],
        help="Exit 1 unless the rule holds at the end, e.g. 'strong>=0.85' or "
        "'judge>=strong-0.02'; "
        "arms as ARM or BENCHMARK/ARM, which two benchmarks sharing an arm name need (repeatable)",
    )
    group.addoption(
        "--bench-allow-partial",
        action="store_true",
        default=None,
        help="With --bench-shard: let --bench-gate judge this shard alone (by default refused: "
        "a shard holds part of the sweep; gate the merged file with echo-bench report --gate)",
    )
    group.addoption(
        "--bench-cache",
        metavar="PATH",
        help="Response cache shared by all workers "
        "(default: bench_results/cache/cache.sqlite under the rootdir; 'off' disables it)",
    )
    group.addoption(
        "--bench-html",
        metavar="PATH",
        help="Keep a self-contained progress page at PATH during the run",
    )
    group.addoption("--bench-progress-every", metavar="SECONDS",
                    help="Print a per-arm progress line this often (default 30; 0 turns it off)")
    group.addoption(
        "--bench-require-isolation",
        action="store_true",
        default=None,
        help="Stop an arm whose code-running scorer (humaneval) lacks a sandbox layer here "
        "(bubblewrap, cgroups, uid drop), naming it, instead of running with less",
    )
    group.addoption(
        "--bench-budget-usd",
        metavar="USD",
        help="Never spend more than USD on provider calls in this run (its shard), counting what "
        "a resumed file already spent; a call whose worst case does not fit is not sent",
    )
    group.addoption(
        "--bench-order",
        choices=ORDERS,
        help="Order of the items: random (default for a new sweep: "
        "a seeded permutation, stratified over subtasks, all arms of an item together) or file",
    )
    group.addoption(
        "--bench-seed",
        metavar="N",
        help="Seed of the random order (default 0); a resume keeps its file's",
    )
    group.addoption(
        "--bench-judge",
        choices=JUDGE_WHEN,
        help="When a scorer that asks a judge model grades: now (default: as the sweep goes) or "
        "later (outputs recorded unjudged, graded by echo-bench judge)",
    )
    group.addoption("--bench-batch", action="store_true", default=None,
                    help="Send the calls of every arm whose provider has a batch API (sim, "
                    "openai, anthropic) through it, unless the arm says batch: false")
    group.addoption("--bench-batch-cancel", action="store_true", default=None,
                    help="On a stop (Ctrl-C, a quota), cancel the batches still open "
                    "(default: left running; the resume collects them)")
    group.addoption(
        "--bench-stop-when-decided",
        metavar="A,B",
        action="append",
        default=[],
        help="Stop the sweep (exit 0) once an anytime-valid test decides A against B (arm or "
        "benchmark/arm; repeatable, Holm across the pairs)",
    )
    parser.addini("bench_order", "Order of benchmark items: random or file (default random)")
    parser.addini("bench_seed", "Seed of the random item order (default 0)")
    parser.addini("bench_out", "Default results path for benchmark sweeps")
    parser.addini("bench_shard", "Shard K/N (or auto) to run, like --bench-shard")
    parser.addini("bench_concurrency", "Provider calls in flight per process (default 8)")
    parser.addini("bench_fsync", "fsync policy for results: always, end or never (default end)")
    parser.addini("bench_strict", "Exit 1 on any wrong answer", type="bool", default=False)
    parser.addini("bench_html", "Progress page to keep during benchmark sweeps")
    parser.addini("bench_cache", "Response cache file, or 'off'")
    parser.addini(
        "bench_retry_errors",
        "Resumes also run error and unjudged rows again (only with --bench-resume)",
        type="bool",
        default=False,
    )
    parser.addini(
        "bench_require_isolation",
        "Stop arms whose sandbox lacks a layer (like --bench-require-isolation)",
        type="bool",
        default=False,
    )
    parser.addini(
        "bench_budget_usd", "Spend ceiling in US dollars for each run (like --bench-budget-usd)"
    )
    parser.addini("bench_judge", "When judged scorers grade: now or later (default now)")
    parser.addini("bench_batch", "Send calls through batch APIs (like --bench-batch)",
                  type="bool", default=False)
    parser.addini(
        "bench_progress_every", "Seconds between per-arm progress lines (default 30; 0: off)"
    )


def _pick(config: pytest.Config, option: str, env: str, ini: str) -> str | None:
    value = config.getoption(option)
    if value is None:
        value = os.environ.get(env) or None
    if value is None:
        value = config.getini(ini) or None
    return value if value is None else str(value)


def resolve(config: pytest.Config) -> BenchOptions:
    """One place that validates every setting; a bad value is a UsageError naming its source."""
    from pytest_echo_bench.plugin.shard import parse_shard

    raw = _pick(config, "bench_concurrency", "ECHO_BENCH_CONCURRENCY", "bench_concurrency") or "8"
    try:
        concurrency = int(raw)
    except ValueError:
        concurrency = 0
    if not 1 <= concurrency <= 1024:
        raise pytest.UsageError(
            f"--bench-concurrency must be a whole number from 1 to 1024, got {raw!r}"
        )
    fsync = _pick(config, "bench_fsync", "ECHO_BENCH_FSYNC", "bench_fsync") or "end"
    if fsync not in FSYNC_POLICIES:
        raise pytest.UsageError(
            f"--bench-fsync must be one of {', '.join(FSYNC_POLICIES)}, got {fsync!r}"
        )
    strict = bool(config.getoption("bench_strict") or config.getini("bench_strict"))
    every_raw = (
        _pick(config, "bench_progress_every", "ECHO_BENCH_PROGRESS_EVERY", "bench_progress_every")
        or "30"
    )
    try:
        every = float(every_raw)
    except ValueError:
        every = -1.0
    if every < 0:
        raise pytest.UsageError(
            f"--bench-progress-every must be a number of seconds >= 0, got {every_raw!r}"
        )
    resume = config.getoption("bench_resume")
    out = _pick(config, "bench_out", "ECHO_BENCH_OUT", "bench_out")
    html = _pick(config, "bench_html", "ECHO_BENCH_HTML", "bench_html")
    cache = _cache(_pick(config, "bench_cache", "ECHO_BENCH_CACHE", "bench_cache"))
    for option, path in (
        ("--bench-out", out),
        ("--bench-resume", resume),
        ("--bench-html", html),
        ("--bench-cache", cache),
    ):
        _check_file(option, path)
    return BenchOptions(
        out=out,
        resume=resume,
        allow_mismatch=bool(config.getoption("bench_allow_mismatch")),
        concurrency=concurrency,
        fsync=fsync,
        strict=strict,
        shard=parse_shard(_pick(config, "bench_shard", "ECHO_BENCH_SHARD", "bench_shard")),
        gates=_gates(config.getoption("bench_gate") or ()),
        allow_partial=bool(config.getoption("bench_allow_partial")),
        html=html,
        progress_every=every,
        cache=cache,
        retry_errors=_retry_errors(config, resume),
        require_isolation=_require_isolation(config),
        budget_usd=_budget(
            _pick(config, "bench_budget_usd", "ECHO_BENCH_BUDGET_USD", "bench_budget_usd"),
            _source(config, "bench_budget_usd", "ECHO_BENCH_BUDGET_USD", "bench_budget_usd"),
        ),
        order=_order(config),
        seed=_seed(config),
        decide=tuple(config.getoption("bench_stop_when_decided") or ()),
        judge=_judge_when(config),
        batch=bool(config.getoption("bench_batch") or config.getini("bench_batch")),
        batch_cancel=bool(config.getoption("bench_batch_cancel")),
    )


def _source(config: pytest.Config, option: str, env: str, ini: str) -> str:
    """Where ``_pick`` found its value, as a message names it: the
    flag, the variable or the ini key."""
    if config.getoption(option) is not None:
        return "--" + option.replace("_", "-")
    return env if os.environ.get(env) else ini


# As store.checks.FIGURE_MAX (not imported: this module loads into every pytest run): a row's cost
# above it is unknown, so a budget above it could never be reached.
MAX_USD = 1e12
# ASCII digits only: float() also reads other scripts' digits ("٥" is 5),
# which no one types as dollars.
_AMOUNT = re.compile(r"[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?")


def _budget(raw: str | None, source: str = "--bench-budget-usd") -> float | None:
    """A positive, finite number of US dollars below 10^12 (``$`` allowed in
    front: it is how people write it)."""
    if raw is None:
        return None
    text = raw.strip().removeprefix("$")
    usd = float(text) if _AMOUNT.fullmatch(text) else -1.0
    if not 0 < usd < MAX_USD:
        raise pytest.UsageError(
            f"{source} must be an amount of US dollars > 0 and below 10^12 "
            f"(ASCII digits, a $ in front allowed), e.g. 5, 0.25 or $5, got {raw!r}"
        )
    return usd


def _order(config: pytest.Config) -> str | None:
    order = _pick(config, "bench_order", "ECHO_BENCH_ORDER", "bench_order")
    if order is not None and order not in ORDERS:
        raise pytest.UsageError(f"--bench-order must be one of {', '.join(ORDERS)}, got {order!r}")
    return order


def _judge_when(config: pytest.Config) -> str:
    when = _pick(config, "bench_judge", "ECHO_BENCH_JUDGE", "bench_judge") or "now"
    if when not in JUDGE_WHEN:
        source = _source(config, "bench_judge", "ECHO_BENCH_JUDGE", "bench_judge")
        raise pytest.UsageError(
            f"{source} must be one of {', '.join(JUDGE_WHEN)}, got {when!r}"
        )
    return when


def _seed(config: pytest.Config) -> int | None:
    raw = _pick(config, "bench_seed", "ECHO_BENCH_SEED", "bench_seed")
    if raw is None:
        return None
    if not (raw.isascii() and raw.isdigit()) or int(raw) > MAX_SEED:
        raise pytest.UsageError(
            f"--bench-seed must be a whole number from 0 to {MAX_SEED}, got {raw!r}"
        )
    return int(raw)


def _require_isolation(config: pytest.Config) -> bool:
    if config.getoption("bench_require_isolation"):
        return True
    raw = os.environ.get("ECHO_BENCH_REQUIRE_ISOLATION", "").strip().lower()
    if raw:
        if raw not in ("1", "true", "yes", "0", "false", "no"):
            raise pytest.UsageError(f"ECHO_BENCH_REQUIRE_ISOLATION must be 1 or 0, got {raw!r}")
        return raw in ("1", "true", "yes")
    return bool(config.getini("bench_require_isolation"))


def _check_file(option: str, path: str | None) -> None:
    """A file the run writes must be a regular file, in a directory, when it exists: ``/dev/null``,
    ``/dev/full`` or a FIFO gave INTERNALERROR and left side files (``/dev/null.lock``) beside them.
    Checked here, before anything creates a side file."""
    if not path:
        return
    from pytest_echo_bench.store.paths import refusal

    why = refusal(path)
    if why is None:
        parent = os.path.dirname(os.path.abspath(path))
        if (why := refusal(parent, "directory")) is not None:
            why = f"is in {parent}, which {why}"
    if why is not None:
        raise pytest.UsageError(f"{option} {path}: {why}; name a regular file "
                                f"(the run also writes side files beside it, such as {path}.lock)")


def _retry_errors(config: pytest.Config, resume: str | None) -> bool:
    """The flag asks for something only a resume does: refused without one. The ini key is a
    project's default for its resumes, so a fresh run ignores it."""
    if config.getoption("bench_retry_errors"):
        if not resume:
            raise pytest.UsageError(
                "--bench-retry-errors re-runs the error rows of a results file: "
                "use it with --bench-resume PATH"
            )
        return True
    return bool(resume) and bool(config.getini("bench_retry_errors"))


def _gates(rules: Iterable[str]) -> tuple[Gate, ...]:
    from pytest_echo_bench.analysis.gates import parse_gate

    try:
        return tuple(parse_gate(rule) for rule in rules)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from exc


def _cache(value: str | None) -> str | None:
    if value is None:
        return ""
    return None if value.lower() in ("off", "no", "none", "0", "false") else value
