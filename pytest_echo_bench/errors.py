"""The one error tree of pytest-echo-bench.

    EchoBenchError
    ├── SpecError (ValueError)          a spec file is wrong: carries path, line, key
    ├── StoreError (OSError)            the results file cannot be read or written
    └── ProviderError                   a model call failed; the subclass says what the run does
        ├── ExhaustedError              quota / credit / usage limit / lost access: stop the run
        ├── TransientError              timeout, connection, rate limit, 5xx, overloaded: retry
        └── PermanentError              this item cannot succeed (e.g. 400): record a failed row

Run control signals, not failures of a call:
    AbortedError                        the run is stopping; this item was not attempted
    IncompleteError                     transient errors outlasted every retry; not recorded
    UnavailableError                    the arm cannot run here (SDK, binary or key missing): skip
"""

from __future__ import annotations


class EchoBenchError(Exception):
    """Root of every error raised by pytest-echo-bench."""


class SpecError(EchoBenchError, ValueError):
    """A benchmark spec is invalid; the message names file, line and key."""

    def __init__(self, message: str, path: str = "", line: int | None = None, key: str = "") -> None:
        self.path = path
        self.line = line
        self.key = key
        where = path + (f":{line}" if line else "")
        what = f" [{key}]" if key else ""
        super().__init__(f"{where}{what}: {message}" if where else message)


class StoreError(EchoBenchError, OSError):
    """The results file is unreadable, malformed or cannot be written."""


class ProviderError(EchoBenchError):
    """A model call failed. ``retry_after`` is the server's hint in seconds, if any."""

    kind = "error"

    def __init__(self, message: str, *, retry_after: float | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.status = status


class ExhaustedError(ProviderError):
    """Quota, credit or usage limit reached (or the key lost access): the whole run must stop."""

    kind = "exhausted"


class TransientError(ProviderError):
    """A failure that may pass: retried with backoff, never recorded as a wrong answer."""

    kind = "transient"


class PermanentError(ProviderError):
    """The call cannot succeed for this item; recorded as a failed row with the error."""

    kind = "permanent"


class AbortedError(EchoBenchError):
    """The run is stopping (exhaustion elsewhere); this item made no call and is not recorded."""


class IncompleteError(EchoBenchError):
    """Transient errors outlasted every attempt; the item is left for a resume."""

    def __init__(self, message: str, attempts: int) -> None:
        super().__init__(message)
        self.attempts = attempts


class UnavailableError(EchoBenchError):
    """An arm cannot run here (missing SDK, binary or API key): its items skip with this reason."""
