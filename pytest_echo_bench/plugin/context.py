"""The run context: decided once on the controller, handed to every worker as plain JSON."""

from __future__ import annotations

import contextlib
import os
import shlex
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pytest_echo_bench import __version__
from pytest_echo_bench.analysis.gates import bind_gates
from pytest_echo_bench.datasets.example import Loaded
from pytest_echo_bench.datasets.registry import load_benchmark
from pytest_echo_bench.engine.fingerprint import combine, fingerprint_parts, spec_fingerprint
from pytest_echo_bench.errors import EchoBenchError, StoreError
from pytest_echo_bench.plugin import budget
from pytest_echo_bench.plugin.options import BenchOptions
from pytest_echo_bench.plugin.plan import decide_plan
from pytest_echo_bench.plugin.recorded import record, recorded, run_order
from pytest_echo_bench.plugin.resume_check import check_resume, refuse_unfingerprinted
from pytest_echo_bench.plugin.shard import (
    refuse_empty_shards,
    refuse_partial_gate,
    resumed_shard,
    shard_fields,
)
from pytest_echo_bench.spec.load import Spec
from pytest_echo_bench.store.files import (
    default_cache,
    lost_path,
    results_dir,
    stop_path,
    torn_path,
)
from pytest_echo_bench.store.owner import Ownership
from pytest_echo_bench.store.reader import ResultsIndex, parse_line
from pytest_echo_bench.store.records import KeySet, Meta
from pytest_echo_bench.store.tally import FileTally
from pytest_echo_bench.store.writer import ResultsWriter, repair


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
    order: dict[str, Any] = field(default_factory=dict)  # the meta line's ``order`` (plugin.order)
    # the meta line's stop-when-decided plan, or {}
    decide: dict[str, Any] = field(default_factory=dict)
    # the run options a plain resume takes (plugin.recorded)
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def stop_marker(self) -> Path:
        return stop_path(self.results)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON for xdist's ``workerinput``; ``from_json`` reads it back on a worker."""
        return {**asdict(self), "meta": self.meta.to_json()}

    @classmethod
    def from_json(cls, handed: dict[str, Any]) -> RunContext:
        return cls(
            **{**handed, "meta": Meta.from_json(handed["meta"], "the controller's meta line")}
        )


RECORDED = pytest.StashKey[KeySet]()  # the controller's (or serial run's) resume keys
COUNTED = pytest.StashKey[FileTally]()  # and its counts of the file, read in the same pass
# specs parsed once per process (context, collection)
SPEC_CACHE = pytest.StashKey[dict[Path, Loaded]]()


@dataclass
class Selection:
    """What a run selects: positional args, -k, -m and the shard."""

    args: list[str]
    keyword: str | None
    markexpr: str | None
    shard: str | None


@dataclass
class Opened:
    """A results file opened for resume: its index, read once, and what to tell the user."""

    path: str
    index: ResultsIndex
    notes: list[str]


