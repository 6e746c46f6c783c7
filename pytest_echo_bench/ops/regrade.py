"""Re-scoring stored outputs with the current scorer: zero model calls."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pytest_echo_bench.datasets.example import Example, Loaded
from pytest_echo_bench.datasets.registry import load_benchmark
from pytest_echo_bench.engine.check import check_spec
from pytest_echo_bench.engine.fingerprint import combine, spec_fingerprint
from pytest_echo_bench.errors import EchoBenchError, SpecError
from pytest_echo_bench.scoring.registry import get_scorer
from pytest_echo_bench.spec.load import Spec
from pytest_echo_bench.store.files import encode_line, row_status
from pytest_echo_bench.store.reader import read_records


@dataclass
class Regraded:
    meta: dict[str, Any] | None
    lines: list[bytes] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    kept: int = 0  # rows with no output to grade (provider errors)


def find_specs(results: Path, meta: dict[str, Any] | None, given: Sequence[Path]) -> dict[str, Loaded]:
    """Specs by benchmark name: those given, else the meta line's, found from here or the file's folders."""
    paths = list(given) or [_locate(s, results) for s in (meta or {}).get("spec_files", [])]
    specs: dict[str, Loaded] = {}
    for path in paths:
        spec, examples = load_benchmark(path)
        check_spec(spec)
        specs[spec.benchmark] = (spec, examples)
    if not specs:
        raise SpecError(f"{results} names no spec; pass --spec SPEC")
    return specs


def _locate(name: str, results: Path) -> Path:
    for base in (Path.cwd(), *results.resolve().parents):
        if (base / name).is_file():
            return base / name
    raise SpecError(f"spec {name} (from the meta line of {results}) not found; pass --spec SPEC")


def regrade(results: Path, given: Sequence[Path] = ()) -> Regraded:
    meta, rows = read_records(results)
    specs = find_specs(results, meta, given)
    default = str((meta or {}).get("benchmark", ""))
    out = Regraded(_new_meta(meta, specs, results))
    indexes: dict[str, dict[str, Example]] = {}
    for record in rows:
        row, raw = record.data, record.raw
        loaded = specs.get(str(row.get("benchmark") or default)) or (next(iter(specs.values())) if len(specs) == 1 else None)
        if loaded is None:
            raise EchoBenchError(f"{results}: no spec for benchmark {row.get('benchmark')!r}; pass --spec")
        spec, examples = loaded
        by_id = indexes.setdefault(spec.benchmark, {ex.id: ex for ex in examples})
        if row_status(row) == "error" and not row.get("output"):
            out.kept += 1
            out.lines.append(raw)
            continue
        out.lines.append(_regrade_row(row, spec, _example(row, by_id), out.changes))
    return out


def _example(row: dict[str, Any], by_id: dict[str, Example]) -> Example:
    """The dataset's item (scorers such as humaneval need more than the target), else one from the row."""
    task_id = str(row["task_id"])
    return by_id.get(task_id) or Example(task_id, "", str(row.get("target", "")))


def _regrade_row(row: dict[str, Any], spec: Spec, example: Example, changes: list[str]) -> bytes:
    scorer = get_scorer(spec.scorer)
    assert scorer is not None  # check_spec verified it
    verdict = scorer(str(row.get("output", "")), example, spec.scorer_options)
    before = row_status(row)
    if verdict.status != before:
        changes.append(f"{row['task_id']}[{row['arm']}]: {before} -> {verdict.status} "
                       f"(answer {row.get('answer')!r} -> {verdict.answer!r})")
    row.update(passed=verdict.passed, detail=verdict.detail, status=verdict.status, answer=verdict.answer)
    return encode_line(row)


def _new_meta(meta: dict[str, Any] | None, specs: dict[str, Loaded], source: Path) -> dict[str, Any] | None:
    """The meta line with the current scorer's fingerprints, so the regraded file resumes cleanly."""
    if meta is None:
        return None
    meta = json.loads(json.dumps(meta))
    fingerprints = {}
    for name, info in (meta.get("benchmarks") or {}).items():
        if name in specs:
            info["fingerprint"] = spec_fingerprint(*specs[name])
        fingerprints[name] = str(info.get("fingerprint"))
    meta["fingerprint"] = combine(fingerprints)
    meta["regraded_from"] = str(source)
    meta["regraded_at"] = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    return meta
