"""What a resume must find in its results file before anything runs: a
fingerprint, and the specs' own."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_echo_bench.engine.fingerprint import accepted, changed_parts
from pytest_echo_bench.plugin.options import BenchOptions
from pytest_echo_bench.store.meta import BenchmarkEntry
from pytest_echo_bench.store.reader import parse_line
from pytest_echo_bench.store.records import Meta

if TYPE_CHECKING:
    from pytest_echo_bench.spec.load import Spec


def refuse_unfingerprinted(file: Path, path: str) -> None:
    """A resume checks that the file's rows answer the specs it runs (``check_resume``): a file that
    records no fingerprint (the parent harness's: no meta line, or one without fingerprints) cannot
    be checked, so it is refused before anything is changed, unless
    ``--bench-allow-mismatch`` says the rows answer these specs (as for a fingerprint that
    differs). Every other reader reads it as it is."""
    try:
        with open(file, "rb") as f:
            first = f.readline().rstrip(b"\n")
    except OSError:
        return  # the full read that follows names the error
    record = parse_line(first, file, 1, strict=False)
    if record is None:
        return  # garbage on line 1: the full read refuses it naming the line
    if record.get("_meta") is not True:
        what = "has no meta line"
    elif record.get("fingerprint") or any(
        info.get("fingerprint") for info in (record.get("benchmarks") or {}).values()
    ):
        return
    else:
        what = "has a meta line that records no fingerprint"
    raise pytest.UsageError(
        f"--bench-resume {path}: the file {what}, as files of the harness this project grew "
        "from do, so nothing "
        "says which spec its rows answer and a resume could not check them against yours. "
        "Run the sweep into a new file "
        "(--bench-out NEW.jsonl), or pass --bench-allow-mismatch if you know they answer "
        "these specs; "
        "echo-bench report, merge, export, power and progress read this file as it is"
    )


def check_resume(
    opts: BenchOptions,
    found: Meta | None,
    fingerprints: dict[str, str],
    parts: dict[str, dict[str, str]] | None = None,
    specs: dict[str, Spec] | None = None,
) -> None:
    """Refuse a resume whose specs hold a benchmark the file lacks, or one whose fingerprint changed
    (naming the parts that changed). A fingerprint recorded before
    the endpoint left it is accepted."""
    recorded = found.benchmarks if found is not None else {}
    for name, fp in fingerprints.items():
        if recorded and name not in recorded and not opts.allow_mismatch:
            raise pytest.UsageError(
                f"--bench-resume {opts.resume}: benchmark {name!r} is not in this file, "
                "which holds "
                f"{', '.join(sorted(recorded))}; run it into a results file of its own, "
                "or pass --bench-allow-mismatch to append it anyway."
            )
        entry = recorded.get(name) or BenchmarkEntry()
        now = (parts or {}).get(name) or {}
        spec = (specs or {}).get(name)
        if not opts.allow_mismatch and _changed(entry.fingerprint, fp, now, spec):
            raise pytest.UsageError(
                f"--bench-resume {opts.resume}: benchmark {name!r} was recorded with fingerprint "
                f"{entry.fingerprint}, but the spec now gives {fp}: "
                f"{what_changed(entry.parts, now)}. "
                "Start a new results file, or pass --bench-allow-mismatch to append anyway."
            )


def _changed(old: str | None, fp: str, now: dict[str, str], spec: Spec | None) -> bool:
    """Whether the recorded fingerprint ``old`` (None or "": none) is not the spec's ``fp``, nor one
    it had when the endpoint was part of the fingerprint."""
    if not old or old == fp:
        return False
    return not (spec is not None and "dataset" in now and old in accepted(spec, now["dataset"]))


def what_changed(old: Any, new: dict[str, str]) -> str:
    """The parts that differ, in words; the file may record none (written before parts were)."""
    said = changed_parts(old, new) if isinstance(old, dict) and new else []
    return f"changed: {', '.join(said)}" if said else "the dataset, scorer or arms changed"
