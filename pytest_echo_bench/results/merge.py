"""Merging results files (e.g. the shards of one sweep) into one that reports like a single run."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_echo_bench.engine.fingerprint import changed_parts, combine
from pytest_echo_bench.engine.outcome import utcnow
from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.results import conflicts
from pytest_echo_bench.results.conflicts import Conflict
from pytest_echo_bench.results.ending import MERGED, Collection, one
from pytest_echo_bench.results.merge_scan import (
    Assumed,
    Place,
    Scan,
    only,
    scan_columns,
    scan_records,
)
from pytest_echo_bench.results.merge_spend import with_replaced
from pytest_echo_bench.shards.coverage import (
    Coverage,
    Part,
    check_one_sweep,
    coverage,
    ended,
    merged_fields,
    part_of,
)
from pytest_echo_bench.shards.parts import FIELD, ITEMS, UNFINISHED, held_by_shard
from pytest_echo_bench.store.files import end_line
from pytest_echo_bench.store.meta import BenchmarkEntry, benchmark_entry
from pytest_echo_bench.store.records import Key, Meta


@dataclass
class Merged:
    meta: Meta | None
    lines: Sequence[bytes] | KeptLines = field(default_factory=list)
    duplicates: int = 0
    conflicts: list[str] = field(default_factory=list)  # as printed
    found: list[Conflict] = field(default_factory=list)  # as the merged meta line records them
    coverage: Coverage = field(default_factory=lambda: Coverage(True, [], []))


# What one file's meta line says of its own shard or parts: the merged
# line says it anew of all of them.
SHARD_FIELDS = (ITEMS, FIELD, UNFINISHED)


def check_fingerprints(
    metas: Sequence[tuple[Path, Meta | None]], allow_mismatch: bool = False
) -> None:
    """Refuse files whose benchmarks were recorded from different
    specs (unless ``allow_mismatch``)."""
    seen: dict[str, tuple[str, Path, dict[str, str] | None]] = {}
    for path, meta in metas:
        for name, fp in _fingerprints(meta).items():
            parts = meta.benchmarks[name].parts if meta is not None else None
            if name in seen and seen[name][0] != fp and not allow_mismatch:
                first, where, before = seen[name]
                # Each file's parts say what differs (an older file records
                # none: "different specs" only).
                both = before is not None and parts is not None
                said = changed_parts(before, parts) if both else []
                what = f" (changed: {', '.join(said)})" if said else ""
                raise StoreError(
                    f"{path}: benchmark {name!r} has fingerprint {fp}, but {where} "
                    f"has {first}: these files come from different specs{what} and cannot "
                    "be merged (--allow-mismatch merges them under a fingerprint no "
                    "spec gives)"
                )
            seen.setdefault(name, (fp, path, parts))


def _fingerprints(meta: Meta | None) -> dict[str, str]:
    """Benchmark -> fingerprint, as a meta line records them
    (``store.checks`` has checked their types)."""
    benchmarks = meta.benchmarks if meta is not None else {}
    return {name: entry.fingerprint for name, entry in benchmarks.items() if entry.fingerprint}


def merge(
    paths: Sequence[Path], assumed: Assumed | None = None, allow_mismatch: bool = False,
    fast: bool = True,
) -> Merged:
    """Each key once: its newest row (the files in the order given, each from first line to last),
    in the place where the key first appeared.

    Every row must belong to a benchmark whose fingerprint its file records: a file stripped of
    its meta line would otherwise take on the other files' fingerprint, and a resume would then
    accept rows from a changed spec. ``assumed`` names the fingerprint of such rows (the user
    says so); it must agree with the other files' like any fingerprint. ``fast`` reads the few
    fields merge needs of each line (``merge_scan.scan_columns``); without it every line is parsed
    whole (``scan_records``, the reference: the merged file is byte for byte the same).
    """
    # key -> where its newest row is, in the order the keys first appeared
    kept: dict[Key, Place] = {}
    scan = scan_columns if fast else scan_records
    scans = [scan(path, index, assumed, kept) for index, path in enumerate(paths)]
    # an empty merged file would pass for a sweep
    if not any(meta is not None or names for meta, names, *_ in scans):
        raise StoreError(
            f"{paths[0]}:1: nothing to merge: no meta line and no row in "
            f"{', '.join(map(str, paths))}"
        )
    metas = _checked_metas(paths, scans, assumed, allow_mismatch)
    parts = [part_of(p, meta) for p, meta in metas]
    check_one_sweep(parts, allow_mismatch)
    # how each file ended: its parts' record, and whether one ever stopped when decided
    ends = [one(p) for p in paths]
    parts = [
        ended(part, end.stop_text, scan[4])
        for part, end, scan in zip(parts, ends, scans, strict=True)
    ]
    # Whether each shard is whole: its rows in every file, each key
    # once, against the items it selects.
    held = held_by_shard(kept, {part.total for part in parts if part.total})
    merged = Merged(
        merged_meta([meta for _, meta in metas], paths), coverage=coverage(parts, held)
    )
    _count_conflicts(merged, scans, paths)
    # The merged file says its parts stopped early, as their own files said (``files.RUN_END``), and
    # that one of them ever stopped when decided: a later merge of it, in any order, still knows.
    merged.lines = KeptLines(list(paths), list(kept.values()), _end_lines(paths, ends))
    merged.meta = describe_epochs(_mismatched(merged.meta, [m for _, m in metas]), kept)
    # whether the shards are all here travels with the file, to every gate
    if merged.meta is not None:
        merged.meta = _with_shards(merged.meta, parts, merged.coverage)
        merged.meta = _record_conflicts(
            merged.meta, [(p, scan[0]) for p, scan in zip(paths, scans, strict=True)], merged.found
        )
        # what the rows it drops spent: the merged file reports the spend of its parts
        merged.meta = with_replaced(merged.meta, paths, scans, kept)
    return merged


def _count_conflicts(merged: Merged, scans: Sequence[Scan], paths: Sequence[Path]) -> None:
    """The duplicates and the changed verdicts the files hold, as printed and as recorded."""
    merged.duplicates = sum(scan[2] for scan in scans)
    changed = [(key, older, newer) for scan in scans for key, older, newer in scan[3]]
    merged.conflicts = [_conflict(key, older, newer, paths) for key, older, newer in changed]
    merged.found = [Conflict(key, older[2], newer[2]) for key, older, newer in changed]


def _end_lines(paths: Sequence[Path], ends: Sequence[Collection]) -> list[bytes]:
    """The merged file's end line, when a part stopped early or ever stopped when decided."""
    stopped, decided = _stopped_parts(paths, ends)
    return [end_line(MERGED, utcnow(), stopped, decided)] if stopped or decided else []


