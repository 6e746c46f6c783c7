"""Registering the run's plugins once the entry point has found specs: the controller in the
process that reports, the worker wherever items are collected and run (both in a serial run)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_echo_bench.plugin.context import RunContext
from pytest_echo_bench.plugin.controller import ControllerPlugin
from pytest_echo_bench.plugin.options import BenchOptions
from pytest_echo_bench.plugin.recorded import resumed
from pytest_echo_bench.plugin.worker import WorkerPlugin
from pytest_echo_bench.plugin.xdist_state import distributed


def controller(config: pytest.Config, opts: BenchOptions, ctx: RunContext) -> dict[str, Any]:
    """Register the controller (and, without xdist workers, the worker); the context for workers."""
    _apply_selection(config, ctx)
    config.pluginmanager.register(ControllerPlugin(config, opts, ctx), "echo-bench-controller")
    if not distributed(config):
        config.pluginmanager.register(WorkerPlugin(config, opts, ctx, remote=False), "echo-bench-worker")
    return ctx.to_json()


def worker(config: pytest.Config, opts: BenchOptions, handed: dict[str, Any]) -> None:
    """An xdist worker: the context the controller decided, and the worker plugin."""
    ctx = RunContext.from_json(handed)
    opts = resumed(config, opts, ctx.options)[0]  # as the controller decided: the recorded ones, unless given
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
