"""Which shards of a sweep a set of results files holds: the ``K/N`` their meta lines record,
checked to come from one sweep, and what is missing from the whole.

A shard file's meta line records ``selection.shard`` (``"K/N"``) and ``shard_scheme``; a merged
file records the shards it holds in ``shards`` and, from them, ``complete`` and ``missing_shards``.
A file that records no shard is the whole sweep.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.ops.shard_env import k_of_n
from pytest_echo_bench.store.records import Meta

# How items are assigned to shards. 1 (before this field existed): a hash of (benchmark, task_id,
# arm[, epoch]), which split an item's arms and epochs across shards; 2: a hash of (benchmark, task_id).
SCHEME = 2
OLD_SCHEME = 1


@dataclass(frozen=True)
class Part:
    """What one results file holds of its sweep: shards ``got`` of ``total`` (0: the whole sweep)."""

    path: str
    total: int
    got: frozenset[int]
    scheme: int
    sweep: tuple[str, ...]  # what every shard of one sweep records alike: its selection and benchmarks
    whole: bool = False  # a whole sweep (unsharded, or a complete merge): it covers every shard of its sweep


def part_of(path: Path | str, meta: Meta | None) -> Part:
    """The part a file's meta line says it holds (``store.checks`` has checked the types)."""
    selection = meta.selection if meta is not None else {}
    extra = meta.extra if meta is not None else {}
    sweep = (*selection.get("args", []), f"-k {selection.get('keyword', '')}", f"-m {selection.get('markexpr', '')}",
             f"benchmarks {'+'.join(sorted(meta.benchmarks if meta is not None else {}))}")
    if extra.get("complete") is True:  # a merge that had them all (or a whole file among them)
        return Part(str(path), 0, frozenset(), int(extra.get("shard_scheme") or SCHEME), sweep, whole=True)
    labels = extra.get("shards") or ([selection["shard"]] if selection.get("shard") else [])
    parsed = [k_of_n(label) for label in labels]
    shards = [p for p in parsed if p is not None]
    if len(shards) != len(labels) or len({n for _, n in shards}) > 1:
        raise StoreError(f"{path}:1: its meta line records shards {', '.join(labels)}, which are not K/N of one N")
    scheme = extra.get("shard_scheme") or (OLD_SCHEME if shards else SCHEME)
    # A file without a meta line says nothing of its selection: it covers no shard.
    return Part(str(path), shards[0][1] if shards else 0, frozenset(k for k, _ in shards), int(scheme), sweep,
                whole=meta is not None and not shards)


def check_one_sweep(parts: Sequence[Part], allow_mismatch: bool = False) -> None:
    """Refuse shards of different sweeps: another N, another assignment scheme, another selection."""
    sharded = [p for p in parts if p.total]
    for part in sharded[1:]:
        first = sharded[0]
        why = (f"is shard(s) of {part.total}, but {first.path} of {first.total}" if part.total != first.total else
               f"assigns items to shards by scheme {part.scheme}, but {first.path} by {first.scheme}"
               if part.scheme != first.scheme else
               f"selected {' '.join(part.sweep)}, but {first.path} selected {' '.join(first.sweep)}"
               if part.sweep != first.sweep else None)
        if why is not None and not allow_mismatch:
            raise StoreError(f"{part.path}: {why}: these are not shards of one sweep and cannot be merged "
                             "(--allow-mismatch merges them; the result is marked complete only if one sweep's "
                             "shards are all there)")


@dataclass(frozen=True)
class Coverage:
    complete: bool
    shards: list[str]  # the shards held, "K/N", in order
    missing: list[str]  # the shards of the sweep(s) not held

    def describe(self) -> str:
        """One line: which shards are here and which are missing."""
        if not self.shards:
            return "no shards: the whole sweep"
        got = f"shards {', '.join(self.shards)}"
        return f"{got}; missing {', '.join(self.missing)}" if self.missing else f"{got}: all of them"


def coverage(parts: Iterable[Part]) -> Coverage:
    """Complete when every sweep the shard files come from has all its shards here.

    A whole file (unsharded, or a complete merge) covers every shard of its own sweep (the same
    selection and benchmarks): a shard re-run beside it adds nothing missing. It covers no shard
    of another sweep (``--allow-mismatch``), and a file without a meta line covers none.
    """
    parts = list(parts)
    wholes = {part.sweep for part in parts if part.whole}
    groups: dict[tuple[int, int, tuple[str, ...]], set[int]] = {}
    for part in parts:
        if part.total:
            got = range(1, part.total + 1) if part.sweep in wholes else part.got
            groups.setdefault((part.total, part.scheme, part.sweep), set()).update(got)
    shards = sorted({(k, n) for (n, _, _), got in groups.items() for k in got}, key=lambda kn: (kn[1], kn[0]))
    missing = sorted({(k, n) for (n, _, _), got in groups.items() for k in range(1, n + 1) if k not in got},
                     key=lambda kn: (kn[1], kn[0]))
    return Coverage(not missing, [f"{k}/{n}" for k, n in shards], [f"{k}/{n}" for k, n in missing])


def merged_fields(cover: Coverage) -> dict[str, Any]:
    """What a merged meta line records of its shards (``shards`` only when there were any)."""
    fields: dict[str, Any] = {"shards": cover.shards} if cover.shards else {}
    return {**fields, "complete": cover.complete, "missing_shards": cover.missing}


def gap(path: Path | str, meta: Meta | None) -> str:
    """"" when a file holds its whole sweep (or says nothing of shards); else which shards it holds and
    which are missing, as the report says it. For the progress page, which must never break a run: a
    meta line with broken shard fields is "" here, and refused by the report."""
    try:
        cover = coverage([part_of(path, meta)])
    except StoreError:
        return ""
    return "" if cover.complete else cover.describe()
