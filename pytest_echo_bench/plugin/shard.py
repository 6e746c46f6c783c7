"""Shards: a stable partition of items by a hash of (benchmark, task_id), so a shard holds every
arm and epoch of its items; ``auto`` takes K/N from a Slurm job array or a Kubernetes Indexed Job."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.ops.shards import SCHEME, k_of_n, part_of, whole_number
from pytest_echo_bench.store.partition import shard_of

SLURM = ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_COUNT")
INDEXED = ("JOB_COMPLETION_INDEX", "ECHO_BENCH_SHARD_COUNT")  # Kubernetes gives the index, not the count
_BLANK = " \t\r\n"  # a value set from a file or a command substitution may end in a newline


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based, as CI matrices count
    total: int

    def __str__(self) -> str:
        return f"{self.index}/{self.total}"

    def owns(self, key: tuple[str, str, str, int]) -> bool:
        return shard_of(key, self.total) == self.index  # the hash lives in store/: the estimate uses it too


def parse_shard(text: str | None, environ: Mapping[str, str] | None = None) -> Shard | None:
    """``"K/N"`` with 1 <= K <= N, or ``"auto"`` (from ``environ``); None when unset; UsageError otherwise."""
    if not text:
        return None
    if text.strip().lower() == "auto":
        return auto_shard(os.environ if environ is None else environ)
    parsed = k_of_n(text)
    if parsed is None:
        raise pytest.UsageError(f"--bench-shard must be K/N with 1 <= K <= N (e.g. 2/4) or auto, got {text!r}")
    return Shard(*parsed)


def auto_shard(environ: Mapping[str, str]) -> Shard:
    """K/N from a Slurm array task (index ``SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN``, so ``--array=1-4``
    works like ``0-3``) or an Indexed Job's pod (``JOB_COMPLETION_INDEX``, 0-based)."""
    names = _family(environ)
    bad = [f"{n}={environ[n]!r}" for n in names if whole_number(environ[n]) is None]
    if bad:
        raise pytest.UsageError(f"--bench-shard auto: {', '.join(bad)} is not a whole number")
    values = {n: whole_number(environ[n]) or 0 for n in names}
    index = values[SLURM[0]] - values[SLURM[1]] if names == SLURM else values[INDEXED[0]]
    count = values[names[-1]]
    if not 0 <= index < count:
        shown = ", ".join(f"{n}={values[n]}" for n in names)
        raise pytest.UsageError(f"--bench-shard auto: {shown} gives index {index}, outside 0..count-1; "
                                "a shard array must be contiguous (e.g. --array=0-3 or completions: 4)")
    return Shard(index + 1, count)


def _family(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The variables of the one scheduler whose index is set, all of them present; else a UsageError naming them."""
    present = [n for n in (*SLURM, *INDEXED) if environ.get(n, "").strip(_BLANK)]
    if SLURM[0] in present and INDEXED[0] in present:
        raise pytest.UsageError(f"--bench-shard auto: both {SLURM[0]} and {INDEXED[0]} are set, so it cannot "
                                "tell which scheduler started this run; unset one, or give --bench-shard K/N")
    names = SLURM if SLURM[0] in present else INDEXED if INDEXED[0] in present else None
    if names is None:
        raise pytest.UsageError(
            f"--bench-shard auto: neither a Slurm array task ({', '.join(SLURM)}) nor a Kubernetes Indexed Job "
            f"({', '.join(INDEXED)}) is in the environment (found: {', '.join(present) or 'none of them'}); "
            "give --bench-shard K/N")
    missing = [n for n in names if n not in present]
    if missing:
        raise pytest.UsageError(f"--bench-shard auto: found {names[0]} but not {', '.join(missing)}; "
                                f"a shard needs all of {', '.join(names)}")
    return names


def refuse_partial_gate(shard: str | None, gates: int, allowed: bool) -> None:
    """A gate judges the whole sweep: with a shard (given, or the one a resumed file records) it is
    refused before anything runs, unless the user says this shard alone is what to judge."""
    if shard and gates and not allowed:
        raise pytest.UsageError(f"--bench-gate with --bench-shard {shard}: a shard holds part of the sweep, and a "
                                "gate judges the whole; gate the merged shards (echo-bench report MERGED.jsonl --gate "
                                "RULE), or pass --bench-allow-partial to gate this shard alone")


def resumed_shard(meta: Mapping[str, Any] | None, given: Shard | None, path: str) -> str | None:
    """The shard a resume runs: the one the file records; a different one given is refused, and so is
    a shard file written with the old per-arm assignment (resuming it would mix two partitions)."""
    try:
        part = part_of(path, meta)
    except StoreError as exc:
        raise pytest.UsageError(f"--bench-resume: {exc}") from exc
    recorded = str(Shard(min(part.got), part.total)) if len(part.got) == 1 else None
    if part.total and len(part.got) != 1:
        raise pytest.UsageError(f"--bench-resume {path}: a merge of shards {', '.join(map(str, sorted(part.got)))} "
                                f"of {part.total}; resume each shard's own file (or run the missing ones), then merge again")
    if recorded and part.scheme != SCHEME:
        raise pytest.UsageError(
            f"--bench-resume {path}: shard {recorded} was written by an earlier version, which assigned each "
            "(task, arm) to a shard on its own; this version keeps an item's arms and epochs in one shard, so "
            "resuming would mix the two assignments. Finish it with the version that wrote it, or run this shard "
            "again into a new file (--bench-out NEW.jsonl) and merge the new files")
    if given is not None and str(given) != recorded:
        raise pytest.UsageError(f"--bench-resume {path}: the file holds {'shard ' + recorded if recorded else 'no shard'}"
                                f", but --bench-shard gives {given}; resume it with its own shard, or run {given} "
                                "into a new file")
    return recorded
