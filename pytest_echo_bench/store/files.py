"""The conventions of a results file, each in one place: the side files beside it, how a line is
encoded, how an older row's verdict is read, the atomic writer, and the stop marker.

``RUN.jsonl`` has up to seven companions: ``RUN.jsonl.owner`` (the run that owns the file, locked
for the whole run), ``RUN.jsonl.lock`` (the append lock), ``RUN.jsonl.torn`` (torn tails cut off by
a repair), ``RUN.jsonl.stop.json`` (why a run stopped early), ``RUN.jsonl.lost`` (an xdist worker
of the run was lost: items may come back already recorded), ``RUN.jsonl.summary.json`` (the
live per-arm summary) and ``RUN.jsonl.budget`` (with ``--bench-budget-usd``: the spend ledger every
process of the run shares, under a lock of its own).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_echo_bench.store import meta

# A row's verdict. ``unjudged``: the output is stored but a judge model gave it no grade (the
# judge failed, or its reply held none, or judging was deferred): never a wrong answer.
UNJUDGED = "unjudged"
STATUSES = ("correct", "wrong", "unparseable", "error", UNJUDGED)
# The statuses of a row that holds no grade: left out of every pass rate and paired comparison,
# counted apart, and run again by a ``--bench-retry-errors`` resume.
UNGRADED = frozenset({"error", "unjudged"})

RESULTS_DIR = "bench_results"  # under the rootdir: results files by default, and the response cache
CACHE_FILE = "cache.sqlite"
CACHE_DIR = "cache"  # bench_results/cache/: the response cache, the one part a backup may skip
# The Cache Directory Tagging Specification's signature
# (https://bford.info/cachedir/), as pytest writes it.
CACHEDIR_TAG = (
    b"Signature: 8a477f597d28d172789f06886806bc55\n"
    b"# This file is a cache directory tag created by pytest-echo-bench.\n"
    b"# For information about cache directory tags, "
    b"see:\n#\thttps://bford.info/cachedir/spec.html\n"
)
GITIGNORE = b"# Created by pytest-echo-bench automatically.\n*\n"


def results_dir(rootdir: Path, create: bool) -> Path:
    """``rootdir/bench_results``; with ``create``, made now if missing, with a ``.gitignore`` of
    ``*`` as pytest makes its cache directory, but with no ``CACHEDIR.TAG``: it holds results, which
    backup tools that skip tagged directories (tar, borg, restic ``--exclude-caches``) must keep.

    Only a directory made here gets it: one that exists may be a user's, committed on purpose.
    Best effort: a directory that refuses it is reported, if at all, by the first append.
    """
    path = rootdir / RESULTS_DIR
    if not create or path.exists():
        return path
    with contextlib.suppress(FileExistsError, OSError):
        path.mkdir(parents=True)
        (path / ".gitignore").write_bytes(GITIGNORE)
    return path


def default_cache(base: Path, create: bool) -> Path:
    """The default response cache under ``base`` (the results directory):
    ``cache/cache.sqlite``, in a directory of its own tagged ``CACHEDIR.TAG`` (it can be
    rebuilt, at a price; the results cannot).

    A ``cache.sqlite`` right in ``base`` (where earlier versions kept it) stays in use: its answers
    were paid for.
    """
    legacy = base / CACHE_FILE
    if legacy.exists():
        return legacy
    path = base / CACHE_DIR
    if create and not path.exists():
        with contextlib.suppress(FileExistsError, OSError):
            path.mkdir(parents=True)
            (path / "CACHEDIR.TAG").write_bytes(CACHEDIR_TAG)
    return path / CACHE_FILE


def owner_path(results: str | Path) -> Path:
    return Path(f"{results}.owner")


def lost_path(results: str | Path) -> Path:
    return Path(f"{results}.lost")


def lock_path(results: str | Path) -> Path:
    return Path(f"{results}.lock")


def torn_path(results: str | Path) -> Path:
    return Path(f"{results}.torn")


def stop_path(results: str | Path) -> Path:
    return Path(f"{results}.stop.json")


def budget_path(results: str | Path) -> Path:
    return Path(f"{results}.budget")


def batches_path(results: str | Path) -> Path:
    """The batch journal (``store.batchlog``): what this run submitted to providers' batch APIs."""
    return Path(f"{results}.batches")