def build_context(
    config: pytest.Config,
    opts: BenchOptions,
    specs: list[Path],
    selection: Selection,
    opened: Opened | None,
) -> RunContext:
    """Controller only: decide the results file, write down the meta line, check a resume."""
    rootdir = config.rootpath
    fingerprints, parts, loaded = _fingerprints(specs, config.stash.setdefault(SPEC_CACHE, {}))
    if loaded:  # before the file is taken or started: the same command, corrected, runs as new
        try:
            bind_gates(opts.gates, {n: list(s.arms) for n, (s, _) in loaded.items()})
        except ValueError as exc:
            # "--bench-gate 'RULE': what is wrong"
            raise pytest.UsageError(f"--bench-{exc}") from None
    budget.refuse_unpriced(opts.budget_usd, {n: s for n, (s, _) in loaded.items()})
    cache = config.stash[SPEC_CACHE]  # the specs ``_fingerprints`` parsed, with their examples
    examples = list(
        {
            id(cache[p]): cache[p] for p in specs if p in cache and cache[p][0].benchmark in loaded
        }.values()
    )
    if opened is None:
        refuse_empty_shards(selection.shard, examples)
    arms = {n: list(s.arms) for n, (s, _) in loaded.items()}
    found = opened.index.meta if opened is not None else None
    order, notes = run_order(opts, found)
    options = recorded(found, str(opts.resume)) if opened is not None else record(opts)
    try:
        plan, more = decide_plan(opts, {n: s for n, (s, _) in loaded.items()}, arms, found, order)
    except pytest.UsageError:
        # a pair of a broken spec's arms: that spec's error says why
        _broken_first(specs, config.stash[SPEC_CACHE])
        raise
    notes += more
    run_id = uuid.uuid4().hex[:12]
    created = datetime.now(UTC)
    names = sorted(loaded) or [p.stem for p in specs]
    base = results_dir(
        rootdir, create=_writes(config) and (not (opts.resume or opts.out) or opts.cache == "")
    )
    results = (
        opts.resume
        or opts.out
        or str(base / f"{created:%Y%m%dT%H%M%SZ}_{'+'.join(names)[:80]}.jsonl")
    )
    meta = Meta(
        benchmark="+".join(names),
        benchmarks={
            n: _bench_info(s, c, rootdir, fingerprints[n], parts[n]) for n, (s, c) in loaded.items()
        },
        spec_files=[_rel(p, rootdir) for p in specs],
        fingerprint=combine(fingerprints),
        arms=arms,
        selection={
            "args": [_rel_arg(a, config.invocation_params.dir, rootdir) for a in selection.args],
            "keyword": selection.keyword or "",
            "markexpr": selection.markexpr or "",
            "shard": selection.shard or "",
        },
        run_id=run_id,
        plugin_version=__version__,
        created_at=created.isoformat(timespec="seconds").replace("+00:00", "Z"),
        fsync=opts.fsync,
        rootdir=str(rootdir),
        order=order,
        decide=plan,
        extra={
            **shard_fields(
                selection.shard,
                examples,
                selection.args,
                selection.keyword,
                selection.markexpr,
                rootdir,
            ),
            **({"options": options} if options else {}),
        },
    )
    ctx = RunContext(
        str(Path(results).resolve()),
        run_id,
        [str(p) for p in specs],
        meta,
        args=selection.args,
        keyword=selection.keyword,
        markexpr=selection.markexpr,
        shard=selection.shard,
        notes=(opened.notes if opened else []) + notes,
        retry_errors=opts.retry_errors,
        order=order,
        decide=plan,
        options=options,
        cache=opts.cache
        if opts.cache != ""
        else str(default_cache(base, _writes(config) and base.is_dir())),
    )
    if opened is not None:
        check_resume(
            opts, opened.index, fingerprints, parts, {n: s for n, (s, _) in loaded.items()}
        )
        ctx.resume_upto, ctx.resume_recorded = opened.index.size, len(opened.index.keys)
        # deselection in this process needs no second read
        config.stash[RECORDED] = opened.index.keys
    elif _writes(config):
        _own(config, ctx.results)
        ctx.notes += _refuse_existing(Path(ctx.results))
    owner = config.pluginmanager.get_plugin("echo-bench-owner")
    ctx.results_id = owner.identity if isinstance(owner, Ownership) else None
    if _writes(config):
        for stale in (ctx.stop_marker, lost_path(ctx.results)):
            # an unwritable directory is reported by the first append
            with contextlib.suppress(OSError):
                # a marker of an earlier run would stop or slow this one
                stale.unlink(missing_ok=True)
        if loaded:  # specs that all failed to load are collection errors: no file for them
            # The ledger first: a budget that cannot be kept is a usage error before
            # the meta line, so the same command, corrected, runs as a new sweep (not
            # "the file already holds a sweep").
            with contextlib.suppress(OSError):  # the writer reports a directory it cannot make
                Path(ctx.results).parent.mkdir(parents=True, exist_ok=True)
            specs_of = {n: s for n, (s, _) in loaded.items()}
            ctx.budget_limits = budget.start(
                ctx.results,
                opts.budget_usd,
                specs_of,
                config.stash.get(COUNTED, None),
                ctx.shard,
                lambda name: _longest(specs_of[name], config.stash[SPEC_CACHE]),
                # the sweep: its first run's id
                str((found or {}).get("run_id") or run_id),
            )
            ctx.budget = bool(ctx.budget_limits)
            ctx.notes += budget.split_note(specs_of, ctx.shard) if ctx.budget else []
            ctx.run_start = _start_file(ctx, opts)
    return ctx


