"""Re-scoring stored outputs with the current scorer: zero model calls.

Regrade replaces one part of a results file's provenance, the scorer, and nothing else. The
stored outputs answer the dataset and came from the arms the file was recorded with, so a spec
whose dataset or arms differ cannot regrade them: the new file would mix old outputs with a
new fingerprint, and a resume would append another model's rows beside them.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pytest_echo_bench.datasets.example import Example, Loaded
from pytest_echo_bench.datasets.registry import load_examples
from pytest_echo_bench.engine.check import check_spec
from pytest_echo_bench.engine.fingerprint import (
    accepted,
    changed_parts,
    combine,
    fingerprint_parts,
    legacy_arms_digest,
    spec_fingerprint,
)
from pytest_echo_bench.engine.outcome import utcnow
from pytest_echo_bench.errors import EchoBenchError, SpecError
from pytest_echo_bench.results.ending import collection
from pytest_echo_bench.results.merge import describe_epochs
from pytest_echo_bench.scoring.registry import get_scorer, takes_judges
from pytest_echo_bench.scoring.verdict import SCORER_EXTRA, Verdict
from pytest_echo_bench.spec.load import Spec, load_spec
from pytest_echo_bench.store.files import encode_line, end_line
from pytest_echo_bench.store.meta import BenchmarkEntry
from pytest_echo_bench.store.reader import Record, read_records
from pytest_echo_bench.store.records import Meta, row_key
from pytest_echo_bench.store.rows import ReadRow, read_row

# The parts a regrade must find unchanged; the scorer is the one it replaces.
KEPT_PARTS = ("dataset", "arms")
_WHY = {"dataset": "its stored outputs answer other items or targets",
        "arms": "its stored outputs came from other models or arm settings"}


class RegradeError(EchoBenchError):
    """The current spec cannot regrade this file: its dataset or arms are
    not the ones the rows came from."""


@dataclass
class Regraded:
    meta: Meta | None
    lines: list[bytes] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    kept: int = 0  # rows with no output to grade (provider errors)
    notes: list[str] = field(default_factory=list)  # what could not be verified


@dataclass
class Bench:
    """One benchmark of the file, with the current spec that regrades it."""

    spec: Spec
    examples: dict[str, Example]
    parts: dict[str, str]
    fingerprint: str
    # the file's recorded parts (or fingerprint) prove the dataset and arms unchanged
    verified: bool
    rows: int = 0
    untargeted: int = 0  # rows recording no target, when there was nothing else to check them by


def find_specs(results: Path, meta: Meta | None, given: Sequence[Path],
               allow_outside: bool = False) -> dict[str, Loaded]:
    """Specs by benchmark name: those given, else the meta line's, under the current directory.

    Loading a spec imports the conftest.py files beside it (python arms and scorers), so a path
    the results file names is data, never a place to import from: it resolves against the
    current directory, and one outside it is refused unless ``allow_outside``.
    """
    root = Path.cwd().resolve()
    paths = list(given) or [
        _locate(s, results, root, allow_outside)
        for s in (meta.spec_files if meta is not None else [])
    ]
    specs: dict[str, Loaded] = {}
    for path in paths:
        import_conftests(path, root)
        # it calls nothing: an unset ${VAR} of an endpoint is no error
        spec = load_spec(path, calls=False)
        examples = load_examples(spec)
        check_spec(spec)
        if takes_judges(spec.scorer):  # regrading calls no model: a judge's grade would be forged
            raise RegradeError(f"{path}: scorer {spec.scorer!r} asks a judge model, and echo-bench "
                               "regrade calls none; run the sweep again to grade with the judge")
        specs[spec.benchmark] = (spec, examples)
    if not specs:
        raise SpecError(f"{results} names no spec; pass --spec SPEC")
    return specs


def import_conftests(spec: Path, rootdir: Path) -> None:
    """Import the conftest.py files pytest would for ``spec``, from the rootdir down to its folder.

    Python arms and scorers register themselves there (``@arm``, ``@scorer``); without them a
    regrade would find the spec's python arms missing (their source digest unknown, so the arms
    seemingly changed) and its own scorer unknown.
    """
    folder = spec.resolve().parent
    chain = [folder, *folder.parents]
    root = rootdir.resolve()
    dirs = list(reversed(chain[: chain.index(root) + 1])) if root in chain else [folder]
    for where in dirs:
        conftest = where / "conftest.py"
        name = f"_echo_bench_conftest_{abs(hash(str(conftest)))}"
        if conftest.is_file() and name not in sys.modules:
            if str(where) not in sys.path:
                # as pytest's default import mode does, for its own imports
                sys.path.insert(0, str(where))
            loader = importlib.util.spec_from_file_location(name, conftest)
            if loader is None or loader.loader is None:
                continue
            module = importlib.util.module_from_spec(loader)
            sys.modules[name] = module
            try:
                loader.loader.exec_module(module)
            except Exception as exc:  # a user's file: say which one, as pytest would
                raise SpecError(
                    f"{conftest}: cannot be imported: {type(exc).__name__}: {exc}"
                ) from exc


def _locate(name: str, results: Path, root: Path, allow_outside: bool) -> Path:
    """A spec the meta line of ``results`` names, under ``root`` (or,
    when allowed, anywhere it says)."""
    path = (root / name).resolve()
    if not path.is_relative_to(root) and not allow_outside:
        raise RegradeError(
            f"spec {name} (from the meta line of {results}) is outside the current directory "
            f"{root}: "
            "regrade imports the conftest.py files beside a spec, and never from a path a "
            "results file "
            "names; pass --spec SPEC, or --allow-outside-specs if you trust that path"
        )
    bases = [root, *results.resolve().parents] if allow_outside else [root]
    for base in bases:
        if (base / name).is_file():
            return base / name
    raise SpecError(
        f"spec {name} (from the meta line of {results}) not found under {root}; pass --spec SPEC"
    )


def regrade(results: Path, given: Sequence[Path] = (), allow_outside: bool = False) -> Regraded:
    line, rows = read_records(results)
    meta = Meta.from_json(line, f"{results}:1") if line is not None else None
    specs = find_specs(results, meta, given, allow_outside)
    recorded = meta.benchmarks if meta is not None else {}
    benches = {
        name: checked_bench(results, name, loaded, recorded.get(name))
        for name, loaded in specs.items()
    }
    out = Regraded(None)
    default = meta.benchmark if meta is not None else ""
    newest = newest_rows(rows, default)
    if len(newest) < len(rows):
        out.notes.append(
            f"echo-bench: {len(rows) - len(newest)} older row(s) of repeated items left out: "
            "the newest row of each item counts (and is regraded)"
        )
    for record in newest:
        # The benchmark the row names, if any: ``bench_of`` tells that from the meta line's.
        row = read_row(record.data, "")
        where = f"{results}:{record.lineno}"
        bench = bench_of(where, row.benchmark, benches, default)
        example = checked_example(where, row, bench)
        bench.rows += 1
        if row.status == "error" and not row.output:
            out.kept += 1
            out.lines.append(record.raw)
            continue
        out.lines.append(_regrade_row(record.data, row, bench.spec, example, out.changes))
    ended = collection([results])
    # the rows were collected as the original's were: it stopped early
    if ended.early or ended.ever_decided:
        # too (its decision's figures are not carried: the new grades decide
        # anew), or once stopped when decided
        stopped = {
            "reason": ended.reason,
            "message": ended.message,
            **({"parts_decided": True} if ended.parts_decided else {}),
        }
        out.lines.append(
            end_line("regraded", utcnow(), stopped if ended.early else None, ended.decided_text)
        )
    # The meta is written only once every row has passed its checks: a
    # refusal leaves nothing behind.
    out.meta = describe_epochs(
        new_meta(meta, benches, {"regraded_from": str(results), "regraded_at": stamp()}),
        (row_key(r.data, default) for r in newest)
    )
    out.notes.extend(_unverified_note(results, meta, benches))
    return out


def newest_rows(rows: list[Record], default: str) -> list[Record]:
    """The newest row of each (benchmark, task_id, arm, epoch), in file order."""
    last = {row_key(r.data, default): i for i, r in enumerate(rows)}
    if len(last) == len(rows):
        return rows
    keep = set(last.values())
    return [r for i, r in enumerate(rows) if i in keep]


def checked_bench(results: Path, name: str, loaded: Loaded,
                  recorded: BenchmarkEntry | None) -> Bench:
    """The current spec of one benchmark, checked against the parts the file recorded for it."""
    spec, examples = loaded
    parts, fingerprint = fingerprint_parts(spec, examples), spec_fingerprint(spec, examples)
    recorded = recorded or BenchmarkEntry()
    old_parts = recorded.parts
    if old_parts is not None:
        _refuse_changed_parts(results, name, spec, old_parts, parts)
        verified = True
    else:
        # Without parts only an unchanged whole fingerprint proves the
        # arms; a changed scorer hides them.
        verified = recorded.fingerprint in accepted(spec, parts["dataset"])
    return Bench(spec, {ex.id: ex for ex in examples}, parts, fingerprint, verified)


def _refuse_changed_parts(
    results: Path, name: str, spec: Spec, old: dict[str, Any], new: dict[str, str]
) -> None:
    # A file recorded when the endpoint was part of the arms' digest: that digest proves them too.
    changed = [part for part in KEPT_PARTS if old.get(part) != new[part]
               and not (part == "arms" and old.get(part) == legacy_arms_digest(spec))]
    if not changed:
        return
    what = " and the ".join(changed)
    verb = "differs" if changed == ["dataset"] else "differ"
    named = [said for said in changed_parts(old, new) if said != "the scorer"]
    digests = "; ".join(f"{part} {old.get(part)} in the file, {new[part]} now" for part in changed)
    raise RegradeError(
        f"{results}: benchmark {name!r}: the {what} of {spec.path} {verb} from the file's "
        f"({digests}; changed: "
        f"{', '.join(named)}): "
        f"{' and '.join(_WHY[part] for part in changed)}. Regrade replaces only the scorer: "
        "pass --spec with the spec "
        "the file was recorded with (its scorer changed as you want), or run a new sweep "
        "into a new results file."
    )


def bench_of(where: str, named: str, benches: dict[str, Bench], default: str) -> Bench:
    """The benchmark a row belongs to; a row naming none (older files) takes the only spec given."""
    bench = benches.get(named or default)
    if bench is None and not named and len(benches) == 1:
        bench = next(iter(benches.values()))
    if bench is None:
        raise RegradeError(f"{where}: no spec for benchmark {named or default!r} "
                           f"(given: {', '.join(sorted(benches))}); pass its spec with --spec")
    return bench


def checked_example(where: str, row: ReadRow, bench: Bench) -> Example:
    """The dataset's item the row answers, refusing a row the current
    dataset does not contain as recorded."""
    example = bench.examples.get(row.task_id)
    if example is None:
        raise RegradeError(f"{where}: task {row.task_id!r} is not in the dataset of "
                           f"{bench.spec.path}; "
                           "regrade with the spec the file was recorded with")
    if row.target is None:
        if not bench.verified:  # older six-field rows: nothing to compare, counted in the note
            bench.untargeted += 1
    elif row.target != example.target:
        raise RegradeError(f"{where}: task {row.task_id!r} was answered for target {row.target!r}, "
                           f"but the dataset of {bench.spec.path} now gives {example.target!r}; "
                           "regrade with the spec the file was recorded with, or run the changed "
                           "items again in a new results file")
    return example


def _regrade_row(data: dict[str, Any], row: ReadRow, spec: Spec, example: Example,
                 changes: list[str]) -> bytes:
    """The line of ``row`` (read from ``data``, the record as stored) graded again; every other
    field of ``data``, one this version does not know included, is written back as it was."""
    scorer = get_scorer(spec.scorer)
    assert scorer is not None  # check_spec verified it
    verdict = scorer(row.output or "", example, spec.scorer_options)
    if verdict.status != row.status:
        label = f"{row.task_id}[{row.arm}" + ("]" if row.epoch == 1 else f"-e{row.epoch}]")
        changes.append(f"{label}: {row.status} -> {verdict.status} "
                       f"(answer {row.answer!r} -> {verdict.answer!r})")
    return encode_line(regraded(data, row, verdict, example))


def regraded(data: dict[str, Any], row: ReadRow, verdict: Verdict,
             example: Example) -> dict[str, Any]:
    """``data`` (the stored line of ``row``) with ``verdict`` in place of its old one."""
    # The row shows the target it was scored against, so its detail and target agree; its extra
    # says what the new verdict says (a seeded random guess counted as one), as a sweep's row would.
    extra = {k: v for k, v in row.extra.items() if k not in SCORER_EXTRA} | verdict.extra
    data.update(passed=verdict.passed, detail=verdict.detail, status=verdict.status,
                answer=verdict.answer, target=example.target)
    if extra or "extra" in data:
        data.update(extra=extra)
    # The grade and judgments are the new verdict's: a judge's grade the new scorer did not give
    # (an unjudged row graded by text, a judged row regraded so) must not stay beside its status.
    # What the judges cost stays: those calls were made.
    data.pop("score", None)
    data.pop("judgments", None)
    if verdict.score is not None:
        data["score"] = verdict.score
    if verdict.judgments:
        data["judgments"] = [j.to_json() for j in verdict.judgments]
    return data


def stamp() -> str:
    """Now, to the second, as the meta line's provenance records it."""
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def new_meta(meta: Meta | None, benches: dict[str, Bench],
             provenance: dict[str, Any]) -> Meta | None:
    """The meta line with the current scorer in each regraded benchmark's provenance, and
    ``provenance`` (where its rows were graded from) added to it."""
    if meta is None:
        return None
    benchmarks = dict(meta.benchmarks)  # entries are frozen: ``meta`` stays as read
    for name, entry in benchmarks.items():
        bench = benches.get(name)
        if bench is not None and bench.verified:
            benchmarks[name] = replace(entry, parts=dict(bench.parts),
                                       fingerprint=bench.fingerprint)
        elif bench is not None:
            # The arms are unproven: a fingerprint no spec gives, so resume refuses
            # it until the user says (--bench-allow-mismatch) that the current arms
            # are the ones the rows came from.
            unproven = combine({"recorded": str(entry.fingerprint),
                                "regraded_scorer": bench.parts["scorer"]})
            benchmarks[name] = replace(entry, fingerprint=unproven)
    fingerprints = {name: str(entry.fingerprint) for name, entry in benchmarks.items()}
    return replace(meta, benchmarks=benchmarks, fingerprint=combine(fingerprints),
                   extra={**meta.extra, **provenance})


def _unverified_note(results: Path, meta: Meta | None, benches: dict[str, Bench]) -> list[str]:
    """One line naming the benchmarks whose arms the file gave no way to check."""
    names = [name for name, bench in sorted(benches.items()) if bench.rows and not bench.verified]
    if not names:
        return []
    untargeted = sum(benches[name].untargeted for name in names)
    unchecked = f"; {untargeted} rows record no target to check" if untargeted else ""
    source = "has no meta line" if meta is None else "records no fingerprint parts"
    after = "" if meta is None else "; resuming the new file needs --bench-allow-mismatch"
    return [
        f"echo-bench: note: {results} {source} for {', '.join(map(repr, names))}: the arms "
        "could not be verified "
        f"(targets checked row by row{unchecked}){after}"
    ]
