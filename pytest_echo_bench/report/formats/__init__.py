"""The report's formats, each a function of the report to text, named in one registry.

``text`` draws the terminal table, markdown and JSON; ``tables`` the tables the first two share;
``csv``; ``html`` and the plots it embeds (``svg``). A new format is a module with a
``render_<name>(report) -> str`` and one line in ``_BUILTIN``: ``echo-bench report --format``
offers every name here, in this order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pytest_echo_bench.registry import Registry

if TYPE_CHECKING:
    from pytest_echo_bench.report.figures import Report

Renderer = Callable[["Report"], str]

_ROOM = "pytest_echo_bench.report.formats"
_BUILTIN = {
    "table": f"{_ROOM}.text:render_table",
    "markdown": f"{_ROOM}.text:render_markdown",
    "json": f"{_ROOM}.text:render_json",
    "csv": f"{_ROOM}.csv:render_csv",
    "html": f"{_ROOM}.html:render_html",
}
RENDERERS: Registry[Renderer] = Registry("report format", _BUILTIN)
FORMATS = tuple(_BUILTIN)  # as --format lists them: the terminal's table first, the default


def render(report: Report, fmt: str = "table") -> str:
    """The report as ``table`` (terminal), ``markdown``, ``json``, ``csv`` or ``html`` text."""
    if fmt not in RENDERERS:
        raise ValueError(f"unknown report format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    return RENDERERS[fmt](report)
