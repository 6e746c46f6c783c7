"""The results file opened for a run: taken for it (the owner's locks) and, for a resume, read once
(its keys, its per-arm counts and its meta line, typed), with the selection the run then makes (a
bare ``--bench-resume PATH`` takes the meta line's)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.plugin.options import BenchOptions
from pytest_echo_bench.plugin.resume_check import refuse_unfingerprinted
from pytest_echo_bench.plugin.shard import refuse_partial_gate, resumed_shard
from pytest_echo_bench.store.files import UNJUDGED, torn_path
from pytest_echo_bench.store.owner import Ownership
from pytest_echo_bench.store.reader import ResultsIndex, read_index
from pytest_echo_bench.store.records import Meta
from pytest_echo_bench.store.tally import FileTally
from pytest_echo_bench.store.writer import repair

COUNTED = pytest.StashKey[FileTally]()  # a resume's counts of the file, read with its keys


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
    meta: Meta | None = None  # the file's meta line, typed (None: it has none)


def writes(config: pytest.Config) -> bool:
    """Whether this run writes the results file (collecting only reads, and never takes it)."""
    return not config.option.collectonly


def own(config: pytest.Config, results: str) -> None:
    """Take the results file for this run, before anything reads or repairs it; released at
    unconfigure."""
    ownership = Ownership(results)
    try:
        ownership.acquire()
    except StoreError as exc:
        raise pytest.UsageError(f"echo-bench: {exc}") from exc
    config.pluginmanager.register(ownership, "echo-bench-owner")


def open_resume(config: pytest.Config, opts: BenchOptions) -> Opened:
    """Repair a torn tail, then read the file once: the keys to deselect and the per-arm counts."""
    path = str(opts.resume)
    file = Path(path)
    if not file.is_file():
        raise pytest.UsageError(f"--bench-resume {path}: no such results file")
    if not opts.allow_mismatch:
        refuse_unfingerprinted(file, path)
    if writes(config):
        own(config, str(file.resolve()))
    try:
        cut = repair(file) if writes(config) else 0  # collecting only never changes the file
        counted = FileTally()
        if writes(config) or opts.retry_errors:
            # One pass gives the keys to deselect and the per-arm counts the run starts from.
            config.stash[COUNTED] = counted
            counted.update(file, strict=True)
            index = ResultsIndex(counted.meta, counted.recorded(opts.retry_errors),
                                 file.stat().st_size)
        else:  # collecting only counts and spends nothing: the keys alone, read fast
            index = read_index(file)
    except (StoreError, OSError) as exc:
        raise pytest.UsageError(f"--bench-resume: {exc}") from exc
    notes = [f"echo-bench: repaired a torn last line in {path} ({cut} bytes kept in "
             f"{torn_path(path)})"] if cut else []
    if opts.retry_errors:
        notes.append(_retry_note(counted.retried()))
    return Opened(path, index, notes, _typed(index.meta, path))


def _retry_note(retried: dict[str, int]) -> str:
    """What a retrying resume runs again: the items whose newest row is an error, or unjudged
    (a judge gave it no grade), each counted when there are such rows."""
    again = sum(retried.values())
    unjudged = retried.get(UNJUDGED, 0)
    what = "an error" if not unjudged else (
        f"an error ({retried.get('error', 0)}) or unjudged ({unjudged})")
    return (f"echo-bench: --bench-retry-errors: {again} item(s) whose newest row is {what} run "
            "again; their old rows stay, the newest row of each item counts")


def selection_of(config: pytest.Config, opts: BenchOptions, opened: Opened | None) -> Selection:
    """Positional args, -k, -m and the shard; a bare ``--bench-resume PATH`` takes them from the
    meta line."""
    args = list(config.args)
    keyword, markexpr = config.option.keyword or None, config.option.markexpr or None
    shard = str(opts.shard) if opts.shard else None
    meta = opened.meta if opened else None
    if meta is not None and config.args_source != pytest.Config.ArgsSource.ARGS:
        recorded = meta.selection
        base = _meta_base(config, meta)
        args = [_inside(config, opts, base, a) for a in recorded.args or meta.spec_files]
        keyword = keyword or recorded.keyword or None
        markexpr = markexpr or recorded.markexpr or None
    # With positional args too: a shard file resumes as its own shard, or not at all.
    if opened is not None:
        shard = resumed_shard(meta, opts.shard, str(opts.resume))
    refuse_partial_gate(shard, len(opts.gates), opts.allow_partial)
    return Selection(args, keyword, markexpr, shard)


def _trusted_root(config: pytest.Config) -> Path:
    """Where the meta line's paths may point: the rootdir the user gave (``--rootdir``, as the
    printed resume command does), the project's rootdir above the current directory, or that
    directory.

    An ini file's rootdir counts only when the run starts inside it: without ``--rootdir`` or an
    ini file, pytest takes the common ancestor of its arguments, ``--bench-resume PATH`` among
    them, so a results file in /tmp would put /tmp (or /) inside.
    """
    here, root = config.invocation_params.dir.resolve(), config.rootpath.resolve()
    given = getattr(config.option, "rootdir", None)
    return root if given or (config.inipath is not None and here.is_relative_to(root)) else here


def _inside(config: pytest.Config, opts: BenchOptions, base: Path, arg: str) -> str:
    """A path of the meta line (a spec file or a selection arg) under the trusted root, or a usage
    error.

    Collecting a path imports the conftest.py files beside it: a results file is data, and the
    paths it names never take a run outside the project (an absolute path or ``..`` included).
    """
    path = str(base / arg)
    resolved = Path(path.partition("::")[0]).resolve()
    root = _trusted_root(config)
    if not resolved.is_relative_to(root):
        raise pytest.UsageError(
            f"--bench-resume {opts.resume}: its meta line names {arg!r}, which is outside {root}: "
            "a resume never collects (and so imports conftest.py from) a path a results file "
            "names. Run it from the project's directory, or name the specs to resume on the "
            "command line")
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
        inside = base.resolve().is_relative_to(root)
        if files and inside and all((base / f).is_file() for f in files):
            return base
    return root
