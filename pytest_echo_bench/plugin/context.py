"""The run context: decided once on the controller, handed to every worker as plain JSON."""

from __future__ import annotations

import contextlib
import os
import shlex
import uuid
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pytest_echo_bench import __version__
from pytest_echo_bench.analysis.decide.monitor import Plan
from pytest_echo_bench.analysis.gates import bind_gates
from pytest_echo_bench.datasets.example import Loaded
from pytest_echo_bench.datasets.registry import load_benchmark
from pytest_echo_bench.engine.fingerprint import combine, fingerprint_parts, spec_fingerprint
from pytest_echo_bench.errors import EchoBenchError, StoreError
from pytest_echo_bench.plugin import budget
from pytest_echo_bench.plugin.opening import COUNTED, Opened, Selection, own, writes
from pytest_echo_bench.plugin.options import BenchOptions
from pytest_echo_bench.plugin.plan import decide_plan
from pytest_echo_bench.plugin.recorded import record, recorded, run_order
from pytest_echo_bench.plugin.resume_check import check_resume
from pytest_echo_bench.plugin.shard import refuse_empty_shards, shard_fields
from pytest_echo_bench.spec.load import Spec
from pytest_echo_bench.store.files import default_cache, lost_path, results_dir, stop_path
from pytest_echo_bench.store.meta import (
    DecideRecord,
    OrderRecord,
    RunOptions,
    SelectionRecord,
    benchmark_entry,
)
from pytest_echo_bench.store.owner import Ownership
from pytest_echo_bench.store.reader import parse_line
from pytest_echo_bench.store.records import OPTIONS, KeySet, Meta
from pytest_echo_bench.store.writer import ResultsWriter


