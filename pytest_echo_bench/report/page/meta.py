"""What the progress page takes from a results file's meta line: the line typed leniently, the items
it expects, and, when no run hands them over (``echo-bench progress FILE``), its decide plan's
figures, read from the file as the controller and the report read them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_echo_bench.analysis.decide.feed import FileFeed
from pytest_echo_bench.analysis.decide.monitor import Monitor, Sequential, monitor_of, sequential
from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.results.ending import one
from pytest_echo_bench.store.records import Meta


def typed(meta: dict[str, Any] | None) -> Meta | None:
    """The scan's meta line typed; the page must never break a run, so a bad one is left out (the
    lenient parser skips it already: this only keeps that so)."""
    try:
        return None if meta is None else Meta.from_json(meta)
    except StoreError:
        return None


def meta_expected(meta: Meta | None, single: bool) -> dict[str, int]:
    if meta is None:
        return {}
    expected = {}
    for name, entry in meta.benchmarks.items():
        names, items = meta.arms.get(name), entry.items
        if names and items is not None:
            expected.update(
                {(str(a) if single else f"{name}/{a}"): items // len(names) for a in names}
            )
    return expected


class DecideFeed:
    """Empty until a meta line with a decide plan is seen; then, on each refresh, the plan's monitor
    reads on in the file (``analysis.decide.feed``), as the controller and the report read it."""

    def __init__(self, results: Path) -> None:
        self.results = results
        self.watch: Monitor | str | None = None
        self.feed: FileFeed | None = None
        self._met = False  # the meta line was looked at (it has no plan when ``watch`` stays None)

    def update(self, meta: Meta | None) -> None:
        if meta is not None and not self._met:
            self._met, self.watch = True, monitor_of(meta)
            self.feed = (
                FileFeed(self.results, self.watch) if isinstance(self.watch, Monitor) else None
            )
        if self.feed is not None:
            self.feed.update()

    def sequential(self, stop_reason: str | None, running: bool) -> Sequential | None:
        if self.watch is None:
            return None
        if running:  # the marker says a stop at once; the end line is read once the sweep is over
            return sequential(self.watch, stop_reason, running)
        # how the file ended, as the report reads it: a decided stop stays decided
        ended = one(self.results)
        return sequential(
            self.watch,
            stop_reason or ended.stop_reason,
            running,
            merged_parts=ended.merged_parts,
            earlier=ended.earlier,
        )
