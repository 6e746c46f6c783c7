"""The versioned records of a results file: one meta line, then one row per graded item."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.store.checks import current_meta, meta_problem
from pytest_echo_bench.store.files import encode_line
from pytest_echo_bench.store.meta import (
    BenchmarkEntry,
    DecideRecord,
    OrderRecord,
    RunOptions,
    SelectionRecord,
    ShardFields,
)

SCHEMA = 1

# (benchmark, task_id, arm, epoch); epoch 1 unless the spec has epochs: K
Key = tuple[str, str, str, int]
# (benchmark, arm, epoch): what a KeySet holds a set of task ids for
ArmEpoch = tuple[str, str, int]


@dataclass
class Meta:
    """First line of a results file: what produced it and what determines its answers."""

    benchmark: str
    benchmarks: dict[str, BenchmarkEntry]
    spec_files: list[str]
    fingerprint: str
    arms: dict[str, list[str]]  # benchmark -> arm names
    selection: SelectionRecord  # args, -k, -m: what `--bench-resume PATH` alone re-runs
    run_id: str
    plugin_version: str
    created_at: str
    fsync: str = "end"
    # where the run started; a resume resolves spec_files and selection.args against its own
    rootdir: str = ""
    order: OrderRecord | None = None  # how items were ordered (plugin.order); None: file order
    decide: DecideRecord | None = None  # the stop-when-decided plan (``Plan``); None: none
    schema: int = SCHEMA
    # Fields of a line this class does not name (the run options, the shard fields, merge's
    # merged_from, regrade's regraded_from, a newer writer's): kept in their order, so a meta line
    # read and written again loses nothing; ``run_options`` and ``shard_fields`` type the ones read.
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        line: dict[str, Any] = {
            "_meta": True, "benchmark": self.benchmark,
            "benchmarks": {name: entry.to_json() for name, entry in self.benchmarks.items()},
            "spec_files": self.spec_files, "fingerprint": self.fingerprint, "arms": self.arms,
            "selection": self.selection.to_json(), "run_id": self.run_id,
            "plugin_version": self.plugin_version, "created_at": self.created_at,
            "fsync": self.fsync, "rootdir": self.rootdir}
        # Absent when unset: such a line is what older readers know.
        for name, part in (("order", self.order), ("decide", self.decide)):
            if part is not None and (data := part.to_json()):
                line[name] = data
        return {**line, "schema": self.schema, **self.extra}

    def run_options(self) -> RunOptions | None:
        """The run options the line records (None: written before they were); ValueError when they
        are not an object (``plugin.recorded`` names the file)."""
        found = self.extra.get(OPTIONS)
        return None if found is None else RunOptions.from_json(found)

    def shard_fields(self, where: str) -> ShardFields:
        """What the line says of shards; StoreError naming ``where`` for a field no writer wrote."""
        return ShardFields.from_json(self.extra, where)

    @classmethod
    def from_json(cls, record: Mapping[str, Any], where: str = "meta line") -> Meta:
        """The meta line ``record`` (a decoded line 1), typed. Its fields must meet
        ``store.checks``'s rules, else a StoreError naming ``where`` (the reader passes ``file:1``);
        a field an older writer left out takes its empty value, as the readers took it before, and
        one it wrote in another shape is read as today's (``store.checks.current_meta``)."""
        is_meta = record.get("_meta") is True
        record = current_meta(record) if is_meta else record
        problem = meta_problem(record) if is_meta else "not a meta line (no \"_meta\": true)"
        if problem is not None:
            raise StoreError(f"{where}: {problem}")
        known = {name: record[name] for name in _META_FIELDS if name in record}
        extra = {k: v for k, v in record.items() if k not in _META_FIELDS and k != "_meta"}
        order, decide = known.pop("order", None), known.pop("decide", None)
        typed = {"benchmarks": {name: BenchmarkEntry.from_json(info)
                                for name, info in known.pop("benchmarks", {}).items()},
                 "selection": SelectionRecord.from_json(known.pop("selection", {})),
                 "order": OrderRecord.from_json(order) if order else None,
                 "decide": DecideRecord.from_json(decide) if decide else None}
        return cls(**{**_EMPTY, **known, **typed}, extra=extra)


OPTIONS = "options"  # the meta line's run options (``plugin.recorded``)
_EMPTY: dict[str, Any] = {"benchmark": "", "spec_files": [], "fingerprint": "", "arms": {},
                          "run_id": "", "plugin_version": "", "created_at": ""}


