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
    # A judge's system text, sent apart from the prompt by a provider whose ``ProviderInfo`` says
    # ``system=True`` (else ``engine.judging`` puts it before the prompt).
    system: str | None = None


@dataclass
class Completion:
    text: str
    usage: dict[str, int] | None = None
    sub_calls: int = 1
    extra: dict[str, Any] = field(default_factory=dict)
    cost_usd: float | None = None
    cache_hits: int = 0
    model: str | None = None  # the model the reply says served it, when it says
    fingerprint: str | None = None  # the reply's ``system_fingerprint`` (OpenAI), when it says


class Provider(Protocol):
    """A model behind an arm: what the engine asks of it. ``BaseProvider`` gives the defaults."""

    @property
    def instant(self) -> bool:
        """It answers at once, without I/O, sleeps or retries (sim without latency or faults,
        replay, reference): its items run on pytest's thread instead of a pool thread and back."""
        ...

    @property
    def endpoint_url(self) -> str | None:
        """The URL its calls go to over the network (None: it calls none): with ``endpoint_key``,
        what ``engine.limiter`` keeps one adaptive limit for."""
        ...

    @property
    def endpoint_key(self) -> str | None:
        """The key it sends to ``endpoint_url`` (kept by the limiter only as a digest)."""
        ...

    def complete(self, request: Request) -> Completion:
        """Return the model's answer or raise a ProviderError subclass."""
        ...

    def close(self) -> None:
        """Close what it holds open (sockets, clients) once the run's calls are done."""
        ...


class BaseProvider:
    """The defaults of ``Provider``: not instant, no endpoint, nothing to close. A provider
    subclasses it and writes ``complete`` (and overrides what differs)."""

    instant: bool = False
    endpoint_url: str | None = None
    endpoint_key: str | None = None

    def close(self) -> None:
        """Nothing is held open."""


# A caller runs a sibling arm through retries and classification; composite arms get one.
Caller = Callable[[str, "Request"], Completion]
Factory = Callable[["ArmSpec", "Spec", Caller], Provider]


@dataclass(frozen=True)
class Route:
    """The calls a routing arm makes for an item, read once from its options: its cheap calls
    (one per ask: a single cheap arm asked ``n`` times is named ``n`` times), each call's persona,
    the strong arm asked when it escalates, and the judge of agreement (None: lexical)."""

    cheap: tuple[str, ...]
    personas: tuple[str | None, ...]
    strong: str
    judge: str | None = None

    @property
    def arms(self) -> list[str]:
        """Every arm it may call, once each: the cheap ones, the strong one, the judge."""
        judge = [self.judge] if self.judge else []
        return list(dict.fromkeys([*self.cheap, self.strong, *judge]))


@dataclass(frozen=True)
class ProviderInfo:
    """What the engine, the budget, the estimate, the cache and the spec check need to know of a
    provider, besides how to build it: one per ``provider:`` name (``providers.PROVIDERS``)."""

    build: Factory
    # Its answers are kept in the response cache: a real model's. The simulator, replays and
    # references cost nothing, and caching the simulator would bypass its fault drills.
    cacheable: bool = False
    base_url: str | None = None  # where its calls go when the spec names no base_url
    key_env: tuple[str, ...] = ()  # where its key is read when the spec names no variable
    # What one call sends beside its prompt, as the provider builds the request: the budget's worst
    # case reads its reply's bound (max_tokens, n) and every field a model reads from it.
    sent: Callable[[ArmSpec], dict[str, Any]] | None = None
    # A routing arm's calls, read from its options (refusing bad ones, with the spec's line).
    routes: Callable[[ArmSpec, Spec], Route] | None = None
    # Its calls to other arms are its own code's: no worst case, counted as one call in an estimate.
    opaque: bool = False
    no_prompt: str | None = None  # why it takes no ``prompt:`` of its own (None: it takes one)
    describe: Callable[[ArmSpec], str] | None = None  # what it calls, for a message (no base_url)
    system: bool = False  # it sends a request's ``system`` text apart from its prompt
    batch: bool = False  # it has a batch API (providers.batch)

    @property
    def composite(self) -> bool:
        """It answers through other arms' calls: its own call costs nothing, theirs do."""
        return self.routes is not None or self.opaque


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