def _bench_info(
    spec: Spec, items: int, rootdir: Path, fingerprint: str, parts: dict[str, str]
) -> dict[str, Any]:
    """A benchmark's entry in the meta line; ``epochs`` only when the spec
    samples each item more than once."""
    info: dict[str, Any] = {
        "spec": _rel(spec.path, rootdir),
        "fingerprint": fingerprint,
        "parts": parts,
        "items": items,
    }
    if spec.epochs > 1:
        info["epochs"] = spec.epochs
    return info


def _writes(config: pytest.Config) -> bool:
    """Whether this run writes the results file (collecting only
    reads, and never takes the file)."""
    return not config.option.collectonly


def _own(config: pytest.Config, results: str) -> None:
    """Take the results file for this run, before anything reads or
    repairs it; released at unconfigure."""
    ownership = Ownership(results)
    try:
        ownership.acquire()
    except StoreError as exc:
        raise pytest.UsageError(f"echo-bench: {exc}") from exc
    config.pluginmanager.register(ownership, "echo-bench-owner")


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


def open_resume(config: pytest.Config, opts: BenchOptions) -> Opened:
    """Repair a torn tail, then read the file once: the keys to deselect and the per-arm counts."""
    path = str(opts.resume)
    file = Path(path)
    if not file.is_file():
        raise pytest.UsageError(f"--bench-resume {path}: no such results file")
    if not opts.allow_mismatch:
        refuse_unfingerprinted(file, path)
    if _writes(config):
        _own(config, str(file.resolve()))
    try:
        cut = repair(file) if _writes(config) else 0  # collecting only never changes the file
        # One pass gives the keys to deselect and the per-arm counts the run starts from.
        counted = config.stash[COUNTED] = FileTally()
        counted.update(file, strict=True)
        index = ResultsIndex(counted.meta, counted.recorded(opts.retry_errors), file.stat().st_size)
    except (StoreError, OSError) as exc:
        raise pytest.UsageError(f"--bench-resume: {exc}") from exc
    notes = (
        [f"echo-bench: repaired a torn last line in {path} ({cut} bytes kept in {torn_path(path)})"]
        if cut
        else []
    )
    if opts.retry_errors:
        again = sum(map(len, counted.codes.values())) - len(index.keys)
        notes.append(
            f"echo-bench: --bench-retry-errors: {again} item(s) whose newest row is an error "
            "run again; "
            "their old rows stay, the newest row of each item counts"
        )
    return Opened(path, index, notes)


def selection_of(config: pytest.Config, opts: BenchOptions, opened: Opened | None) -> Selection:
    """Positional args, -k, -m and the shard; a bare ``--bench-resume PATH``
    takes them from the meta line."""
    args, keyword, markexpr = (
        list(config.args),
        config.option.keyword or None,
        config.option.markexpr or None,
    )
    shard = str(opts.shard) if opts.shard else None
    found = opened.index.meta if opened else None
    meta = _typed(found, str(opts.resume))
    if meta is not None and config.args_source != pytest.Config.ArgsSource.ARGS:
        recorded = meta.selection
        base = _meta_base(config, meta)
        args = [_inside(config, opts, base, a) for a in recorded.get("args") or meta.spec_files]
        keyword = keyword or recorded.get("keyword") or None
        markexpr = markexpr or recorded.get("markexpr") or None
    # with positional args too: a shard file resumes as its own shard, or not at all
    if opened is not None:
        shard = resumed_shard(meta, opts.shard, str(opts.resume))
    refuse_partial_gate(shard, len(opts.gates), opts.allow_partial)
    return Selection(args, keyword, markexpr, shard)


