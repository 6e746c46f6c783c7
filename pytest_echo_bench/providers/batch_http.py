"""What the two batch clients share: their calls over the arm's lean client, and reading a
results file line by line.

A batch call reuses its live provider's parts (``Wire``): the body a live call sends, the parser
of a live reply and the classifier of a live error, so an answer or an error means the same
whichever way it came.

Results files are read by one rule (``ResultReader``): a line whose ``custom_id`` can be read
becomes that request's ``BatchResult``, its answer parsed or its error classified as a live call's
(a line that says nothing the provider documents is a ``PermanentError`` naming the batch and the
line: an error row for that request). A line whose ``custom_id`` cannot be read (no JSON, no
object, no string id) belongs to no request: the lines after it are still read and yielded, then
the read ends in a ``PermanentError`` naming the batch and the first such line, so the caller
knows the results are incomplete (the requests it does not hear of were not answered). A second
line for a ``custom_id`` already read is ignored: each request has one outcome.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_echo_bench.errors import PermanentError, ProviderError, TransientError
from pytest_echo_bench.providers.answer import kind
from pytest_echo_bench.providers.base import Completion, Request
from pytest_echo_bench.providers.batch import ENDED, FAILED, BatchResult, BatchStatus
from pytest_echo_bench.providers.http_json import JSONClient, loads, success
from pytest_echo_bench.store.redaction import Secrets

# ``find`` reads at most this many pages of a provider's batch list (newest first): a run's own
# batches are among its newest, and an account with thousands must not cost thousands of calls.
LIST_PAGES = 20
# How far the provider's clock may be behind ours, when a listing is cut at ``since``.
CLOCK_SKEW_S = 600.0


@dataclass(frozen=True)
class Wire:
    """What a batch client takes from its live provider, so a batch call is the live call."""

    payload: Callable[[Request], dict[str, Any]]  # the body a live call sends
    parse: Callable[[Any], Completion]  # a 2xx reply's body read as the live answer
    # a non-2xx reply's status, body and headers as the live call's error
    error: Callable[[int, Any, Mapping[str, str], Secrets], ProviderError]


@dataclass
class BatchHTTP:
    """A batch API's calls over the arm's lean client (its base_url, key, proxy and CAs)."""

    client: JSONClient
    wire: Wire

    def json(self, method: str, path: str, what: str, payload: Any = None,
             create: bool = False) -> dict[str, Any]:
        """The JSON object a call answers; a non-2xx is the live call's error. ``create``: a call
        that makes something (a batch, a file) goes on a fresh connection, so that no keep-alive
        race sends it twice (``wire.Connection`` resends on a reused one)."""
        if create:
            self.client.close()
        body = json.dumps(payload).encode("utf-8") if payload is not None else b""
        reply = self.client.call(method, path, body)
        return self.checked(reply.status, reply.headers, self.client.parsed(reply), what)

    def upload(self, path: str, fields: Mapping[str, str], name: str, content: bytes,
               what: str) -> dict[str, Any]:
        """A ``multipart/form-data`` POST of ``fields`` and one file, on a fresh connection."""
        boundary = uuid.uuid4().hex
        self.client.close()
        reply = self.client.call(
            "POST", path, multipart(boundary, fields, name, content),
            f"multipart/form-data; boundary={boundary}",
        )
        return self.checked(reply.status, reply.headers, self.client.parsed(reply), what)

    def raw(self, path: str, what: str) -> bytes:
        """A GET's body as sent (a results file); a non-2xx is the live call's error."""
        reply = self.client.call("GET", path)
        if not success(reply.status):
            self.checked(reply.status, reply.headers, self.client.parsed(reply), what)
        return reply.body

    def checked(self, status: int, headers: Mapping[str, str], data: Any,
                what: str) -> dict[str, Any]:
        if not success(status):
            error = self.wire.error(status, data, headers, self.client.secrets)
            error.args = (f"{what}: {error}",)
            raise error
        if not isinstance(data, dict):
            raise PermanentError(f"{what}: the reply is {kind(data)}, not a JSON object")
        return data

    def close(self) -> None:
        self.client.close()


def multipart(boundary: str, fields: Mapping[str, str], name: str, content: bytes) -> bytes:
    """RFC 7578's form: each field, then the file (form name ``file``) as JSON Lines."""
    parts = [
        f'--{boundary}\r\ncontent-disposition: form-data; name="{key}"\r\n\r\n{value}\r\n'.encode()
        for key, value in fields.items()
    ]
    parts.append(
        f'--{boundary}\r\ncontent-disposition: form-data; name="file"; filename="{name}"\r\n'
        "content-type: application/jsonl\r\n\r\n".encode()
    )
    return b"".join(parts) + content + f"\r\n--{boundary}--\r\n".encode()


def text(value: Any, where: str, name: str) -> str:
    """A field that must be a non-empty string, or a PermanentError naming it."""
    if not isinstance(value, str) or not value:
        raise PermanentError(f"{where}: {name} is {kind(value)}, not a non-empty string")
    return value


def count(counts: Any, name: str) -> int:
    """One of a status's request counts; what is not a count reads as 0 (a progress figure)."""
    value = counts.get(name) if isinstance(counts, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return 0
    return value


@dataclass
class ResultReader:
    """Reads a batch's results files by the rule in this module's docstring."""

    where: str  # "OpenAI batch batch_abc": what every message starts with
    seen: set[str] = field(default_factory=set)
    unreadable: list[str] = field(default_factory=list)  # "output file line 3", in order

    def read(self, body: bytes, label: str,
             result: Callable[[str, dict[str, Any], str], BatchResult]) -> Iterator[BatchResult]:
        """Each line's result: ``result(custom_id, line, place)``, ``place`` naming the line."""
        for number, raw in enumerate(body.split(b"\n"), 1):
            if not raw.strip():
                continue
            place = f"{self.where}, {label} line {number}"
            line = _line(raw)
            custom_id = line.get("custom_id") if isinstance(line, dict) else None
            if not isinstance(custom_id, str) or not custom_id or line is None:
                self.unreadable.append(f"{label} line {number}")
                continue
            if custom_id in self.seen:
                continue
            self.seen.add(custom_id)
            try:
                yield result(custom_id, line, place)
            except ProviderError as exc:  # the line's own shape is wrong: that request's error
                yield BatchResult(custom_id, error=exc)

    def finish(self) -> None:
        """Raise for the lines that belong to no request, once every other line was read."""
        if self.unreadable:
            more = f" (and {len(self.unreadable) - 1} more)" if len(self.unreadable) > 1 else ""
            raise PermanentError(
                f"{self.where}: results {self.unreadable[0]}{more} names no custom_id (no JSON "
                "object with a string custom_id): the requests not read here were not answered"
            )


def _line(raw: bytes) -> dict[str, Any] | None:
    try:
        line = loads(raw)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    return line if isinstance(line, dict) else None


def ended(where: str, status: BatchStatus) -> None:
    """Refuse to read the results of a batch that has none (yet)."""
    if status.state == FAILED:
        raise PermanentError(f"{where} failed, it has no results: {status.error}")
    if status.state != ENDED:
        raise TransientError(f"{where} has not ended (status {status.raw!r})")


def failed(where: str, message: str) -> PermanentError:
    """A results line that says nothing the provider documents: that request's error."""
    return PermanentError(f"{where}: {message}")
