"""The prompts an export attaches to its samples: the datasets of the specs a results file was
recorded with (the meta line's ``spec_files``, or ``--spec``), checked to be the ones it answered.

Rows do not store the prompt, so a log's input comes from a dataset. A dataset changed since the
sweep would pair each stored output with a prompt its model never saw: a spec whose dataset
digest (the meta line's ``parts.dataset``) differs is refused, as regrade refuses it. A file
recorded before the parts existed is checked row by row instead: each row's target must be the
dataset's. Loading a spec here reads data only (its loader is one of ours, no conftest.py is
imported), so the meta line's paths are looked up under the current directory and then the
results file's own directories.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.datasets.prompts import prompter
from pytest_echo_bench.datasets.registry import load_benchmark
from pytest_echo_bench.engine.fingerprint import dataset_digest
from pytest_echo_bench.errors import EchoBenchError
from pytest_echo_bench.spec.load import Spec

# (benchmark, task_id) -> the item's input; (benchmark, task_id, arm) -> an arm's own prompt
Prompts = dict[tuple[str, ...], str]


class InputsError(EchoBenchError):
    """A spec's dataset is not the one the results file answered: its
    prompts would be other prompts."""


@dataclass
class Inputs:
    prompts: Prompts = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # (benchmark, arm) -> "provider/model"
    models: dict[tuple[str, str], str] = field(default_factory=dict)


def find_inputs(results: Path, meta: Mapping[str, Any], rows: Iterable[Mapping[str, Any]],
                given: Sequence[Path]) -> Inputs:
    """The prompts of the specs ``given``, else of the meta line's;
    each checked against the file."""
    out = Inputs()
    paths = list(given) or _recorded(results, meta, out.notes)
    benchmarks = meta.get("benchmarks")
    recorded: Mapping[str, Any] = benchmarks if isinstance(benchmarks, dict) else {}
    for path in paths:
        try:
            spec, examples = load_benchmark(path)
        except EchoBenchError as exc:
            if given:  # asked for by name: its error is the answer
                raise
            out.notes.append(
                f"echo-bench: note: spec {path} (from the meta line of {results}) cannot be loaded "
                f"({exc}): its samples' inputs are left empty; pass --spec SPEC"
            )
            continue
        info = recorded.get(spec.benchmark)
        if not isinstance(info, dict):
            out.notes.append(
                f"echo-bench: note: {path} is benchmark {spec.benchmark!r}, which {results} "
                "does not "
                "record: its prompts are not used"
            )
            continue
        _check(results, path, spec.benchmark, info, examples, rows)
        out.prompts.update({(spec.benchmark, ex.id): ex.input for ex in examples})
        _own_prompts(spec, examples, out)
        out.models.update(
            {
                (spec.benchmark, name): f"{arm.provider}/{model}"
                for name, arm in spec.arms.items()
                if isinstance(model := arm.options.get("model"), str) and model
            }
        )
    return out


def prompt_of(prompts: Prompts, benchmark: str, task_id: str, arm: str) -> str | None:
    """What ``arm`` was sent for the item: its own prompt (``prompt:``,
    ``fewshot:``), else the item's input."""
    return prompts.get((benchmark, task_id, arm), prompts.get((benchmark, task_id)))


def _own_prompts(spec: Spec, examples: list[Example], out: Inputs) -> None:
    """The prompts of the arms with one of their own (the arms' part of the
    fingerprint covers their templates)."""
    for arm in spec.arms:
        try:
            made = prompter(spec, arm, examples)
        # its few-shot file gone since: said, and the item's input attached
        except EchoBenchError as exc:
            out.notes.append(
                f"echo-bench: note: arm {arm!r} of {spec.path}: its prompt cannot be "
                f"rendered ({exc}): "
                "its samples' inputs are the items' own"
            )
            continue
        if made is not None:
            out.prompts.update({(spec.benchmark, ex.id, arm): made.render(ex) for ex in examples})


def _recorded(results: Path, meta: Mapping[str, Any], notes: list[str]) -> list[Path]:
    """The meta line's spec files that can be found; a note for each that
    cannot (its inputs stay empty)."""
    names = meta.get("spec_files")
    found = []
    for name in names if isinstance(names, list) else []:
        path = _locate(str(name), results)
        if path is None:
            notes.append(
                f"echo-bench: note: spec {name} (from the meta line of {results}) is not under "
                f"{Path.cwd()} nor beside the file: its samples' inputs are left empty; pass "
                "--spec SPEC"
            )
        else:
            found.append(path)
    return found


def _locate(name: str, results: Path) -> Path | None:
    for base in (Path.cwd(), *results.resolve().parents):
        if (base / name).is_file():
            return base / name
    return None


def _check(
    results: Path,
    path: Path,
    benchmark: str,
    info: Mapping[str, Any],
    examples: list[Example],
    rows: Iterable[Mapping[str, Any]],
) -> None:
    parts = info.get("parts")
    recorded = parts.get("dataset") if isinstance(parts, dict) else None
    if recorded is not None:
        now = dataset_digest(examples)
        if recorded != now:
            raise InputsError(
                f"{results}: benchmark {benchmark!r}: the dataset of {path} differs from the "
                "file's "
                f"(dataset {recorded} in the file, {now} now): its prompts are not the ones "
                "the stored "
                "outputs answer. Pass --spec with the spec the file was recorded with."
            )
        return
    targets = {ex.id: ex.target for ex in examples}
    for row in rows:
        if row.get("benchmark", benchmark) != benchmark or "target" not in row:
            continue
        task = str(row.get("task_id"))
        if targets.get(task) != str(row["target"]):
            raise InputsError(
                f"{results}: task {task!r} of benchmark {benchmark!r} was answered for target "
                f"{row['target']!r}, but {path} gives {targets.get(task)!r}: its prompts are "
                "not the "
                "ones the stored outputs answer. Pass --spec with the spec the file was "
                "recorded with."
            )
