"""What the terminal says of a run's batches: on the progress line, each open batch's state (as
its process last saw it), and after a stop the ones still open on the provider, read from the
batch journal (``store.batchlog``, every process's), and what the resume will do with each."""

from __future__ import annotations

import time
from pathlib import Path

from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.store.batchlog import BatchState, Submission, read_journal, read_states

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
    seen = {s.batch_id: s for s in read_states(results)}
    lines += [f"  {_said(sub, seen)}" for sub in open_[:MAX_NAMED]]
    if len(open_) > MAX_NAMED:
        lines.append(f"  ... and {len(open_) - MAX_NAMED} more (in {results}.batches)")
    return lines


def progress_part(results: str | Path) -> str:
    """The progress line's part on the batches open now ("" when none)."""
    states = read_states(results)
    if not states:
        return ""
    now = time.time()
    shown = "; ".join(s.line(now) for s in states[:3])
    more = f"; {len(states) - 3} more" if len(states) > 3 else ""
    return f"batches {shown}{more}"


def _said(sub: Submission, seen: dict[str, BatchState]) -> str:
    held = f"{len(sub.open_ids)} request(s) of {sub.benchmark}/{sub.arm}"
    if sub.batch_ids is None:
        return (f"{held}: submitted, the provider's answer unknown; the resume looks the batch up "
                "before sending anything")
    states = [seen[b].state.replace("_", " ") for b in sub.batch_ids if b in seen]
    last = f" (last seen: {', '.join(states)})" if states else ""
    return f"{', '.join(sub.batch_ids) or 'no batch'}: {held}{last}"
