"""A new run whose ``-k``, ``-m`` or shard selects nothing says which benchmarks and arms exist,
and exits 5 (pytest's "no tests collected"), as ``echo-bench estimate`` does. Under xdist, where
the specs alone show that ``-k`` or the shard selects nothing, no worker is started: collection
runs in the controller, which is quick, and still decides (a conftest may add keywords that the
specs cannot show), so a selection the specs misjudge runs all the same, serially."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from pytest_echo_bench.cli.empty_selection import (
    NOTHING_SELECTED,
    nothing_selected,
    selection_words,
)
from pytest_echo_bench.cli.estimate import select
from pytest_echo_bench.cli.keyword import parse_keyword
from pytest_echo_bench.datasets.example import Loaded
from pytest_echo_bench.datasets.registry import load_benchmark
from pytest_echo_bench.errors import EchoBenchError
from pytest_echo_bench.plugin.context import SPEC_CACHE, RunContext
from pytest_echo_bench.shards.env import k_of_n
from pytest_echo_bench.spec.load import Spec


def _loaded(config: pytest.Config, specs: Sequence[str]) -> list[Loaded]:
    """The specs that load, with their items (parsed once a run: the cache is the context's)."""
    cache = config.stash.setdefault(SPEC_CACHE, {})
    found: list[Loaded] = []
    for path in specs:
        try:
            found.append(load_benchmark(Path(path), cache))
        except EchoBenchError:
            continue  # a collection error or a skip of its own
    return found


def _counts(loaded: Sequence[Loaded]) -> list[tuple[Spec, int]]:
    return [(spec, len(examples) * len(spec.arms) * spec.epochs) for spec, examples in loaded]


def selects_nothing(config: pytest.Config, ctx: RunContext) -> bool:
    """True when ``-k`` or the shard selects no item of the specs, as far as the specs tell."""
    if not (ctx.keyword or ctx.shard) or ctx.markexpr or any("::" in a for a in ctx.args or ()):
        return False
    loaded = _loaded(config, ctx.specs)
    try:
        matcher = parse_keyword(ctx.keyword)
    except ValueError:
        return False  # pytest refuses the expression itself, in its own words
    shard = k_of_n(ctx.shard) if ctx.shard else None
    return bool(loaded) and not any(
        select(spec, examples, config.rootpath, matcher, shard) for spec, examples in loaded
    )


class SelectionNote:
    """At the end of a new run that selected nothing, the benchmarks and arms there are."""

    def __init__(self, config: pytest.Config, ctx: RunContext) -> None:
        self.config, self.ctx = config, ctx

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(
        self, terminalreporter: pytest.TerminalReporter, exitstatus: int
    ) -> None:
        if exitstatus != NOTHING_SELECTED:
            return
        counts = _counts(_loaded(self.config, self.ctx.specs))
        # not only datasets optional and absent: the selection chose none
        if sum(count for _, count in counts):
            what = selection_words(self.ctx.keyword, self.ctx.markexpr, self.ctx.shard)
            terminalreporter.write_line(nothing_selected(what, counts))
