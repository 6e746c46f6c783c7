"""Pure modules: scoring, error classification and backoff, the results store."""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path

import pytest

from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.engine.calls import Classifier, backoff_delay, call_with_retries
from pytest_echo_bench.errors import (
    AbortedError,
    ExhaustedError,
    IncompleteError,
    PermanentError,
    StoreError,
    TransientError,
)
from pytest_echo_bench.providers.base import Completion, Request
from pytest_echo_bench.scoring.text import exact, numeric
from pytest_echo_bench.spec.load import RetryPolicy
from pytest_echo_bench.store.reader import read_index
from pytest_echo_bench.store.writer import ResultsWriter
from pytest_echo_bench.suites.bbh import score as bbh


@pytest.mark.parametrize(
    ("output", "target", "status", "answer"),
    [
        ("Let's see. So the answer is (B).", "(B)", "correct", "(B)"),
        ("The answer is (A). Wait, no: the answer is (C).", "(C)", "correct", "(C)"),
        ("Answer: D", "(B)", "wrong", "(D)"),
        ("(B)", "(B)", "correct", "(B)"),
        ("the answer is straightforward once we look closely", "(A)", "unparseable", None),
        ("So the answer is Yes.", "Yes", "correct", "Yes"),
        ("so the answer is no", "Yes", "wrong", "No"),
        ("So the answer is 1,024.", "1024", "correct", "1,024"),
        ("Many lines\nof reasoning\nwithout any conclusion", "7", "unparseable", None),
        ("So the answer is ) ] }.", ")]}", "correct", ") ] }"),
    ],
)
def test_bbh_scorer(output: str, target: str, status: str, answer: str | None) -> None:
    verdict = bbh(output, target, {})
    assert (verdict.status, verdict.answer) == (status, answer)


def test_bbh_strict_follows_the_paper() -> None:
    assert bbh("So the answer is (B).", "(B)", {"strict": True}).passed
    assert not bbh("So the answer is B.", "(B)", {"strict": True}).passed
    assert bbh("The answer: (B)", "(B)", {"strict": True}).status == "unparseable"


def test_exact_and_numeric_details_keep_the_old_format() -> None:
    assert exact(" 4\n", "4", {}).detail == "passed"
    assert exact("5", "4", {}).detail == "expected 4 got 5"
    assert exact("  ", "4", {}).detail == "unparseable"
    assert numeric("about 3.99 I think", "4", {"tol": 0.05}).passed


class Flaky:
    def __init__(self, errors: list[Exception]) -> None:
        self.errors = errors
        self.calls = 0

    def complete(self, request: Request) -> Completion:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return Completion("ok")


REQ = Request(Example("t1", "in", "out"), "arm", "in")
FAST = RetryPolicy(attempts=3, backoff_s=0.001, max_backoff_s=0.002)


def test_transient_errors_are_retried_then_succeed() -> None:
    provider = Flaky([TransientError("529"), TimeoutError("slow")])
    done = call_with_retries(provider, REQ, FAST, Classifier(), threading.Event())
    assert (done.completion.text, done.attempts, len(done.retries)) == ("ok", 3, 2)


def test_retries_run_out_as_incomplete() -> None:
    provider = Flaky([TransientError("529")] * 5)
    with pytest.raises(IncompleteError) as info:
        call_with_retries(provider, REQ, FAST, Classifier(), threading.Event())
    assert info.value.attempts == 3 and provider.calls == 3


def test_exhaustion_is_never_retried() -> None:
    provider = Flaky([RuntimeError("You exceeded your current quota")])
    with pytest.raises(ExhaustedError):
        call_with_retries(provider, REQ, FAST, Classifier(), threading.Event())
    assert provider.calls == 1


def test_a_stop_makes_no_call() -> None:
    stop = threading.Event()
    stop.set()
    provider = Flaky([])
    with pytest.raises(AbortedError):
        call_with_retries(provider, REQ, FAST, Classifier(), stop)
    assert provider.calls == 0


