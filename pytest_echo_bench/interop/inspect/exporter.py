"""``echo-bench export --format inspect``: a results file as Inspect eval
logs, one per (benchmark, arm).

Each log is Inspect's ``.json`` format (an ``EvalLog``, version 2), which ``read_eval_log`` reads
and ``inspect view`` lists: the eval's task (the benchmark), model (the arm's ``provider/model``,
else the arm's name; the arm is ``metadata.echo_bench.arm``) and epochs, one sample per task id and
epoch with its input, target, output, usage, time and score (C, I, or N for unparseable; an error
row is an errored sample, unscored, as Inspect logs one; an unjudged row, whose output a judge gave
no grade, Inspect's unscored score: ``Score.unscored(reason="grader_failed")``, value NaN, as its
``model_graded_qa`` records a grade it cannot find), and the results Inspect itself would
compute: each sample's epochs reduced by their mean, then ``accuracy`` and ``stderr`` over the
samples scored. Rows are read as every reader of ours reads them: the newest row of each key counts.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from pytest_echo_bench import __version__
from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.interop.inspect.importer import USAGE_NAMES
from pytest_echo_bench.interop.inspect.inputs import Prompts, find_inputs, prompt_of
from pytest_echo_bench.store.files import UNGRADED, UNJUDGED, write_atomic
from pytest_echo_bench.store.reader import iter_records, parse_line
from pytest_echo_bench.store.records import row_key
from pytest_echo_bench.store.rows import ReadRow, read_row

# the scorer's name in the logs: the spec's scorer ran in our sweep, not in Inspect
SCORER = "echo_bench"
SCORE = {"correct": "C", "wrong": "I", "unparseable": "N"}
# Inspect's reason for a score a model grader could not give (``ScoreReason``)
UNSCORED_REASON = "grader_failed"
_UNSAFE = re.compile(r"[^A-Za-z0-9.-]+")  # "_" too: it separates the parts of an Inspect log's name
_STAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}")

Inputs = Prompts  # the prompts, from the specs (``inputs``)


@dataclass
class Exported:
    paths: list[Path] = field(default_factory=list)
    samples: int = 0
    notes: list[str] = field(default_factory=list)


def export_inspect(results: Path, out: Path, specs: Sequence[Path] = ()) -> Exported:
    """Write one log per (benchmark, arm) of ``results`` into directory
    ``out``; an existing log is refused.

    The file is read once for where each key's newest row is; then each log's rows are read again
    from there, twice (once for the figures its header gives, once for its samples), and the log
    written a sample at a time: no arm's rows or samples are held, whatever the file's size. The
    inputs come from ``specs``, else from the specs the meta line names (``inputs``).
    """
    meta, groups = _index(results)
    if not groups:
        raise StoreError(
            f"{results} has no rows to export" + (" (only its meta line)" if meta else "")
        )
    found = find_inputs(results, meta, RowsAt(results, groups), specs)
    inputs = found.prompts
    names: set[str] = set()
    stamp = _stamp(meta.get("created_at"))
    paths = [out / _file_name(stamp, benchmark, arm, names) for benchmark, arm in groups]
    for path in paths:  # all refused before any is written
        if path.exists() or path.is_symlink():
            raise StoreError(f"{path} exists: export writes new logs, never over one")
    samples = 0
    with open(results, "rb") as f:
        for path, ((benchmark, arm), places) in zip(paths, groups.items(), strict=True):
            places.sort()  # (epoch, task id): the order of a log's samples

            def rows(places: list[tuple[int, str, int]] = places,
                     default: str = benchmark) -> Iterator[ReadRow]:
                return (read_row(_row_at(f, results, offset), default) for _, _, offset in places)
            # as Inspect names one: "openai/gpt-4o"; else the arm
            model = found.models.get((benchmark, arm), arm)
            _write(path, log_pieces(meta, benchmark, arm, rows, inputs, model))
            samples += len(places)
    return Exported(paths, samples, found.notes)


def _index(
    results: Path,
) -> tuple[dict[str, Any], dict[tuple[str, str], list[tuple[int, str, int]]]]:
    """The meta line, and per (benchmark, arm) each key's newest row as (epoch, task id, offset)."""
    meta: dict[str, Any] = {}
    newest: dict[tuple[str, str, str, int], int] = {}
    default = ""
    for record in iter_records(results):
        if record.data.get("_meta"):
            if record.lineno == 1:
                meta, default = record.data, str(record.data.get("benchmark") or "")
            continue
        newest[row_key(record.data, default)] = record.offset
    groups: dict[tuple[str, str], list[tuple[int, str, int]]] = {}
    for (benchmark, task_id, arm, epoch), offset in newest.items():
        groups.setdefault((benchmark, arm), []).append((epoch, task_id, offset))
    return meta, groups


