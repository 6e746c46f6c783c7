"""What running one item comes to, and what the engine needs to know of an item.

The engine never sees a pytest node: anything with a spec, an example, an arm and a node id will
do (the plugin's ``BenchItem`` is one), so the engine imports nothing from pytest.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pytest_echo_bench.datasets.example import Example
    from pytest_echo_bench.datasets.prompts import Prompter
    from pytest_echo_bench.spec.load import Spec
    from pytest_echo_bench.store.files import StopReason
    from pytest_echo_bench.store.records import Row

# What an item came to: "row" (graded and recorded) or one of the unrecorded kinds.
ROW, INCOMPLETE, ABORTED, UNAVAILABLE = "row", "incomplete", "aborted", "unavailable"


class Job(Protocol):
    """One benchmark item under one arm, as the engine runs it."""

    spec: Spec
    example: Example
    arm: str
    epoch: int  # 1..K of the spec's ``epochs: K`` (1 when it has none)
    # per arm of the spec with a ``prompt:``: its prompts (datasets.prompts)
    prompters: Mapping[str, Prompter]

    @property
    def nodeid(self) -> str: ...


@dataclass
class Outcome:
    kind: str
    row: Row | None = None
    message: str = ""
    retries: int = 0
    stop: StopReason | None = None  # set on the item whose failure stopped the run
    # UNAVAILABLE: the arm is set up wrong, not merely unable to run here
    misconfigured: bool = False
    # the arm's endpoint's concurrency limit after this item (engine.limiter)
    limit: int | None = None
    # requests a second the endpoint is paced at after this item (None: not paced)
    pace: float | None = None
    throttled: int = 0  # 429 answers this item met
    # what the process's limiters decided since its last item (shown with -v)
    decisions: tuple[str, ...] = ()


def utcnow() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
