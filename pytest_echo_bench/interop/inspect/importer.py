"""``echo-bench import``: Inspect eval logs as a new results file of
ours, one row per sample and epoch.

The rows are the ones a sweep writes (``store.records.Row``, through the same encoder), so every
reader of ours (report, merge, power, the page) takes them as it takes a sweep's. The mapping,
field by field, is in ``docs/inspect.md``. The file is new: an existing path (a running sweep's
file exists from its first moment) is refused, never appended to or replaced.
"""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pytest_echo_bench import __version__
from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.interop.inspect.log import NOANSWER, InspectLog, read_log, value_to_float
from pytest_echo_bench.providers.answer import CACHE_APART
from pytest_echo_bench.scoring.verdict import Verdict, judge
from pytest_echo_bench.spec.load import MAX_EPOCHS
from pytest_echo_bench.store.checks import count, figure
from pytest_echo_bench.store.files import UNJUDGED, encode_line, write_atomic
from pytest_echo_bench.store.meta import BenchmarkEntry, SelectionRecord, benchmark_entry
from pytest_echo_bench.store.records import Key, Meta, Row

WORKER = "inspect"  # the row's worker: no process of ours ran it


@dataclass
class Imported:
    meta: dict[str, Any]
    lines: list[bytes] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def arms_for(logs: Sequence[Path], arms: Sequence[str]) -> list[str | None]:
    """The arm of each log: none given (its model), one (every log's) or one per log, in order."""
    if not arms:
        return [None] * len(logs)
    if len(arms) == 1:
        return [arms[0]] * len(logs)
    if len(arms) != len(logs):
        raise ValueError(
            f"--arm given {len(arms)} times for {len(logs)} logs: give it once (every log's arm) "
            "or once per log, in the logs' order"
        )
    return list(arms)


@dataclass(frozen=True)
class Read:
    """What the meta line needs of a log once its samples are rows (its samples are not kept)."""

    log: InspectLog  # header, path and reader; its samples emptied
    ids: frozenset[str]
    epochs: int
    samples: int


def import_logs(
    paths: Sequence[Path], arms: Sequence[str] = (), scorer: str | None = None
) -> Imported:
    """The rows and meta line of ``paths``; refused whole (nothing written) on the first bad log or
    a key two logs both give (the same task and model twice: give each its own ``--arm``).

    One log is held at a time: each log's samples are made rows, then let go, before the next is
    read (a log is read whole: up to ``bounds.LOG_LIMIT``, and several times that in memory).
    """
    seen: dict[Key, Path] = {}
    out = Imported(meta={})
    done: list[Read] = []
    names: dict[str, list[str]] = {}  # benchmark -> its arms, in order
    items: dict[str, int] = {}
    for path, arm in zip(paths, arms_for(paths, arms), strict=True):
        log = read_log(path)
        for row in log_rows(log, arm, scorer, out.notes):
            key = (row.benchmark, row.task_id, row.arm, row.epoch or 1)
            if key in seen:
                raise StoreError(
                    f"{log.path} and {seen[key]} both have sample {row.task_id!r} epoch "
                    f"{key[3]} of "
                    f"task {row.benchmark!r} for arm {row.arm!r}: give each log its own --arm"
                )
            seen[key] = log.path
            out.lines.append(row.to_line())
            listed = names.setdefault(row.benchmark, [])
            if row.arm not in listed:
                listed.append(row.arm)
            items[row.benchmark] = items.get(row.benchmark, 0) + 1
        done.append(
            Read(log, frozenset(str(s["id"]) for s in log.samples), _epochs(log), len(log.samples))
        )
        log.samples = []
    if not out.lines:
        raise StoreError(
            f"no samples in {', '.join(map(str, paths))}: nothing to import (a log written with "
            "--no-log-samples has only its header)"
        )
    out.meta = import_meta(done, names, items)
    return out


