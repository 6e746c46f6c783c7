"""The one error tree of pytest-echo-bench.

    EchoBenchError
    ├── SpecError (ValueError)          a spec file is wrong: carries path, line, key
    ├── StoreError (OSError)            the results file cannot be read or written
    └── ProviderError                   a model call failed; the subclass says what the run does
        ├── ExhaustedError              run scope: quota / credit / usage limit: stop the run
        ├── ArmError                    arm scope: not logged in, key refused, no such model,
        │                               endpoint unreachable or not the API: stop this arm
        ├── TransientError              timeout, connection, rate limit, 5xx, overloaded: retry
        └── PermanentError              item scope: this item cannot succeed (e.g. 400): record
                                        a failed row
    LocalError (OSError)                local scope: our own machine (EMFILE, ENOSPC): stop,
                                        record nothing

Run control signals, not failures of a call:
    AbortedError                        the run is stopping; this item was not attempted
    └── BudgetError                     its call's worst case does not fit the budget: not sent
    IncompleteError                     transient errors outlasted every retry; not recorded
    UnavailableError                    the arm cannot run here (SDK, binary or key missing): skip

And one warning, not an error (shown in pytest's warnings summary, or on the command's stderr):
    DatasetWarning (UserWarning)        the dataset loads, but looks wrong (every target one letter)
"""

from __future__ import annotations


class EchoBenchError(Exception):
    """Root of every error raised by pytest-echo-bench."""


class SpecError(EchoBenchError, ValueError):
    """A benchmark spec is invalid; the message names file, line and key."""

    def __init__(
        self, message: str, path: str = "", line: int | None = None, key: str = ""
    ) -> None:
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

    def __init__(
        self, message: str, *, retry_after: float | None = None, status: int | None = None
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.status = status


class ExhaustedError(ProviderError):
    """Quota, credit or usage limit reached: the whole run must stop.

    ``resume_at`` is when the provider says the window resets (Unix time), if it says.
    """

    kind = "exhausted"

    def __init__(self, message: str, *, retry_after: float | None = None, status: int | None = None,
                 resume_at: float | None = None) -> None:
        super().__init__(message, retry_after=retry_after, status=status)
        self.resume_at = resume_at


class ArmError(ProviderError):
    """This arm cannot work as configured (not logged in, key refused, unknown model, endpoint
    unreachable or not speaking the API): the arm stops, nothing of it is recorded, other arms go
    on. ``hint`` says what a person must do about it.

    ``fallback`` is what the same failure means once the arm has answered in this run (None: it
    always means the arm is unusable). A refused connection on an arm's first call says the
    endpoint is wrong; after a hundred answers it says the server restarted: retry.
    """

    kind = "arm"

    def __init__(self, message: str, *, hint: str = "", status: int | None = None,
                 fallback: ProviderError | None = None, absent: bool = False) -> None:
        super().__init__(message, status=status)
        self.hint = hint
        self.fallback = fallback
        # No credentials here at all (a CLI never logged in), as a missing key: an arm marked
        # optional may go without them. A refused key, a wrong model or base_url is a mistake.
        self.absent = absent


class TransientError(ProviderError):
    """A failure that may pass: retried with backoff, never recorded as a wrong answer."""

    kind = "transient"


class PermanentError(ProviderError):
    """The call cannot succeed for this item; recorded as a failed row with the error."""

    kind = "permanent"


class LocalError(EchoBenchError, OSError):
    """Our own machine failed the call (too many open files, disk full):
    stop resumably, record nothing."""


class AbortedError(EchoBenchError):
    """The run is stopping (exhaustion elsewhere); this item made no call and is not recorded."""


class BudgetError(AbortedError):
    """The worst case of this item's next call does not fit what the budget has left: the call is
    not sent, nothing is recorded, and a resume with a larger budget runs the item."""


class IncompleteError(EchoBenchError):
    """Transient errors outlasted every attempt; the item is left for a resume."""

    def __init__(self, message: str, attempts: int) -> None:
        super().__init__(message)
        self.attempts = attempts


class UnavailableError(EchoBenchError):
    """An arm cannot run here (missing SDK, binary or API key): its items skip with this reason.

    ``misconfigured``: it could run but is set up wrong (a refused key, no such model): an arm
    marked optional still makes the sweep incomplete for it.
    """

    def __init__(self, message: str, *, misconfigured: bool = False) -> None:
        super().__init__(message)
        self.misconfigured = misconfigured


class DatasetWarning(UserWarning):
    """A dataset that loads but looks like a mistake (every choice target the same letter)."""
