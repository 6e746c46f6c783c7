"""The run-wide stop: an in-process event plus the stop marker every process can see."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_echo_bench.store.files import StopReason, stop_path, write_stop

# How often a process looks for another's stop marker: every call start asks, three times per item,
# and a stat per ask cost more than the rest of the check; a stop still takes effect within 3 s.
LOOK_EVERY_S = 0.05


@dataclass
class StopSignal:
    """Set here by ``trigger``, or seen set elsewhere through the marker beside ``results``."""

    results: Path
    event: threading.Event = field(default_factory=threading.Event)
    reason: StopReason | None = None  # this process's own stop, once triggered
    details: dict[str, Any] = field(default_factory=dict)  # what its marker says besides the reason
    _looked: float = field(default=float("-inf"), repr=False)  # when the marker was last looked for
    _marker: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        self._marker = str(stop_path(self.results))

    @property
    def marker(self) -> Path:
        return Path(self._marker)

    def is_set(self) -> bool:
        if self.event.is_set():
            return True
        now = time.monotonic()
        if now - self._looked >= LOOK_EVERY_S:
            self._looked = now
            if os.path.exists(self._marker):
                self.event.set()  # another worker hit exhaustion: start no new call here either
        return self.event.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True as soon as the run stops (here or in another process)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self.event.wait(min(left, 0.25)) or self.is_set():
                return True
        return self.is_set()

    def trigger(self, reason: StopReason, **details: Any) -> None:
        """Stop the run everywhere; the first reason written to the marker wins."""
        if self.reason is None:
            self.reason, self.details = reason, details
        self.event.set()
        write_stop(self.results, reason, **details)

    def persist(self) -> None:
        """Write this process's stop marker again if it is still missing.

        Out of file descriptors (EMFILE) the marker could not be written when the stop came; once
        the calls in flight are closed it can, and without it the run's end would say "interrupted".
        """
        if self.reason is not None and not self.marker.exists():
            write_stop(self.results, self.reason, **self.details)
