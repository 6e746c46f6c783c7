"""What a judging pass grades: the stored outputs of one or more results files, each file checked
against the judge spec as ``regrade`` checks one (its dataset and arms must be the ones the rows
came from), each row's item found in the spec's dataset.

A judging pass replaces one part of a file's provenance, the scorer and its judges, as a regrade
does; the checks are regrade's own (``results.regrade``), so the two refuse the same files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_echo_bench.budget import judged
from pytest_echo_bench.datasets.example import Example, Loaded
from pytest_echo_bench.datasets.registry import load_examples
from pytest_echo_bench.engine.check import check_spec
from pytest_echo_bench.engine.declared import declared
from pytest_echo_bench.errors import EchoBenchError
from pytest_echo_bench.results.merge import describe_epochs, merged_meta
from pytest_echo_bench.results.regrade import (
    Bench,
    bench_of,
    checked_bench,
    checked_example,
    import_conftests,
    new_meta,
    newest_rows,
    stamp,
)
from pytest_echo_bench.scoring.registry import takes_judges
from pytest_echo_bench.scoring.verdict import ERROR
from pytest_echo_bench.spec.load import load_spec
from pytest_echo_bench.store.reader import read_records
from pytest_echo_bench.store.records import Key, Meta, row_key
from pytest_echo_bench.store.rows import ReadRow, read_row

JUDGED_FROM = "judged_from"  # meta: the source files' run ids and fingerprints
JUDGE_FINGERPRINT = "judge_fingerprint"  # meta: per benchmark, the scorer part (judges included)
Pair = tuple[str, str, int]  # (benchmark, task_id, epoch): what every arm of an item answers


class JudgeError(EchoBenchError):
    """A judging pass cannot grade these files with this spec, or write into this output."""


@dataclass(frozen=True)
class Stored:
    """One source row: its key, the line as stored, the row as read, and its item."""

    key: Key
    data: dict[str, Any]
    row: ReadRow
    spec_path: str
    example: Example

    @property
    def carried(self) -> bool:
        """No output to judge (a provider's error row): carried over as it is."""
        return self.row.status == ERROR and not self.row.output


@dataclass
class Sources:
    """The source files' rows (the newest of each key, in file order) and what the output's meta
    line says of them."""

    files: list[Path] = field(default_factory=list)
    rows: list[Stored] = field(default_factory=list)
    meta: Meta | None = None
    # (benchmark, task_id, epoch) -> arm -> output: what ``answer_of`` gives a pairwise scorer
    answers: dict[Pair, dict[str, str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def load_judge_specs(paths: Sequence[Path]) -> dict[str, Loaded]:
    """The judge specs by benchmark, each with its dataset; every one must grade with a judge."""
    root = Path.cwd().resolve()
    specs: dict[str, Loaded] = {}
    for path in paths:
        import_conftests(path, root)  # the spec's own scorers and python arms register there
        spec = load_spec(path)
        examples = load_examples(spec)
        check_spec(spec)
        if not takes_judges(spec.scorer):
            raise JudgeError(f"{path}: scorer {spec.scorer!r} asks no judge; echo-bench regrade "
                             "scores stored outputs again with a scorer that needs none")
        if spec.benchmark in specs:
            raise JudgeError(f"{path}: benchmark {spec.benchmark!r} is given twice (also "
                             f"{specs[spec.benchmark][0].path}); pass one spec per benchmark")
        specs[spec.benchmark] = (spec, examples)
    return specs


def refuse_unpriced(specs: dict[str, Loaded]) -> None:
    """Under a budget every judge a scorer asks needs a worst case, before anything is sent (as a
    sweep's ``--bench-budget-usd`` refuses it): a JudgeError naming the judge and what it lacks."""
    for spec, _ in specs.values():
        plan = None if spec.budget_unpriced else judged.panel(spec, declared(spec))
        for name in plan.calls if plan is not None else ():
            why = judged.unbounded(spec, name, plan.judges[name])
            if why:
                raise JudgeError(
                    f"{spec.path}: judge {name!r} has no worst case, so --budget-usd cannot hold "
                    f"its calls before they are sent: {why}; or set budget_unpriced: allow in the "
                    "spec (its calls are then sent unreserved, and only what they report counts)")


def read_sources(paths: Sequence[Path], specs: dict[str, Loaded]) -> Sources:
    """Every source file read and checked; a refusal (JudgeError, or regrade's) before any row is
    judged, naming the file and line."""
    out = Sources(list(paths))
    metas: list[Meta | None] = []
    benches: dict[str, Bench] = {}
    seen: dict[Key, str] = {}
    provenance: list[dict[str, str]] = []
    for path in paths:
        meta, checked = _read_one(path, specs, out, seen)
        metas.append(meta)
        provenance.append({"file": str(path), "run_id": meta.run_id,
                           "fingerprint": meta.fingerprint})
        for name, bench in checked.items():
            first = benches.setdefault(name, bench)
            first.verified = first.verified and bench.verified
    base = metas[0] if len(metas) == 1 else merged_meta(metas, paths)
    judged = {JUDGED_FROM: provenance, JUDGE_FINGERPRINT: judge_fingerprint(benches),
              "judged_at": stamp()}
    out.meta = describe_epochs(new_meta(base, benches, judged), (s.key for s in out.rows))
    unverified = sorted(name for name, bench in benches.items() if not bench.verified)
    if unverified:
        out.notes.append(f"echo-bench judge: note: the source files record no fingerprint parts "
                         f"for {', '.join(map(repr, unverified))}: the arms could not be verified "
                         "(targets checked row by row)")
    return out


def judge_fingerprint(benches: dict[str, Bench]) -> dict[str, str]:
    """Per benchmark, the digest of its scorer part: the scorer, its options and its judges."""
    return {name: bench.parts["scorer"] for name, bench in sorted(benches.items())}


def _read_one(path: Path, specs: dict[str, Loaded], out: Sources,
              seen: dict[Key, str]) -> tuple[Meta, dict[str, Bench]]:
    line, records = read_records(path)
    if line is None:
        raise JudgeError(f"{path} has no meta line: a judging pass records the run id and "
                         "fingerprint of the rows it grades; judge a file a sweep wrote")
    meta = Meta.from_json(line, f"{path}:1")
    default = meta.benchmark
    benches = {name: checked_bench(path, name, loaded, meta.benchmarks.get(name))
               for name, loaded in specs.items()}
    for record in newest_rows(records, default):
        where = f"{path}:{record.lineno}"
        row = read_row(record.data, default)
        bench = bench_of(where, row.benchmark, benches, default)
        example = checked_example(where, row, bench)
        key = row_key(record.data, default)
        if key in seen:
            raise JudgeError(f"{where}: {key[1]!r}[{key[2]}] is recorded in {seen[key]} too; "
                             "merge the files first (echo-bench merge) and judge the merged file")
        seen[key] = where
        stored = Stored(key, record.data, row, str(bench.spec.path), example)
        out.rows.append(stored)
        if row.output is not None and not stored.carried:
            out.answers.setdefault((key[0], key[1], key[3]), {})[key[2]] = row.output
    return meta, benches
