"""A run whose ``-k``, ``-m`` or shard selects nothing says which benchmarks and arms exist, and
exits 5 (pytest's "no tests collected"). With ``-k`` and a shard it is known from the specs alone,
so the controller stops before writing anything or starting a worker; ``-m`` and node ids only
collection can judge, so there the note comes at the end of the run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from pytest_echo_bench.datasets.example import Loaded
from pytest_echo_bench.datasets.registry import load_benchmark
from pytest_echo_bench.errors import EchoBenchError
from pytest_echo_bench.ops.empty_selection import NOTHING_SELECTED, nothing_selected, selection_words
from pytest_echo_bench.ops.estimate_cli import select
from pytest_echo_bench.ops.keyword import parse_keyword
from pytest_echo_bench.ops.shard_env import k_of_n
from pytest_echo_bench.plugin.context import SPEC_CACHE, Selection


def _loaded(config: pytest.Config, specs: Sequence[Path]) -> list[Loaded] | None:
    """Every spec with its items (parsed once: the run's context reuses them); None when one fails
    (its collection error says why, and nothing is judged of a selection over it)."""
    cache = config.stash.setdefault(SPEC_CACHE, {})
    found: list[Loaded] = []
    for path in specs:
        try:
            found.append(load_benchmark(path, cache))
        except EchoBenchError:
            return None
    return found


def exit_if_nothing_selected(config: pytest.Config, specs: Sequence[Path], selection: Selection) -> None:
    """Controller, before the results file: stop with exit 5 when ``-k`` or the shard selects no item."""
    if not (selection.keyword or selection.shard) or selection.markexpr or any("::" in a for a in selection.args):
        return
    loaded = _loaded(config, specs)
    if not loaded:
        return
    try:
        matcher = parse_keyword(selection.keyword)
    except ValueError:
        return  # pytest refuses the expression itself, in its own words
    shard = k_of_n(selection.shard) if selection.shard else None
    if any(select(spec, examples, config.rootpath, matcher, shard) for spec, examples in loaded):
        return
    what = selection_words(selection.keyword, None, selection.shard)
    raise pytest.exit(nothing_selected(what, [(s, len(e) * len(s.arms) * s.epochs) for s, e in loaded]),
                      returncode=NOTHING_SELECTED)


class SelectionNote:
    """At the end of a new run that selected nothing (``-m``, node ids), the benchmarks and arms."""

    def __init__(self, config: pytest.Config, specs: Sequence[Path], selection: Selection) -> None:
        self.config, self.specs, self.selection = config, list(specs), selection

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter, exitstatus: int) -> None:
        if exitstatus != NOTHING_SELECTED:
            return
        loaded = [(s, len(e) * len(s.arms) * s.epochs) for s, e in _loaded(self.config, self.specs) or []]
        if sum(count for _, count in loaded):  # not every dataset optional and missing: the selection chose none
            sel = self.selection
            terminalreporter.write_line(nothing_selected(selection_words(sel.keyword, sel.markexpr, sel.shard), loaded))