@pytest.mark.parametrize(
    ("error", "patterns", "kind"),
    [
        (ValueError("bad prompt"), {}, PermanentError),
        (ConnectionResetError("reset"), {}, TransientError),
        (ValueError("Claude usage limit reached"), {}, ExhaustedError),
        (ValueError("server overloaded"), {"transient": ("overloaded",)}, TransientError),
        (TransientError("weird quota thing"), {"exhaustion": ("quota thing",)}, ExhaustedError),
    ],
)
def test_classification(error: Exception, patterns: dict[str, tuple[str, ...]], kind: type) -> None:
    assert type(Classifier(**patterns).classify(error)) is kind


def test_backoff_grows_with_jitter_and_a_retry_after_is_waited_exactly() -> None:
    policy = RetryPolicy(attempts=5, backoff_s=1.0, max_backoff_s=8.0)
    rng = random.Random(0)
    delays = [backoff_delay(policy, n, None, rng) for n in (1, 2, 3, 4, 5)]
    assert 0.5 <= delays[0] <= 1.0 and 1.0 <= delays[1] <= 2.0 and all(d <= 8.0 for d in delays)
    assert backoff_delay(policy, 1, 30.0, rng) == 30.0
    # the server knows when it admits the next call
    assert backoff_delay(policy, 3, 0.02, rng) == 0.02
    # "retry-after: 0" says nothing: our backoff
    assert 0.5 <= backoff_delay(policy, 1, 0.0, rng) <= 1.0


