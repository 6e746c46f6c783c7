"""OpenAI's Batch API for an ``openai`` arm: the requests as a JSON Lines file, one batch per file.

``submit`` uploads the file (``POST /files``, ``purpose=batch``; each line ``{custom_id, method,
url: /v1/chat/completions, body}``, the body exactly what a live call sends) and creates the
batch (``POST /batches``, a 24 h window, ``metadata: {"echo_bench_run": tag}``). ``status`` maps
OpenAI's states onto the protocol's: ``validating``, ``in_progress``, ``finalizing`` as they are;
``completed``, ``expired`` and ``cancelled`` are ``ended`` (their results can be read);
``failed`` (the file did not validate) is ``failed``, with the file's errors; ``cancelling`` as it
is. ``results`` reads the output file (answers, and errors with a status and body) and the error
file: a 2xx body is parsed as a live reply; a non-2xx status and body are classified as a live
call's (quota: ``ExhaustedError``, 429 and 5xx: ``TransientError``, ...); a line with no response
and the error ``batch_expired`` or ``batch_cancelled`` is unrun (send it again). How a line that
cannot be read is treated: ``batch_http``. ``find`` pages through the account's batches (newest
first, at most ``LIST_PAGES`` pages, none created before ``since``) for those labelled ``tag``.

Limits (OpenAI's documentation): 50,000 requests and 200 MB per input file; ``size`` tells the
engine what one request adds to a file, so it can split batches by bytes as well.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from pytest_echo_bench.providers.base import Request
from pytest_echo_bench.providers.batch import (
    CANCELLING,
    ENDED,
    FAILED,
    FINALIZING,
    IN_PROGRESS,
    UNKNOWN,
    VALIDATING,
    BatchResult,
    BatchStatus,
)
from pytest_echo_bench.providers.batch_http import (
    BatchHTTP,
    ResultReader,
    Wire,
    count,
    ended,
    failed,
    listed,
    text,
)
from pytest_echo_bench.providers.http_json import JSONClient

ENDPOINT = "/v1/chat/completions"
TAG_KEY = "echo_bench_run"  # the metadata key that labels a run's batches
MAX_REQUESTS = 50_000
MAX_BYTES = 200 * 1024 * 1024
_STATES = {
    "validating": VALIDATING,
    "in_progress": IN_PROGRESS,
    "finalizing": FINALIZING,
    "completed": ENDED,
    "expired": ENDED,
    "cancelled": ENDED,
    "failed": FAILED,
    "cancelling": CANCELLING,
}
# A line's error without a response: these two say the request never ran.
_UNRUN = {"batch_expired", "batch_cancelled"}
# ...and these that it may run another time (read as a live 500); any other as a live 400.
_TRANSIENT_CODES = {"server_error", "rate_limit_exceeded", "timeout", "internal_error"}


class OpenAIBatch:
    """One ``openai`` arm's Batch API (``OpenAIProvider.batch_api``)."""

    max_requests = MAX_REQUESTS
    max_bytes = MAX_BYTES

    def __init__(self, client: JSONClient, wire: Wire) -> None:
        self.http = BatchHTTP(client, wire)

    def line(self, custom_id: str, request: Request) -> bytes:
        """One request's line of the input file, its newline included."""
        body = self.http.wire.payload(request)
        record = {"custom_id": custom_id, "method": "POST", "url": ENDPOINT, "body": body}
        return json.dumps(record, separators=(",", ":")).encode("utf-8") + b"\n"

    def size(self, custom_id: str, request: Request) -> int:
        """The bytes one request adds to a batch's input file (``max_bytes`` in all)."""
        return len(self.line(custom_id, request))

    def submit(self, requests: Sequence[tuple[str, Request]], tag: str) -> str:
        content = b"".join(self.line(custom_id, request) for custom_id, request in requests)
        _check_size(len(requests), len(content))
        uploaded = self.http.upload(
            "/files", {"purpose": "batch"}, "echo-bench-batch.jsonl", content,
            "OpenAI batch input upload",
        )
        file_id = text(uploaded.get("id"), "OpenAI batch input upload", "the file's id")
        created = self.http.json(
            "POST", "/batches", "OpenAI batch creation",
            {"input_file_id": file_id, "endpoint": ENDPOINT, "completion_window": "24h",
             "metadata": {TAG_KEY: tag}},
            create=True,
        )
        return text(created.get("id"), "OpenAI batch creation", "the batch's id")

    def status(self, batch_id: str) -> BatchStatus:
        where = f"OpenAI batch {batch_id}"
        data = self.http.json("GET", f"/batches/{batch_id}", where)
        return _status(batch_id, data)

    def results(self, batch_id: str) -> Iterator[BatchResult]:
        where = f"OpenAI batch {batch_id}"
        data = self.http.json("GET", f"/batches/{batch_id}", where)
        ended(where, _status(batch_id, data))
        reader = ResultReader(where)
        for label, key in (("output file", "output_file_id"), ("error file", "error_file_id")):
            file_id = data.get(key)
            if file_id is None:  # no request of that kind
                continue
            file_id = text(file_id, where, key)
            body = self.http.raw(f"/files/{file_id}/content", f"{where}, {label} {file_id}")
            yield from reader.read(body, label, self._result)
        reader.finish()

    def cancel(self, batch_id: str) -> None:
        self.http.json("POST", f"/batches/{batch_id}/cancel", f"OpenAI batch {batch_id} cancel")

    def find(self, tag: str, custom_ids: frozenset[str], since: float) -> list[str]:
        return [
            batch["id"]
            for batch in listed(self.http, "/batches", "after", since, _seconds,
                                "OpenAI batch listing")
            if isinstance(batch.get("metadata"), dict) and batch["metadata"].get(TAG_KEY) == tag
        ]

    def close(self) -> None:
        self.http.close()

    def _result(self, custom_id: str, line: dict[str, Any], place: str) -> BatchResult:
        response = line.get("response")
        if isinstance(response, dict):
            code = response.get("status_code")
            if isinstance(code, bool) or not isinstance(code, int):
                raise failed(place, "its response has no integer status_code")
            body = response.get("body")
            if 200 <= code < 300:
                return BatchResult(custom_id, completion=self.http.wire.parse(body))
            error = self.http.wire.error(code, body, {}, self.http.client.secrets)
            return BatchResult(custom_id, error=error)
        error = line.get("error")
        if not isinstance(error, dict):
            raise failed(place, "it has neither a response nor an error object")
        code = error.get("code")
        if code in _UNRUN:
            return BatchResult(custom_id)
        status = 500 if code in _TRANSIENT_CODES else 400
        return BatchResult(
            custom_id, error=self.http.wire.error(status, {"error": error}, {},
                                                  self.http.client.secrets)
        )