def log_rows(log: InspectLog, arm: str | None, scorer: str | None, notes: list[str]) -> list[Row]:
    """One row per sample and epoch of ``log``."""
    spec = log.header["eval"]
    epochs = _epochs(log)
    name = scorer or _first_scorer(log)
    if scorer is not None and log.samples and not any(scorer in _scorers(s) for s in log.samples):
        found = sorted({n for s in log.samples for n in _scorers(s)})
        raise StoreError(f"{log.path}: no sample has a score from scorer {scorer!r} (its scorers: "
                         f"{', '.join(map(repr, found)) or 'none'})")
    if not log.samples:
        notes.append(
            f"echo-bench: warning: {log.path} has no samples (written with "
            "--no-log-samples?): nothing "
            "imported from it"
        )
    if log.header.get("status") not in ("success", None):
        notes.append(
            f"{log.path}: the eval's status is {log.header.get('status')!r:.40}: only its "
            "logged samples "
            "are imported"
        )
    return [
        _row(log, sample, arm or _exported_arm(spec) or str(spec["model"]), name, epochs)
        for sample in log.samples
    ]


def _exported_arm(spec: dict[str, Any]) -> str | None:
    """The arm a log ``export`` wrote names (its model is the arm's
    model): a round trip keeps the arm."""
    mine = (
        spec.get("metadata", {}).get("echo_bench")
        if isinstance(spec.get("metadata"), dict)
        else None
    )
    arm = mine.get("arm") if isinstance(mine, dict) else None
    return arm if isinstance(arm, str) and arm else None


def _scorers(sample: dict[str, Any]) -> list[str]:
    scores = sample.get("scores")
    return [str(name) for name in scores] if isinstance(scores, dict) else []


def _epochs(log: InspectLog) -> int:
    config = log.header["eval"].get("config")
    value = config.get("epochs") if isinstance(config, dict) else None
    # read_log checked each epoch
    top = max((int(s.get("epoch", 1)) for s in log.samples), default=1)
    if isinstance(value, int) and not isinstance(value, bool) and value > MAX_EPOCHS:
        raise StoreError(
            f"{log.path}: eval.config.epochs is {value if value < 10**12 else 'huge'}, over the "
            f"{MAX_EPOCHS} epochs a results file holds"
        )
    return max(value if isinstance(value, int) and value > 0 else 1, top)


def _first_scorer(log: InspectLog) -> str | None:
    """The log's first scorer, as Inspect lists them in its results; else the first a sample has."""
    results = log.header.get("results")
    scores = results.get("scores") if isinstance(results, dict) else None
    if (
        isinstance(scores, list)
        and scores
        and isinstance(scores[0], dict)
        and isinstance(scores[0].get("name"), str)
    ):
        return str(scores[0]["name"])
    for sample in log.samples:
        if isinstance(sample.get("scores"), dict) and sample["scores"]:
            return str(next(iter(sample["scores"])))
    return None


def _row(log: InspectLog, sample: dict[str, Any], arm: str, scorer: str | None, epochs: int) -> Row:
    spec = log.header["eval"]
    target = _target(sample.get("target"))
    output = _output(sample)
    verdict, inspect = _verdict(sample, scorer, target)
    inspect.update({"log": log.path.name, "input": _text(sample.get("input"))})
    if isinstance(sample.get("uuid"), str):
        inspect["sample_uuid"] = sample["uuid"]
    retries = len(sample["error_retries"]) if isinstance(sample.get("error_retries"), list) else 0
    metadata = sample.get("metadata")
    subtask = metadata.get("subtask") if isinstance(metadata, dict) else None
    when = str(spec.get("created") or "")
    return Row(
        task_id=str(sample["id"]),
        arm=arm,
        passed=verdict.passed,
        detail=verdict.detail,
        wall_seconds=figure(sample.get("total_time")),
        sub_calls=count(sample.get("turn_count")) or 1,
        benchmark=str(spec["task"]),
        status=verdict.status,
        output=output,
        answer=verdict.answer,
        target=target,
        attempts=1 + retries,
        started_at=str(sample.get("started_at") or when),
        finished_at=str(sample.get("completed_at") or when),
        worker=WORKER,
        run_id=str(spec.get("run_id") or ""),
        subtask=subtask if isinstance(subtask, str) else None,
        usage=_usage(sample),
        retries=retries,
        cost_usd=_cost(sample),
        extra={"inspect": inspect},
        epoch=int(sample.get("epoch", 1)) if epochs > 1 else None,
    )