def test_writer_writes_meta_once_and_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    writer = ResultsWriter(path, "always", meta={"_meta": True, "benchmark": "b"})
    threads = [
        threading.Thread(
            target=lambda i=i: writer.append(
                json.dumps({"task_id": f"t{i}", "arm": "a"}).encode() + b"\n"
            )
        )
        for i in range(50)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    writer.close()
    lines = path.read_text().splitlines()
    assert json.loads(lines[0])["_meta"] and len(lines) == 51
    assert read_index(path).keys == {("b", f"t{i}", "a") for i in range(50)}


def test_writer_cuts_a_torn_tail_before_appending(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text('{"_meta": true, "benchmark": "b"}\n{"task_id": "t0", "arm"')
    writer = ResultsWriter(path)
    writer.append(b'{"task_id":"t1","arm":"a"}\n')
    writer.close()
    assert path.read_text().splitlines()[1] == '{"task_id":"t1","arm":"a"}'
    assert (tmp_path / "r.jsonl.torn").read_text() == '{"task_id": "t0", "arm"\n'


def test_read_index_stops_at_the_offset(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(
        '{"task_id":"t0","arm":"a","benchmark":"b"}\n{"task_id":"t1","arm":"a","benchmark":"b"}\n'
    )
    assert read_index(path, upto=43).keys == {("b", "t0", "a")}


def test_unwritable_results_path_is_a_clear_store_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(StoreError, match="cannot open results file"):
        ResultsWriter(tmp_path / "file" / "r.jsonl").append(b"{}\n")


def test_a_whole_row_missing_only_its_newline_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text('{"_meta": true, "benchmark": "b"}\n{"task_id": "t0", "arm": "a"}')
    writer = ResultsWriter(path)
    writer.append(b'{"task_id":"t1","arm":"a"}\n')
    writer.close()
    assert read_index(path).keys == {("b", "t0", "a"), ("b", "t1", "a")}
    assert not (tmp_path / "r.jsonl.torn").exists()


def test_only_arms_with_nothing_to_wait_for_run_on_pytests_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Instant providers graded by a text check skip the pool; anything that waits keeps it."""
    from pytest_echo_bench.engine.runner import Runner
    from pytest_echo_bench.engine.stop import StopSignal
    from pytest_echo_bench.spec.load import load_spec

    results = tmp_path / "r.jsonl"
    results.write_text('{"task_id":"q0","arm":"x","output":"4"}\n')
    spec_text = (
        "benchmark: b\ndataset: {loader: inline, items: [{id: q0, input: '2+2', target: "
        "'4'}]}\nscorer: SCORER\narms:\n"
        "  plain: {provider: sim}\n  slow: {provider: sim, latency_s: 0.01}\n"
        "  flaky: {provider: sim, faults: {transient_rate: 0.1}}\n  ref: {provider: reference}\n"
        f"  again: {{provider: replay, path: {results}}}\n"
        "  api: {provider: openai, model: m, client: http, base_url: "
        "'http://127.0.0.1:9/v1', api_key_env: ECHO_TEST_KEY}\n"
        "  nokey: {provider: openai, model: m, client: http, api_key_env: NO_SUCH_KEY}\n"
    )
    monkeypatch.setenv("ECHO_TEST_KEY", "k")
    monkeypatch.delenv("NO_SUCH_KEY", raising=False)
    writer = ResultsWriter(tmp_path / "out.jsonl")
    runner = Runner(
        writer, StopSignal(tmp_path / "out.jsonl"), "r", "main", on_stop=lambda reason: None
    )
    (tmp_path / "exact.yaml").write_text(spec_text.replace("SCORER", "exact"))
    (tmp_path / "code.yaml").write_text(spec_text.replace("SCORER", "humaneval"))
    exact_spec, code_spec = load_spec(tmp_path / "exact.yaml"), load_spec(tmp_path / "code.yaml")
    instant = {arm: runner.arm(exact_spec, arm).instant for arm in exact_spec.arms}
    assert instant == {
        "plain": True,
        "slow": False,
        "flaky": False,
        "ref": True,
        "again": True,
        "api": False,
        "nokey": True,
    }  # unavailable: it fails at once, with its reason
    # a sandbox run per item
    assert not any(runner.arm(code_spec, arm).instant for arm in code_spec.arms)
    writer.close()


def test_a_key_set_is_a_set_of_keys() -> None:
    from pytest_echo_bench.store.records import KeySet

    keys = KeySet(
        [
            ("b", "t1", "a", 1),
            ("b", "t2", "a", 1),
            ("b", "t1", "c", 1),
            ("", "t1", "a", 1),
            ("b", "t1", "a", 1),
            ("b", "t1", "a", 2),
        ]
    )
    assert len(keys) == 5 and set(keys) == {
        ("b", "t1", "a", 1),
        ("b", "t2", "a", 1),
        ("b", "t1", "c", 1),
        ("", "t1", "a", 1),
        ("b", "t1", "a", 2),
    }
    assert (
        ("b", "t2", "a", 1) in keys
        and ("b", "t2", "c", 1) not in keys
        and ("c", "t1", "a", 1) not in keys
    )
    # a key without an epoch is epoch 1's
    assert ("b", "t2", "a", 2) not in keys and ("b", "t1", "a") in keys
    assert ("b", "t1") not in keys and "bt1a" not in keys
    keys.discard(("b", "t1", "a", 2))
    assert keys == {
        ("b", "t1", "a", 1),
        ("b", "t2", "a", 1),
        ("b", "t1", "c", 1),
        ("", "t1", "a", 1),
    }
    assert keys != {("b", "t1", "a", 1)}


def test_appends_racing_close_leave_no_descriptor_open(tmp_path: Path) -> None:
    """Calls that land while the run ends are refused; none reopens the file or its lock."""
    import os

    def open_fds() -> set[str]:
        return set(os.listdir("/proc/self/fd"))

    before = open_fds()
    rows = 0
    for n in range(60):
        writer = ResultsWriter(tmp_path / f"r{n}.jsonl")
        writer.append(b'{"task_id":"t","arm":"a"}\n')
        refused = threading.Event()

        def hammer(writer: ResultsWriter = writer, refused: threading.Event = refused) -> None:
            nonlocal rows
            while True:
                try:
                    writer.append(b'{"task_id":"t","arm":"b"}\n')
                    rows += 1
                except AbortedError:
                    refused.set()
                    return

        threads = [threading.Thread(target=hammer) for _ in range(3)]
        for t in threads:
            t.start()
        writer.close()
        for t in threads:
            t.join(10)
        assert refused.is_set() and not any(t.is_alive() for t in threads)
        lines = (tmp_path / f"r{n}.jsonl").read_bytes().splitlines()
        assert all(
            line.startswith(b'{"task_id":"t","arm":') and line.endswith(b"}") for line in lines
        )
    assert open_fds() <= before and rows > 0
