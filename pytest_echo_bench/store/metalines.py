"""Meta lines after the first: which a results file may hold, and which make it two files in one.

Line 1 says which sweep the rows answer to. A later meta line is one of three things:

- **a run's end line** (``files.RUN_END``): how the run ended, appended by the run itself, by
  merge and by regrade. Every reader skips it (``files.read_end`` reads it).
- **a copy of line 1's header**: the same fingerprints and the same shard, so the rows after it
  answer the same spec (``cat run.jsonl run.jsonl``, a sweep run again into a copy). Skipped: its
  rows are the sweep's rows, and the newest row of each key counts as anywhere in a file.
- **another sweep's header**: ``cat v1.jsonl v2.jsonl > both.jsonl``. Before this check its line
  was skipped and v2's rows replaced v1's under v1's fingerprint. Every reader refuses it, naming
  the file and line: ``echo-bench merge`` combines files and checks that they can be combined.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.store.files import RUN_END
from pytest_echo_bench.store.safe_text import shown

# the head of a file whose line 1 is a row (no meta line): no sweep it names
NO_HEAD: Mapping[str, Any] = {}


def is_end_line(record: Mapping[str, Any]) -> bool:
    """Whether a meta line is a run's end line (the test ``files.read_end`` applies)."""
    return isinstance(record.get(RUN_END), dict)


def sweep_of(meta: Mapping[str, Any]) -> tuple[object, object, object]:
    """What a header says its rows answer to: its fingerprint, each benchmark's, and its shard.

    Raw values, compared as they are: a field of the wrong type is simply another value, never a
    traceback (a later header's types are not checked: only whether it is line 1's).
    """
    benchmarks = meta.get("benchmarks")
    if isinstance(benchmarks, dict):
        benchmarks = {
            name: info.get("fingerprint") if isinstance(info, dict) else info
            for name, info in benchmarks.items()
        }
    selection = meta.get("selection")
    shard = selection.get("shard", "") if isinstance(selection, dict) else selection
    return meta.get("fingerprint"), benchmarks, shard or ""


def later_meta_problem(head: Mapping[str, Any], record: Mapping[str, Any]) -> str | None:
    """Why the meta line ``record``, after line 1, makes its file two files in one; None when it is
    a run's end line or repeats ``head`` (line 1's meta line; ``NO_HEAD`` when line 1 is a row)."""
    if is_end_line(record):
        return None
    advice = ("two results files joined into one (cat a b > c)? Split the file before this line, "
              "or combine the files with: echo-bench merge A B -o OUT")
    if head is NO_HEAD:
        return f"a meta line after rows of a file whose line 1 is no meta line: {advice}"
    first, later = sweep_of(head), sweep_of(record)
    if first[:2] != later[:2]:
        # the benchmarks' fingerprints differ under one fingerprint
        which = 0 if first[0] != later[0] else 1
        name = "fingerprint" if which == 0 else "benchmarks' fingerprints"
        return (f"a second meta line, of another sweep ({name} {_value(later[which])}, "
                f"line 1 has {_value(first[which])}): {advice}")
    if first[2] != later[2]:
        return (f"a second meta line, of another shard of the sweep (shard {_value(later[2])}, "
                f"line 1 has {_value(first[2])}): {advice}")
    return None


def check_later_meta(
    head: Mapping[str, Any], record: Mapping[str, Any], path: Path, lineno: int
) -> None:
    """Refuse the meta line ``record`` at ``lineno`` when it heads another sweep's rows; ``head`` is
    line 1's meta line (``record`` itself at line 1, never refused here), or ``NO_HEAD``."""
    problem = later_meta_problem(head, record) if lineno != 1 else None
    if problem is not None:
        raise StoreError(f"{path}:{lineno}: {problem}")


def _value(value: object) -> str:
    return shown(repr(value)[:40]) if value is not None else "none"
