"""The typed parts of a results file's meta line: a benchmark's entry, the selection, the order, the
decide plan as recorded, the run options, the shard fields, and the line a run appends as it ends.

Every part reads what any of our writers wrote (``from_json``: a key it leaves out is None, a key
this version does not name is kept in ``extra``) and writes back the same bytes (``to_json``: the
keys it has, in the order our writers write them, then the others as they came). ``store.checks``
has checked the types of the meta line's own fields before these read them; the string keys of the
file's fields are read here and there only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_echo_bench.errors import StoreError


def _split(data: Mapping[str, Any], names: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the fields ``names`` holds, the others in their order)."""
    return (
        {k: data[k] for k in names if k in data},
        {k: v for k, v in data.items() if k not in names},
    )


def _joined(part: Any, names: Sequence[str], extra: Mapping[str, Any]) -> dict[str, Any]:
    """A part's fields that are set, in ``names``' order, then its ``extra``."""
    known = {name: value for name in names if (value := getattr(part, name)) is not None}
    return {**known, **extra}


@dataclass(frozen=True)
class BenchmarkEntry:
    """A benchmark's entry in ``benchmarks``: its spec, fingerprint, the digests of its parts, its
    items (every arm and epoch of each example) and ``epochs`` when more than 1. An imported log
    has no spec parts, a merge's assumed fingerprint is all a file without a meta line has."""

    spec: str | None = None
    fingerprint: str | None = None
    parts: dict[str, str] | None = None
    items: int | None = None
    epochs: int | None = None  # None: 1 (left out of the line)
    extra: dict[str, Any] = field(default_factory=dict)

    NAMES = ("spec", "fingerprint", "parts", "items", "epochs")

    @property
    def samples(self) -> int:
        """Samples per item: ``epochs``, 1 when the entry has none."""
        return self.epochs or 1

    def to_json(self) -> dict[str, Any]:
        return _joined(self, self.NAMES, self.extra)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BenchmarkEntry:
        known, extra = _split(data, cls.NAMES)
        return cls(**known, extra=extra)


def benchmark_entry(
    fingerprint: str,
    *,
    spec: str | None = None,
    items: int | None = None,
    parts: Mapping[str, str] | None = None,
    epochs: int = 1,
) -> BenchmarkEntry:
    """A benchmark's entry as every writer makes it (a run, an import, a merge's assumed
    fingerprint): ``epochs`` only when each item is sampled more than once."""
    return BenchmarkEntry(
        spec,
        fingerprint,
        dict(parts) if parts is not None else None,
        items,
        epochs if epochs > 1 else None,
    )


@dataclass(frozen=True)
class SelectionRecord:
    """What a run selected (``selection``): positional args, -k, -m and its shard ("" for none);
    what a bare ``--bench-resume PATH`` runs again. The first writer had no ``shard``."""

    args: list[str] | None = None
    keyword: str | None = None
    markexpr: str | None = None
    shard: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    NAMES = ("args", "keyword", "markexpr", "shard")

    @classmethod
    def of(
        cls, args: Sequence[str], keyword: str | None, markexpr: str | None, shard: str | None
    ) -> SelectionRecord:
        """The selection a new sweep records: every field, "" for none."""
        return cls(list(args), keyword or "", markexpr or "", shard or "")

    def to_json(self) -> dict[str, Any]:
        return _joined(self, self.NAMES, self.extra)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SelectionRecord:
        known, extra = _split(data, cls.NAMES)
        return cls(**known, extra=extra)


RANDOM, FILE = "random", "file"


@dataclass(frozen=True)
class OrderRecord:
    """How the sweep's items are ordered (``order``): random, with its scheme and seed, or file."""

    order: str | None = None
    scheme: str | None = None
    seed: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    NAMES = ("order", "scheme", "seed")

    @property
    def random(self) -> bool:
        return self.order == RANDOM

    def to_json(self) -> dict[str, Any]:
        return _joined(self, self.NAMES, self.extra)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OrderRecord:
        known, extra = _split(data, cls.NAMES)
        return cls(**known, extra=extra)


@dataclass(frozen=True)
class DecideRecord:
    """The stop-when-decided plan as the meta line records it (``decide``): its pairs ``[benchmark,
    a, b]``, ``alpha`` and ``margin``, of the right types; ``analysis.decide.monitor.Plan.read``
    says whether it can be used."""

    pairs: list[list[str]] | None = None
    alpha: float | None = None
    margin: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    NAMES = ("pairs", "alpha", "margin")

    def to_json(self) -> dict[str, Any]:
        return _joined(self, self.NAMES, self.extra)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DecideRecord:
        known, extra = _split(data, cls.NAMES)
        return cls(**known, extra=extra)


OPTION_NAMES = ("cache", "concurrency", "budget_usd", "judge")


