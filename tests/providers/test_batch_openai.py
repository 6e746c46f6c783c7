"""OpenAI's Batch API client end to end against the loopback batch server: the file it uploads
(the live call's body, line for line), the lifecycle to the end, every request's outcome
classified as a live call's, unrun requests after expiry and cancellation, finding a batch whose
submission outcome is unknown, a results download cut short, TLS and a proxy as the live calls."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from batch_arms import provider, requests
from batch_server import BatchServer, Job
from netparts import Cert, forward_proxy, https_url, make_cert, tls_server
from openai_server import FakeOpenAI

from conftest import OPENAI_KEY
from pytest_echo_bench.errors import ArmError, ExhaustedError, PermanentError, TransientError
from pytest_echo_bench.providers.batch import (
    CANCELLING,
    ENDED,
    FAILED,
    FINALIZING,
    IN_PROGRESS,
    VALIDATING,
)
from pytest_echo_bench.providers.batch_openai import MAX_BYTES, MAX_REQUESTS, OpenAIBatch

pytestmark = pytest.mark.usefixtures("api_key", "no_network_variables")


@pytest.fixture
def server() -> Iterator[BatchServer]:
    with BatchServer() as running:
        yield running


@pytest.fixture
def batches(server: BatchServer, tmp_path: Path) -> Iterator[OpenAIBatch]:
    api = provider(tmp_path, "openai", server.openai_url).batch_api()
    yield api
    api.close()


def run_to_end(api: OpenAIBatch, batch_id: str, polls: int = 20) -> list[Any]:
    """Every status on the way to the end."""
    seen = []
    for _ in range(polls):
        seen.append(api.status(batch_id))
        if seen[-1].state in (ENDED, FAILED):
            return seen
    raise AssertionError(f"not ended after {polls} polls: {seen[-1]}")


def test_a_batch_runs_to_the_end_and_each_outcome_is_a_live_calls(
    server: BatchServer, batches: OpenAIBatch, tmp_path: Path
) -> None:
    server.fail.update({"c1": "quota", "c2": "429", "c3": "500", "c4": "400"})
    batch_id = batches.submit(requests(6), "run-1")
    states = [s.state for s in run_to_end(batches, batch_id)]
    assert states == [IN_PROGRESS, FINALIZING, ENDED]
    results = {r.custom_id: r for r in batches.results(batch_id)}
    assert sorted(results) == [f"c{i}" for i in range(6)]
    assert [results[c].completion.text for c in ("c0", "c5")] == ["echo q0", "echo q5"]
    assert results["c0"].completion.usage == {"prompt_tokens": 1, "completion_tokens": 2}
    kinds = {c: type(results[c].error) for c in ("c1", "c2", "c3", "c4")}
    assert kinds == {"c1": ExhaustedError, "c2": TransientError, "c3": TransientError,
                     "c4": PermanentError}
    assert dict(server.billed) == {"c0": 1, "c5": 1}  # errors are not billed
    final = batches.status(batch_id)
    assert (final.total, final.done, final.failed, final.raw) == (6, 6, 4, "completed")


def test_the_file_holds_the_live_calls_body_and_the_batch_the_runs_tag(
    server: BatchServer, batches: OpenAIBatch, tmp_path: Path
) -> None:
    pairs = requests(3)
    batch_id = batches.submit(pairs, "run-7")
    job = server.jobs[batch_id]
    assert job.metadata == {"echo_bench_run": "run-7"}
    lines = [json.loads(line) for line in server.files[job.input_file_id].splitlines()]
    assert [(x["custom_id"], x["method"], x["url"]) for x in lines] == [
        (f"c{i}", "POST", "/v1/chat/completions") for i in range(3)]
    with FakeOpenAI() as live:  # the same arm's live call, its body as the server got it
        arm = provider(tmp_path / "live", "openai", live.base_url)
        for _, request in pairs:
            arm.complete(request)
        arm.close()
    assert [x["body"] for x in lines] == [r["body"] for r in live.requests]
    assert {headers.get("authorization") for _, _, headers in server.calls} == {
        f"Bearer {OPENAI_KEY}"}
    assert batches.size(*pairs[0]) == len(server.files[job.input_file_id].splitlines()[0]) + 1
    assert (batches.max_requests, batches.max_bytes) == (MAX_REQUESTS, MAX_BYTES)


def test_progress_counts_as_requests_run(server: BatchServer, batches: OpenAIBatch) -> None:
    server.per_step = 2
    server.fail["c1"] = "400"
    batch_id = batches.submit(requests(5), "run")
    seen = run_to_end(batches, batch_id)
    assert [(s.state, s.done, s.failed) for s in seen] == [
        (IN_PROGRESS, 0, 0), (IN_PROGRESS, 2, 1), (IN_PROGRESS, 4, 1), (FINALIZING, 5, 1),
        (ENDED, 5, 1)]


def test_a_batch_polled_only_when_the_test_says_stays_validating(
    server: BatchServer, batches: OpenAIBatch
) -> None:
    server.steps_per_poll = 0
    batch_id = batches.submit(requests(2), "run")
    assert batches.status(batch_id).state == VALIDATING
    server.advance(batch_id)
    assert batches.status(batch_id).state == IN_PROGRESS


def test_expired_requests_are_unrun(server: BatchServer, batches: OpenAIBatch) -> None:
    server.per_step = 2
    batch_id = batches.submit(requests(5), "run")
    batches.status(batch_id)  # validating -> in progress
    batches.status(batch_id)  # two run
    server.expire(batch_id)
    assert batches.status(batch_id).raw == "expired"
    results = list(batches.results(batch_id))
    assert sorted(r.custom_id for r in results if r.completion) == ["c0", "c1"]
    assert sorted(r.custom_id for r in results if r.unrun) == ["c2", "c3", "c4"]
    assert dict(server.billed) == {"c0": 1, "c1": 1}


def test_a_cancelled_batch_ends_with_its_unrun_requests(
    server: BatchServer, batches: OpenAIBatch
) -> None:
    server.per_step = 2
    batch_id = batches.submit(requests(4), "run")
    batches.status(batch_id)
    batches.status(batch_id)
    batches.cancel(batch_id)
    server.steps_per_poll = 0
    assert batches.status(batch_id).state == CANCELLING
    server.advance(batch_id)
    final = batches.status(batch_id)
    assert (final.state, final.raw) == (ENDED, "cancelled")
    results = list(batches.results(batch_id))
    assert sorted(r.custom_id for r in results if r.unrun) == ["c2", "c3"]
    assert len(results) == 4


def test_a_file_that_fails_validation_fails_the_batch_naming_the_line(
    server: BatchServer, batches: OpenAIBatch
) -> None:
    pairs = requests(3)
    batch_id = batches.submit([*pairs, pairs[1]], "run")  # c1 twice
    final = run_to_end(batches, batch_id)[-1]
    assert final.state == FAILED
    assert final.error is not None and "line 4: duplicate_custom_id" in final.error
    with pytest.raises(PermanentError, match=f"batch {batch_id} failed.*line 4"):
        list(batches.results(batch_id))
    assert not server.billed


def test_results_of_a_batch_still_running_are_not_read(
    server: BatchServer, batches: OpenAIBatch
) -> None:
    server.steps_per_poll = 0
    batch_id = batches.submit(requests(2), "run")
    with pytest.raises(TransientError, match="has not ended"):
        list(batches.results(batch_id))


def test_a_refused_call_is_the_live_calls_error(batches: OpenAIBatch) -> None:
    # a 404, as a live call's: another account's batch, or another base_url than it was sent to
    with pytest.raises(ArmError, match="OpenAI batch batch_nope: HTTP 404"):
        batches.status("batch_nope")
    with pytest.raises(ValueError, match="1 to 50000 requests"):
        batches.submit([], "run")


def test_find_lists_the_runs_batches_page_by_page(
    server: BatchServer, batches: OpenAIBatch
) -> None:
    now = server.clock()
    for n in range(230):  # three pages of 100, newest first
        job = Job(server.new_id("batch_"), "openai", now - 230 + n, [],
                  {"echo_bench_run": "mine" if n % 3 == 0 else "other"})
        server.jobs[job.id] = job
    found = batches.find("mine", frozenset(), since=now - 10_000)
    assert sorted(found) == sorted(j.id for j in server.jobs.values()
                                   if j.metadata["echo_bench_run"] == "mine")
    lists = [path for method, path, _ in server.calls if path == "/v1/batches"]
    assert len(lists) == 3
    assert batches.find("mine", frozenset(), since=now + 10_000) == []  # all older than since


def test_a_submission_whose_reply_was_lost_is_found_by_its_tag(
    server: BatchServer, tmp_path: Path
) -> None:
    release = threading.Event()
    server.hooks["create"] = lambda job: "reset" if not release.is_set() else None
    api = provider(tmp_path, "openai", server.openai_url).batch_api()
    with pytest.raises(TransientError):
        api.submit(requests(3), "run-lost")  # created, but the client never heard so
    release.set()
    found = api.find("run-lost", frozenset({"c0"}), since=server.clock() - 60)
    assert len(found) == 1 and server.jobs[found[0]].metadata == {"echo_bench_run": "run-lost"}
    run_to_end(api, found[0])
    assert sorted(r.custom_id for r in api.results(found[0])) == ["c0", "c1", "c2"]
    assert dict(server.billed) == {"c0": 1, "c1": 1, "c2": 1}


def test_a_results_download_cut_short_is_transient_and_read_again(
    server: BatchServer, batches: OpenAIBatch
) -> None:
    cuts = iter(["cut"])
    server.hooks["results"] = lambda job: next(cuts, None)
    batch_id = batches.submit(requests(4), "run")
    run_to_end(batches, batch_id)
    with pytest.raises(TransientError):
        list(batches.results(batch_id))
    assert sorted(r.custom_id for r in batches.results(batch_id)) == ["c0", "c1", "c2", "c3"]
    assert sum(server.billed.values()) == 4


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> Cert:
    return make_cert(tmp_path_factory.mktemp("certs"), "echo-bench-batch-ca")


def test_through_a_proxy_to_a_private_ca(cert: Cert, tmp_path: Path) -> None:
    with tls_server(cert, BatchServer) as server, forward_proxy(tmp_path) as proxy:
        extra = f"    ca_file: {cert.cert}\n    proxy: {proxy.url}\n"
        api = provider(tmp_path, "openai", https_url(server), extra).batch_api()
        batch_id = api.submit(requests(2), "run-tls")
        run_to_end(api, batch_id)
        assert sorted(r.completion.text for r in api.results(batch_id)) == ["echo q0", "echo q1"]
        api.close()
        assert proxy.lines(f"127.0.0.1:{server.httpd.server_address[1]}", at_least=1)