@dataclass
class Row:
    """One completed, graded item. The first six fields keep older readers working."""

    task_id: str
    arm: str
    passed: bool
    detail: str
    wall_seconds: float | None  # None: unknown (an imported log's bad or missing total_time)
    sub_calls: int
    benchmark: str
    status: str  # correct | wrong | unparseable | error
    output: str
    answer: str | None
    target: str
    attempts: int
    started_at: str
    finished_at: str
    worker: str
    run_id: str
    subtask: str | None = None
    usage: dict[str, int] | None = None
    retries: int = 0
    cost_usd: float | None = None
    cost_units: float | None = None  # cost relative to the spec's pricing.unit reference call
    cache_hits: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    # 1..K for a spec with ``epochs: K`` > 1; left out of the line otherwise
    epoch: int | None = None
    # What the run's budget charged for the item's calls: their cost, or a call's worst case when
    # its reply gave no usage. A resume counts it against the budget; left out when no budget ran.
    charged_usd: float | None = None
    # A judged scorer's grade on its scale, what each judge did (``scoring.judgment.Judgment``
    # records) and what the judges cost apart from the arm (``cost_usd`` is the arm's own). Left
    # out of the line when there is none: a row without judges is what older readers know.
    score: float | None = None
    judgments: list[dict[str, Any]] | None = None
    judge_cost_usd: float | None = None
    # What the provider says served the arm's call (``model`` in OpenAI and Anthropic replies; a
    # routing arm's: its calls' models joined), its ``system_fingerprint`` where it gives one, and
    # a digest of the dataset item asked (``engine.fingerprint.item_digest``): what ``compare``
    # reads to tell two runs asked the same thing of the same model. Left out when unknown.
    served_model: str | None = None
    served_fingerprint: str | None = None
    item_sha256: str | None = None
    # The provider's id of the batch that answered it (``engine.batching``); absent for a live call.
    batch_id: str | None = None
    # When ``echo-bench judge`` graded a stored output into this row, which keeps the arm call's
    # run id and times: it names the judging apart from its call (``results.spent``). Left out
    # when none: a sweep's row is judged with its call.
    judged_at: str | None = None
    schema: int = SCHEMA

    def to_line(self) -> bytes:
        # A shallow dict in field order: asdict() deep-copies every value, which cost more per
        # row than the append itself. Nested values (usage, extra) are plain JSON already.
        data = {name: getattr(self, name) for name in _ROW_FIELDS}
        if not data["extra"]:
            del data["extra"]
        if data["epoch"] is None:  # K = 1: the line is exactly what older readers know
            del data["epoch"]
        for name in _LEFT_OUT_WHEN_NONE:
            if data[name] is None:
                del data[name]
        return encode_line(data)


_ROW_FIELDS = tuple(f.name for f in fields(Row))
_LEFT_OUT_WHEN_NONE = ("charged_usd", "score", "judgments", "judge_cost_usd", "served_model",
                       "served_fingerprint", "item_sha256", "batch_id", "judged_at")
# a line's own "extra" field is one of its extras
_META_FIELDS = frozenset(f.name for f in fields(Meta)) - {"extra"}


def row_from_json(record: dict[str, Any]) -> Row:
    """A row as our writer wrote it, back as a ``Row`` (fields it does not know are dropped)."""
    return Row(**{name: record[name] for name in _ROW_FIELDS if name in record})


def row_epoch(row: dict[str, Any]) -> int:
    """A row's epoch: 1 when it has none (K = 1, older files), or 0 or garbage in its place."""
    epoch = row.get("epoch")
    return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) and epoch > 1 else 1


def row_key(row: dict[str, Any], default_benchmark: str) -> Key:
    return (
        str(row.get("benchmark") or default_benchmark),
        str(row["task_id"]),
        str(row["arm"]),
        row_epoch(row),
    )


def scan_epoch(epoch: int | None) -> int:
    """``row_epoch`` for a decoded ``keyscan`` row's epoch field (an int or None)."""
    return epoch if epoch is not None and epoch > 1 else 1


class KeySet:
    """Recorded (benchmark, task_id, arm, epoch) keys, held as a set of task
    ids per (benchmark, arm, epoch).

    A resumed file has a million keys but only a few arms and benchmarks: a tuple and three
    strings per key cost about 260 bytes, a task id in its arm's set about 90.
    """

    __slots__ = ("by_arm",)

    def __init__(self, keys: Iterable[Key] = ()) -> None:
        self.by_arm: dict[ArmEpoch, set[str]] = {}
        for key in keys:
            self.add(key)

    def ids(self, benchmark: str, arm: str, epoch: int = 1) -> set[str]:
        """The task ids recorded for an arm's epoch: add to it directly when adding many."""
        ids = self.by_arm.get((benchmark, arm, epoch))
        if ids is None:
            ids = self.by_arm[benchmark, arm, epoch] = set()
        return ids

    def add(self, key: Key) -> None:
        self.ids(key[0], key[2], key[3]).add(key[1])

    def discard(self, key: Key) -> None:
        """Forget ``key``: its newest row is one that resume runs
        again (``--bench-retry-errors``)."""
        ids = self.by_arm.get((key[0], key[2], key[3]))
        if ids is not None:
            ids.discard(key[1])

    def add_rows(self, rows: Iterable[Any], default: str) -> None:
        """Add decoded rows (``benchmark``, ``task_id``, ``arm``, ``epoch``
        attributes): resume's hot loop."""
        by_arm = self.by_arm
        # each arm's set by the fields as decoded: no call per row to read them as a key
        sets: dict[tuple[Any, str, Any], set[str]] = {}
        for r in rows:
            ids = sets.get(raw := (r.benchmark, r.arm, r.epoch))
            if ids is None:
                arm = (r.benchmark or default, r.arm, scan_epoch(r.epoch))
                ids = sets[raw] = by_arm.setdefault(arm, set())
            ids.add(r.task_id)

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple) or len(key) not in (3, 4):
            return False
        ids = self.by_arm.get((key[0], key[2], key[3] if len(key) == 4 else 1))
        return ids is not None and key[1] in ids

    def __len__(self) -> int:
        return sum(map(len, self.by_arm.values()))

    # as a set of keys; (benchmark, task_id, arm) is epoch 1's
    def __eq__(self, other: object) -> bool:
        if isinstance(other, KeySet | set | frozenset):
            return set(self) == {
                k + (1,) if isinstance(k, tuple) and len(k) == 3 else k for k in other
            }
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, like a set

    def __iter__(self) -> Iterator[Key]:
        for (benchmark, arm, epoch), ids in self.by_arm.items():
            for task_id in ids:
                yield (benchmark, task_id, arm, epoch)
