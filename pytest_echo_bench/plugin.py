"""The pytest11 entry point: adds options and, only when a run has benchmark specs, registers
the ``BenchSession`` that holds all state. Ordinary test suites see nothing else of us."""

from __future__ import annotations

import pytest

from . import options
from .collect import SESSION, SPEC_CACHE
from .context import RunContext, build_context
from .errors import StoreError

_WORKER_KEY = "echo_bench"


def pytest_addoption(parser: pytest.Parser) -> None:
    options.addoption(parser)


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "bench_arm(name): the arm of a benchmark item")
    config.addinivalue_line("markers", "bench_subtask(name): the subtask of a benchmark item")
    opts = options.resolve(config)
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        raw = workerinput.get(_WORKER_KEY)
        ctx = RunContext(**raw) if raw else None
    else:
        ctx = build_context(config, opts, config.stash.setdefault(SPEC_CACHE, {}))
    if ctx is None:
        return
    _apply_selection(config, ctx)
    from .session import BenchSession

    session = BenchSession(config, opts, ctx)
    config.stash[SESSION] = session
    config.pluginmanager.register(session, "echo-bench-session")


def _apply_selection(config: pytest.Config, ctx: RunContext) -> None:
    """A bare ``--bench-resume PATH`` runs the spec files and -k/-m the meta line recorded."""
    if ctx.args is not None and list(config.args) != ctx.args:
        config.args[:] = ctx.args
    if ctx.keyword and not config.option.keyword:
        config.option.keyword = ctx.keyword
    if ctx.markexpr and not config.option.markexpr:
        config.option.markexpr = ctx.markexpr


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: object) -> None:
    """Controller: hand every xdist worker the run context decided once, here."""
    config = node.config  # type: ignore[attr-defined]
    session = config.stash.get(SESSION, None)
    if session is not None:
        node.workerinput[_WORKER_KEY] = session.ctx.to_json()  # type: ignore[attr-defined]


def pytest_internalerror(excrepr: object, excinfo: pytest.ExceptionInfo[BaseException]) -> bool | None:
    if isinstance(excinfo.value, StoreError):
        # A full disk or read-only directory: say so plainly; the rows already written are intact.
        print(f"echo-bench: {excinfo.value}")
    return None