class RowsAt:
    """Every key's newest row, read from its place each time it is iterated (none held)."""

    def __init__(
        self, path: Path, groups: Mapping[tuple[str, str], list[tuple[int, str, int]]]
    ) -> None:
        self.path = path
        self.offsets = sorted(offset for places in groups.values() for _, _, offset in places)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        with open(self.path, "rb") as f:
            for offset in self.offsets:
                yield _row_at(f, self.path, offset)


def _row_at(f: BinaryIO, path: Path, offset: int) -> dict[str, Any]:
    f.seek(offset)
    record = parse_line(f.readline().rstrip(b"\n"), path, 0, strict=False)
    if record is None:
        raise StoreError(f"{path}: changed while it was exported (no row at byte {offset})")
    return record


@dataclass
class Figures:
    """What a log's header and reductions say of its samples, gathered a sample at a time."""

    epochs: int
    ids: dict[str, None] = field(default_factory=dict)  # every sample id, in order
    # sample id -> [sum, count] of its scored epochs
    scored: dict[str, list[float]] = field(default_factory=dict)
    # sample ids with an unscored (unjudged) epoch: those with no scored one reduce to NaN
    unscored: dict[str, None] = field(default_factory=dict)
    # summed over the samples: only the names they have
    usage: dict[str, Any] = field(default_factory=dict)
    # the first row's start, the earliest start, the latest finish
    started: list[str] = field(default_factory=list)
    finished: str | None = None
    samples: int = 0

    def add(self, row: ReadRow) -> None:
        """Count the sample of ``row`` (``_sample``'s: an error or unjudged row is unscored, a
        correct row C)."""
        self.samples += 1
        # The spec's K: an arm may lack rows of the last epochs.
        self.epochs = max(self.epochs, row.epoch)
        self.ids.setdefault(row.task_id)
        self._score(row)
        for key, value in (_usage(row.usage, row.cost_usd) or {}).items():
            self.usage[key] = self.usage.get(key, 0) + value
        first = _time(row.started_at)
        self.started = self.started or [first or "", first or ""]
        self.started[1] = (
            min(self.started[1], first)
            if self.started[1] and first
            else self.started[1] or first or ""
        )
        done = _time(row.finished_at)
        self.finished = (
            max(self.finished, done) if self.finished and done else self.finished or done
        )

    def _score(self, row: ReadRow) -> None:
        """Count the sample's score: none for an error, NaN (unscored) for an unjudged row."""
        if row.status == UNJUDGED:
            self.unscored.setdefault(row.task_id)
        elif row.status not in UNGRADED:
            total = self.scored.setdefault(row.task_id, [0.0, 0])
            total[0] += 1.0 if row.status == "correct" else 0.0
            total[1] += 1

    def reduced(self) -> list[dict[str, Any]]:
        """Inspect's default reducer: each sample's scored epochs by their mean (an errored epoch
        is not scored; unscored epochs are skipped, and a sample with only those reduces to NaN,
        Inspect's unscored sentinel)."""
        scored = [{"value": total / n, "sample_id": sid} for sid, (total, n) in self.scored.items()]
        return scored + [{"value": math.nan, "sample_id": sid} for sid in self.unscored
                         if sid not in self.scored]


def eval_log(meta: Mapping[str, Any], benchmark: str, arm: str, rows: Sequence[ReadRow],
             inputs: Inputs, model: str | None = None) -> dict[str, Any]:
    """The ``EvalLog`` of one arm of one benchmark, as JSON data (field
    order is Inspect's file format)."""
    rows = sorted(rows, key=lambda r: (r.epoch, r.task_id))
    samples = [_sample(r, model or arm, prompt_of(inputs, benchmark, r.task_id, arm)) for r in rows]
    figures = _figures(meta, benchmark, rows)
    return {**_head(meta, benchmark, arm, figures, model), "samples": samples,
            "reductions": [{"scorer": SCORER, "reducer": "mean", "samples": figures.reduced()}]}


def log_pieces(meta: Mapping[str, Any], benchmark: str, arm: str,
               rows: Callable[[], Iterable[ReadRow]],
               inputs: Inputs, model: str | None = None) -> Iterator[bytes]:
    """The bytes ``_encode(eval_log(...))`` gives, in pieces: ``rows()`` (sorted) is read twice,
    once for the figures the header gives and once for the samples, so that no sample is held."""
    figures = _figures(meta, benchmark, rows())
    yield _encode(_head(meta, benchmark, arm, figures, model))[:-1] + b',"samples":['
    for n, row in enumerate(rows()):
        prompt = prompt_of(inputs, benchmark, row.task_id, arm)
        yield (b"," if n else b"") + _encode(_sample(row, model or arm, prompt))
    yield b'],"reductions":[{"scorer":' + _encode(SCORER) + b',"reducer":"mean","samples":['
    for n, reduced in enumerate(figures.reduced()):
        yield (b"," if n else b"") + _encode(reduced)
    yield b"]}]}"


