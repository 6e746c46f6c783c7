"""Merging results files (e.g. the shards of one sweep) into one that reports like a single run."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_echo_bench.engine.fingerprint import combine
from pytest_echo_bench.engine.outcome import utcnow
from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.ops.decide import collection
from pytest_echo_bench.ops.shards import Coverage, check_one_sweep, coverage, merged_fields, part_of
from pytest_echo_bench.store.files import end_line, row_status
from pytest_echo_bench.store.reader import Record, read_records
from pytest_echo_bench.store.records import Key, Meta, row_key


@dataclass
class Merged:
    meta: Meta | None
    lines: list[bytes] = field(default_factory=list)
    duplicates: int = 0
    conflicts: list[str] = field(default_factory=list)
    coverage: Coverage = field(default_factory=lambda: Coverage(True, [], []))


Assumed = dict[str, str]  # benchmark -> the fingerprint its rows in files without one were recorded with


def check_fingerprints(metas: Sequence[tuple[Path, Meta | None]], allow_mismatch: bool = False) -> None:
    """Refuse files whose benchmarks were recorded from different specs (unless ``allow_mismatch``)."""
    seen: dict[str, tuple[str, Path]] = {}
    for path, meta in metas:
        for name, fp in _fingerprints(meta).items():
            if name in seen and seen[name][0] != fp and not allow_mismatch:
                raise StoreError(f"{path}: benchmark {name!r} has fingerprint {fp}, but {seen[name][1]} has "
                                 f"{seen[name][0]}: these files come from different specs and cannot be merged "
                                 "(--allow-mismatch merges them under a fingerprint no spec gives)")
            seen.setdefault(name, (fp, path))


def _fingerprints(meta: Meta | None) -> dict[str, str]:
    """Benchmark -> fingerprint, as a meta line records them (``store.checks`` has checked their types)."""
    benchmarks = meta.benchmarks if meta is not None else {}
    return {name: info["fingerprint"] for name, info in benchmarks.items() if info.get("fingerprint")}


def _typed(path: Path, meta: dict[str, Any] | None) -> Meta | None:
    return Meta.from_json(meta, f"{path}:1") if meta is not None else None


def merge(paths: Sequence[Path], assumed: Assumed | None = None, allow_mismatch: bool = False) -> Merged:
    """Each key once: its newest row (the files in the order given, each from first line to last),
    in the place where the key first appeared.

    Every row must belong to a benchmark whose fingerprint its file records: a file stripped of
    its meta line would otherwise take on the other files' fingerprint, and a resume would then
    accept rows from a changed spec. ``assumed`` names the fingerprint of such rows (the user
    says so); it must agree with the other files' like any fingerprint.
    """
    loaded = [(p, _typed(p, meta), rows) for p, (meta, rows) in ((p, read_records(p)) for p in paths)]
    metas = [(p, _with_assumed(p, meta, rows, assumed or {})) for p, meta, rows in loaded]
    check_fingerprints(metas, allow_mismatch)
    parts = [part_of(p, meta) for p, meta in metas]
    check_one_sweep(parts, allow_mismatch)
    merged = Merged(_merged_meta([meta for _, meta in metas], paths), coverage=coverage(parts))
    kept: dict[Key, tuple[bytes, bool, str, Path]] = {}  # key -> (line, passed, status, file) of its newest row
    for path, meta, rows in loaded:
        default = (meta.benchmark if meta is not None else "") or _only(assumed)
        for record in rows:
            row = record.data
            key = row_key(row, default)
            passed = row.get("passed") is True
            older = kept.get(key)
            kept[key] = (record.raw, passed, row_status(row), path)
            if older is None:
                continue
            merged.duplicates += 1
            if older[1] != passed and older[2] != "error":  # a retried error row is expected to change
                merged.conflicts.append(f"{_shown_key(key)}: {older[3]} says passed={older[1]}, "
                                        f"{path} says passed={passed}; kept the newest")
    merged.lines = [line for line, _, _, _ in kept.values()]
    stopped = _stopped_parts(paths)
    if stopped:  # the merged file says its parts stopped early, as their own files said (``files.RUN_END``)
        merged.lines.append(end_line("merged", utcnow(), stopped))
    merged.meta = describe_epochs(_mismatched(merged.meta, [m for _, m in metas]), kept)
    if merged.meta is not None:  # whether the shards are all here travels with the file, to every gate
        schemes = [p.scheme for p in parts if p.total]
        fields = {**merged_fields(merged.coverage), **({"shard_scheme": schemes[0]} if schemes else {})}
        merged.meta = replace(merged.meta, extra={**merged.meta.extra, **fields})
    return merged


def _stopped_parts(paths: Sequence[Path]) -> dict[str, Any] | None:
    """The merged file's stop record when any part stopped early: reason ``merged``, each part's own."""
    parts = [{"file": str(p), "reason": c.reason, "message": c.message} for p in paths if (c := collection([p])).early]
    if not parts:
        return None
    why = "; ".join(f"{Path(p['file']).name}: {p['reason']}" for p in parts)
    return {"reason": "merged", "message": why, "parts": parts}


def _only(assumed: Assumed | None) -> str:
    """The benchmark of rows naming none in a file without a meta line: the one assumed, if one."""
    return next(iter(assumed)) if assumed and len(assumed) == 1 else ""


def _with_assumed(path: Path, meta: Meta | None, rows: list[Record], assumed: Assumed) -> Meta | None:
    """``meta`` with an entry for each benchmark its rows have and it records no fingerprint of,
    from ``assumed``; refused, naming the first such row, when the user did not say."""
    known = _fingerprints(meta)
    default = (meta.benchmark if meta is not None else "") or _only(assumed)
    added: dict[str, dict[str, Any]] = {}
    for record in rows:
        name = row_key(record.data, default)[0]
        if name in known or name in added:
            continue
        if name not in assumed:
            what = "has no meta line" if meta is None else f"records no fingerprint for benchmark {name!r}"
            raise StoreError(f"{path}:{record.lineno}: a row of benchmark {name!r}, but the file {what}: nothing says "
                             "which spec its rows answer. Pass --assume-fingerprint BENCHMARK=FINGERPRINT if you know")
        added[name] = {"fingerprint": assumed[name]}
    if not added:
        return meta
    base = meta if meta is not None else Meta.from_json({"_meta": True, "benchmark": default})
    noted = {**(base.extra.get("assumed_fingerprints") or {}), **{n: assumed[n] for n in added}}
    return replace(base, benchmarks={**base.benchmarks, **added}, extra={**base.extra, "assumed_fingerprints": noted})


def _mismatched(meta: Meta | None, metas: list[Meta | None]) -> Meta | None:
    """The merged meta, where files disagreed on a benchmark's fingerprint (``--allow-mismatch``):
    a fingerprint no spec gives (and no parts), so that resume and regrade refuse it until told."""
    if meta is None:
        return None
    found: dict[str, set[str]] = {}
    for m in metas:
        for name, fp in _fingerprints(m).items():
            found.setdefault(name, set()).add(fp)
    if all(len(fps) == 1 for fps in found.values()):
        return meta
    benchmarks = {name: dict(info) for name, info in meta.benchmarks.items()}
    for name, fps in found.items():
        if len(fps) > 1:
            info = benchmarks.setdefault(name, {})
            info.pop("parts", None)
            info["fingerprint"] = combine({f"merged{i}": fp for i, fp in enumerate(sorted(fps))})
    fingerprints = {name: str(info.get("fingerprint")) for name, info in benchmarks.items()}
    return replace(meta, benchmarks=benchmarks, fingerprint=combine(fingerprints))


def describe_epochs(meta: Meta | None, keys: Iterable[Key]) -> Meta | None:
    """The meta line with each benchmark's ``epochs`` (and ``items``) as the rows have them.

    The files merged may have been run with different ``epochs: K`` (a resume that raised K): the
    meta must describe the rows it heads, not the first file's spec.
    """
    if meta is None:
        return None
    top: dict[str, int] = {}
    for benchmark, _, _, epoch in keys:
        top[benchmark] = max(top.get(benchmark, 1), epoch)
    benchmarks = {name: dict(info) for name, info in meta.benchmarks.items()}
    for name, info in benchmarks.items():
        value = info.get("epochs")
        recorded = value if isinstance(value, int) and value > 0 else 1
        epochs = max(recorded, top.get(name, 1))
        if epochs > 1 and epochs != recorded:
            if isinstance(info.get("items"), int) and recorded:
                info["items"] = info["items"] // recorded * epochs
            info["epochs"] = epochs
    return replace(meta, benchmarks=benchmarks)


def _shown_key(key: Key) -> str:
    return f"{key[0]}/{key[1]}[{key[2]}]" if key[3] == 1 else f"{key[0]}/{key[1]}[{key[2]}-e{key[3]}]"


def _merged_meta(metas: list[Meta | None], paths: Sequence[Path]) -> Meta | None:
    present = [m for m in metas if m is not None]
    if not present:
        return None
    # A file's own meta line heads the merged file; one made of assumed fingerprints only if none has one.
    meta = next((m for m in present if m.run_id), present[0])
    benchmarks: dict[str, dict[str, Any]] = {}
    for m in present:
        benchmarks.update(m.benchmarks)
    return replace(meta, benchmarks=benchmarks, benchmark="+".join(sorted(benchmarks)) or meta.benchmark,
                   selection={**meta.selection, "shard": ""},  # the merged file stands for the whole sweep
                   extra={**meta.extra, "merged_from": [str(p) for p in paths]})