def batch_states_path(results: str | Path, worker: str) -> Path:
    """What one process last saw of its open batches (``store.batchlog.write_states``)."""
    return Path(f"{results}.batches.{worker}.json")


def summary_path(results: str | Path) -> Path:
    return Path(f"{results}.summary.json")


def encode_line(record: Mapping[str, Any]) -> bytes:
    """One JSONL line. ``ensure_ascii`` keeps every line pure ASCII: no encoding surprises for odd
    model output, and the fast reader (``keyscan``) takes the fast path for every such chunk."""
    return (json.dumps(record, ensure_ascii=True, separators=(",", ":")) + "\n").encode("ascii")


def row_status(row: Mapping[str, Any]) -> str:
    """A row's verdict: its ``status``, or for rows of the older six-field format, what ``passed``
    and ``detail`` say. The one rule every reader uses (report, page, end table, regrade)."""
    status = row.get("status")
    if status in STATUSES:
        return str(status)
    return legacy_status(row.get("passed"), row.get("detail"))


def legacy_status(passed: object, detail: object) -> str:
    """Rows written before ``status`` existed carry only the scorer's detail string."""
    text = detail if isinstance(detail, str) else ""
    if passed is True or text == "passed":
        return "correct"
    if text == "unparseable":
        return "unparseable"
    return "error" if text.startswith("error") else "wrong"


def write_atomic(
    path: Path, data: bytes | Iterable[bytes], *, durable: bool = False, exclusive: bool = False
) -> None:
    """Write ``data`` (bytes, or pieces of bytes written as they come) to a temporary file beside
    ``path``, then move it into place: readers see the whole file or none of it. ``durable``
    fsyncs first (a results file); ``exclusive`` leaves an existing ``path`` alone and raises
    FileExistsError (the first stop marker wins)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            for piece in [data] if isinstance(data, bytes) else data:
                f.write(piece)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; these files are meant to be read by others
        if exclusive:
            os.link(tmp, path)  # fails if another process got there first
        else:
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


# A stop that is not a failure: every comparison the run was asked to decide is decided (exit 0).
DECIDED = meta.DECIDED

# Stops that resuming as things are would only repeat: a person must fix something first.
NEEDS_FIXING = frozenset({"arm-unavailable", "local-error", "store-error"})


@dataclass(frozen=True)
class StopReason:
    """Why a run stopped early: ``reason`` is exhausted, incomplete, interrupted, worker-lost (time
    or a resume fixes these), decided (done early, on purpose), or arm-unavailable, local-error,
    store-error (a person must fix these first)."""

    reason: str
    message: str = ""

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}".strip().rstrip(":")


def write_stop(file: str | Path, stop: StopReason, **details: Any) -> None:
    """Write the stop marker of results ``file`` atomically; the first reason wins. A directory that
    refuses it is not an error here: the exit status and the message still say why."""
    record = {"reason": stop.reason, "message": stop.message, **details}
    with contextlib.suppress(OSError):  # FileExistsError included: another process was first
        write_atomic(
            stop_path(file), (json.dumps(record, indent=1) + "\n").encode("utf-8"), exclusive=True
        )


def read_stop(results: str | Path) -> StopReason | None:
    """The stop marker's reason, or None when the run has not stopped early. A damaged marker is
    a stop all the same."""
    marker = stop_path(results)
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError):
        return StopReason("stopped", f"see {marker.name}")
    if not isinstance(data, dict):
        return StopReason("stopped", f"see {marker.name}")
    return StopReason(str(data.get("reason") or "stopped"), str(data.get("message") or ""))


def read_json(path: Path) -> dict[str, Any]:
    """A small JSON side file (the summary), or {} when it is missing or damaged."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


