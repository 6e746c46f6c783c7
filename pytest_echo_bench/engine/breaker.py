"""Per arm and process: the first call runs alone, and a failure that
shows the arm cannot work stops it.

A misconfigured arm (no login, a wrong key, a wrong base_url) must cost one call, not one per
concurrency slot and not one per item: until the arm has answered once in this process, its
calls go one at a time, and once it is known to be unusable (``trip``) none of its items is called.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Protocol

from pytest_echo_bench.errors import AbortedError, UnavailableError

# The same permanent error on this many first calls in a row, before any answer, is the arm's, not
# the items': a proxy that refuses every request with one fixed text ("400 No connected db.").
REPEATS = 3
WAIT_TICK_S = 0.25  # how often a call waiting for the arm's first answer looks at the stop


class Stop(Protocol):
    def is_set(self) -> bool: ...


class ArmBreaker:
    def __init__(self) -> None:
        self._answered = threading.Event()
        self._probe = threading.RLock()  # re-entered by a Python arm that asks its own arm again
        self._lock = threading.Lock()
        self.broken: UnavailableError | None = None
        # the last permanent error text before any answer, and its run
        self._streak: tuple[str, int] = ("", 0)

    @contextlib.contextmanager
    def turn(self, stop: Stop) -> Iterator[bool]:
        """Wait for this call's turn; yields True when it is a probe
        (the arm has not answered yet)."""
        if self._answered.is_set():
            yield False
            return
        while not self._probe.acquire(timeout=WAIT_TICK_S):
            self._check(stop)
        # answered while this call waited: it runs side by side, not alone
        if self._answered.is_set():
            self._probe.release()
            self._check(stop)
            yield False
            return
        try:
            self._check(stop)
            yield not self._answered.is_set()
        finally:
            self._probe.release()

    def _check(self, stop: Stop) -> None:
        if self.broken is not None:
            raise self.broken
        if stop.is_set():
            raise AbortedError("the run is stopping; no call was made")

    def answered(self) -> None:
        """The arm works: from now on its calls run side by side."""
        self._answered.set()

    def repeated(self, text: str) -> bool:
        """One more permanent error before any answer: True when it makes
        ``REPEATS`` equal ones in a row.

        Two different errors mean the items differ, not the arm: the arm is then taken as working.
        """
        with self._lock:
            last, count = self._streak
            if count and text != last:
                self._answered.set()
                return False
            self._streak = (text, count + 1)
            return count + 1 >= REPEATS

    def trip(self, error: UnavailableError) -> UnavailableError:
        """The arm cannot work: every call of it from now on fails at once with ``error``."""
        with self._lock:
            if self.broken is None:
                self.broken = error
            return self.broken
