"""The one classifier: which scope a failed call has, so the run does the right thing with it.

    item       PermanentError   this prompt fails (a 400 for its length, a content filter): an
                                error row
    arm        ArmError         this arm cannot work as configured (not logged in, key refused, no
                                such model, endpoint unreachable or not the API, a certificate
                                that fails verification): the arm stops,
                                nothing of it is recorded, the other arms go on
    run        ExhaustedError   quota or usage exhausted: every process stops; resumable later
    local      LocalError       our own machine (too many open files, disk full): the run stops
                                resumably; nothing is recorded
    (transient TransientError   may pass: retried with backoff, never recorded)

Providers raise the class they know; whatever else is raised, and every text, passes here. The
error tables of docs/exit-status.md and docs/providers.md list the rules.
"""

from __future__ import annotations

import errno
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass

from pytest_echo_bench.errors import (
    ArmError,
    ExhaustedError,
    LocalError,
    PermanentError,
    ProviderError,
    TransientError,
)
from pytest_echo_bench.providers.network import TLS_HINT, cert_failure

# Texts that mean "out of quota/credit" in an error without an HTTP status (a CLI's output, an
# exception of unknown origin). An error with a status was classified by its provider from the
# reply's error code and type, which it knows: a word in its message ("billing" in a 400 about a
# prompt) does not stop the run. The spec's ``errors.exhaustion`` patterns apply to every error.
BUILTIN_EXHAUSTION = (
    r"insufficient_quota",
    r"exceeded your current quota",
    r"credit balance is too low",
    r"usage limit",
    r"\bbilling_(?:error|hard_limit_reached|not_active)\b",
    r"credit_balance_exhausted",
    r"quota exceeded",
    r"out of credits",
)
# Messages that mean the arm's credentials are wrong, whatever the status: LiteLLM without a
# database answers a wrong key with "400 No connected db."; CLIs say it in text.
BUILTIN_ARM = (
    r"No connected db", r"invalid api key", r"incorrect api key", r"invalid x-api-key",
    r"Invalid proxy server token", r"not logged in", r"please run /login",
)
# A proxy that does not serve the model answers 400, not 404 (LiteLLM: "Invalid model name passed
# in model=..."), the same for every item.
BUILTIN_MODEL = (
    r"Invalid model name passed",
    r"model_not_found",
    r"The model `[^`]*` does not exist",
)
# errno values that are our machine's trouble, not the provider's: retrying only repeats them
# and recording them would grade a full disk as a wrong answer.
LOCAL_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOSPC, errno.EDQUOT, errno.ENOMEM})
LOCAL_HINT = (
    "free the resource (open files: raise `ulimit -n` or lower --bench-concurrency; disk: "
    "free space; "
    "memory: lower --bench-concurrency or the number of workers), then resume"
)
CREDENTIALS_HINT = (
    "the arm's credentials were refused: fix its key (or log the CLI in), then resume"
)
MODEL_HINT = (
    "the server does not serve this model: check the arm's model (and base_url), then resume"
)
UNREACHABLE_HINT = "check base_url (scheme, host, port) and that the server is running"


@dataclass(frozen=True)
class Classifier:
    exhaustion: tuple[str, ...] = ()
    transient: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "_exhausted", _compile(self.exhaustion))
        object.__setattr__(self, "_transient", _compile(self.transient))

    def classify(self, exc: BaseException) -> ProviderError | LocalError:
        """Map any exception onto a scope; spec patterns refine the built-in rules."""
        if isinstance(exc, LocalError):
            return exc
        local = local_cause(exc)
        if local is not None:
            return LocalError(f"{described(local)}; {LOCAL_HINT}")
        error = exc if isinstance(exc, ProviderError) else _builtin(exc)
        text = str(exc)
        if not isinstance(error, ArmError) and cert_failure(exc) is not None:
            # A certificate that fails verification fails every call the same way: retried as
            # transient it kept a run "incomplete" for days. The arm's settings must change.
            return ArmError(text, hint=TLS_HINT, status=error.status)
        exhausted, transient = self._exhausted, self._transient  # type: ignore[attr-defined]
        if not isinstance(error, ExhaustedError) and (
            exhausted.search(text) or (error.status is None and _EXHAUSTED.search(text))
        ):
            return ExhaustedError(text, status=error.status)
        if isinstance(error, (PermanentError, TransientError)) and _ARM.search(text):
            return ArmError(
                text, hint=CREDENTIALS_HINT, status=error.status, absent=bool(_ABSENT.search(text))
            )
        if isinstance(error, PermanentError) and _MODEL.search(text):
            return ArmError(text, hint=MODEL_HINT, status=error.status)
        if isinstance(error, TransientError) and unreachable(exc):
            return ArmError(text, hint=UNREACHABLE_HINT, status=error.status, fallback=error)
        if isinstance(error, PermanentError) and self.transient and transient.search(text):
            return TransientError(text, retry_after=error.retry_after, status=error.status)
        return error


def _compile(patterns: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in patterns) or r"(?!x)x", re.IGNORECASE)


_EXHAUSTED = _compile(BUILTIN_EXHAUSTION)
_ARM = _compile(BUILTIN_ARM)
# no login at all, as opposed to a refused one
_ABSENT = _compile((r"not logged in", r"please run /login"))
_MODEL = _compile(BUILTIN_MODEL)


def _builtin(exc: BaseException) -> ProviderError:
    name = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, (TimeoutError, ConnectionError, socket.timeout)):
        return TransientError(name)
    return PermanentError(name)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what caused it: SDKs wrap the OSError that says what really happened."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < 16:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def local_cause(exc: BaseException) -> OSError | MemoryError | None:
    """The error in ``exc``'s chain that is our own machine's (EMFILE,
    ENOSPC, out of memory), if any.

    MemoryError is this process out of memory (a Python arm building a huge list, a scorer, a
    reply too large to decode): no verdict on the item and no fault of the provider. Retrying it
    on a machine short of memory only repeats it; a row would grade it as the model's error.
    """
    for link in _chain(exc):
        if isinstance(link, (LocalError, MemoryError)):
            return link
        if isinstance(link, OSError) and link.errno in LOCAL_ERRNOS:
            return link
    return None


def described(local: BaseException) -> str:
    """``MemoryError: out of memory``, ``OSError: [Errno 24] Too many open files``."""
    text = str(local) or ("out of memory" if isinstance(local, MemoryError) else "")
    return f"{type(local).__name__}: {text}"


def unreachable(exc: BaseException) -> bool:
    """Nothing answers at the endpoint: the connection was refused or the host name is unknown."""
    return any(isinstance(link, (ConnectionRefusedError, socket.gaierror)) for link in _chain(exc))