def _verdict(
    sample: dict[str, Any], scorer: str | None, target: str
) -> tuple[Verdict, dict[str, Any]]:
    """The row's verdict from the sample's score: correct when it maps to 1 (C, 1, True, "yes"), no
    answer (N) unparseable, anything else wrong; Inspect's unscored score (NaN, a grader that
    gave no grade) unjudged; an errored sample, or one without a score, an error row."""
    error = sample.get("error")
    if isinstance(error, dict) and error:
        message = " ".join(str(error.get("message") or "the sample errored").split())
        return Verdict("error", None, f"error: {message[:500]}"), {"error": True}
    scores = sample.get("scores")
    score = scores.get(scorer) if scorer and isinstance(scores, dict) else None
    if not isinstance(score, dict) or "value" not in score:
        return Verdict("error", None, f"error: the sample has no score from scorer {scorer!r}"), {
            "scorer": scorer
        }
    value = score["value"]
    answer = score.get("answer") if isinstance(score.get("answer"), str) else None
    number = value_to_float(value)
    inspect = {
        "scorer": scorer,
        "value": _kept(value, number),
        "value_float": number if math.isfinite(number) else None,
    }
    if value == NOANSWER:
        return Verdict("unparseable", answer, "unparseable"), inspect
    if isinstance(value, float) and math.isnan(value):  # ``Score.unscored``: no grade, not wrong
        return Verdict(UNJUDGED, answer, _unscored(score)), inspect
    verdict = judge(answer if answer is not None else "", target, number == 1.0)
    if number not in (0.0, 1.0):
        # partial credit: not passed
        verdict = replace(verdict, detail=f"scored {number:g}, not 1: {verdict.detail}")
    return verdict, inspect


def _unscored(score: dict[str, Any]) -> str:
    """The detail of an unscored sample's row: Inspect's reason and explanation, bounded (an
    explanation of ours, exported, already opens with "unjudged:": said once)."""
    said = [str(score.get(k)).removeprefix("unjudged: ") for k in ("reason", "explanation")
            if score.get(k)]
    text = " ".join(": ".join(said or ["unscored"]).split())
    return f"unjudged: {text[:500]}"


def _kept(value: object, number: float) -> object:
    """A score's value as the row keeps it: a number no float holds (Inspect writes NaN and
    Infinity, which JSON has not; an integer like 10**400, ``number`` infinite) as its text, never
    as a figure; anything else as is."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, int) and not isinstance(value, bool) and math.isinf(number):
        # str() refuses an integer over 4,300 digits (about 14,000 bits);
        # JSON never gives one that long
        return (
            str(value)
            if value.bit_length() < 14_000
            else f"an integer of {value.bit_length():,} bits"
        )
    return value


def _target(value: object) -> str:
    """A sample's target: its text; a list of targets (any one is right) as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
        return value[0]
    return json.dumps(value, ensure_ascii=False)


