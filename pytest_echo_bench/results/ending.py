"""How the sweep of a report's files ended, as the files record it: the one reading that the report,
its gates, a merge and a regrade take the stop from (``store.files.RUN_END``, or for a file written
before that line, the stop marker beside it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pytest_echo_bench.store.files import DECIDED, read_end_record, read_json, read_stop, stop_path
from pytest_echo_bench.store.meta import MERGED, RunEnd


@dataclass(frozen=True)
class Collection:
    """How a sweep ended: ``reason`` "" when it ran to the end."""

    # else a decided file's reason, or the first stopped file's ("merged": its parts')
    reason: str = ""
    message: str = ""
    # a decided stop's figures, as the run recorded them at the stop
    pairs: tuple[dict[str, Any], ...] = ()
    # a merged file: one of its parts stopped when decided (then, or in an earlier run)
    parts_decided: bool = False
    # Where an earlier run of the file stopped when decided, as its end lines carry it ("":
    # never): a resume that then stopped for another reason, or ran to the end, does not
    # make its fixed-n figures valid.
    decided_before: str = ""

    @property
    def early(self) -> bool:
        return bool(self.reason)

    @property
    def stop_text(self) -> str:
        """The stop as a shard file's part shows it: its reason (pytest's
        with its words, which are short)."""
        return (
            f"pytest: {self.message}" if self.reason == "pytest" and self.message else self.reason
        )

    @property
    def ever_decided(self) -> bool:
        """Whether the file, or a part merged into it, ever stopped when decided."""
        return self.reason == DECIDED or self.parts_decided or bool(self.decided_before)

    @property
    def merged_parts(self) -> str:
        """A merged file's parts that stopped early, when one stopped when decided
        (``Sequential.merged_parts``)."""
        return (self.message or self.decided_before or MERGED) if self.parts_decided else ""

    @property
    def earlier(self) -> str:
        """Where an earlier run of this file stopped when decided
        (``Sequential.earlier``); "" for a merged file's parts."""
        return "" if self.parts_decided else self.decided_before

    @property
    def decided_text(self) -> str:
        """What the next end line of this file carries (``store.files.end_line``'s ``decided``)."""
        if self.reason == DECIDED:
            return f"a run stopped when decided{' (' + self.message + ')' if self.message else ''}"[
                :500
            ]
        return self.decided_before or (
            "a part merged into it stopped when decided" if self.parts_decided else ""
        )

    @property
    def stop_reason(self) -> str | None:
        """The reason as ``analysis.decide.monitor.sequential`` takes it: None
        when the sweep ran to the end."""
        return self.reason or None


def collection(files: Sequence[Path]) -> Collection:
    """How the files' sweep ended: a file that stopped when decided wins (its decision chose
    when the rows stopped), else the first file that stopped early; every report format takes
    it from here. Whether any file (or part of one) ever stopped when decided is kept
    whatever the order of the files."""
    every = [one(path) for path in files]
    chosen = _chosen([c for c in every if c.early])
    before = next((c.decided_before for c in every if c.decided_before and not c.parts_decided), "")
    parts = next((c for c in every if c.parts_decided), None)
    # a merged file's decided part, beside another file's stop
    if parts is not None and not chosen.parts_decided:
        chosen = replace(chosen, parts_decided=True, message=chosen.message or parts.merged_parts)
    return replace(chosen, decided_before=chosen.decided_before or before)


def _chosen(found: Sequence[Collection]) -> Collection:
    """Of the files that stopped early, the one whose stop the sweep reports."""
    return next((c for c in found if c.reason == DECIDED), found[0] if found else Collection())


def one(path: Path) -> Collection:
    """How one file ended: its last end line, else (a file written before
    the end line) its stop marker."""
    record = read_end_record(path)
    if record is not None:
        return _ended(RunEnd.from_json(record))
    stop = read_stop(path)
    if stop is None:
        return Collection()
    marker = {**read_json(stop_path(path)), "reason": stop.reason, "message": stop.message}
    return _ended(RunEnd("", "", marker))


def before_resume(path: Path, upto: int) -> Collection:
    """How the file ended before a resume that began at byte ``upto``: its last end line there (the
    stop marker beside it is this run's own by now)."""
    record = read_end_record(path, upto)
    return _ended(RunEnd.from_json(record) if record is not None else RunEnd("", ""))


def _ended(end: RunEnd) -> Collection:
    stop, decided = end.stop, end.decided
    if stop is None:
        return Collection(parts_decided=end.merged and bool(decided), decided_before=decided)
    parts_decided = stop.parts_decided or (end.merged and bool(decided))
    return Collection(stop.reason, stop.message, stop.pairs, parts_decided, decided)