def _trusted_root(config: pytest.Config) -> Path:
    """Where the meta line's paths may point: the rootdir the user gave (``--rootdir``, as the
    printed resume command does), the project's rootdir above the
    current directory, or that directory.

    An ini file's rootdir counts only when the run starts inside it: without ``--rootdir`` or an
    ini file, pytest takes the common ancestor of its arguments, ``--bench-resume PATH`` among
    them, so a results file in /tmp would put /tmp (or /) inside.
    """
    here, root = config.invocation_params.dir.resolve(), config.rootpath.resolve()
    given = getattr(config.option, "rootdir", None)
    return root if given or (config.inipath is not None and here.is_relative_to(root)) else here


def _inside(config: pytest.Config, opts: BenchOptions, base: Path, arg: str) -> str:
    """A path of the meta line (a spec file or a selection arg) under the
    trusted root, or a usage error.

    Collecting a path imports the conftest.py files beside it: a results file is data, and the
    paths it names never take a run outside the project (an absolute path or ``..`` included).
    """
    path = str(base / arg)
    resolved = Path(path.partition("::")[0]).resolve()
    root = _trusted_root(config)
    if not resolved.is_relative_to(root):
        raise pytest.UsageError(
            f"--bench-resume {opts.resume}: its meta line names {arg!r}, which is outside "
            f"{root}: a resume never "
            "collects (and so imports conftest.py from) a path a results file names. Run it "
            "from the project's "
            "directory, or name the specs to resume on the command line"
        )
    return path


def _typed(found: dict[str, Any] | None, path: str) -> Meta | None:
    """The meta line a resume found, typed (a file with broken meta fields is a usage error)."""
    try:
        return Meta.from_json(found, f"{path}:1") if found else None
    except StoreError as exc:
        raise pytest.UsageError(f"--bench-resume: {exc}") from None


def _meta_base(config: pytest.Config, meta: Meta) -> Path:
    """The directory the meta line's relative paths start from: the current rootdir, or the
    directory pytest was started in (never a directory the meta line names: see ``_inside``).

    pytest picks the rootdir before plugins add their options, so it takes the value of
    ``--bench-resume PATH`` for a path argument: a results file outside the project (another
    disk, /tmp) moves the rootdir to a common parent, where "." would collect unrelated specs.
    """
    files = meta.spec_files
    root = _trusted_root(config)
    for base in (config.rootpath, config.invocation_params.dir):
        if (
            files
            and base.resolve().is_relative_to(root)
            and all((base / f).is_file() for f in files)
        ):
            return base
    return root


Fingerprints = tuple[dict[str, str], dict[str, dict[str, str]], dict[str, tuple[Spec, int]]]


def _fingerprints(specs: list[Path], cache: dict[Path, Loaded]) -> Fingerprints:
    """Per benchmark: its fingerprint, the digests of its parts, and (spec, item count)."""
    fingerprints: dict[str, str] = {}
    parts: dict[str, dict[str, str]] = {}
    loaded: dict[str, tuple[Spec, int]] = {}
    for path in specs:
        try:
            spec, examples = load_benchmark(path, cache)
        except EchoBenchError:
            continue  # collection reports it, with file and line, in the usual way
        if spec.benchmark in loaded:
            raise pytest.UsageError(
                f"{path}: benchmark name {spec.benchmark!r} is also used by "
                f"{loaded[spec.benchmark][0].path}; give each spec its own name"
            )
        parts[spec.benchmark] = fingerprint_parts(spec, examples)
        fingerprints[spec.benchmark] = spec_fingerprint(spec, examples)
        loaded[spec.benchmark] = (spec, len(examples) * len(spec.arms) * spec.epochs)
    return fingerprints, parts, loaded


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
