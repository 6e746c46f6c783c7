"""Merging results files (e.g. the shards of one sweep) into one that reports like a single run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_echo_bench.errors import StoreError
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
    loaded = [(p, *read_records(p)) for p in paths]
    check_fingerprints([(p, meta) for p, meta, _ in loaded])
    merged = Merged(_merged_meta([meta for _, meta, _ in loaded], paths))
    first: dict[Key, tuple[bool, Path]] = {}
    for path, meta, rows in loaded:
        default = str((meta or {}).get("benchmark", ""))
        for record in rows:
            row, raw = record.data, record.raw
            key = row_key(row, default)
            if key in first:
                merged.duplicates += 1
                if first[key][0] != bool(row.get("passed")):
                    merged.conflicts.append(f"{key[0]}/{key[1]}[{key[2]}]: {first[key][1]} says passed={first[key][0]}, "
                                            f"{path} says passed={bool(row.get('passed'))}; kept the first")
                continue
            first[key] = (bool(row.get("passed")), path)
            merged.lines.append(raw)
    return merged


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
