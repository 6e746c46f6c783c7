"""Dropping what pytest keeps of a benchmark item's reports once every hook has read them: at
10,000 items the kept reports cost the terminal reporter more time, and the process more memory,
than the sweep (the controller and, under xdist, each worker do it for their own reporter)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pytest

from pytest_echo_bench.engine.outcome import ROW
from pytest_echo_bench.plugin.payload import Payload


class Filing:
    """This process's terminal reporter, looked up on first use, and the node ids it unfiles."""

    def __init__(self, config: pytest.Config, prefixes: tuple[str, ...] = ("",)) -> None:
        self._config = config
        self._prefixes = prefixes  # "<spec>::": the node ids of benchmark items ("": any)
        self._reporter: Any = None  # the terminal reporter (False: none), looked up once

    def unfile(self, report: pytest.TestReport) -> None:
        """A benchmark item's silent setup/teardown report leaves the reporter's list."""
        if self._reporter is None:
            self._reporter = self._config.pluginmanager.get_plugin("terminalreporter") or False
        if report.nodeid.startswith(self._prefixes):
            unfile(self._reporter, report)


_NO_KEYWORDS: Mapping[str, Any] = MappingProxyType({})
_NO_SECTIONS: Any = ()  # for the lists: immutable and shared, like the keywords


def unfile(reporter: Any, report: pytest.TestReport) -> None:
    """Drop a passed, silent setup/teardown report of a benchmark item from the terminal reporter.

    pytest keeps every such report and, for each failed test, scans them all for teardown output
    (``TerminalReporter._get_teardown_reports``): with 10,000 items and 3,000 wrong answers that
    took longer than the sweep. These reports carry no output, so nothing printed changes. Called
    right after the reporter filed ``report``, so it is the last one in the list.
    """
    filed = reporter.stats.get("") if reporter else None
    if filed and filed[-1] is report:
        filed.pop()


def spend(report: pytest.TestReport) -> None:
    """Drop what every hook has now read from a benchmark item's call report.

    pytest keeps every report to the end (the terminal reporter's counts and failure lists),
    with a dict of the item's keywords, two lists and our payload each: about 500 bytes an
    item that nothing reads after this hook. Unrecorded kinds keep their payload: the short
    summary asks ``pytest_report_teststatus`` again for their word. A report with captured
    output keeps its sections.
    """
    bench = Payload.of(report)
    if bench is None:
        return
    if bench.kind == ROW:
        del report.bench
    report.keywords = _NO_KEYWORDS  # read-only: a late writer fails loudly instead of sharing
    if not report.sections:
        report.sections = _NO_SECTIONS
    if not report.user_properties:
        report.user_properties = _NO_SECTIONS