def _figures(meta: Mapping[str, Any], benchmark: str, rows: Iterable[ReadRow]) -> Figures:
    info = (meta.get("benchmarks") or {}).get(benchmark) or {}
    figures = Figures(info["epochs"] if isinstance(info.get("epochs"), int) else 1)
    for row in rows:
        figures.add(row)
    return figures


def _head(
    meta: Mapping[str, Any], benchmark: str, arm: str, figures: Figures, model: str | None = None
) -> dict[str, Any]:
    """The log's fields before its samples: ``model`` the arm's (its
    name when the spec gives none)."""
    model = model or arm
    first = figures.started[0] if figures.started else None
    created = _time(meta.get("created_at")) or first or "1970-01-01T00:00:00+00:00"
    ids = list(figures.ids)
    spec = {
        "eval_id": uuid.uuid4().hex,
        "run_id": str(meta.get("run_id") or ""),
        "created": created,
        "task": benchmark,
        "task_id": f"{benchmark}:{meta.get('fingerprint') or ''}",
        "task_version": 0,
        "dataset": {"name": benchmark, "samples": len(ids), "sample_ids": ids, "shuffled": False},
        "model": model,
        "config": {"epochs": figures.epochs},
        "packages": {"pytest-echo-bench": __version__},
        "scorers": [
            {
                "name": SCORER,
                "options": {},
                "metrics": [
                    {"name": "inspect_ai/accuracy", "options": {}},
                    {"name": "inspect_ai/stderr", "options": {}},
                ],
                "metadata": {},
            }
        ],
        "metadata": {
            "echo_bench": {
                "results_run_id": meta.get("run_id"),
                "fingerprint": meta.get("fingerprint"),
                "arm": arm,
            }
        },
    }
    started = (figures.started[1] if figures.started else "") or created
    stats = {"started_at": started, "completed_at": figures.finished or created,
             "model_usage": {model: figures.usage} if figures.usage else {}}
    return {
        "version": 2,
        "status": "success",
        "eval": spec,
        "plan": {"name": "plan", "steps": [], "config": {}},
        "results": _results(figures.samples, [r["value"] for r in figures.reduced()]),
        "stats": stats,
    }


def _sample(row: ReadRow, arm: str, prompt: str | None) -> dict[str, Any]:
    output = row.output or ""
    usage = _usage(row.usage, row.cost_usd)
    text = prompt if prompt is not None else _imported_input(row)
    assistant = {"role": "assistant", "content": output, "source": "generate", "model": arm}
    sample: dict[str, Any] = {
        "id": row.task_id,
        "epoch": row.epoch,
        "input": text,
        "target": row.target or "",
        "messages": [{"role": "user", "content": text, "source": "input"}, assistant],
        "output": {
            "model": arm,
            "choices": [{"message": assistant, "stop_reason": "stop"}],
            "completion": output,
            **({"usage": usage} if usage else {}),
        },
        "scores": {},
        "metadata": {"subtask": row.subtask} if row.subtask is not None else {},
        "model_usage": {arm: usage} if usage else {},
        "started_at": _time(row.started_at),
        "completed_at": _time(row.finished_at),
        "total_time": row.wall_seconds,
    }
    if row.status == "error":
        sample["error"] = {"message": row.detail or "error", "traceback": "", "traceback_ansi": ""}
    elif row.status == UNJUDGED:  # the output stands; the judge gave it no grade
        sample["scores"] = {SCORER: {"value": math.nan, "answer": row.answer,
                                     "explanation": row.detail or "", "reason": UNSCORED_REASON}}
    else:
        score = {"value": SCORE[row.status], "answer": row.answer, "explanation": row.detail or ""}
        sample["scores"] = {SCORER: score}
    return sample


def _imported_input(row: ReadRow) -> str:
    """The input an imported row kept from its Inspect log; rows of our
    sweeps do not store the prompt."""
    inspect = row.extra.get("inspect")
    text = inspect.get("input") if isinstance(inspect, dict) else None
    return text if isinstance(text, str) else ""


