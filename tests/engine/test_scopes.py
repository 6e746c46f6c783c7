"""The one classifier's scopes, the arm breaker, and what the supervisor does with each stop."""

from __future__ import annotations

import errno
import json
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import make_spec, sim_spec
from pytest_echo_bench.cli.main import main
from pytest_echo_bench.cli.supervise import RESET_MARGIN_S, supervise
from pytest_echo_bench.engine.breaker import REPEATS, ArmBreaker
from pytest_echo_bench.engine.calls import call_with_retries
from pytest_echo_bench.engine.scope import Classifier
from pytest_echo_bench.errors import (
    AbortedError,
    ArmError,
    ExhaustedError,
    LocalError,
    PermanentError,
    TransientError,
    UnavailableError,
)
from pytest_echo_bench.providers.base import Completion, Request
from pytest_echo_bench.spec.load import RetryPolicy
from pytest_echo_bench.store.files import StopReason, stop_path, write_stop


def wrapped(cause: BaseException, outer: type[Exception] = TransientError) -> Exception:
    """An SDK's way: its own error, raised from the OSError that says what happened."""
    try:
        raise outer("APIConnectionError: Connection error.") from cause
    except Exception as exc:
        return exc


@pytest.mark.parametrize(
    "error, scope",
    [
        (PermanentError("HTTP 400: maximum context length exceeded"), PermanentError),
        (TransientError("HTTP 429 rate_limit_exceeded: slow down"), TransientError),
        (
            PermanentError("HTTP 429 throttling_error: You exceeded your current quota"),
            ExhaustedError,
        ),
        (PermanentError("HTTP 400: No connected db."), ArmError),
        (
            TransientError("claude exited with status 1: Not logged in · Please run /login"),
            ArmError,
        ),
        (OSError(errno.EMFILE, "Too many open files"), LocalError),
        (wrapped(OSError(errno.ENOSPC, "No space left on device")), LocalError),
        (RuntimeError("scorer broke"), PermanentError),
        (wrapped(ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")), ArmError),
        (wrapped(socket.gaierror(-2, "Name or service not known")), ArmError),
        (wrapped(ConnectionResetError(errno.ECONNRESET, "reset")), TransientError),
    ],
    ids=[
        "item",
        "transient",
        "exhausted-by-text",
        "litellm-no-db",
        "cli-login",
        "emfile",
        "enospc-wrapped",
        "other",
        "refused",
        "dns",
        "reset",
    ],
)
def test_every_failure_gets_one_scope(error: Exception, scope: type[Exception]) -> None:
    assert type(Classifier().classify(error)) is scope


def test_unreachable_is_the_arms_only_before_it_answered() -> None:
    error = Classifier().classify(wrapped(ConnectionRefusedError(errno.ECONNREFUSED, "refused")))
    assert isinstance(error, ArmError) and isinstance(error.fallback, TransientError)


class Refused:
    def __init__(self) -> None:
        self.calls = 0

    def complete(self, request: Request) -> Completion:
        self.calls += 1
        raise wrapped(ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"))


REQ = Request(None, "a", "p")  # type: ignore[arg-type]
FAST = RetryPolicy(attempts=6, backoff_s=0.001, max_backoff_s=0.002)


def test_a_probe_gives_up_an_unreachable_arm_after_a_few_tries_an_answered_arm_retries_it_all() -> (
    None
):
    probe = Refused()
    with pytest.raises(ArmError):
        call_with_retries(probe, REQ, FAST, Classifier(), threading.Event(), probing=True)
    assert probe.calls == 3
    answered = Refused()
    with pytest.raises(Exception, match="6 transient errors"):
        call_with_retries(answered, REQ, FAST, Classifier(), threading.Event(), probing=False)
    assert answered.calls == 6


def test_the_breaker_trips_on_repeats_and_not_on_different_errors() -> None:
    same = ArmBreaker()
    assert [same.repeated("HTTP 400: bad parameter") for _ in range(REPEATS)] == [False] * (
        REPEATS - 1
    ) + [True]
    differ = ArmBreaker()
    assert not differ.repeated("too long: item 1") and not differ.repeated("too long: item 2")
    with differ.turn(threading.Event()) as probing:
        assert not probing  # two different errors: the items differ, the arm works


def test_calls_wait_for_the_first_one_and_fail_at_once_when_it_trips() -> None:
    breaker, stop = ArmBreaker(), threading.Event()
    seen: list[str] = []

    def second() -> None:
        try:
            with breaker.turn(stop):
                seen.append("called")
        except UnavailableError as exc:
            seen.append(str(exc))

    with breaker.turn(stop) as probing:
        assert probing
        waiter = threading.Thread(target=second)
        waiter.start()
        time.sleep(0.05)
        assert seen == []  # the second call waits for the first
        breaker.trip(UnavailableError("arm 'x' cannot work"))
    waiter.join(5)
    assert seen == ["arm 'x' cannot work"]
    stop.set()
    with pytest.raises(UnavailableError):
        with breaker.turn(stop):
            pass


def test_a_waiting_call_leaves_when_the_run_stops() -> None:
    breaker, stop = ArmBreaker(), threading.Event()
    got: list[BaseException] = []

    def waiter() -> None:
        try:
            with breaker.turn(stop):
                pass
        except AbortedError as exc:
            got.append(exc)

    with breaker.turn(stop):
        thread = threading.Thread(target=waiter)
        thread.start()
        stop.set()
        thread.join(5)
    assert len(got) == 1


def fake_runs(results: Path, stops: list[StopReason | None], **details: object) -> list[int]:
    """Each run writes the next stop (None: completes); returns its status."""
    statuses: list[int] = []

    def run(argv: list[str]) -> int:
        stop_path(results).unlink(missing_ok=True)
        stop = stops[len(statuses)]
        if stop is not None:
            write_stop(results, stop, **details)
        statuses.append(0 if stop is None else 2)
        return statuses[-1]

    return run  # type: ignore[return-value]


def test_the_supervisor_waits_until_the_providers_reset_time(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    waits: list[float] = []
    log: list[str] = []
    run = fake_runs(
        out, [StopReason("exhausted", "usage limit"), None], resume_at=time.time() + 120
    )
    argv = ["pytest", "--bench-out", str(out)]
    status = supervise(
        argv, 3, 3600, log.append, run=run, sleep=waits.append  # type: ignore[arg-type]
    )
    assert status == 0
    assert len(waits) == 1 and 120 <= waits[0] <= 120 + RESET_MARGIN_S + 1  # not the 3600 s backoff
    assert any("window resets at" in line for line in log)


def test_the_supervisor_ends_at_once_on_what_needs_fixing(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    for reason in ("arm-unavailable", "local-error", "store-error"):
        waits: list[float] = []
        log: list[str] = []
        run = fake_runs(out, [StopReason(reason, "arm 'gpt' cannot work as configured")])
        argv = ["pytest", "--bench-out", str(out)]
        status = supervise(
            argv, 5, 0, log.append, run=run, sleep=waits.append  # type: ignore[arg-type]
        )
        assert status == 2
        assert waits == []
        assert (
            "waiting would not fix this; fix it, then run:" in log[-1]
            and "--bench-resume" in log[-1]
        )


def test_echo_bench_run_ends_a_missing_key_sweep_at_once(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    arms = (
        "  good: {provider: sim, accuracy: 1.0}\n  gpt: {provider: openai, model: m, "
        "api_key_env: NO_SUCH_KEY_VAR}"
    )
    make_spec(pytester, sim_spec(3, arms=arms))
    out = pytester.path / "sup.jsonl"
    status = main(
        [
            "run",
            "--backoff",
            "600",
            "--",
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(pytester.path / "demo.yaml"),
            "--bench-out",
            str(out),
            "--rootdir",
            str(pytester.path),
        ]
    )
    log = capsys.readouterr().out
    assert status == 2, log
    assert log.count("echo-bench run: attempt") == 1  # and no 600 s backoff
    assert "arm-unavailable" in log and "set the environment variable NO_SUCH_KEY_VAR" in log
    assert json.loads(stop_path(out).read_text())["arms"] == ["demo/gpt"]


def test_once_the_arm_has_answered_the_waiting_calls_run_side_by_side() -> None:
    breaker, stop = ArmBreaker(), threading.Event()
    # two waiting calls and this thread, all in their turn at once
    inside = threading.Barrier(3, timeout=5)
    failures: list[BaseException] = []

    def call() -> None:
        try:
            with breaker.turn(stop) as probing:
                assert not probing
                inside.wait()
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            failures.append(exc)

    with breaker.turn(stop) as probing:
        assert probing
        threads = [threading.Thread(target=call) for _ in range(2)]
        for thread in threads:
            thread.start()
        breaker.answered()
    inside.wait()  # would time out if the two ran one after the other
    for thread in threads:
        thread.join(5)
    assert failures == []
