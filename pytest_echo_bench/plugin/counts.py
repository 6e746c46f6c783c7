"""What the controller counts from the reports: each payload's kind, the items not completed and
why, the arms that could not run, other tests' failures, collection errors and lost workers."""

from __future__ import annotations

from dataclasses import dataclass, field

from pytest_echo_bench.engine.outcome import ABORTED, INCOMPLETE, ROW, UNAVAILABLE
from pytest_echo_bench.plugin.payload import Payload
from pytest_echo_bench.store.safe_text import shown

LISTED = 5  # the end lists this many items not completed, then says how many more


@dataclass
class Counts:
    """Filled by the controller's report hooks; read by the exit status and the summary."""

    to_run: int = 0  # benchmark items this session runs
    collected: bool = False  # xdist: every worker reports the same ids; the first is taken
    kinds: dict[str, int] = field(default_factory=dict)  # payload kind -> items
    # (benchmark, arm) -> its items not recorded; (node id, message) of those that ran
    not_completed: dict[tuple[str, str], int] = field(default_factory=dict)
    unfinished: list[tuple[str, str]] = field(default_factory=list)
    # (arm, reason) -> items skipped for it
    unavailable: dict[tuple[str, str], int] = field(default_factory=dict)
    # "<benchmark>/<arm>" not marked optional -> why it could not run
    required: dict[str, str] = field(default_factory=dict)
    other_failures: int = 0  # ordinary tests of the same run that failed
    collect_errors: int = 0
    lost: list[str] = field(default_factory=list)  # xdist workers lost during the run
    over_said: int = 0  # replies over their bound already said on the terminal

    def add(self, nodeid: str, bench: Payload) -> str | None:
        """Count one benchmark item's call report; the line to say at once, when it is the first
        of its arm to be skipped for a reason (a user watching a long run can fix it now)."""
        self.kinds[bench.kind] = self.kinds.get(bench.kind, 0) + 1
        if bench.kind == ROW:
            return None
        key = (bench.benchmark, bench.arm)
        self.not_completed[key] = self.not_completed.get(key, 0) + 1
        if bench.kind != UNAVAILABLE:
            self.unfinished.append((nodeid, bench.message))
            return None
        # One reason per arm, not one line per item.
        reason = (bench.arm, bench.message)
        first = reason not in self.unavailable
        self.unavailable[reason] = self.unavailable.get(reason, 0) + 1
        if not bench.optional:
            self.required.setdefault(f"{bench.benchmark}/{bench.arm}", bench.message)
        return f"echo-bench: arm {bench.arm} stopped: {bench.message}" if first else None

    @property
    def left(self) -> int:
        """Items that ran and were not recorded: incomplete or aborted."""
        return self.kinds.get(INCOMPLETE, 0) + self.kinds.get(ABORTED, 0)

    def end_lines(self) -> list[str]:
        """The summary's lines of arms not run and items not completed (a few of them), escaped."""
        lines = [shown(f"not run: {count} items of arm {arm}: {reason}")
                 for (arm, reason), count in sorted(self.unavailable.items())]
        lines += [shown(f"not completed: {nodeid}: {message}")
                  for nodeid, message in self.unfinished[:LISTED]]
        if len(self.unfinished) > LISTED:
            lines.append(f"... and {len(self.unfinished) - LISTED} more not completed")
        return lines
