"""What a failure does to the run: its text as rows and messages show it (the spec's secrets
redacted), the run-wide stop it triggers, and the outcome its item comes to.

Every step of running an item (the call, a judge's call, grading, the row's append) ends its
failures here, so a quota error stops the run the same way wherever it was met.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from pytest_echo_bench.engine.declared import with_judges
from pytest_echo_bench.engine.outcome import ABORTED, INCOMPLETE, UNAVAILABLE, Job, Outcome, utcnow
from pytest_echo_bench.engine.stop import StopSignal
from pytest_echo_bench.errors import (
    AbortedError,
    ExhaustedError,
    IncompleteError,
    LocalError,
    PermanentError,
    StoreError,
    UnavailableError,
)
from pytest_echo_bench.providers.secrets import spec_secrets
from pytest_echo_bench.scoring.verdict import Verdict, failed
from pytest_echo_bench.spec.load import Spec
from pytest_echo_bench.store.files import StopReason
from pytest_echo_bench.store.redaction import Secrets, redact
from pytest_echo_bench.store.safe_text import shown

# What a failed call may raise once the call path has classified it (``CallPath.call``).
CallFailure = (UnavailableError, AbortedError, IncompleteError, ExhaustedError, LocalError,
               PermanentError)


class Failures:
    """This process's side of every failure; ``on_stop`` tells pytest the run is stopping."""

    def __init__(self, stop: StopSignal, results: Path, worker: str,
                 on_stop: Callable[[str], None]) -> None:
        self.stop, self.results, self.worker, self.on_stop = stop, str(results), worker, on_stop
        self._secrets: dict[str, Secrets] = {}  # spec path -> what its error texts must not show

    def text(self, spec: Spec, exc: BaseException | str) -> str:
        """An error's text as a row or a message may carry it: the spec's secrets redacted
        (``providers.secrets``: keys, proxy credentials, the variables it names; its judges' too).

        Servers, proxies and CLIs quote what they were sent (a header, a body that echoes it), so
        any error text may hold a key; this is the one place error texts pass on their way out.
        """
        secrets = self._secrets.get(str(spec.path))
        if secrets is None:
            secrets = self._secrets[str(spec.path)] = spec_secrets(with_judges(spec))
        return redact(str(exc), secrets)

    def outcome(self, item: Job, exc: BaseException) -> Outcome | Verdict:
        """What an item whose call failed with ``exc`` (one of ``CallFailure``) comes to; a
        ``Verdict``: the item's error row, to record."""
        text = self.text(item.spec, exc)
        if isinstance(exc, UnavailableError):
            return Outcome(UNAVAILABLE, message=text, misconfigured=exc.misconfigured)
        if isinstance(exc, AbortedError):
            return Outcome(ABORTED, message=text)
        if isinstance(exc, IncompleteError):
            tried = f"not completed after {exc.attempts} attempts"
            return Outcome(INCOMPLETE, message=f"{tried}: {text}")
        if isinstance(exc, ExhaustedError):
            reason = self.exhausted(item.spec, item.example.id, item.arm, item.nodeid, text, exc)
            return Outcome(ABORTED, message=f"provider exhausted: {text}", stop=reason)
        if isinstance(exc, LocalError):
            return self.local(item, exc)
        return failed(text)

    def exhausted(self, spec: Spec, task_id: str, arm: str, where: str, text: str,
                  exc: ExhaustedError) -> StopReason:
        """Stop the run everywhere: the provider is out of quota (``text``: already redacted)."""
        reason = StopReason("exhausted", text)
        resume_at = exc.resume_at if exc.resume_at is not None else _after(exc.retry_after)
        # When the provider says when its window resets, the supervisor waits until then.
        when = {"resume_at": resume_at} if resume_at is not None else {}
        self.stop.trigger(reason, benchmark=spec.benchmark, task_id=task_id, arm=arm,
                          worker=self.worker, at=utcnow(), results=self.results, **when)
        # pytest prints this line as it is ("Interrupted: ..."): the server's text, shown escaped.
        self.on_stop(shown(f"echo-bench: provider exhausted on {where}: {text}", newlines=False))
        return reason

    def local(self, item: Job, exc: LocalError) -> Outcome:
        """Our machine failed the item: stop the run resumably; nothing is recorded."""
        text = self.text(item.spec, exc)
        reason = StopReason("local-error", text)
        self.stop.trigger(reason, benchmark=item.spec.benchmark, task_id=item.example.id,
                          arm=item.arm, worker=self.worker, at=utcnow(), results=self.results)
        self.on_stop(shown(f"echo-bench: local error on {item.nodeid}: {text}", newlines=False))
        return Outcome(ABORTED, message=f"not recorded: {text}", stop=reason)

    def unrecorded(self, exc: StoreError) -> Outcome:
        """The row could not be appended (disk full, a read-only directory...): stop the run; the
        rows already written stay intact."""
        reason = StopReason("store-error", str(exc))
        self.stop.trigger(reason, at=utcnow(), results=self.results)
        self.on_stop(f"echo-bench: {exc}")
        return Outcome(ABORTED, message=f"not recorded: {exc}", stop=reason)


def _after(seconds: float | None) -> float | None:
    return time.time() + seconds if seconds else None
