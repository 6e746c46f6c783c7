"""Which shards of a sweep a set of results files holds: the ``K/N`` their meta lines record,
checked to come from one sweep, and what is missing from the whole or unfinished in it.

A shard file's meta line records ``selection.shard`` (``"K/N"``), ``shard_scheme`` and
``shard_items`` (``shards.parts``); a merged file records the shards it holds in ``shards``, how
each part ended in ``shard_parts`` and, from them, ``complete``, ``missing_shards`` and
``unfinished_shards``. A file that records no shard is the whole sweep.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.shards.env import k_of_n
from pytest_echo_bench.shards.parts import (
    FIELD,
    UNFINISHED,
    PartEnd,
    ShardKey,
    how_ended,
    recorded_parts,
    shard_whole,
)
from pytest_echo_bench.store.meta import SelectionRecord
from pytest_echo_bench.store.records import Meta

# How items are assigned to shards. 1 (before this field existed): a hash of (benchmark, task_id,
# arm[, epoch]), which split an item's arms and epochs across shards; 2:
# a hash of (benchmark, task_id).
SCHEME = 2
OLD_SCHEME = 1


@dataclass(frozen=True)
class Part:
    """What one results file holds of its sweep: shards ``got`` of
    ``total`` (0: the whole sweep)."""

    path: str
    total: int
    got: frozenset[int]
    scheme: int
    # what every shard of one sweep records alike: its selection and benchmarks
    sweep: tuple[str, ...]
    # a whole sweep (unsharded, or a complete merge): it covers every shard of its sweep
    whole: bool = False
    # how each shard file in it ended (a merge's record; a shard file's, once ``ended``)
    ends: tuple[PartEnd, ...] = ()
    # a shard file's own: the items its shard selects (None: not recorded)
    expected: int | None = None
    # a merge's file (``merged_from``): how its parts ended is its record, not its end line
    merged: bool = False


def part_of(path: Path | str, meta: Meta | None) -> Part:
    """The part a file's meta line says it holds (``store.checks`` has checked the types)."""
    if meta is None:  # a file without a meta line says nothing of its selection: it covers no shard
        return Part(str(path), 0, frozenset(), SCHEME, _sweep(SelectionRecord(), {}))
    where = f"{path}:1"
    fields = meta.shard_fields(where)
    sweep = _sweep(meta.selection, meta.benchmarks)
    ends = recorded_parts(fields, where)
    own = [meta.selection.shard] if meta.selection.shard else []
    shards = _shards(fields.shards or own, where)
    total, got = (shards[0][1] if shards else 0), frozenset(k for k, _ in shards)
    # A merge that had them all (or a whole file among them): it keeps their names.
    if fields.complete is True:
        return Part(str(path), total, got, fields.scheme or SCHEME, sweep, True, ends, merged=True)
    scheme = fields.scheme or (OLD_SCHEME if shards else SCHEME)
    return Part(str(path), total, got, scheme, sweep, whole=not shards, ends=ends,
                expected=fields.items, merged=fields.merged)


def _sweep(selection: SelectionRecord, benchmarks: Mapping[str, object]) -> tuple[str, ...]:
    """What every shard of one sweep records alike: its selection and its benchmarks."""
    return (*(selection.args or []), f"-k {selection.keyword or ''}",
            f"-m {selection.markexpr or ''}", f"benchmarks {'+'.join(sorted(benchmarks))}")


def _shards(labels: Sequence[str], where: str) -> list[ShardKey]:
    """The (K, N) of each ``K/N`` label; StoreError unless they all parse, with one N."""
    parsed = [k_of_n(label) for label in labels]
    shards = [p for p in parsed if p is not None]
    if len(shards) != len(labels) or len({n for _, n in shards}) > 1:
        raise StoreError(f"{where}: its meta line records shards {', '.join(labels)}, which are "
                         "not K/N of one N")
    return shards


def own_shard(part: Part) -> str | None:
    """"K/N" of a shard file that is a run's own (not a merge of parts): how it
    ended is read from the file itself."""
    mine = part.total and len(part.got) == 1 and not (part.ends or part.whole or part.merged)
    return f"{min(part.got)}/{part.total}" if mine else None


def ended(part: Part, stop: str, held: int) -> Part:
    """A shard file's part with how it ended: ``stop`` the reason its end line (or marker) records
    ("" for none), ``held`` its rows (each key once)."""
    shard = own_shard(part)
    if shard is None:
        return part
    end = PartEnd(shard, part.path, how_ended(stop, held, part.expected), stop, held, part.expected)
    return replace(part, ends=(end,))