def _results(total: int, reduced: Sequence[float]) -> dict[str, Any]:
    """Inspect's ``EvalResults`` of the reduced samples: ``accuracy`` and ``stderr`` over those
    scored; a NaN (unscored: every epoch unjudged) counted in ``unscored_samples``, as Inspect
    counts one."""
    values = [v for v in reduced if not math.isnan(v)]
    n = len(values)
    accuracy = sum(values) / n if n else 0.0
    # numpy's std(ddof=1) / sqrt(n), as Inspect's stderr; 0 below two samples, as Inspect gives.
    stderr = (
        math.sqrt(sum((v - accuracy) ** 2 for v in values) / (n - 1)) / math.sqrt(n)
        if n > 1
        else 0.0
    )
    metrics = {"accuracy": {"name": "accuracy", "value": accuracy, "params": {}},
               "stderr": {"name": "stderr", "value": stderr, "params": {}}}
    return {
        "total_samples": total,
        "completed_samples": total,
        "scores": [
            {
                "name": SCORER,
                "scorer": SCORER,
                "scored_samples": n,
                "unscored_samples": len(reduced) - n,
                "params": {},
                "metrics": metrics,
            }
        ],
    }


# The cache's counts as rows of older versions name them (claude CLI rows, imported logs):
# Inspect's names -> theirs, counted apart from prompt_tokens.
_OLD_CACHE_NAMES = {"input_tokens_cache_read": "cache_read_input_tokens",
                    "input_tokens_cache_write": "cache_creation_input_tokens"}


def _usage(counts: Mapping[str, int] | None, cost: float | None) -> dict[str, Any] | None:
    """The row's usage (``ReadRow.usage``: None unless every figure is a count, a 0 being a
    figure the row never had) as Inspect's ``ModelUsage``, in the names
    ``importer.USAGE_NAMES`` reads back, with its cost."""
    if counts is None:
        return None
    usage = {theirs: counts[ours] for theirs, ours in USAGE_NAMES.items() if ours in counts}
    if not usage.keys() & {"input_tokens", "output_tokens"}:
        return None
    if "input_tokens" in usage:
        # Inspect's input_tokens are the full-rate ones: ours count the cache's in (a claude CLI
        # row of an older version, in its own names, counted them apart already).
        cached = sum(usage.get(k, 0) for k in _OLD_CACHE_NAMES)
        usage["input_tokens"] = max(usage["input_tokens"] - cached, 0)
    for theirs, ours in _OLD_CACHE_NAMES.items():
        if ours in counts and theirs not in usage:
            usage[theirs] = counts[ours]
    usage = {
        "input_tokens": usage.pop("input_tokens", 0),
        "output_tokens": usage.pop("output_tokens", 0),
        **usage,
    }
    # Inspect's total is every token: full-rate input, output and the cache's reads and writes.
    usage["total_tokens"] = sum(
        usage.get(k, 0)
        for k in (
            "input_tokens",
            "output_tokens",
            "input_tokens_cache_read",
            "input_tokens_cache_write",
        )
    )
    if cost is not None:
        usage["total_cost"] = cost
    return usage


def _time(value: object) -> str | None:
    """A row's UTC time as Inspect writes one (``+00:00``, which its ``UtcDatetimeStr`` wants)."""
    if not isinstance(value, str) or not value:
        return None
    return value[:-1] + "+00:00" if value.endswith("Z") else value


def _stamp(created: object) -> str:
    """The run's start as Inspect's log names begin (``2026-12-01T22-41-38-00-00``): ``inspect
    view`` and ``list_eval_logs`` list a ``.json`` file only under such a name."""
    found = _STAMP.match(created) if isinstance(created, str) else None
    return (found.group(0) if found else "1970-01-01T00:00:00").replace(":", "-") + "-00-00"


def _file_name(stamp: str, benchmark: str, arm: str, taken: set[str]) -> str:
    """``STAMP_BENCHMARK_ARM.json`` (Inspect's ``{timestamp}_{task}_{id}``) in characters every file
    system takes; a second one the same gets a number."""
    parts = [
        _UNSAFE.sub("-", text)[:80] or what
        for text, what in ((benchmark, "benchmark"), (arm, "arm"))
    ]
    stem = "_".join([stamp, *parts])  # at most 200 bytes: file systems refuse names over 255
    name, n = f"{stem}.json", 1
    while name in taken:
        n += 1
        name = f"{stem}-{n}.json"
    taken.add(name)
    return name


def _encode(value: object) -> bytes:
    # ASCII with escapes: a lone surrogate (valid in our rows' JSON) cannot make the
    # file invalid UTF-8. No indent: it turns json's C encoder off (encoding 20,000
    # samples: 17.7 s indented, 0.6 s not).
    return json.dumps(value, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def _write(path: Path, pieces: Iterable[bytes]) -> None:
    try:
        write_atomic(path, pieces, exclusive=True)
    except FileExistsError:
        raise StoreError(f"{path} exists: export writes new logs, never over one") from None
    except OSError as exc:
        raise StoreError(f"cannot write {path}: {exc.strerror or exc}") from exc
