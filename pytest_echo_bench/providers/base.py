"""The provider seam: a small Protocol every model backend implements."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..datasets import Example
    from ..spec import ArmSpec, Spec


@dataclass(frozen=True)
class Request:
    """One call: the item, its prompt, and which attempt this is (1-based)."""

    example: Example
    arm: str
    prompt: str
    attempt: int = 1
    timeout_s: float = 180.0
    sample: int = 0  # the n-th ask of the same arm and prompt within one item (distinct cache entries)


@dataclass
class Completion:
    text: str
    usage: dict[str, int] | None = None
    sub_calls: int = 1
    extra: dict[str, Any] = field(default_factory=dict)
    cost_usd: float | None = None
    cache_hits: int = 0


class Provider(Protocol):
    """A model behind an arm. A provider may also set ``instant = True``: it answers at once,
    without I/O, sleeps or retries (sim without latency or faults, replay, reference), so its
    items run on pytest's thread instead of being handed to a pool thread and back."""

    def complete(self, request: Request) -> Completion:
        """Return the model's answer or raise a ProviderError subclass."""
        ...


# A caller runs a sibling arm through retries and classification; composite arms get one.
Caller = Callable[[str, "Request"], Completion]
Factory = Callable[["ArmSpec", "Spec", Caller], Provider]


def option(arm: ArmSpec, key: str, kind: type | tuple[type, ...], default: Any, spec: Spec) -> Any:
    """Read an arm option, failing with the spec's file and line when its type is wrong."""
    if key not in arm.options:
        return default
    value = arm.options[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # bool is an int in Python; "accuracy: true" is still a mistake worth naming.
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise spec.error(f"{key} has the wrong type: {value!r}", "arms", arm.name, key)
    return value