def check_one_sweep(parts: Sequence[Part], allow_mismatch: bool = False) -> None:
    """Refuse shards of different sweeps: another N, another
    assignment scheme, another selection."""
    # a whole file covers its sweep however it was split
    sharded = [p for p in parts if p.total and not p.whole]
    for part in sharded[1:]:
        first = sharded[0]
        why = (
            f"is shard(s) of {part.total}, but {first.path} of {first.total}"
            if part.total != first.total
            else f"assigns items to shards by scheme {part.scheme}, but {first.path} by "
            f"{first.scheme}"
            if part.scheme != first.scheme
            else f"selected {' '.join(part.sweep)}, but {first.path} selected "
            f"{' '.join(first.sweep)}"
            if part.sweep != first.sweep
            else None
        )
        if why is not None and not allow_mismatch:
            raise StoreError(
                f"{part.path}: {why}: these are not shards of one sweep and cannot be merged "
                "(--allow-mismatch merges them; the result is marked complete only if one sweep's "
                "shards are all there)"
            )


@dataclass(frozen=True)
class Coverage:
    complete: bool
    shards: list[str]  # the shards held, "K/N", in order
    missing: list[str]  # the shards of the sweep(s) not held
    # shards held, but not all their items (stopped, killed, empty)
    unfinished: list[str] = field(default_factory=list)
    # how each shard file ended, with its shard's items
    ends: list[PartEnd] = field(default_factory=list)

    def describe(self) -> str:
        """One line: which shards are here, which are missing and which are
        unfinished (and how they ended)."""
        if not self.shards:
            return "no shards: the whole sweep"
        said = [f"shards {', '.join(self.shards)}"]
        if self.missing:
            said.append(f"missing {', '.join(self.missing)}")
        if self.unfinished:
            how = "; ".join(e.text() for e in self.ends if e.shard in self.unfinished)
            said.append(f"unfinished {', '.join(self.unfinished)}" + (f" ({how})" if how else ""))
        return "; ".join(said) if len(said) > 1 else f"{said[0]}: all of them"


def _label(kn: ShardKey) -> str:
    return f"{kn[0]}/{kn[1]}"


def _ordered(found: Iterable[ShardKey]) -> list[str]:
    return [_label(kn) for kn in sorted(set(found), key=lambda kn: (kn[1], kn[0]))]


def coverage(parts: Iterable[Part], held: Mapping[ShardKey, int] | None = None) -> Coverage:
    """Complete when every sweep the shard files come from has all its shards here, each whole.

    A whole file (unsharded, or a complete merge) covers every shard of its own sweep (the same
    selection and benchmarks): a shard re-run beside it adds nothing missing. It covers no shard
    of another sweep (``--allow-mismatch``), and a file without a meta line covers none. A shard
    held is whole when ``held`` (its rows in all the files, each key once) reaches the items its
    meta line says it selects (``shards.parts.shard_whole``); None: the files' own counts.
    """
    parts = list(parts)
    groups, covered = _groups(parts)
    shards = {(k, n) for (n, _, _), got in groups.items() for k in got}
    missing = {(k, n) for (n, _, _), got in groups.items() for k in range(1, n + 1) if k not in got}
    # A file given twice is listed once.
    ends = list(dict.fromkeys(end for part in parts for end in part.ends))
    unfinished = {kn for kn in shards - covered if not _whole(kn, ends, held)}
    return Coverage(not missing and not unfinished, _ordered(shards), _ordered(missing),
                    _ordered(unfinished), ends)


Group = tuple[int, int, tuple[str, ...]]  # (N, scheme, sweep): the shards of one split of one sweep


def _groups(parts: Sequence[Part]) -> tuple[dict[Group, set[int]], set[ShardKey]]:
    """The shards held of each split of a sweep, and the shards a whole file of their sweep covers
    (whole whatever their files say)."""
    wholes = {part.sweep for part in parts if part.whole}
    groups: dict[Group, set[int]] = {}
    covered: set[ShardKey] = set()
    for part in parts:
        if part.total:
            got = range(1, part.total + 1) if part.sweep in wholes else part.got
            groups.setdefault((part.total, part.scheme, part.sweep), set()).update(got)
            covered.update((k, part.total) for k in got if part.sweep in wholes)
    return groups, covered


def _whole(kn: ShardKey, ends: Sequence[PartEnd], held: Mapping[ShardKey, int] | None) -> bool:
    """Whether shard ``kn`` is all here: its rows held against the items it selects."""
    mine = [e for e in ends if e.shard == _label(kn)]
    return shard_whole(mine, None if held is None else held.get(kn, 0))


def merged_fields(cover: Coverage) -> dict[str, Any]:
    """What a merged meta line records of its shards (``shards`` and its
    parts only when there were any)."""
    fields: dict[str, Any] = (
        {"shards": cover.shards, FIELD: [e.to_json() for e in cover.ends]} if cover.shards else {}
    )
    return {
        **fields,
        "complete": cover.complete,
        "missing_shards": cover.missing,
        UNFINISHED: cover.unfinished,
    }


def gap(path: Path | str, meta: Meta | None) -> str:
    """"" when a file holds its whole sweep (or says nothing of shards); else which shards it holds
    and which are missing, as the report says it. For the progress page, which must never break a
    run: a meta line with broken shard fields is "" here, and refused by the report."""
    try:
        cover = coverage([part_of(path, meta)])
    except StoreError:
        return ""
    return "" if cover.complete else cover.describe()