def _checked_metas(paths: Sequence[Path], scans: Sequence[Scan], assumed: Assumed | None,
                   allow_mismatch: bool) -> list[tuple[Path, Meta | None]]:
    """Each file's meta line, with the fingerprints the user assumed for its rows, checked to come
    from one spec per benchmark."""
    # Files none of which records a fingerprint (the parent harness's, with or without a meta line):
    # their rows cannot take on another file's, and the merged file records none either, so a resume
    # refuses it as it refuses them (``plugin.context``).
    unrecorded = not assumed and not any(_fingerprints(meta) for meta, *_ in scans)
    metas = [(p, meta if unrecorded else _with_assumed(p, meta, names, assumed or {}))
             for p, (meta, names, *_) in zip(paths, scans, strict=True)]
    check_fingerprints(metas, allow_mismatch)
    return metas


def _with_shards(meta: Meta, parts: Sequence[Part], cover: Coverage) -> Meta:
    """The merged meta line with what it holds of the shards, and their assignment scheme."""
    schemes = [p.scheme for p in parts if p.total]
    fields = {**merged_fields(cover), **({"shard_scheme": schemes[0]} if schemes else {})}
    return replace(meta, extra={**meta.extra, **fields})


def _record_conflicts(
    meta: Meta, metas: Sequence[tuple[Path, Meta | None]], found: list[Conflict]
) -> Meta:
    """The merged meta line with the conflicts found now and those earlier merges recorded
    (bounded): its rows hold each key once, so a report of it could not see them any more."""
    listed: list[Conflict] = []
    unlisted = 0
    for path, m in metas:
        earlier, more = conflicts.recorded(m, f"{path}:1")
        listed, unlisted = listed + earlier, unlisted + more
    listed += found
    extra = {k: v for k, v in meta.extra.items() if k != conflicts.FIELD}
    if listed or unlisted:
        extra[conflicts.FIELD] = conflicts.record(listed, unlisted)
    return replace(meta, extra=extra)


def _conflict(key: Key, older: Place, newer: Place, paths: Sequence[Path]) -> str:
    return (f"{_shown_key(key)}: {paths[older[0]]} says passed={older[2]}, "
            f"{paths[newer[0]]} says passed={newer[2]}; kept the newest")


class KeptLines:
    """The merged rows, in order: each read from its file when iterated (written), a line at a time;
    then ``tail``, the lines that are not rows (the merged file's end
    line), not counted in its length."""

    def __init__(self, paths: list[Path], places: list[Place], tail: Sequence[bytes] = ()) -> None:
        self.paths, self.places, self.tail = paths, places, list(tail)

    def __len__(self) -> int:
        return len(self.places)

    def __iter__(self) -> Iterator[bytes]:
        with contextlib.ExitStack() as stack:
            files = [stack.enter_context(open(p, "rb")) for p in self.paths]
            for index, offset, _, _ in self.places:
                f = files[index]
                f.seek(offset)  # in order within a file: inside the buffer, no system call
                line = f.readline()
                if not line.strip():
                    raise StoreError(
                        f"{self.paths[index]}: changed while it was merged (no row at byte "
                        f"{offset})"
                    )
                # a whole last row without its newline
                yield line if line.endswith(b"\n") else line + b"\n"
        yield from self.tail


