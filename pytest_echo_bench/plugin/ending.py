"""The line a run appends to its results file as it ends (``store.files.end_line``): how the sweep
ended travels with the rows, so a copy or a merge of the file still knows it stopped early."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_echo_bench.engine.outcome import utcnow
from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.plugin.context import RunContext
from pytest_echo_bench.results.ending import Collection, before_resume
from pytest_echo_bench.store.files import end_line, read_json, stop_path
from pytest_echo_bench.store.writer import ResultsWriter


def record_end(ctx: RunContext, stopped: str, pytest_stop: str | bool, ran: int) -> str | None:
    """Append the end line after a stop (ours, ``stopped``; or pytest's, ``--maxfail``, ``-x``),
    and after a resume that ran items of a file that had stopped (its stop is over); the error's
    text when the file refuses it."""
    path = Path(ctx.results)
    stop = stopped or (f"pytest: {pytest_stop}" if pytest_stop else "")
    if not path.is_file() or path.stat().st_size == 0:
        return None
    # The whole file before this run, not its last bytes: a killed resume may
    # have appended rows after the stop.
    before = before_resume(path, ctx.resume_upto) if ctx.resume_upto is not None else Collection()
    if not stop and not (ctx.resume_upto is not None and ran > 0 and before.early):
        return None
    writer = ResultsWriter(path, identity=ctx.results_id)
    try:
        # A stop when decided stays on the file's record: its fixed-n figures are never valid again.
        marker = _stop_record(path, stopped, stop) or None
        writer.append(end_line(ctx.run_id, utcnow(), marker, before.decided_text))
    except StoreError as exc:
        return str(exc)
    finally:
        writer.close()
    return None


def _stop_record(path: Path, stopped: str, stop: str) -> dict[str, Any]:
    """The stop the end line records: our stop marker's record (without the path it names), or
    pytest's stop (or a marker the directory refused) as the run says it; {} when it ran to the
    end."""
    found = read_json(stop_path(path)) if stopped else {}
    marker = {k: v for k, v in found.items() if k != "results"}
    if stop and not marker:
        reason, _, message = stop.partition(":")
        marker = {"reason": reason, "message": message.strip()}
    return marker
