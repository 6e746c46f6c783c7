"""The shard a run (or an estimate of it) takes: ``K/N`` as written, or ``auto`` from the
environment of a Slurm job array task or a Kubernetes Indexed Job's pod.

Below ``plugin/`` so that ``echo-bench estimate --bench-shard auto`` (which never imports pytest)
resolves it as the run does. Errors are ``ValueError``; the plugin turns them into usage errors.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

MAX_SHARDS = 1_000_000  # far beyond any array or matrix (GitHub's is 256); bounds the number parsed
_DIGITS = re.compile(r"[0-9]{1,7}")  # ASCII only: int() would also take "٣", "1_0" and "+3"
# whole, but more digits than any count or index below MAX_SHARDS
_LONG = re.compile(r"0*[1-9][0-9]{7,}")
_SPACE = " \t\r\n"  # a value read from a file, a shell or a scheduler may carry a trailing newline

SLURM = ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_COUNT")
# Kubernetes gives the index, not the count
INDEXED = ("JOB_COMPLETION_INDEX", "ECHO_BENCH_SHARD_COUNT")
# What Slurm sets beside them: a range's step (not for a list,
# --array=0,3,5) and the highest task id.
SLURM_STEP, SLURM_MAX = "SLURM_ARRAY_TASK_STEP", "SLURM_ARRAY_TASK_MAX"
CONTIGUOUS = "a shard array must be contiguous (e.g. --array=0-3 or completions: 4)"


def whole_number(text: str) -> int | None:
    """A count or index as a shell or a scheduler writes it (surrounding
    whitespace allowed), else None."""
    stripped = text.strip(_SPACE)
    return int(stripped) if _DIGITS.fullmatch(stripped) else None


def k_of_n(text: str) -> tuple[int, int] | None:
    """``"K/N"`` with 1 <= K <= N <= MAX_SHARDS as (K, N); None for anything else."""
    head, sep, tail = text.partition("/")
    k, n = whole_number(head), whole_number(tail)
    if not sep or k is None or n is None or not 1 <= k <= n <= MAX_SHARDS:
        return None
    return k, n


def resolve_shard(text: str | None, environ: Mapping[str, str]) -> tuple[int, int] | None:
    """(K, N) from ``"K/N"`` or ``"auto"``; None when not given. An empty value is refused: it would
    run the whole sweep where a shard was meant (``--bench-shard=$UNSET_VARIABLE``)."""
    if text is None:
        return None
    if not text.strip(_SPACE):
        raise ValueError(
            "--bench-shard is empty: give K/N (e.g. 2/4) or auto, or leave it out to run the "
            "whole sweep"
        )
    if text.strip(_SPACE).lower() == "auto":
        return auto_shard(environ)
    parsed = k_of_n(text)
    if parsed is None:
        raise ValueError(
            f"--bench-shard must be K/N with 1 <= K <= N (e.g. 2/4) or auto, got {text!r}"
        )
    return parsed


def auto_shard(environ: Mapping[str, str]) -> tuple[int, int]:
    """(K, N) from a Slurm array task (index ``SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN``, so
    ``--array=1-4`` works like ``0-3``) or an Indexed Job's pod
    (``JOB_COMPLETION_INDEX``, 0-based)."""
    names = _family(environ)
    values = _numbers(environ, names)
    if names == SLURM:
        _refuse_gaps(values)
    index = values[SLURM[0]] - values[SLURM[1]] if names == SLURM else values[INDEXED[0]]
    count = values[names[-1]]
    if count > MAX_SHARDS:
        raise ValueError(
            f"--bench-shard auto: {names[-1]}={count} is beyond the {MAX_SHARDS:,} shards a "
            "sweep may have; "
            f"{CONTIGUOUS}"
        )
    if not 0 <= index < count:
        shown = ", ".join(f"{n}={values[n]}" for n in names)
        raise ValueError(
            f"--bench-shard auto: {shown} gives index {index}, outside 0..count-1; {CONTIGUOUS}"
        )
    return index + 1, count


def _numbers(environ: Mapping[str, str], names: tuple[str, ...]) -> dict[str, int]:
    """The scheduler's variables as whole numbers (Slurm's step and highest id too, when set); a
    ValueError naming any that is not one, or is larger than any array."""
    extra = [n for n in (SLURM_STEP, SLURM_MAX)
             if names == SLURM and environ.get(n, "").strip(_SPACE)]
    given = (*names, *extra)
    huge = [f"{n}={environ[n].strip(_SPACE)}" for n in given
            if _LONG.fullmatch(environ[n].strip(_SPACE))]
    if huge:  # a whole number, but no array or matrix is this large: a variable set by mistake
        raise ValueError(
            f"--bench-shard auto: {', '.join(huge)} is beyond the {MAX_SHARDS:,} shards a "
            f"sweep may have; {CONTIGUOUS}"
        )
    bad = [f"{n}={environ[n]!r}" for n in given if whole_number(environ[n]) is None]
    if bad:
        raise ValueError(f"--bench-shard auto: {', '.join(bad)} is not a whole number")
    return {n: whole_number(environ[n]) or 0 for n in given}


def _refuse_gaps(values: Mapping[str, int]) -> None:
    """A stepped range (``--array=0-7:2``) or a list (``--array=0,3,5,7``) leaves gaps between task
    ids: their indexes would not be 0..count-1, and only the tasks past the count would find out.
    Every task refuses it, from what Slurm tells each one alike."""
    step = values.get(SLURM_STEP, 1)
    if step != 1:
        raise ValueError(
            f"--bench-shard auto: {SLURM_STEP}={step}: a stepped array leaves gaps between "
            "task ids; "
            f"{CONTIGUOUS}"
        )
    top, low, count = values.get(SLURM_MAX), values[SLURM[1]], values[SLURM[2]]
    if top is not None and top - low + 1 != count:
        raise ValueError(
            f"--bench-shard auto: {SLURM[1]}={low}, {SLURM_MAX}={top} but "
            f"{SLURM[2]}={count}: the task "
            f"ids have gaps (a list such as --array=0,3,5,7); {CONTIGUOUS}"
        )


def _family(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The variables of the one scheduler whose index is set, all of them present;
    else a ValueError naming them."""
    present = [n for n in (*SLURM, *INDEXED) if environ.get(n, "").strip(_SPACE)]
    if SLURM[0] in present and INDEXED[0] in present:
        raise ValueError(
            f"--bench-shard auto: both {SLURM[0]} and {INDEXED[0]} are set, so it cannot "
            "tell which scheduler started this run; unset one, or give --bench-shard K/N"
        )
    names = SLURM if SLURM[0] in present else INDEXED if INDEXED[0] in present else None
    if names is None:
        raise ValueError(
            f"--bench-shard auto: neither a Slurm array task ({', '.join(SLURM)}) nor a "
            "Kubernetes Indexed Job "
            f"({', '.join(INDEXED)}) is in the environment (found: "
            f"{', '.join(present) or 'none of them'}); "
            "give --bench-shard K/N"
        )
    missing = [n for n in names if n not in present]
    if missing:
        raise ValueError(f"--bench-shard auto: found {names[0]} but not {', '.join(missing)}; "
                         f"a shard needs all of {', '.join(names)}")
    return names