def _text(value: object) -> str:
    """An input: its text, or a chat's messages joined, each message's
    content its text or its text parts."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        return ""
    parts = [
        _text(m.get("content")) if "role" in m else str(m.get("text") or "")
        for m in value
        if isinstance(m, dict)
    ]
    return "\n\n".join(p for p in parts if p)


def _output(sample: dict[str, Any]) -> str:
    output = sample.get("output")
    completion = output.get("completion") if isinstance(output, dict) else None
    return completion if isinstance(completion, str) else ""


# Inspect's ModelUsage -> our usage. Its input_tokens are the full-rate ones, cache reads and writes
# excluded (``model/_model_output.py``), as Anthropic's API counts them: our prompt_tokens is all
# input billed, so the cache's are added in (``providers.answer.CACHE_APART``).
USAGE_NAMES = {
    "input_tokens": "prompt_tokens",
    "output_tokens": "completion_tokens",
    "input_tokens_cache_read": "cache_read_tokens",
    "input_tokens_cache_write": "cache_write_tokens",
    "reasoning_tokens": "reasoning_tokens",
}


def _usage(sample: dict[str, Any]) -> dict[str, int] | None:
    """The sample's tokens over every model it called (``model_usage``), else its output's; unknown
    (None) when a figure is not a count: a sum missing one would be too low without saying so."""
    usages, output = sample.get("model_usage"), sample.get("output")
    found = list(usages.values()) if isinstance(usages, dict) and usages else [
        output.get("usage") if isinstance(output, dict) else None]
    total: dict[str, int] = {}
    for usage in found:
        if not isinstance(usage, dict):
            continue
        for theirs, ours in USAGE_NAMES.items():
            if usage.get(theirs) is None:
                continue
            tokens = count(usage[theirs])
            if tokens is None:
                return None
            total[ours] = total.get(ours, 0) + tokens
    if not total.keys() & {"prompt_tokens", "completion_tokens"}:
        return None
    extra = {
        k: v for k, v in total.items() if v and k not in ("prompt_tokens", "completion_tokens")
    }
    prompt = total.get("prompt_tokens", 0) + sum(extra.get(k, 0) for k in CACHE_APART)
    if count(prompt) is None:  # past the largest count a reader holds
        return None
    return {"prompt_tokens": prompt, "completion_tokens": total.get("completion_tokens", 0),
            **extra}


def _cost(sample: dict[str, Any]) -> float | None:
    """The sum of ``model_usage[*].total_cost``; unknown when one recorded is not a figure."""
    usages = sample.get("model_usage")
    recorded = (
        [u.get("total_cost") for u in usages.values() if isinstance(u, dict)]
        if isinstance(usages, dict)
        else []
    )
    costs = [figure(c) for c in recorded if c is not None]
    return None if not costs or None in costs else sum(c for c in costs if c is not None)


def import_meta(
    done: Sequence[Read], arms: dict[str, list[str]], items: dict[str, int]
) -> dict[str, Any]:
    """The meta line: each task a benchmark whose arms are the models (or
    ``--arm``s), and where it came from."""
    benchmarks = {
        name: _bench_info(
            name, [r for r in done if r.log.header["eval"]["task"] == name], items[name]
        )
        for name in arms
    }
    now = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    meta = Meta(
        benchmark="+".join(sorted(benchmarks)),
        benchmarks=benchmarks,
        spec_files=[],
        fingerprint=_digest(sorted((n, b.fingerprint) for n, b in benchmarks.items())),
        arms=arms,
        selection=SelectionRecord.of([], None, None, None),
        run_id=f"import-{uuid.uuid4().hex}",
        plugin_version=__version__,
        created_at=now,
        extra={"imported_from": [_source(r) for r in done]},
    )
    return meta.to_json()


def _bench_info(name: str, done: Sequence[Read], items: int) -> BenchmarkEntry:
    """A task's entry: its fingerprint is the task's name, version and sample ids, so logs of one
    task imported apart (one per model) merge, and a task changed in between does not."""
    ids = sorted(set().union(*(r.ids for r in done)))
    versions = sorted({str(r.log.header["eval"].get("task_version", 0)) for r in done})
    return benchmark_entry(_digest(["inspect", name, versions, ids]), spec="", items=items,
                           epochs=max(r.epochs for r in done))


def _source(read: Read) -> dict[str, Any]:
    log = read.log
    spec = log.header["eval"]
    packages = spec.get("packages") if isinstance(spec.get("packages"), dict) else {}
    return {
        "path": str(log.path),
        "task": spec["task"],
        "model": spec["model"],
        "eval_id": _str(spec.get("eval_id")),
        "status": _str(log.header.get("status")),
        "inspect_ai": _str(packages.get("inspect_ai")),
        "reader": log.reader,
        "samples": read.samples,
    }


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def write_new(out: Path, meta: dict[str, Any], lines: list[bytes]) -> None:
    """Write a results file that must not exist: never over another file, and so never over a
    sweep's (its owner creates the file at the run's start, and locks it)."""
    try:
        write_atomic(out, encode_line(meta) + b"".join(lines), durable=True, exclusive=True)
    except FileExistsError:
        raise StoreError(
            f"{out} exists: an import writes a new results file, never over one (a running sweep's "
            "included); choose another -o, or merge the files afterwards"
        ) from None
    except OSError as exc:
        raise StoreError(f"cannot write {out}: {exc.strerror or exc}") from exc
