"""How the sweep of a report's files ended, as the files record it: the one reading that the report,
its gates, a merge and a regrade take the stop from (``store.files.RUN_END``, or for a file written
before that line, the stop marker beside it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_echo_bench.store.files import DECIDED, read_end, read_json, read_stop, stop_path

MERGED = "merged"  # the reason a merged file records when parts of it stopped early (``ops.merge``)


@dataclass(frozen=True)
class Collection:
    """How a sweep ended: ``reason`` "" when it ran to the end."""

    reason: str = ""  # else a decided file's reason, or the first stopped file's ("merged": its parts')
    message: str = ""
    pairs: tuple[dict[str, Any], ...] = ()  # a decided stop's figures, as the run recorded them at the stop
    parts_decided: bool = False  # a merged file: one of its parts stopped when decided

    @property
    def early(self) -> bool:
        return bool(self.reason)

    @property
    def merged_parts(self) -> str:
        """A merged file's parts that stopped early, when one stopped when decided (``Sequential.merged_parts``)."""
        return self.message or MERGED if self.parts_decided else ""

    @property
    def stop_reason(self) -> str | None:
        """The reason as ``ops.decide.sequential`` takes it: None when the sweep ran to the end."""
        return self.reason or None


def collection(files: Sequence[Path]) -> Collection:
    """How the files' sweep ended: a file that stopped when decided wins (its decision chose when the
    rows stopped), else the first file that stopped early; every report format takes it from here."""
    found = [c for c in map(_one, files) if c.early]
    return next((c for c in found if c.reason == DECIDED), found[0] if found else Collection())


def _one(path: Path) -> Collection:
    found, stopped = read_end(path)
    if not found:  # a file written before the end record: its marker, when it is beside it
        stop = read_stop(path)
        stopped = {**read_json(stop_path(path)), "reason": stop.reason, "message": stop.message} if stop else None
    if not stopped:
        return Collection()
    reason = str(stopped.get("reason") or "stopped")
    pairs = stopped.get("pairs") if reason == DECIDED else None
    decided = reason == MERGED and (stopped.get("parts_decided") is True or _decided_part(stopped.get("parts")))
    return Collection(reason, str(stopped.get("message") or ""),
                      tuple(p for p in pairs if isinstance(p, dict)) if isinstance(pairs, list) else (), decided)


def _decided_part(parts: object) -> bool:
    """Whether a merged file's record of its stopped parts names one that stopped when decided (or a
    part that is a merge of such parts)."""
    return isinstance(parts, list) and any(isinstance(p, dict) and (p.get("reason") == DECIDED or p.get("parts_decided") is True)
                                           for p in parts)
