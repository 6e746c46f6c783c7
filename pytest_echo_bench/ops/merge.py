"""Merging results files (e.g. the shards of one sweep) into one that reports like a single run."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.store.files import row_status
from pytest_echo_bench.store.reader import read_records
from pytest_echo_bench.store.records import Key, row_key


@dataclass
class Merged:
    meta: dict[str, Any] | None
    lines: list[bytes] = field(default_factory=list)
    duplicates: int = 0
    conflicts: list[str] = field(default_factory=list)


def check_fingerprints(metas: Sequence[tuple[Path, dict[str, Any] | None]]) -> None:
    """Refuse files whose benchmarks were recorded from different specs."""
    seen: dict[str, tuple[str, Path]] = {}
    for path, meta in metas:
        for name, info in ((meta or {}).get("benchmarks") or {}).items():
            fp = str(info.get("fingerprint"))
            if name in seen and seen[name][0] != fp:
                raise StoreError(f"{path}: benchmark {name!r} has fingerprint {fp}, but {seen[name][1]} has "
                                 f"{seen[name][0]}: these files come from different specs and cannot be merged")
            seen.setdefault(name, (fp, path))


def merge(paths: Sequence[Path]) -> Merged:
    """Each key once: its newest row (the files in the order given, each from first line to last),
    in the place where the key first appeared."""
    loaded = [(p, *read_records(p)) for p in paths]
    check_fingerprints([(p, meta) for p, meta, _ in loaded])
    merged = Merged(_merged_meta([meta for _, meta, _ in loaded], paths))
    kept: dict[Key, tuple[bytes, bool, str, Path]] = {}  # key -> (line, passed, status, file) of its newest row
    for path, meta, rows in loaded:
        default = str((meta or {}).get("benchmark", ""))
        for record in rows:
            row = record.data
            key = row_key(row, default)
            passed = bool(row.get("passed"))
            older = kept.get(key)
            kept[key] = (record.raw, passed, row_status(row), path)
            if older is None:
                continue
            merged.duplicates += 1
            if older[1] != passed and older[2] != "error":  # a retried error row is expected to change
                merged.conflicts.append(f"{_shown_key(key)}: {older[3]} says passed={older[1]}, "
                                        f"{path} says passed={passed}; kept the newest")
    merged.lines = [line for line, _, _, _ in kept.values()]
    merged.meta = describe_epochs(merged.meta, kept)
    return merged


def describe_epochs(meta: dict[str, Any] | None, keys: Iterable[Key]) -> dict[str, Any] | None:
    """The meta line with each benchmark's ``epochs`` (and ``items``) as the rows have them.

    The files merged may have been run with different ``epochs: K`` (a resume that raised K): the
    meta must describe the rows it heads, not the first file's spec.
    """
    if meta is None:
        return None
    top: dict[str, int] = {}
    for benchmark, _, _, epoch in keys:
        top[benchmark] = max(top.get(benchmark, 1), epoch)
    benchmarks = {name: dict(info) for name, info in (meta.get("benchmarks") or {}).items()}
    for name, info in benchmarks.items():
        value = info.get("epochs")
        recorded = value if isinstance(value, int) and value > 0 else 1
        epochs = max(recorded, top.get(name, 1))
        if epochs > 1 and epochs != recorded:
            if isinstance(info.get("items"), int) and recorded:
                info["items"] = info["items"] // recorded * epochs
            info["epochs"] = epochs
    return {**meta, "benchmarks": benchmarks}


def _shown_key(key: Key) -> str:
    return f"{key[0]}/{key[1]}[{key[2]}]" if key[3] == 1 else f"{key[0]}/{key[1]}[{key[2]}-e{key[3]}]"


def _merged_meta(metas: list[dict[str, Any] | None], paths: Sequence[Path]) -> dict[str, Any] | None:
    present = [m for m in metas if m]
    if not present:
        return None
    meta = dict(present[0])
    benchmarks: dict[str, Any] = {}
    for m in present:
        benchmarks.update(m.get("benchmarks") or {})
    meta["benchmarks"] = benchmarks
    meta["benchmark"] = "+".join(sorted(benchmarks)) or meta.get("benchmark", "")
    selection = dict(meta.get("selection") or {})
    selection["shard"] = ""  # the merged file stands for the whole sweep
    meta["selection"] = selection
    meta["merged_from"] = [str(p) for p in paths]
    return meta
