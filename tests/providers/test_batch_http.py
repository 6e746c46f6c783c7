"""What both batch clients share (``providers.batch_http``), on the loopback batch server: paths
under a base_url that carries a query, the multipart form of an upload as a server parses it,
results files read line by line, request counts that are no counts, and the server's hold of a
reply (what a test kills its client during)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from batch_arms import provider, requests
from batch_files import multipart_file
from batch_server import BatchServer

from pytest_echo_bench.errors import PermanentError
from pytest_echo_bench.providers.batch import BatchResult
from pytest_echo_bench.providers.batch_http import ResultReader, count, multipart

pytestmark = pytest.mark.usefixtures("api_key", "no_network_variables")


@pytest.fixture
def server() -> Iterator[BatchServer]:
    with BatchServer() as running:
        yield running


def test_a_base_url_with_a_query_keeps_it_on_every_path(
    server: BatchServer, tmp_path: Path
) -> None:
    api = provider(tmp_path, "openai", server.openai_url + "?api-version=7").batch_api()
    batch_id = api.submit(requests(1), "run")
    api.status(batch_id)
    api.find("run", frozenset(), since=0)
    api.close()
    assert server.targets == [
        "/v1/files?api-version=7", "/v1/batches?api-version=7",
        f"/v1/batches/{batch_id}?api-version=7", "/v1/batches?limit=100&api-version=7"]


def test_an_upload_is_the_form_a_server_reads() -> None:
    content = b'{"a": 1}\r\n--not-the-boundary\r\n\x00\xff'
    body = multipart("b0undary", {"purpose": "batch"}, "in.jsonl", content)
    fields, file = multipart_file("multipart/form-data; boundary=b0undary", body)
    assert fields == {"purpose": "batch", "filename": "in.jsonl"} and file == content


def test_lines_are_read_whatever_ends_them() -> None:
    reader = ResultReader("batch b")
    body = b'{"custom_id": "a"}\r\n\n  \n{"custom_id": "b"}'  # CRLF, blank lines, no final newline
    read = list(reader.read(body, "results", lambda c, line, place: BatchResult(c)))
    assert [r.custom_id for r in read] == ["a", "b"]
    reader.finish()  # nothing unreadable


def test_a_line_without_an_id_is_reported_once_the_rest_is_read() -> None:
    reader = ResultReader("batch b")
    body = b'{"custom_id": 5}\n{"custom_id": "a"}\n{"custom_id": "a"}\n'
    read = reader.read(body, "results", lambda c, line, place: BatchResult(c))
    assert [r.custom_id for r in read] == ["a"]
    with pytest.raises(PermanentError, match="batch b: results line 1 of its results"):
        reader.finish()


@pytest.mark.parametrize("value", [None, -1, True, 1.5, "3", [3]])
def test_a_count_that_is_no_count_reads_as_nothing(value: object) -> None:
    assert count({"total": value}, "total") == 0
    assert count(value, "total") == 0


def test_a_held_creation_has_made_its_batch_before_the_client_hears_of_it(
    server: BatchServer, tmp_path: Path
) -> None:
    arrived, release = server.hold("create")
    api = provider(tmp_path, "anthropic", server.base_url).batch_api()
    with ThreadPoolExecutor(1) as pool:
        submitted = pool.submit(api.submit, requests(2), "run")
        assert arrived.wait(10)
        (made,) = server.jobs  # the batch exists: a client killed now never records its id
        assert not submitted.done()
        release.set()
        assert submitted.result(10) == made
    api.close()
