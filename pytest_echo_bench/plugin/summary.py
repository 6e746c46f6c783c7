"""The end-of-run terminal section, "echo-bench summary": the per-arm table, what did not run
or complete, the gates, the budget, the decide figures, the limiters' decisions with ``-v``, the
results file, and after an early stop the command that resumes it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pytest_echo_bench.plugin.batches import left_lines
from pytest_echo_bench.plugin.counts import Counts
from pytest_echo_bench.plugin.finish import Finish
from pytest_echo_bench.plugin.live import LiveRun, end_table
from pytest_echo_bench.store.files import NEEDS_FIXING
from pytest_echo_bench.store.safe_text import shown
from pytest_echo_bench.suites import isolation


def write_summary(tr: Any, finish: Finish, counts: Counts, live: LiveRun | None,
                  decided: Callable[[], list[str]], scores_code: bool) -> None:
    """The section, on the terminal reporter ``tr``; ``decided``: the decide watch's lines."""
    results = finish.ctx.results
    tr.section("echo-bench summary")
    # Names in the table come from specs, reasons and messages from providers: shown escaped.
    for line in end_table(Path(results), counts.not_completed, live.counted if live else None):
        tr.write_line(shown(line))
    for line in counts.end_lines():
        tr.write_line(line)
    _notes(tr, finish, counts, decided)
    if finish.config.get_verbosity() > 0 and live is not None and live.decisions:
        _decisions(tr, live.decisions)
    tr.write_line(f"results: {results}")
    if scores_code and isolation.machine().missing():
        tr.write_line(isolation.summary_line(), yellow=True)
    if finish.stopped:
        _resume(tr, finish)


def _notes(tr: Any, finish: Finish, counts: Counts, decided: Callable[[], list[str]]) -> None:
    """A resume that found nothing left, the gates, the budget and the decide figures."""
    if finish.ctx.resume_upto is not None and counts.to_run == 0 and not finish.stopped:
        results = finish.ctx.results
        tr.write_line(f"echo-bench: sweep complete: every selected item is recorded in {results}")
    for line in finish.gate_lines:
        tr.write_line(line, red="FAILED" in line, green="FAILED" not in line)
    if finish.budget.line:
        tr.write_line(finish.budget.line)
    for line in decided():
        tr.write_line(shown(line))


def _decisions(tr: Any, decisions: Iterable[str]) -> None:
    """The limiters' last decisions, from every process, in time order."""
    lines = list(decisions)
    tr.write_line(f"limiter decisions (the last {len(lines)}, all processes):")
    # Each process's arrive in turn with its items' reports: their UTC stamps put them in time order
    # (a stable sort on the stamp alone: a process's own order stands within one millisecond).
    for line in sorted(lines, key=lambda line: line.partition(" ")[0]):
        tr.write_line(f"  {line}")  # escaped by the worker that sent it (plugin.payload)


def _resume(tr: Any, finish: Finish) -> None:
    """Why the run stopped early, and the command that resumes it."""
    stopped = finish.stopped
    fix = stopped.split(":", 1)[0] in NEEDS_FIXING
    then = "fix that, then resume with" if fix else "resume with"
    said = shown(f"echo-bench: stopped early ({stopped}); {then}:", newlines=False)
    tr.write_line(said, bold=True, red=True)
    tr.write_line(f"  {finish.resume_command()}", bold=True)
    for line in left_lines(finish.ctx.results, finish.opts.batch_cancel):
        tr.write_line(shown(line), yellow=True)
