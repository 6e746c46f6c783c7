"""The example type: one benchmark item as a loader produced it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_echo_bench.spec.load import Spec

NO_METADATA: Mapping[str, Any] = MappingProxyType({})  # shared by every example without any


@dataclass(frozen=True, slots=True)  # a sweep holds every example at once: no __dict__ each
class Example:
    """One benchmark item as the loader produced it."""

    id: str
    input: str
    target: str
    subtask: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=lambda: NO_METADATA)


Loaded = tuple["Spec", list[Example]]