@dataclass(frozen=True)
class RunOptions:
    """The run options a sweep records (``options``): the response cache ("off", "default" or an
    absolute path), the calls in flight, the budget and when judged scorers grade ("now" or
    "later"). Values as the file has them: a resume takes
    them back, ``plugin.recorded`` checks them first. ``given``: the names the line has (a budget of
    null is recorded, and differs from none recorded)."""

    cache: Any = None
    concurrency: Any = None
    budget_usd: Any = None
    judge: Any = None
    given: tuple[str, ...] = OPTION_NAMES
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {**{name: getattr(self, name) for name in self.given}, **self.extra}

    @classmethod
    def from_json(cls, data: object) -> RunOptions:
        """The options of a meta line; ValueError when they are not an object."""
        if not isinstance(data, dict):
            raise ValueError("are not an object")
        known, extra = _split(data, OPTION_NAMES)
        return cls(**known, given=tuple(known), extra=extra)


ITEMS, PARTS, MAX_PARTS = "shard_items", "shard_parts", 1_000_000


@dataclass(frozen=True)
class ShardFields:
    """What a meta line says of shards (``shards.coverage`` reads it): a shard file's
    ``shard_scheme`` and ``shard_items``; a merge's ``shards``, ``complete`` and how each part ended
    (``shard_parts``, as recorded: ``shards.parts.PartEnd`` reads each)."""

    scheme: int | None = None
    items: int | None = None  # the items the shard's selection holds; None: not recorded
    shards: list[str] | None = None
    parts: list[Any] | None = None
    complete: bool | None = None
    merged: bool = False  # a merge's line (``merged_from`` or ``shard_parts``)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str) -> ShardFields:
        """The shard fields of a meta line's other fields; StoreError naming ``where`` for a
        ``shard_items`` that is not a count, or ``shard_parts`` that is not a bounded list."""
        items, parts = data.get(ITEMS), data.get(PARTS)
        if parts is not None and (not isinstance(parts, list) or len(parts) > MAX_PARTS):
            raise StoreError(
                f"{where}: its meta line field {PARTS!r} must be a list of at most "
                f"{MAX_PARTS} parts"
            )
        if items is not None and not (type(items) is int and items >= 0):
            raise StoreError(
                f"{where}: its meta line field {ITEMS!r} must be a whole number of 0 or more, "
                f"got {items!r:.80}"
            )
        return cls(
            data.get("shard_scheme"),
            items,
            data.get("shards"),
            parts,
            data.get("complete"),
            "merged_from" in data or PARTS in data,
        )


DECIDED, MERGED = "decided", "merged"


@dataclass(frozen=True)
class StopRecord:
    """Why a run stopped, as its end line records it: the stop marker's ``reason`` and ``message``,
    and its details in the marker's order (a decided stop's ``pairs``, a merge's stopped
    ``parts``)."""

    reason: str = "stopped"
    message: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pairs(self) -> tuple[dict[str, Any], ...]:
        """A decided stop's figures, as the run recorded them at the stop."""
        pairs = self.extra.get("pairs") if self.reason == DECIDED else None
        return tuple(p for p in pairs if isinstance(p, dict)) if isinstance(pairs, list) else ()

    @property
    def parts_decided(self) -> bool:
        """A merge's stop: one of its parts (or a part of one) stopped when decided."""
        if self.reason != MERGED:
            return False
        parts = self.extra.get("parts")
        return self.extra.get("parts_decided") is True or (
            isinstance(parts, list)
            and any(
                isinstance(p, dict)
                and (p.get("reason") == DECIDED or p.get("parts_decided") is True)
                for p in parts
            )
        )

    @classmethod
    def from_json(cls, data: object) -> StopRecord | None:
        """A stop record; None for a run that ran to the end (null, nothing, or not an object)."""
        if not isinstance(data, dict) or not data:
            return None
        extra = {k: v for k, v in data.items() if k not in ("reason", "message")}
        return cls(str(data.get("reason") or "stopped"), str(data.get("message") or ""), extra)


@dataclass(frozen=True)
class RunEnd:
    """The record of a run's end line (``store.files.RUN_END``): the run, when, its stop record
    (None: it ran to the end, exactly as written), and where an earlier run (or a merged part)
    stopped when decided ("": never)."""

    run_id: str
    at: str
    stopped: Mapping[str, Any] | None = None
    decided: str = ""

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "run_id": self.run_id,
            "at": self.at,
            "stopped": dict(self.stopped) if self.stopped else None,
        }
        return {**record, **({"decided": self.decided} if self.decided else {})}

    @property
    def stop(self) -> StopRecord | None:
        return StopRecord.from_json(self.stopped)

    @property
    def merged(self) -> bool:
        """The end line of a merged file (written by ``results.merge``)."""
        return self.run_id == MERGED

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunEnd:
        """An end line's record as read; what is not of its type reads as nothing recorded."""
        decided, stopped = data.get("decided"), data.get("stopped")
        return cls(
            data.get("run_id") if isinstance(data.get("run_id"), str) else "",
            data.get("at") if isinstance(data.get("at"), str) else "",
            stopped if isinstance(stopped, dict) else None,
            decided[:500] if isinstance(decided, str) else "",
        )
