"""Registering the run's plugins once the entry point has found specs: the controller in the
process that reports, the worker wherever items are collected and run (both in a serial run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_echo_bench.datasets.registry import load_benchmark
from pytest_echo_bench.engine.check import check_spec
from pytest_echo_bench.errors import EchoBenchError, SpecError
from pytest_echo_bench.plugin.context import SPEC_CACHE, RunContext
from pytest_echo_bench.plugin.controller import ControllerPlugin
from pytest_echo_bench.plugin.options import BenchOptions
from pytest_echo_bench.plugin.recorded import resumed
from pytest_echo_bench.plugin.selecting import SelectionNote, selects_nothing
from pytest_echo_bench.plugin.worker import WorkerPlugin
from pytest_echo_bench.plugin.xdist_state import collect_here, distributed, will_distribute


def controller(config: pytest.Config, opts: BenchOptions, ctx: RunContext) -> dict[str, Any]:
    """Register the controller (and, without xdist workers, the worker); the context for workers."""
    _apply_selection(config, ctx)
    if will_distribute(config) and not config.option.continue_on_collection_errors and (
            _spec_error(config, ctx) or selects_nothing(config, ctx)):
        # what a serial run says (a spec's error, exit 2; nothing selected, exit 5), at once
        collect_here(config)
    # a resume with nothing left is a complete sweep (exit 0), not an empty selection
    if ctx.resume_upto is None:
        config.pluginmanager.register(SelectionNote(config, ctx), "echo-bench-selection")
    config.pluginmanager.register(ControllerPlugin(config, opts, ctx), "echo-bench-controller")
    if not distributed(config):
        config.pluginmanager.register(
            WorkerPlugin(config, opts, ctx, remote=False), "echo-bench-worker"
        )
    return ctx.to_json()


def _spec_error(config: pytest.Config, ctx: RunContext) -> bool:
    """Whether a spec of the run fails to load (collection would fail on it): the controller parsed
    every spec already, so this costs no second parse of a good one."""
    cache = config.stash.setdefault(SPEC_CACHE, {})
    for path in map(Path, ctx.specs):
        try:
            # as collection checks it (scorer, arms' options)
            check_spec(load_benchmark(path, cache)[0])
        except SpecError:
            return True
        except EchoBenchError:
            continue  # an optional dataset that is missing: a skip, which workers report as usual
    return False


def worker(config: pytest.Config, opts: BenchOptions, handed: dict[str, Any]) -> None:
    """An xdist worker: the context the controller decided, and the worker plugin."""
    ctx = RunContext.from_json(handed)
    # as the controller decided: the recorded ones, unless given
    opts = resumed(config, opts, ctx.options)[0]
    _apply_selection(config, ctx)
    config.pluginmanager.register(WorkerPlugin(config, opts, ctx, remote=True), "echo-bench-worker")


def _apply_selection(config: pytest.Config, ctx: RunContext) -> None:
    """A bare ``--bench-resume PATH`` runs the spec files and -k/-m the meta line recorded."""
    if ctx.args is not None and list(config.args) != ctx.args:
        config.args[:] = ctx.args
    if ctx.keyword and not config.option.keyword:
        config.option.keyword = ctx.keyword
    if ctx.markexpr and not config.option.markexpr:
        config.option.markexpr = ctx.markexpr
