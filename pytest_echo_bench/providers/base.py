"""The provider seam: a small Protocol every model backend implements."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from pytest_echo_bench.errors import UnavailableError

if TYPE_CHECKING:
    from pytest_echo_bench.datasets.example import Example
    from pytest_echo_bench.spec.load import ArmSpec, Spec


@dataclass(frozen=True)
class Request:
    """One call: the item, its prompt, and which attempt this is (1-based)."""

    example: Example
    arm: str
    prompt: str
    attempt: int = 1
    timeout_s: float = 180.0
    # the n-th ask of the same arm and prompt within one item (distinct cache entries)
    sample: int = 0
    # the item's epoch (spec ``epochs: K``): each epoch its own cache entries and sim draws
    epoch: int = 1


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


def check_options(arm: ArmSpec, spec: Spec, provider: str, known: set[str]) -> None:
    """Refuse an option the provider does not know (a typo would otherwise be silently ignored)."""
    unknown = sorted(set(arm.options) - known)
    if unknown:
        raise spec.error(
            f"unknown {provider} option {unknown[0]!r}; known: {', '.join(sorted(known))}",
            "arms",
            arm.name,
            unknown[0],
        )


def chat_options(
    arm: ArmSpec, spec: Spec, provider: str, key_env: str, base_url: str
) -> tuple[str, str, str | None, str]:
    """What the chat providers share: model (required), client (sdk
    or http), api_key_env, base_url."""
    model = option(arm, "model", str, None, spec)
    if not model:
        raise spec.error(f"an {provider} arm needs a 'model'", "arms", arm.name)
    # The lean client by default: the SDKs cost several times its CPU
    # per call (docs/performance.md).
    client = option(arm, "client", str, "http", spec)
    if client not in ("sdk", "http"):
        raise spec.error(f"client must be sdk or http, got {client!r}", "arms", arm.name, "client")
    return (model, client, option(arm, "api_key_env", (str, type(None)), key_env, spec),
            option(arm, "base_url", str, base_url, spec))


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


# Where an arm's calls go when its spec names no base_url.
DEFAULT_BASE_URL = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
# Where an arm's key is read when its spec names no variable (the claude preset passes these on).
DEFAULT_KEY_ENV = {"openai": ("OPENAI_API_KEY",), "anthropic": ("ANTHROPIC_API_KEY",),
                   "command": ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN")}


def read_key(arm: str, env: str) -> str:
    """The API key in the variable ``env``, without the white space around it.

    A key read from a secret file or a CRLF ``.env`` ends in a newline; sent as is, the HTTP
    client refuses the header with the whole key in its message. A key that is still not one
    printable ASCII word is refused here, naming the variable and never showing the value.
    """
    key = os.environ.get(env, "").strip()
    if not key:
        raise UnavailableError(f"arm {arm!r} needs an API key: set the environment variable {env}")
    if not (key.isascii() and key.isprintable()) or " " in key:
        raise UnavailableError(
            f"arm {arm!r}: the API key in {env} has a space or a control or non-ASCII "
            f"character inside it; set {env} to the key alone (its value is not shown)"
        )
    return key