def _seconds(value: Any) -> float | None:
    """A ``created_at``: epoch seconds (None: not a number)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _check_size(requests: int, size: int) -> None:
    if not 0 < requests <= MAX_REQUESTS:
        raise ValueError(f"an OpenAI batch holds 1 to {MAX_REQUESTS} requests, not {requests}")
    if size > MAX_BYTES:
        raise ValueError(
            f"an OpenAI batch's input file holds at most {MAX_BYTES} bytes, not {size}: split it "
            "(size() gives each request's bytes)"
        )


def _status(batch_id: str, data: dict[str, Any]) -> BatchStatus:
    raw = data.get("status")
    # A word OpenAI does not document (a state added since): the batch goes on, polled again.
    state = _STATES.get(raw, UNKNOWN) if isinstance(raw, str) else UNKNOWN
    counts = data.get("request_counts")
    completed, errored = count(counts, "completed"), count(counts, "failed")
    return BatchStatus(
        batch_id, state, count(counts, "total"), completed + errored, errored, str(raw),
        _errors(data.get("errors")) if state == FAILED else None,
    )


def _errors(errors: Any) -> str:
    """Why a batch failed, from its ``errors.data`` (the first few, with their lines)."""
    data = errors.get("data") if isinstance(errors, dict) else None
    if not isinstance(data, list) or not data:
        return "OpenAI gave no reason"
    said = []
    for error in data[:3]:
        if isinstance(error, dict):
            line = error.get("line")
            where = f"line {line}: " if isinstance(line, int) and not isinstance(line, bool) else ""
            said.append(f"{where}{error.get('code') or 'error'}: {str(error.get('message'))[:200]}")
    more = f" (and {len(data) - 3} more)" if len(data) > 3 else ""
    return "; ".join(said) + more if said else "OpenAI gave no reason"
