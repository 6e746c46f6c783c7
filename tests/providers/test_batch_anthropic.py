"""Anthropic's Message Batches client end to end against the loopback batch server: the requests
it sends (the live call's body as each one's params), the lifecycle to the end, every result
classified as a live call's, unrun requests after expiry and cancellation, finding a batch whose
submission outcome is unknown by its custom ids, a results download cut short, TLS and a proxy
as the live calls."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from anthropic_server import FakeAnthropic
from batch_arms import provider, requests
from batch_server import BatchServer, Job
from netparts import Cert, forward_proxy, https_url, make_cert, tls_server

from conftest import ANTHROPIC_KEY
from pytest_echo_bench.errors import (
    ArmError,
    ExhaustedError,
    PermanentError,
    TransientError,
)
from pytest_echo_bench.providers.batch import CANCELLING, ENDED, IN_PROGRESS
from pytest_echo_bench.providers.batch_anthropic import (
    MAX_BYTES,
    MAX_REQUESTS,
    AnthropicBatch,
)

pytestmark = pytest.mark.usefixtures("api_key", "no_network_variables")


@pytest.fixture
def server() -> Iterator[BatchServer]:
    with BatchServer() as running:
        yield running


@pytest.fixture
def batches(server: BatchServer, tmp_path: Path) -> Iterator[AnthropicBatch]:
    api = provider(tmp_path, "anthropic", server.base_url).batch_api()
    yield api
    api.close()


def run_to_end(api: AnthropicBatch, batch_id: str, polls: int = 20) -> list[Any]:
    seen = []
    for _ in range(polls):
        seen.append(api.status(batch_id))
        if seen[-1].state == ENDED:
            return seen
    raise AssertionError(f"not ended after {polls} polls: {seen[-1]}")


def test_a_batch_runs_to_the_end_and_each_result_is_a_live_calls(
    server: BatchServer, batches: AnthropicBatch
) -> None:
    server.fail.update({"c1": "quota", "c2": "429", "c3": "500", "c4": "400"})
    batch_id = batches.submit(requests(6), "run-1")
    assert [s.state for s in run_to_end(batches, batch_id)] == [ENDED]
    results = {r.custom_id: r for r in batches.results(batch_id)}
    assert sorted(results) == [f"c{i}" for i in range(6)]
    assert [results[c].completion.text for c in ("c0", "c5")] == ["echo q0", "echo q5"]
    assert results["c0"].completion.usage == {"prompt_tokens": 1, "completion_tokens": 2}
    kinds = {c: type(results[c].error) for c in ("c1", "c2", "c3", "c4")}
    assert kinds == {"c1": ExhaustedError, "c2": TransientError, "c3": TransientError,
                     "c4": PermanentError}
    assert dict(server.billed) == {"c0": 1, "c5": 1}
    final = batches.status(batch_id)
    assert (final.total, final.done, final.failed, final.raw) == (6, 6, 4, "ended")


def test_each_requests_params_are_the_live_calls_body(
    server: BatchServer, batches: AnthropicBatch, tmp_path: Path
) -> None:
    pairs = requests(3)
    batch_id = batches.submit(pairs, "run")
    with FakeAnthropic() as live:
        arm = provider(tmp_path / "live", "anthropic", live.base_url)
        for _, request in pairs:
            arm.complete(request)
        arm.close()
    assert [body for _, body in server.jobs[batch_id].requests] == [
        r["body"] for r in live.requests]
    assert {(h.get("x-api-key"), h.get("anthropic-version")) for _, _, h in server.calls} == {
        (ANTHROPIC_KEY, "2023-06-01")}
    assert (batches.max_requests, batches.max_bytes) == (MAX_REQUESTS, MAX_BYTES)
    assert batches.size(*pairs[0]) > len(pairs[0][1].prompt)


def test_progress_counts_as_requests_run(server: BatchServer, batches: AnthropicBatch) -> None:
    server.per_step = 2
    server.fail["c1"] = "400"
    batch_id = batches.submit(requests(5), "run")
    seen = run_to_end(batches, batch_id)
    assert [(s.state, s.total, s.done, s.failed) for s in seen] == [
        (IN_PROGRESS, 5, 2, 1), (IN_PROGRESS, 5, 4, 1), (ENDED, 5, 5, 1)]


def test_a_batch_anthropic_refuses_is_the_live_calls_error(batches: AnthropicBatch) -> None:
    pairs = requests(2)
    with pytest.raises(PermanentError, match="Anthropic batch creation: HTTP 400.*not unique"):
        batches.submit([*pairs, pairs[0]], "run")
    with pytest.raises(ArmError, match="Anthropic batch msgbatch_gone: HTTP 404"):
        batches.status("msgbatch_gone")
    with pytest.raises(ValueError, match="1 to 100000 requests"):
        batches.submit([], "run")


def test_expired_requests_are_unrun(server: BatchServer, batches: AnthropicBatch) -> None:
    server.per_step = 2
    batch_id = batches.submit(requests(5), "run")
    batches.status(batch_id)  # two run
    server.expire(batch_id)
    final = batches.status(batch_id)
    assert (final.state, final.done, final.total) == (ENDED, 2, 5)
    results = list(batches.results(batch_id))
    assert sorted(r.custom_id for r in results if r.unrun) == ["c2", "c3", "c4"]
    assert dict(server.billed) == {"c0": 1, "c1": 1}


def test_a_cancelled_batch_ends_with_its_unrun_requests(
    server: BatchServer, batches: AnthropicBatch
) -> None:
    server.per_step = 1
    batch_id = batches.submit(requests(3), "run")
    batches.status(batch_id)
    batches.cancel(batch_id)
    server.steps_per_poll = 0
    assert batches.status(batch_id).raw == "canceling"
    assert batches.status(batch_id).state == CANCELLING
    with pytest.raises(TransientError, match="has not ended"):
        list(batches.results(batch_id))
    server.advance(batch_id)
    results = list(batches.results(batch_id))
    assert sorted(r.custom_id for r in results if r.unrun) == ["c1", "c2"]
    assert [r.completion.text for r in results if r.completion] == ["echo q0"]


def test_find_keeps_running_batches_and_ended_ones_holding_the_ids(
    server: BatchServer, batches: AnthropicBatch
) -> None:
    server.steps_per_poll = 0
    ended = batches.submit(requests(2, "mine"), "run")
    other = batches.submit(requests(2, "theirs"), "run")
    running = batches.submit(requests(1, "late"), "run")
    for batch_id in (ended, other):
        server.advance(batch_id)
    since = server.clock() - 60
    assert sorted(batches.find("run", frozenset({"mine1"}), since)) == sorted([ended, running])
    assert batches.find("run", frozenset({"mine1"}), server.clock() + 3600) == []


def test_find_pages_and_stops_at_since(server: BatchServer, batches: AnthropicBatch) -> None:
    now = server.clock()
    for n in range(250):  # running batches, one a minute, the newest now
        job = Job(server.new_id("msgbatch_"), "anthropic", now - 60 * (249 - n),
                  [("x", {})], phase="running")
        server.jobs[job.id] = job
    assert len(batches.find("run", frozenset(), since=now - 60 * 1000)) == 250
    assert len([p for m, p, _ in server.calls if p == "/v1/messages/batches"]) == 3
    recent = batches.find("run", frozenset(), since=now - 60 * 20 - 30)
    assert len(recent) == 21 + 10  # 20 minutes, and the ten more of the clock's skew allowance


def test_a_submission_whose_reply_was_lost_is_found_by_its_custom_ids(
    server: BatchServer, tmp_path: Path
) -> None:
    release = threading.Event()
    server.hooks["create"] = lambda job: "reset" if not release.is_set() else None
    api = provider(tmp_path, "anthropic", server.base_url).batch_api()
    with pytest.raises(TransientError):
        api.submit(requests(3), "run")
    release.set()
    since = server.clock() - 60
    found = api.find("run", frozenset({"c0", "c1", "c2"}), since)
    assert found == list(server.jobs)
    run_to_end(api, found[0])
    assert api.find("run", frozenset({"c2"}), since) == found  # ended, holding c2
    assert dict(server.billed) == {"c0": 1, "c1": 1, "c2": 1}


def test_a_results_download_cut_short_is_transient_and_read_again(
    server: BatchServer, batches: AnthropicBatch
) -> None:
    cuts = iter(["cut"])
    server.hooks["results"] = lambda job: next(cuts, None)
    batch_id = batches.submit(requests(4), "run")
    run_to_end(batches, batch_id)
    with pytest.raises(TransientError):
        list(batches.results(batch_id))
    assert sorted(r.custom_id for r in batches.results(batch_id)) == ["c0", "c1", "c2", "c3"]


def test_the_results_url_is_not_followed_off_the_base_url(
    server: BatchServer, batches: AnthropicBatch
) -> None:
    batch_id = batches.submit(requests(1), "run")
    run_to_end(batches, batch_id)
    list(batches.results(batch_id))
    assert ("GET", f"/v1/messages/batches/{batch_id}/results") in [
        (m, p) for m, p, _ in server.calls]


def test_created_at_of_every_form_reads(server: BatchServer) -> None:
    from pytest_echo_bench.providers.batch_anthropic import _moment

    moment = datetime.datetime(2024, 9, 24, 18, 37, 24, 100435, datetime.UTC).timestamp()
    assert _moment("2024-09-24T18:37:24.100435Z") == moment
    assert _moment("2024-09-24T18:37:24.100435") == moment  # no zone: UTC
    assert _moment("yesterday") is None and _moment(5) is None


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> Cert:
    return make_cert(tmp_path_factory.mktemp("certs"), "echo-bench-batch-ca")


def test_through_a_proxy_to_a_private_ca(cert: Cert, tmp_path: Path) -> None:
    with tls_server(cert, BatchServer) as server, forward_proxy(tmp_path) as proxy:
        extra = f"    ca_file: {cert.cert}\n    proxy: {proxy.url}\n"
        api = provider(tmp_path, "anthropic", https_url(server, path=""), extra).batch_api()
        batch_id = api.submit(requests(2), "run-tls")
        run_to_end(api, batch_id)
        assert sorted(r.completion.text for r in api.results(batch_id)) == ["echo q0", "echo q1"]
        api.close()
        assert proxy.lines(f"127.0.0.1:{server.httpd.server_address[1]}", at_least=1)