# The results file's own record of how a run ended: a meta line after the first, which every
# reader skips (``store.reader``, ``keyscan``), so older readers, resume and merge accept it. The
# marker beside the file is lost when the file is copied; this line travels with the rows.
RUN_END = "run_end"


def end_line(run_id: str, at: str, stopped: Mapping[str, Any] | None, decided: str = "") -> bytes:
    """The line a run appends as it ends: ``stopped`` is its stop marker's record, None
    when it ran to the end; ``decided``, where an earlier run of the file (or a part merged
    into it) stopped when decided: carried from end line to end line, so the file never
    forgets it (``results.ending``)."""
    record = meta.RunEnd(run_id, at, stopped, decided).to_json()
    return encode_line({"_meta": True, RUN_END: record})


# read_end reads the file backwards this much at a time: a million rows are not held
END_CHUNK = 1 << 18
END_CANDIDATES = 1000  # bounded: rows whose extra has the same key are rare


def read_end(
    path: Path, upto: int | None = None, window: int | None = None
) -> tuple[bool, dict[str, Any] | None]:
    """(whether the file records how its last run ended, that run's stop record or None).

    The last such line wins: a resume that ran to the end follows the stop it resumed from. Found
    by searching the bytes from the end (``"run_end"`` with bare quotes is a key, never inside a
    JSON string), a chunk at a time; a row's ``extra`` may have such a key too, so the line must be
    a meta line. ``upto`` and ``window``: only the ``window`` bytes before byte ``upto`` (a resume's
    start: a stop is the last line its run wrote).
    """
    record = read_end_record(path, upto, window)
    stopped = record.get("stopped") if record is not None else None
    return record is not None, stopped if isinstance(stopped, dict) else None


def read_end_record(
    path: Path, upto: int | None = None, window: int | None = None
) -> dict[str, Any] | None:
    """The last end line's record (``run_id``, ``at``, ``stopped``, ``decided``), as
    ``read_end`` finds it; None: none."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size if upto is None else upto
            first = max(0, size - window) if window is not None else 0
            return _find_end(f, first, size)
    except OSError:
        return None


def _find_end(f: Any, first: int, size: int) -> dict[str, Any] | None:
    """The last end line of bytes [first, size) of ``f``: each chunk searched in its whole lines
    only, the part of a line it cuts carried to the next chunk back.

    Linear in the bytes read: a line longer than a chunk is kept as its pieces and joined once, when
    its start is found. Joining it to each new chunk and searching the whole for a newline made a
    128 MB last line cost about a minute (quadratic in its length).
    """
    key = b'"' + RUN_END.encode() + b'"'
    end, tried = size, 0
    # the pieces of the line cut at the last chunk's start, last piece first
    carried: list[bytes] = []
    while end > first and tried < END_CANDIDATES:
        start = max(first, end - END_CHUNK)
        f.seek(start)
        chunk = f.read(end - start)
        end = start
        # in the new bytes only: the carried ones end the line cut before
        newline = chunk.find(b"\n")
        if start > first and newline < 0:  # one line longer than the chunk: read on back
            carried.append(chunk)
            continue
        # no copy of the chunk when no line was cut
        data = b"".join([chunk, *reversed(carried)]) if carried else chunk
        cut = 0 if start == first else newline + 1
        carried = [chunk[:cut]] if cut else []
        at_end = len(data)
        # bounds, not slices: a chunk is searched without a copy of it
        while tried < END_CANDIDATES:
            at = data.rfind(key, cut, at_end)
            if at < 0:
                break
            tried += 1
            begin = max(cut, data.rfind(b"\n", cut, at) + 1)
            stop = data.find(b"\n", at)
            try:
                record = json.loads(data[begin:stop if stop >= 0 else len(data)])
            except (ValueError, RecursionError):
                record = None
            if (
                isinstance(record, dict)
                and record.get("_meta") is True
                and isinstance(record.get(RUN_END), dict)
            ):
                found: dict[str, Any] = record[RUN_END]
                return found
            at_end = begin
    return None
