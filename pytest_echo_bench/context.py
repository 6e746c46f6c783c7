"""The run context: decided once on the controller, handed to every worker as plain JSON."""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from . import __version__
from .datasets import Loaded, load_benchmark
from .discovery import find_specs
from .errors import EchoBenchError, StoreError
from .fingerprint import combine, spec_fingerprint
from .options import BenchOptions
from .records import KeySet, Meta
from .spec import Spec
from .store import ResultsIndex, repair
from .summary import FileTally


@dataclass
class RunContext:
    results: str
    run_id: str
    specs: list[str]
    meta: dict[str, Any]
    resume_upto: int | None = None
    resume_recorded: int = 0
    args: list[str] | None = None  # replacement positional args when resuming from the meta line
    keyword: str | None = None
    markexpr: str | None = None
    shard: str | None = None
    cache: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def stop_marker(self) -> Path:
        return Path(self.results + ".stop.json")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


RECORDED = pytest.StashKey[KeySet]()  # the controller's (or serial run's) resume keys
COUNTED = pytest.StashKey[FileTally]()  # and its counts of the file, read in the same pass


def build_context(config: pytest.Config, opts: BenchOptions, cache: dict[Path, Loaded]) -> RunContext | None:
    """Controller only: find the specs, decide the results file, check a resume. None = inert."""
    notes: list[str] = []
    index = _resume_index(config, opts.resume, notes) if opts.resume else None
    args, keyword, markexpr, shard = _selection(config, opts, index)
    rootdir = config.rootpath
    specs = find_specs(args, config.invocation_params.dir, list(config.getini("norecursedirs")))
    if not specs:
        if opts.resume:
            raise pytest.UsageError(f"--bench-resume {opts.resume}: no benchmark spec found in {' '.join(args)}; "
                                    "name the spec files on the command line")
        return None
    fingerprints, loaded = _fingerprints(specs, cache)
    run_id = uuid.uuid4().hex[:12]
    created = datetime.now(UTC)
    names = sorted(loaded) or [p.stem for p in specs]
    results = opts.resume or opts.out or str(rootdir / "bench_results" / f"{created:%Y%m%dT%H%M%SZ}_{'+'.join(names)[:80]}.jsonl")
    meta = Meta(
        benchmark="+".join(names), benchmarks={n: {"spec": _rel(s.path, rootdir), "fingerprint": fingerprints[n],
                                                  "items": c} for n, (s, c) in loaded.items()},
        spec_files=[_rel(p, rootdir) for p in specs], fingerprint=combine(fingerprints),
        arms={n: list(s.arms) for n, (s, _) in loaded.items()},
        selection={"args": [_rel_arg(a, config.invocation_params.dir, rootdir) for a in args],
                   "keyword": keyword or "", "markexpr": markexpr or "", "shard": shard or ""},
        run_id=run_id, plugin_version=__version__, created_at=created.isoformat(timespec="seconds").replace("+00:00", "Z"),
        fsync=opts.fsync,
    )
    ctx = RunContext(str(Path(results).resolve()), run_id, [str(p) for p in specs], meta.to_json(),
                     args=args, keyword=keyword, markexpr=markexpr, shard=shard, notes=notes,
                     cache=str(rootdir / "bench_results" / "cache.sqlite") if opts.cache == "" else opts.cache)
    if index is not None:
        _check_resume(opts, index, fingerprints)
        ctx.resume_upto, ctx.resume_recorded = index.size, len(index.keys)
        config.stash[RECORDED] = index.keys  # deselection in this process needs no second read
        ctx.stop_marker.unlink(missing_ok=True)  # a stale marker would stop this run at once
    return ctx


