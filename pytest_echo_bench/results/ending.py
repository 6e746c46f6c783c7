"""How the sweep of a report's files ended, as the files record it: the one reading that the report,
its gates, a merge and a regrade take the stop from (``store.files.RUN_END``, or for a file written
before that line, the stop marker beside it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pytest_echo_bench.store.files import DECIDED, read_end_record, read_json, read_stop, stop_path

# the reason a merged file records when parts of it stopped early (``results.merge``)
MERGED = "merged"


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
    found = [c for c in every if c.early]
    chosen = next((c for c in found if c.reason == DECIDED), found[0] if found else Collection())
    before = next((c.decided_before for c in every if c.decided_before and not c.parts_decided), "")
    parts = next((c for c in every if c.parts_decided), None)
    # a merged file's decided part, beside another file's stop
    if parts is not None and not chosen.parts_decided:
        chosen = replace(chosen, parts_decided=True, message=chosen.message or parts.merged_parts)
    return replace(chosen, decided_before=chosen.decided_before or before)


def one(path: Path) -> Collection:
    """How one file ended: its last end line, else (a file written before
    the end line) its stop marker."""
    record = read_end_record(path)
    if record is None:
        stop = read_stop(path)
        record = (
            {
                "stopped": {
                    **read_json(stop_path(path)),
                    "reason": stop.reason,
                    "message": stop.message,
                }
            }
            if stop
            else {}
        )
    return _ended(record)


def before_resume(path: Path, upto: int) -> Collection:
    """How the file ended before a resume that began at byte ``upto``: its last end line there (the
    stop marker beside it is this run's own by now)."""
    return _ended(read_end_record(path, upto) or {})


def _ended(record: dict[str, Any]) -> Collection:
    stopped = record.get("stopped")
    decided = (
        str(record.get("decided") or "")[:500] if isinstance(record.get("decided"), str) else ""
    )
    merged = record.get("run_id") == MERGED
    if not isinstance(stopped, dict) or not stopped:
        return Collection(parts_decided=merged and bool(decided), decided_before=decided)
    reason = str(stopped.get("reason") or "stopped")
    pairs = stopped.get("pairs") if reason == DECIDED else None
    parts = reason == MERGED and (
        stopped.get("parts_decided") is True or _decided_part(stopped.get("parts"))
    )
    return Collection(
        reason,
        str(stopped.get("message") or ""),
        tuple(p for p in pairs if isinstance(p, dict)) if isinstance(pairs, list) else (),
        parts or (merged and bool(decided)),
        decided,
    )


def _decided_part(parts: object) -> bool:
    """Whether a merged file's record of its stopped parts names one that stopped when decided (or a
    part that is a merge of such parts)."""
    return isinstance(parts, list) and any(
        isinstance(p, dict) and (p.get("reason") == DECIDED or p.get("parts_decided") is True)
        for p in parts
    )
