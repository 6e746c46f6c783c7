"""How every format shows each arm's spend per billed token class (``report.token_classes``): the
table the terminal, markdown and HTML draw, the JSON object and the CSV lines. A report of rows
that keep no class apart has none of them, so its output is what it was before classes."""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

from pytest_echo_bench.budget.money import usd
from pytest_echo_bench.report.formats.tables import Table
from pytest_echo_bench.report.token_classes import ClassSpend
from pytest_echo_bench.spec.pricing import CLASS_NAMES
from pytest_echo_bench.store import safe_text

NOTE = ("input: input tokens neither read from nor written to the cache; output: output tokens "
        "not spent reasoning. USD at the prices of the spec the results file names, as it is now "
        "(-: the arm is not priced there, or the spec was not found)")
CSV_FIELDS = ["token_class", "tokens"]


def class_tables(spends: list[ClassSpend]) -> list[Table]:
    """One table: a line of tokens and a line of USD per arm (none: no row keeps a class)."""
    if not spends:
        return []
    rows: list[list[str]] = []
    for s in spends:
        rows.append([s.benchmark, s.arm, "tokens", *(f"{s.tokens[n]:,}" for n in CLASS_NAMES)])
        costs = s.cost_usd
        rows.append([s.benchmark, s.arm, "usd",
                     *("-" if costs is None else usd(costs[n]) for n in CLASS_NAMES)])
    header = ["benchmark", "arm", "", *(n.replace("_", " ") for n in CLASS_NAMES)]
    return [Table("spend per token class", header, rows, 3, NOTE)]


def class_json(spends: list[ClassSpend], label: Callable[[str, str], str]) -> dict[str, Any]:
    """``{arm label: {"tokens": {class: N}, "cost_usd": {class: USD} | null, "rows": N}}``."""
    return {label(s.benchmark, s.arm): {"tokens": dict(s.tokens), "cost_usd": s.cost_usd,
                                        "rows": s.rows}
            for s in spends}


def class_csv_rows(spends: list[ClassSpend]) -> list[dict[str, Any]]:
    """A ``kind=token_class`` line per arm and class: its tokens and their cost."""
    return [{"kind": "token_class", "benchmark": s.benchmark, "arm": s.arm, "token_class": name,
             "tokens": s.tokens[name],
             "cost_usd": None if s.cost_usd is None else s.cost_usd[name]}
            for s in spends for name in CLASS_NAMES]


def class_html(spends: list[ClassSpend]) -> str:
    """The table as an HTML section, every name escaped (empty: no row keeps a class)."""
    tables = class_tables(spends)
    if not tables:
        return ""
    (table,) = tables

    def cell(tag: str, text: str, i: int) -> str:
        shown = html.escape(safe_text.shown(text, newlines=False))
        attrs = ' class="text"' if i < table.left else ""
        return f"<{tag}{attrs}>{shown}</{tag}>"

    def line(tag: str, cells: list[str]) -> str:
        return "<tr>" + "".join(cell(tag, c, i) for i, c in enumerate(cells)) + "</tr>"

    body = line("th", table.header) + "".join(line("td", r) for r in table.rows)
    return (f'<section id="token-classes"><h3>Spend per token class</h3><div class="scroll">'
            f'<table>{body}</table></div><p class="muted">{html.escape(NOTE)}</p></section>')
