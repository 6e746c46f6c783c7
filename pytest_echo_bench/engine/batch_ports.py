"""What the batch submitter (``engine.batching``) is given: the run's batch settings, what it
reaches in the runner, and the earlier runs' batches it may join."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pytest_echo_bench.engine.arms import ArmRuntime
from pytest_echo_bench.engine.batch_budget import BatchHolds
from pytest_echo_bench.engine.batch_items import OpenBatch
from pytest_echo_bench.engine.batch_results import Recorder
from pytest_echo_bench.engine.calling import CallPath
from pytest_echo_bench.engine.failures import Failures
from pytest_echo_bench.engine.stop import StopSignal
from pytest_echo_bench.providers.batch import BatchAPI
from pytest_echo_bench.spec.load import Spec
from pytest_echo_bench.store.batchlog import BatchState, Journal, Submission


@dataclass(frozen=True)
class BatchRun:
    """The run's batch settings: ``every`` arm that can (``--bench-batch``), ``cancel`` what is
    open on a stop (``--bench-batch-cancel``), the ``tag`` the batches are labelled with."""

    every: bool = False
    cancel: bool = False
    tag: str = ""


@dataclass
class Ports:
    """What the batches reach: the journal, the run's stop, the call path (cache, pricing), what
    a failure does, an arm's runtime, its ``BatchAPI`` (``apis``), whether a provider has one
    (``batchable``); then, set by the runner that owns them, how an answer becomes its item's row
    (``record``), the budget's holds (``holds``, with a budget) and where what the process sees
    of its open batches goes (``publish``: the progress line, page and summary read it)."""

    journal: Journal
    stop: StopSignal
    calls: CallPath
    failures: Failures
    arm: Callable[[Spec, str], ArmRuntime]
    apis: Callable[[ArmRuntime], BatchAPI]
    batchable: Callable[[str], bool]
    record: Recorder | None = None
    holds: BatchHolds | None = None
    publish: Callable[[list[BatchState]], None] | None = None


@dataclass
class Earlier:
    """An earlier run's open batches: ``holding`` (custom id -> its submission, from the journal)
    and the ones this process joined (``adopted``, by the journal's name); ``joins``: whether an
    item (by node id) is held by one of them, decided once per item."""

    holding: dict[str, Submission]
    adopted: dict[str, OpenBatch] = field(default_factory=dict)
    joins: dict[str, bool] = field(default_factory=dict)
