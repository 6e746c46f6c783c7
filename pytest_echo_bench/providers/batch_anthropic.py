"""Anthropic's Message Batches for an ``anthropic`` arm.

``submit`` sends ``POST /v1/messages/batches`` with ``requests: [{custom_id, params}]``, each
``params`` exactly what a live call sends (Anthropic validates them at once: a refused batch is
the live call's error). ``status`` maps ``processing_status`` onto the protocol's states:
``in_progress`` and ``canceling`` (``cancelling``) as they are, ``ended`` is ``ended``;
``request_counts`` gives the progress (succeeded and errored are done; canceled and expired are
not). ``results`` reads the results file of ``/v1/messages/batches/{id}/results`` under the arm's
base_url (the batch's ``results_url`` is not followed: the key goes nowhere else): ``succeeded``
is the message parsed as a live reply, ``errored`` its error classified as a live error body (by
the HTTP status its type stands for), ``canceled`` and ``expired`` are unrun (send again). How a
line that cannot be read is treated: ``batch_http``.

A batch carries no label of ours, so ``find`` lists the account's batches (newest first, at most
``LIST_PAGES`` pages, none created before ``since``) and keeps those still running and those
ended whose results hold one of the given ``custom_id``s.

Limits (Anthropic's documentation): 100,000 requests or 256 MB per batch, whichever comes first.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator, Sequence
from typing import Any

from pytest_echo_bench.providers.base import Request
from pytest_echo_bench.providers.batch import (
    CANCELLING,
    ENDED,
    IN_PROGRESS,
    UNKNOWN,
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

PATH = "/v1/messages/batches"
MAX_REQUESTS = 100_000
MAX_BYTES = 256 * 1024 * 1024
_STATES = {"in_progress": IN_PROGRESS, "canceling": CANCELLING, "ended": ENDED}
_UNRUN = {"canceled", "expired"}
# The HTTP status each documented error type stands for, so a batch's error is classified as the
# same error of a live call (an unknown type as a 400: the request's own).
_STATUS_OF = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


class AnthropicBatch:
    """One ``anthropic`` arm's Message Batches (``AnthropicProvider.batch_api``)."""

    max_requests = MAX_REQUESTS
    max_bytes = MAX_BYTES

    def __init__(self, client: JSONClient, wire: Wire) -> None:
        self.http = BatchHTTP(client, wire)

    def entry(self, custom_id: str, request: Request) -> dict[str, Any]:
        """One request of a batch: its id, and the body a live call sends."""
        return {"custom_id": custom_id, "params": self.http.wire.payload(request)}

    def size(self, custom_id: str, request: Request) -> int:
        """The bytes one request adds to a batch's body (``max_bytes`` in all)."""
        return len(json.dumps(self.entry(custom_id, request)).encode("utf-8")) + 2

    def submit(self, requests: Sequence[tuple[str, Request]], tag: str) -> str:
        # ``tag`` has no place here: Anthropic's batches carry no metadata (``find`` matches
        # the custom ids instead).
        if not 0 < len(requests) <= MAX_REQUESTS:
            raise ValueError(
                f"an Anthropic batch holds 1 to {MAX_REQUESTS} requests, not {len(requests)}"
            )
        body = {"requests": [self.entry(custom_id, request) for custom_id, request in requests]}
        data = json.dumps(body).encode("utf-8")
        if len(data) > MAX_BYTES:
            raise ValueError(
                f"an Anthropic batch holds at most {MAX_BYTES} bytes, not {len(data)}: split it "
                "(size() gives each request's bytes)"
            )
        created = self.http.json("POST", PATH, "Anthropic batch creation", data, create=True)
        return text(created.get("id"), "Anthropic batch creation", "the batch's id")

    def status(self, batch_id: str) -> BatchStatus:
        where = f"Anthropic batch {batch_id}"
        return _status(batch_id, self.http.json("GET", f"{PATH}/{batch_id}", where))

    def results(self, batch_id: str) -> Iterator[BatchResult]:
        where = f"Anthropic batch {batch_id}"
        ended(where, self.status(batch_id))
        body = self.http.raw(f"{PATH}/{batch_id}/results", f"{where} results")
        reader = ResultReader(where)
        yield from reader.read(body, "results", self._result)
        reader.finish()

    def cancel(self, batch_id: str) -> None:
        self.http.json("POST", f"{PATH}/{batch_id}/cancel", f"Anthropic batch {batch_id} cancel")

    def find(self, tag: str, custom_ids: frozenset[str], since: float) -> list[str]:
        found: list[str] = []
        for batch in listed(
            self.http, PATH, "after_id", since, _moment, "Anthropic batch listing"
        ):
            state = _STATES.get(str(batch.get("processing_status")))
            batch_id = batch["id"]
            if state in (IN_PROGRESS, CANCELLING) or (
                state == ENDED and bool(custom_ids) and self._holds(batch_id, custom_ids)
            ):
                found.append(batch_id)
        return found

    def close(self) -> None:
        self.http.close()

    def _holds(self, batch_id: str, custom_ids: frozenset[str]) -> bool:
        """An ended batch's results name one of ``custom_ids`` (unrun ones too: it was sent)."""
        where = f"Anthropic batch {batch_id}"
        body = self.http.raw(f"{PATH}/{batch_id}/results", f"{where} results")
        reader = ResultReader(where)
        return any(
            result.custom_id in custom_ids
            for result in reader.read(body, "results", lambda c, line, place: BatchResult(c))
        )

    def _result(self, custom_id: str, line: dict[str, Any], place: str) -> BatchResult:
        result = line.get("result")
        outcome = result.get("type") if isinstance(result, dict) else None
        if not isinstance(result, dict) or not isinstance(outcome, str):
            raise failed(place, "it has no result object with a type")
        if outcome == "succeeded":
            return BatchResult(custom_id, completion=self.http.wire.parse(result.get("message")))
        if outcome in _UNRUN:
            return BatchResult(custom_id)
        if outcome != "errored":
            raise failed(place, f"its result type {outcome!r} is none Anthropic documents")
        error = result.get("error")
        # documented as {"type": "error", "error": {"type", "message"}}; the inner object alone
        # (as some examples show it) reads the same
        inner = error.get("error") if isinstance(error, dict) else None
        inner = inner if isinstance(inner, dict) else error
        kind = inner.get("type") if isinstance(inner, dict) else None
        status = _STATUS_OF.get(kind, 400) if isinstance(kind, str) else 400
        return BatchResult(
            custom_id, error=self.http.wire.error(status, error, {}, self.http.client.secrets)
        )


def _status(batch_id: str, data: dict[str, Any]) -> BatchStatus:
    raw = data.get("processing_status")
    # A word Anthropic does not document (a state added since): the batch goes on, polled again.
    state = _STATES.get(raw, UNKNOWN) if isinstance(raw, str) else UNKNOWN
    counts = data.get("request_counts")
    names = ("processing", "succeeded", "errored", "canceled", "expired")
    succeeded, errored = count(counts, "succeeded"), count(counts, "errored")
    return BatchStatus(
        batch_id, state, sum(count(counts, name) for name in names), succeeded + errored,
        errored, str(raw),
    )


def _moment(value: Any) -> float | None:
    """An RFC 3339 time (``2024-09-24T18:37:24.100435Z``) as epoch seconds; None if unreadable."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    try:
        return moment.timestamp()
    except (OverflowError, OSError, ValueError):
        return None