def _stopped_parts(
    paths: Sequence[Path], ends: Sequence[Collection]
) -> tuple[dict[str, Any] | None, str]:
    """The merged file's stop record when any part stopped early (reason ``merged``, each part's
    own), and which parts ever stopped when decided ("" for none: the end line's ``decided``)."""
    stopped = [(p, c) for p, c in zip(paths, ends, strict=True) if c.early]
    decided = "; ".join(
        f"{p.name}: {c.decided_text}" for p, c in zip(paths, ends, strict=True) if c.ever_decided
    )[:2000]
    if not stopped:
        return None, decided
    parts = [
        {
            "file": str(p),
            "reason": c.reason,
            "message": c.message,
            **({"parts_decided": True} if c.parts_decided or c.decided_before else {}),
        }
        for p, c in stopped
    ]
    why = "; ".join(f"{p.name}: {c.reason}" for p, c in stopped)
    return {"reason": MERGED, "message": why, "parts": parts}, decided


def _with_assumed(
    path: Path, meta: Meta | None, names: dict[str, int], assumed: Assumed
) -> Meta | None:
    """``meta`` with an entry for each benchmark its rows have and it records no fingerprint of,
    from ``assumed``; refused, naming the first such row, when the user did not say (``names``:
    each benchmark of the file's rows and its first line, in file order)."""
    known = _fingerprints(meta)
    default = (meta.benchmark if meta is not None else "") or only(assumed)
    added: dict[str, BenchmarkEntry] = {}
    for name, lineno in names.items():
        if name in known or name in added:
            continue
        if name not in assumed:
            what = (
                "has no meta line"
                if meta is None
                else f"records no fingerprint for benchmark {name!r}"
            )
            raise StoreError(
                f"{path}:{lineno}: a row of benchmark {name!r}, but the file {what}: nothing says "
                "which spec its rows answer. Pass --assume-fingerprint BENCHMARK=FINGERPRINT "
                "if you know"
            )
        added[name] = benchmark_entry(assumed[name])
    if not added:
        return meta
    base = meta if meta is not None else Meta.from_json({"_meta": True, "benchmark": default})
    noted = {**(base.extra.get("assumed_fingerprints") or {}), **{n: assumed[n] for n in added}}
    return replace(
        base,
        benchmarks={**base.benchmarks, **added},
        extra={**base.extra, "assumed_fingerprints": noted},
    )


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
    benchmarks = dict(meta.benchmarks)
    for name, fps in found.items():
        if len(fps) > 1:
            fingerprint = combine({f"merged{i}": fp for i, fp in enumerate(sorted(fps))})
            entry = benchmarks.get(name) or BenchmarkEntry()
            benchmarks[name] = replace(entry, fingerprint=fingerprint, parts=None)
    fingerprints = {name: str(entry.fingerprint) for name, entry in benchmarks.items()}
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
    return replace(meta, benchmarks={name: _with_epochs(entry, top.get(name, 1))
                                     for name, entry in meta.benchmarks.items()})


def _with_epochs(entry: BenchmarkEntry, top: int) -> BenchmarkEntry:
    """``entry`` with the epochs its rows reach (``top``), its items scaled to them."""
    epochs = max(entry.samples, top)
    if epochs == 1 or epochs == entry.samples:
        return entry
    items = entry.items // entry.samples * epochs if entry.items is not None else None
    return replace(entry, items=items, epochs=epochs)


def _shown_key(key: Key) -> str:
    return (
        f"{key[0]}/{key[1]}[{key[2]}]" if key[3] == 1 else f"{key[0]}/{key[1]}[{key[2]}-e{key[3]}]"
    )


def merged_meta(metas: list[Meta | None], paths: Sequence[Path]) -> Meta | None:
    present = [m for m in metas if m is not None]
    if not present:
        return None
    # A file's own meta line heads the merged file; one made of assumed
    # fingerprints only if none has one.
    meta = next((m for m in present if m.run_id), present[0])
    benchmarks: dict[str, BenchmarkEntry] = {}
    for m in present:
        benchmarks.update(m.benchmarks)
    # A part's decide plan heads the merged file whichever part it is: the report replays it, and
    # its gates read the anytime-valid figures where a part stopped when decided.
    decide = meta.decide or next((m.decide for m in present if m.decide), None)
    # The merged file stands for the whole sweep: no shard of it.
    return replace(
        meta,
        benchmarks=benchmarks,
        benchmark="+".join(sorted(benchmarks)) or meta.benchmark,
        decide=decide,
        selection=replace(meta.selection, shard=""),
        extra={
            **{k: v for k, v in meta.extra.items() if k not in SHARD_FIELDS},
            "merged_from": [str(p) for p in paths],
        },
    )
