"""Stopping on signals the way Ctrl-C stops: every stop leaves its marker and its resume line.

SIGTERM (a CI timeout, ``kill``, a container stop) would end the process at once, with no marker,
no summary and no resume line; here it raises KeyboardInterrupt in the main thread, so pytest
stops as it does on Ctrl-C and our ``pytest_sessionfinish`` records the stop. Once a stop has
begun, the next Ctrl-C is shielded (a message, no traceback): pytest's own interrupt handling
takes a moment (it formats the interrupted traceback), and a second Ctrl-C there used to lose the
marker, the summary and the resume line. A third Ctrl-C is not held back.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

import pytest

from pytest_echo_bench.plugin.xdist_state import worker_pids

_Handler = Any  # what signal.signal returns: a callable, SIG_DFL, SIG_IGN or None


class StopSignals:
    def __init__(self, config: pytest.Config | None = None) -> None:
        self.terminated = False  # the stop came from SIGTERM, not Ctrl-C
        # Its xdist workers (a controller's) are sent a SIGTERM it gets: `docker stop` and
        # Kubernetes signal the controller alone, and workers that learnt of the
        # stop from its marker ended seconds after those a terminal's Ctrl-C (sent
        # to the whole group) reached at once.
        self._config = config
        self._saved: dict[int, _Handler] = {}
        self._shielded = 0

    def install(self) -> None:
        """SIGTERM stops like Ctrl-C (only where nothing else handles
        it, and only in the main thread)."""
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        ):
            self._saved[signal.SIGTERM] = signal.signal(signal.SIGTERM, self._on_term)

    def _on_term(self, signum: int, frame: FrameType | None) -> None:
        if self.terminated:
            # the stop is under way: a second SIGTERM (the group's and ours) must not cut it short
            return
        self.terminated = True
        for pid in worker_pids(self._config) if self._config is not None else ():
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:  # already gone
                pass
        raise KeyboardInterrupt("SIGTERM")

    def shield(self) -> None:
        """The stop has begun: the next SIGINT prints a line
        instead of interrupting the shutdown."""
        if (
            threading.current_thread() is not threading.main_thread()
            or signal.SIGINT in self._saved
        ):
            return
        self._saved[signal.SIGINT] = signal.signal(signal.SIGINT, self._on_int)

    def _on_int(self, signum: int, frame: FrameType | None) -> None:
        self._shielded += 1
        if self._shielded > 1:
            raise KeyboardInterrupt
        print(
            "\necho-bench: stopping: writing the stop marker and the resume line (Ctrl-C "
            "again to quit now)",
            file=sys.stderr,
            flush=True,
        )

    @property
    def reason(self) -> str:
        return (
            "the run was stopped by SIGTERM"
            if self.terminated
            else "the run was interrupted (Ctrl-C)"
        )

    def restore(self) -> None:
        """Put back the handlers found at install (unconfigure: pytester runs
        many sessions in one process)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for signum, handler in self._saved.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self._saved.clear()