def _resume_index(config: pytest.Config, path: str, notes: list[str]) -> ResultsIndex:
    file = Path(path)
    if not file.is_file():
        raise pytest.UsageError(f"--bench-resume {path}: no such results file")
    try:
        cut = repair(file)
        # One pass gives the keys to deselect and the per-arm counts the run starts from.
        counted = config.stash[COUNTED] = FileTally()
        counted.update(file, strict=True)
        index = ResultsIndex(counted.meta, counted.seen, file.stat().st_size)  # seen grows only at the end
    except (StoreError, OSError) as exc:
        raise pytest.UsageError(f"--bench-resume: {exc}") from exc
    if cut:
        notes.append(f"echo-bench: repaired a torn last line in {path} ({cut} bytes kept in {path}.torn)")
    return index


def _selection(config: pytest.Config, opts: BenchOptions,
               index: ResultsIndex | None) -> tuple[list[str], str | None, str | None, str | None]:
    """Positional args, -k, -m and the shard; a bare ``--bench-resume PATH`` takes them from the meta line."""
    args, keyword, markexpr = list(config.args), config.option.keyword or None, config.option.markexpr or None
    shard = str(opts.shard) if opts.shard else None
    meta = index.meta if index else None
    if meta and config.args_source != pytest.Config.ArgsSource.ARGS:
        selection = meta.get("selection") or {}
        base = _meta_base(config, meta)
        args = [str(base / a) for a in selection.get("args") or meta.get("spec_files") or []]
        keyword = keyword or selection.get("keyword") or None
        markexpr = markexpr or selection.get("markexpr") or None
        shard = shard or selection.get("shard") or None
    return args, keyword, markexpr, shard


def _meta_base(config: pytest.Config, meta: dict[str, Any]) -> Path:
    """The directory the meta line's relative paths start from: the rootdir of the run that wrote it.

    pytest picks the rootdir before plugins add their options, so it takes the value of
    ``--bench-resume PATH`` for a path argument: a results file outside the project (another
    disk, /tmp) moves the rootdir to a common parent, where "." would collect unrelated specs.
    """
    files = meta.get("spec_files") or []
    for base in (config.rootpath, config.invocation_params.dir):
        if files and all((base / f).is_file() for f in files):
            return base
    return config.rootpath


def _fingerprints(specs: list[Path], cache: dict[Path, Loaded]) -> tuple[dict[str, str], dict[str, tuple[Spec, int]]]:
    fingerprints: dict[str, str] = {}
    loaded: dict[str, tuple[Spec, int]] = {}
    for path in specs:
        try:
            spec, examples = load_benchmark(path, cache)
        except EchoBenchError:
            continue  # collection reports it, with file and line, in the usual way
        if spec.benchmark in loaded:
            raise pytest.UsageError(f"{path}: benchmark name {spec.benchmark!r} is also used by "
                                    f"{loaded[spec.benchmark][0].path}; give each spec its own name")
        fingerprints[spec.benchmark] = spec_fingerprint(spec, examples)
        loaded[spec.benchmark] = (spec, len(examples) * len(spec.arms))
    return fingerprints, loaded


def _check_resume(opts: BenchOptions, index: ResultsIndex, fingerprints: dict[str, str]) -> None:
    recorded = (index.meta or {}).get("benchmarks") or {}
    for name, fp in fingerprints.items():
        old = (recorded.get(name) or {}).get("fingerprint")
        if old and old != fp and not opts.allow_mismatch:
            raise pytest.UsageError(
                f"--bench-resume {opts.resume}: benchmark {name!r} was recorded with fingerprint {old}, "
                f"but the spec now gives {fp} (dataset, scorer or arms changed). Start a new results file, "
                "or pass --bench-allow-mismatch to append anyway."
            )


def _rel(path: Path, rootdir: Path) -> str:
    try:
        return str(path.resolve().relative_to(rootdir))
    except ValueError:
        return str(path.resolve())


def _rel_arg(arg: str, invocation_dir: Path, rootdir: Path) -> str:
    path, sep, rest = arg.partition("::")
    return _rel(invocation_dir / path, rootdir) + sep + rest
