"""Everything this plugin reads of pytest-xdist's state, in one place.

Public: ``config.workerinput`` (a worker's id and what the controller handed it) and the
``dsession`` plugin (the controller of a distributed run). Private, and so kept here alone:
the worker's queue of item indices (``torun``, ``nextitem_index``), read to start the calls of
the items this worker will run next, and the workers' process ids (execnet's gateways), to pass a
SIGTERM on to them (tested against xdist >= 3.6.1).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest


def distributed(config: pytest.Config) -> bool:
    """True in the controller of a run whose items xdist sends to workers (-n N, N >= 1)."""
    return config.pluginmanager.has_plugin("dsession")


def will_distribute(config: pytest.Config) -> bool:
    """True in a controller that xdist's ``pytest_configure`` makes (or made) distributed: both run
    last in configure, in no order we choose, so its options are read as it reads them."""
    if getattr(config, "workerinput", None) is not None or not config.pluginmanager.has_plugin(
        "xdist"
    ):
        return False
    return distributed(config) or (
        config.getoption("dist", "no") != "no"
        and bool(config.getoption("tx", None))
        and not config.getoption("collectonly")
    )


def collect_here(config: pytest.Config) -> None:
    """Run in this process, as without ``-n``: xdist is told so (``--dist no``) if its configure is
    still to come, and its controller and reporter are unregistered if it came first; either way no
    worker starts (a run that can only fail collection would otherwise start every worker first,
    and end with xdist's status for a collection error, 1, not pytest's 2)."""
    config.option.dist = "no"
    for name in ("dsession", "terminaldistreporter"):
        plugin = config.pluginmanager.get_plugin(name)
        if plugin is not None:
            config.pluginmanager.unregister(plugin, name)


def worker_id(config: pytest.Config) -> str | None:
    """This worker's id ("gw0"), or None outside a worker."""
    workerinput = getattr(config, "workerinput", None)
    return None if workerinput is None else str(workerinput["workerid"])


def worker_count(config: pytest.Config) -> int:
    """How many worker processes share the run (1 outside xdist)."""
    workerinput = getattr(config, "workerinput", None)
    return 1 if workerinput is None else max(1, int(workerinput.get("workercount", 1)))


def worker_pids(config: pytest.Config) -> list[int]:
    """The process ids of a distributed run's local workers (execnet's popen gateways, private), []
    when unknown or serial: a SIGTERM sent to the controller alone is passed on to them."""
    dsession = config.pluginmanager.get_plugin("dsession")
    group = getattr(getattr(dsession, "nodemanager", None), "group", None)
    pids = []
    for gateway in list(group or ()):
        pid = getattr(getattr(getattr(gateway, "_io", None), "popen", None), "pid", None)
        if isinstance(pid, int) and pid > 0:
            pids.append(pid)
    return pids


def stop_scheduling(config: pytest.Config, message: str) -> None:
    """The controller of a distributed run stops it as a worker's ``shouldstop`` would: xdist's
    ``DSession.shouldstop``, read after each event, shuts the workers down (a serial run: no-op)."""
    dsession = config.pluginmanager.get_plugin("dsession")
    if dsession is not None and not getattr(dsession, "shouldstop", False):
        dsession.shouldstop = message


class WorkerQueue:
    """The indices (into ``session.items``) of the items this worker will run next."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._plugin: Any = None  # xdist's WorkerInteractor, found on first use (False: none)

    def upcoming(self, limit: int) -> list[int]:
        if self._plugin is None:
            self._plugin = next((p for p in self.config.pluginmanager.get_plugins()
                                 if hasattr(p, "torun") and hasattr(p, "nextitem_index")), False)
        if not self._plugin:
            return []
        nxt = self._plugin.nextitem_index
        head = [nxt] if isinstance(nxt, int) else []
        # With --dist worksteal queued items may be taken back by another worker, so there only
        # the next item (already dequeued, never stolen) is safe to start.
        if self.config.getoption("dist", "load") == "worksteal":
            return head
        with self._plugin.torun.lock() as queue:
            rest = [i for i in itertools.islice(queue, limit) if isinstance(i, int)]
        return head + rest
