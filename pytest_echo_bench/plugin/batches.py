"""What a stopped run says of its batches: the ones still open on the provider, read from the
batch journal (``store.batchlog``, every process's), and what the resume will do with each."""

from __future__ import annotations

from pathlib import Path

from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.store.batchlog import Submission, read_journal

MAX_NAMED = 10  # batches named one by one; the rest are counted


def left_lines(results: str | Path, cancelled: bool) -> list[str]:
    """One line per open batch (the first ``MAX_NAMED``), after a stop; none when none is open."""
    try:
        open_ = read_journal(results).open()
    except StoreError as exc:
        return [f"echo-bench: {exc}"]
    if not open_:
        return []
    how = ("cancelled on the stop: the resume reads what they ran and sends the rest again"
           if cancelled else
           "left running on the provider: the resume collects them and sends none of their "
           "requests again (--bench-batch-cancel cancels them on a stop)")
    lines = [f"echo-bench: {len(open_)} batch(es) {how}:"]
    lines += [f"  {_said(sub)}" for sub in open_[:MAX_NAMED]]
    if len(open_) > MAX_NAMED:
        lines.append(f"  ... and {len(open_) - MAX_NAMED} more (in {results}.batches)")
    return lines


def _said(sub: Submission) -> str:
    held = f"{len(sub.open_ids)} request(s) of {sub.benchmark}/{sub.arm}"
    if sub.batch_ids is None:
        return (f"{held}: submitted, the provider's answer unknown; the resume looks the batch up "
                "before sending anything")
    return f"{', '.join(sub.batch_ids) or 'no batch'}: {held}"