@dataclass
class RunContext:
    results: str
    run_id: str
    specs: list[str]
    meta: Meta  # the meta line this run writes, or the one its resume found
    resume_upto: int | None = None
    resume_recorded: int = 0
    args: list[str] | None = None  # replacement positional args when resuming from the meta line
    keyword: str | None = None
    markexpr: str | None = None
    shard: str | None = None
    cache: str | None = None
    run_start: int = 0  # the file's size when this run began: the rows after it are this run's
    retry_errors: bool = False  # resume deselects only keys whose newest row is not an error
    # (device, inode) of the file the owner locked: the only one appended to
    results_id: list[int] | None = None
    budget: bool = False  # a spend ledger beside the results holds every call (plugin.budget)
    # its limits, from the options and specs
    budget_limits: dict[str, float | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # The stop-when-decided plan the controller watches (plugin.deciding); None: none, and on every
    # worker, which never watches it (the meta line carries it as recorded).
    decide: Plan | None = None

    @property
    def stop_marker(self) -> Path:
        return stop_path(self.results)

    @property
    def options(self) -> RunOptions | None:
        """The run options a plain resume takes (plugin.recorded): checked when this run began."""
        return self.meta.run_options()

    def to_json(self) -> dict[str, Any]:
        """Plain JSON for xdist's ``workerinput``; ``from_json`` reads it back on a worker."""
        handed = {name: getattr(self, name) for name in _HANDED}
        return {**handed, "meta": self.meta.to_json()}

    @classmethod
    def from_json(cls, handed: dict[str, Any]) -> RunContext:
        return cls(
            **{**handed, "meta": Meta.from_json(handed["meta"], "the controller's meta line")}
        )


_HANDED = tuple(f.name for f in fields(RunContext) if f.name not in ("meta", "decide"))
RECORDED = pytest.StashKey[KeySet]()  # the controller's (or serial run's) resume keys
# specs parsed once per process (context, collection)
SPEC_CACHE = pytest.StashKey[dict[Path, Loaded]]()


@dataclass
class Specs:
    """The specs of a run that load, per benchmark: each spec and its items, its fingerprint and the
    digests of its parts."""

    loaded: dict[str, tuple[Spec, int]]
    fingerprints: dict[str, str]
    parts: dict[str, dict[str, str]]

    @property
    def by_name(self) -> dict[str, Spec]:
        return {name: spec for name, (spec, _) in self.loaded.items()}

    @property
    def arms(self) -> dict[str, list[str]]:
        return {name: list(spec.arms) for name, (spec, _) in self.loaded.items()}


def build_context(config: pytest.Config, opts: BenchOptions, specs: list[Path],
                  selection: Selection, opened: Opened | None) -> RunContext:
    """Controller only: decide the results file, write down the meta line, check a resume."""
    bench, examples = _checked_specs(config, opts, specs)
    if opened is None:
        refuse_empty_shards(selection.shard, examples)
    found = opened.meta if opened is not None else None
    order, notes = run_order(opts, found)
    options = recorded(found, str(opts.resume)) if opened is not None else record(opts)
    plan, more = _plan(config, opts, specs, bench, found, order)
    created = datetime.now(UTC)
    names = sorted(bench.loaded) or [p.stem for p in specs]
    base, results = _results_path(config, opts, created, names)
    meta = _meta(config, opts, specs, selection, bench, examples, created, names)
    recorded_options = {OPTIONS: options.to_json()} if options is not None else {}
    meta = replace(meta, order=order, decide=_recorded_plan(found, plan),
                   extra={**meta.extra, **recorded_options})
    ctx = RunContext(results, meta.run_id, [str(p) for p in specs], meta, args=selection.args,
                     keyword=selection.keyword, markexpr=selection.markexpr, shard=selection.shard,
                     notes=(opened.notes if opened else []) + notes + more,
                     retry_errors=opts.retry_errors, decide=plan, cache=_cache(config, opts, base))
    _take_file(config, opts, ctx, bench, opened, found)
    if writes(config):
        _start_run(config, opts, ctx, bench, found)
    return ctx


def _results_path(config: pytest.Config, opts: BenchOptions, created: datetime,
                  names: list[str]) -> tuple[Path, str]:
    """The results directory (made when this run writes there) and the results file's path."""
    create = writes(config) and (not (opts.resume or opts.out) or opts.cache == "")
    base = results_dir(config.rootpath, create=create)
    named = f"{created:%Y%m%dT%H%M%SZ}_{'+'.join(names)[:80]}.jsonl"
    return base, str(Path(opts.resume or opts.out or str(base / named)).resolve())


def _plan(config: pytest.Config, opts: BenchOptions, specs: list[Path], bench: Specs,
          found: Meta | None, order: OrderRecord) -> tuple[Plan | None, list[str]]:
    """The run's decide plan (``plugin.plan``); a pair of a broken spec's arms: that spec's error
    says why."""
    try:
        return decide_plan(opts, bench.by_name, bench.arms, found, order)
    except pytest.UsageError:
        _broken_first(specs, config.stash[SPEC_CACHE])
        raise


def _recorded_plan(found: Meta | None, plan: Plan | None) -> DecideRecord | None:
    """The plan the meta line records: a resume's as its file has it, a new sweep's own."""
    if found is not None:
        return found.decide
    return plan.record() if plan is not None else None


def _cache(config: pytest.Config, opts: BenchOptions, base: Path) -> str | None:
    """The response cache's path: the one given, or the default beside the results directory."""
    if opts.cache != "":
        return opts.cache
    return str(default_cache(base, writes(config) and base.is_dir()))


def _checked_specs(config: pytest.Config, opts: BenchOptions,
                   specs: list[Path]) -> tuple[Specs, list[Loaded]]:
    """The run's specs, loaded once, their gates and budget checked before the file is taken or
    started: the same command, corrected, runs as new. With them, the loaded specs' examples."""
    bench = _fingerprints(specs, config.stash.setdefault(SPEC_CACHE, {}))
    if bench.loaded:
        try:
            bind_gates(opts.gates, bench.arms)
        except ValueError as exc:  # "--bench-gate 'RULE': what is wrong"
            raise pytest.UsageError(f"--bench-{exc}") from None
    budget.refuse_unpriced(opts.budget_usd, bench.by_name, opts.judge != "later")
    cache = config.stash[SPEC_CACHE]  # the specs ``_fingerprints`` parsed, with their examples
    examples = {id(cache[p]): cache[p] for p in specs
                if p in cache and cache[p][0].benchmark in bench.loaded}
    return bench, list(examples.values())


def _meta(config: pytest.Config, opts: BenchOptions, specs: list[Path], selection: Selection,
          bench: Specs, examples: list[Loaded], created: datetime, names: list[str]) -> Meta:
    """The meta line a new sweep writes (``build_context`` adds its order, plan and options)."""
    rootdir = config.rootpath
    args = [_rel_arg(a, config.invocation_params.dir, rootdir) for a in selection.args]
    entries = {name: benchmark_entry(bench.fingerprints[name], spec=_rel(spec.path, rootdir),
                                     items=items, parts=bench.parts[name], epochs=spec.epochs)
               for name, (spec, items) in bench.loaded.items()}
    shard = shard_fields(selection.shard, examples, selection.args, selection.keyword,
                         selection.markexpr, rootdir)
    return Meta(
        benchmark="+".join(names), benchmarks=entries, spec_files=[_rel(p, rootdir) for p in specs],
        fingerprint=combine(bench.fingerprints), arms=bench.arms,
        selection=SelectionRecord.of(args, selection.keyword, selection.markexpr, selection.shard),
        run_id=uuid.uuid4().hex[:12], plugin_version=__version__,
        created_at=created.isoformat(timespec="seconds").replace("+00:00", "Z"), fsync=opts.fsync,
        rootdir=str(rootdir), extra=shard)


def _take_file(config: pytest.Config, opts: BenchOptions, ctx: RunContext, bench: Specs,
               opened: Opened | None, found: Meta | None) -> None:
    """A resume's file checked against the specs and its keys kept for deselection; a new sweep's
    file taken for this run (and refused when it holds a sweep)."""
    if opened is not None:
        check_resume(opts, found, bench.fingerprints, bench.parts, bench.by_name)
        ctx.resume_upto, ctx.resume_recorded = opened.index.size, len(opened.index.keys)
        config.stash[RECORDED] = opened.index.keys  # deselection here needs no second read
    elif writes(config):
        own(config, ctx.results)
        ctx.notes += _refuse_existing(Path(ctx.results))
    owner = config.pluginmanager.get_plugin("echo-bench-owner")
    ctx.results_id = owner.identity if isinstance(owner, Ownership) else None


def _start_run(config: pytest.Config, opts: BenchOptions, ctx: RunContext, bench: Specs,
               found: Meta | None) -> None:
    """Clear an earlier run's markers, start the budget's ledger, and write the meta line."""
    for stale in (ctx.stop_marker, lost_path(ctx.results)):
        with contextlib.suppress(OSError):  # an unwritable directory: the first append says so
            stale.unlink(missing_ok=True)  # a marker of an earlier run would stop or slow this one
    if not bench.loaded:  # specs that all failed to load are collection errors: no file for them
        return
    # The ledger first: a budget that cannot be kept is a usage error before the meta line, so the
    # same command, corrected, runs as a new sweep (not "the file already holds a sweep").
    with contextlib.suppress(OSError):  # the writer reports a directory it cannot make
        Path(ctx.results).parent.mkdir(parents=True, exist_ok=True)
    specs_of, cache = bench.by_name, config.stash[SPEC_CACHE]
    sweep = (found.run_id if found is not None else "") or ctx.run_id  # its first run's id
    ctx.budget_limits = budget.start(ctx.results, opts.budget_usd, specs_of,
                                     config.stash.get(COUNTED, None), ctx.shard,
                                     lambda name: _longest(specs_of[name], cache), sweep)
    ctx.budget = bool(ctx.budget_limits)
    ctx.notes += budget.split_note(specs_of, ctx.shard) if ctx.budget else []
    ctx.run_start = _start_file(ctx, opts)


def _refuse_existing(path: Path) -> list[str]:
    """A new sweep never appends to a file that already holds one: that would record items twice.
    A file that holds a meta line and no row (a spec that failed before its first row) holds no
    answer: this run, which owns it, replaces it, so the same command, corrected, runs."""
    if not path.is_file() or path.stat().st_size == 0:
        return []
    with open(path, "rb") as f:
        first = f.readline(1 << 20).rstrip(b"\n")
        rest = f.read(1 << 16)
    meta = parse_line(first, path, 1, strict=False)
    if meta is None:
        raise pytest.UsageError(f"--bench-out {path}: the file exists and is not a results file; "
                                "name a new file with --bench-out")
    if _no_rows(meta, rest, path) and not any(
        budget.lost_before(path, str(meta.get("run_id") or "")).values()
    ):
        # in place: the file this run owns (its inode) is the one it appends to
        os.truncate(path, 0)
        return [
            f"echo-bench: {path} held the meta line of run {meta.get('run_id')} and no row: "
            "replaced by this run's"
        ]
    raise pytest.UsageError(
        f"--bench-out {path}: the file already holds a sweep. Resume it with: "
        f"{shlex.join(['pytest', '--bench-resume', str(path)])}, or name a new file with "
        "--bench-out"
    )


def _no_rows(meta: dict[str, Any], rest: bytes, path: Path) -> bool:
    """Whether a file is a meta line and nothing but meta lines (its runs' end lines) after it."""
    if meta.get("_meta") is not True or len(rest) >= 1 << 16 or (rest and not rest.endswith(b"\n")):
        return False
    lines = [parse_line(line, path, n, strict=False) for n, line in enumerate(rest.splitlines(), 2)]
    return all(line is not None and line.get("_meta") is True for line in lines)


def _start_file(ctx: RunContext, opts: BenchOptions) -> int:
    """Write the meta line now (if the file is new), so every printed resume command works from the
    first moment, even if the run stops before its first row; the
    file's size: where this run begins."""
    writer = ResultsWriter(
        Path(ctx.results), opts.fsync, meta=ctx.meta.to_json(), identity=ctx.results_id
    )
    try:
        writer.start()
    except StoreError:
        return 0  # a directory that refuses the file: the run's first append reports it as a stop
    finally:
        writer.close()
    return Path(ctx.results).stat().st_size


def _fingerprints(specs: list[Path], cache: dict[Path, Loaded]) -> Specs:
    """Per benchmark: (spec, item count), its fingerprint, and the digests of its parts."""
    bench = Specs({}, {}, {})
    for path in specs:
        try:
            spec, examples = load_benchmark(path, cache)
        except EchoBenchError:
            continue  # collection reports it, with file and line, in the usual way
        if spec.benchmark in bench.loaded:
            other = bench.loaded[spec.benchmark][0].path
            raise pytest.UsageError(f"{path}: benchmark name {spec.benchmark!r} is also used by "
                                    f"{other}; give each spec its own name")
        bench.parts[spec.benchmark] = fingerprint_parts(spec, examples)
        bench.fingerprints[spec.benchmark] = spec_fingerprint(spec, examples)
        bench.loaded[spec.benchmark] = (spec, len(examples) * len(spec.arms) * spec.epochs)
    return bench


def _longest(spec: Spec, cache: dict[Path, Loaded]) -> str:
    """The benchmark's longest prompt (in UTF-8 bytes): the one its
    arms' worst cases are largest for."""
    _, examples = load_benchmark(spec.path, cache)
    return max(
        (e.input for e in examples),
        key=lambda text: len(text.encode("utf-8", "surrogatepass")),
        default="",
    )


def _broken_first(specs: list[Path], cache: dict[Path, Loaded]) -> None:
    """The first spec that does not load, as a usage error with its own file and line."""
    for path in specs:
        try:
            load_benchmark(path, cache)
        except EchoBenchError as exc:
            raise pytest.UsageError(str(exc)) from None


def _rel(path: Path, rootdir: Path) -> str:
    try:
        return str(path.resolve().relative_to(rootdir))
    except ValueError:
        return str(path.resolve())


def _rel_arg(arg: str, invocation_dir: Path, rootdir: Path) -> str:
    path, sep, rest = arg.partition("::")
    return _rel(invocation_dir / path, rootdir) + sep + rest
