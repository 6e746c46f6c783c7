"""What the two batch clients share: their calls over the arm's lean client, and reading a
results file line by line.

A batch call reuses its live provider's parts (``Wire``): the body a live call sends, the parser
of a live reply and the classifier of a live error, so an answer or an error means the same
whichever way it came. A non-2xx is the live call's error (a 4xx to a creation: refused, nothing
made); a 2xx that is no JSON object, or a creation's 2xx naming no id, is a ``TransientError``:
the call may have done its work, so its outcome is unknown (a batch is looked up with ``find``
before its requests go again), never "refused".

Results files are read by one rule (``ResultReader``): a line whose ``custom_id`` can be read
becomes that request's ``BatchResult``, its answer parsed or its error classified as a live call's
(a line that says nothing the provider documents is a ``PermanentError`` naming the batch and the
line: an error row for that request). A line whose ``custom_id`` cannot be read (no JSON, no
object, no string id) belongs to no request: the lines after it are still read and yielded, then
the read ends in a ``PermanentError`` naming the batch and the first such line, so the caller
knows the results are incomplete (a request it does not hear of may have been answered in a line
it could not read: the engine gives it an error row, never sends it again unasked). A second
line for a ``custom_id`` already read is ignored: each request has one outcome.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from pytest_echo_bench.errors import PermanentError, ProviderError, TransientError
from pytest_echo_bench.providers.answer import kind
from pytest_echo_bench.providers.base import Completion, Request
from pytest_echo_bench.providers.batch import ENDED, FAILED, BatchResult, BatchStatus
from pytest_echo_bench.providers.http_json import JSONClient, loads, success
from pytest_echo_bench.providers.reply import Reply
from pytest_echo_bench.store.redaction import Secrets

# ``find`` reads at most this many pages of a provider's batch list (newest first): a run's own
# batches are among its newest, and an account with thousands must not cost thousands of calls.
LIST_PAGES = 20
# The least time a results file's download is given, whatever the arm's timeout_s.
DOWNLOAD_TIMEOUT_S = 900.0
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
    files: JSONClient = field(init=False)  # the results files' client (``__post_init__``)

    def __post_init__(self) -> None:
        # A results file of up to 200 MB (OpenAI) or 256 MB (Anthropic) arrives under one
        # deadline for the whole reply: its own client, with the longer of the arm's timeout and
        # DOWNLOAD_TIMEOUT_S, so a slow link does not fail every read of a large batch.
        c = self.client
        self.files = JSONClient(c.url, dict(c.headers), max(c.timeout, DOWNLOAD_TIMEOUT_S),
                                c.network, c.secrets)

    def json(self, method: str, path: str, what: str, payload: Any = None,
             create: bool = False) -> dict[str, Any]:
        """The JSON object a call answers; a non-2xx is the live call's error. ``payload``: a
        JSON value, or its bytes already encoded (None: no body). ``create``: a call
        that makes something (a batch, a file) goes on a fresh connection, so that no keep-alive
        race sends it twice (``wire.Connection`` resends on a reused one)."""
        with named(what):
            if create:
                self.client.close()
            body = payload if isinstance(payload, bytes) else (
                json.dumps(payload).encode("utf-8") if payload is not None else b"")
            reply = self.client.call(method, path, body)
            data = self._checked(reply, self.client.parsed(reply))
            made = data.get("id")
            if create and (not isinstance(made, str) or not made):
                # Accepted (a 2xx), but which batch it made cannot be read: not "refused", which
                # would let the same requests go again while this batch runs.
                raise TransientError(
                    "the provider accepted the call but its reply names no id: its batch is "
                    "looked up (find) before anything is sent again"
                )
            return data

    def upload(self, path: str, fields: Mapping[str, str], name: str, content: bytes,
               what: str) -> dict[str, Any]:
        """A ``multipart/form-data`` POST of ``fields`` and one file, on a fresh connection."""
        boundary = uuid.uuid4().hex
        with named(what):
            self.client.close()
            reply = self.client.call(
                "POST", path, multipart(boundary, fields, name, content),
                f"multipart/form-data; boundary={boundary}",
            )
            return self._checked(reply, self.client.parsed(reply))

    def raw(self, path: str, what: str) -> bytes:
        """A GET's body as sent (a results file); a non-2xx is the live call's error."""
        with named(what):
            reply = self.files.call("GET", path)
            if not success(reply.status):
                self._checked(reply, self.files.parsed(reply))
            return reply.body

    def _checked(self, reply: Reply, data: Any) -> dict[str, Any]:
        if not success(reply.status):
            raise self.wire.error(reply.status, data, reply.headers, self.client.secrets)
        if not isinstance(data, dict):
            # a 2xx whose body is no object: what the call did is unknown, as after a timeout
            raise TransientError(f"the reply is {kind(data)}, not a JSON object")
        return data

    def close(self) -> None:
        self.client.close()
        self.files.close()


@contextlib.contextmanager
def named(what: str) -> Iterator[None]:
    """A ProviderError raised inside says first which call of which batch it is about."""
    try:
        yield
    except ProviderError as exc:
        exc.args = (f"{what}: {exc}", *exc.args[1:])
        raise


def listed(http: BatchHTTP, path: str, cursor: str, since: float,
           created: Callable[[Any], float | None], what: str) -> Iterator[dict[str, Any]]:
    """The account's batches (objects with a string ``id``) created since ``since``, less the
    clock's skew, newest first as both APIs list them: at most ``LIST_PAGES`` pages of 100, the
    next page after the last id (``cursor``: the query's name for it). ``created``: a batch's
    ``created_at`` in epoch seconds (None: unknown, kept); ``what`` names the listing."""
    after: str | None = None
    for _ in range(LIST_PAGES):
        query = f"{path}?limit=100" + (f"&{cursor}={quote(after, safe='')}" if after else "")
        page = http.json("GET", query, what)
        batches = page.get("data")
        if not isinstance(batches, list):
            raise PermanentError(f"{what}: its data is {kind(batches)}, not a list")
        for batch in batches:
            if not isinstance(batch, dict) or not isinstance(batch.get("id"), str):
                continue
            moment = created(batch.get("created_at"))
            if moment is not None and moment < since - CLOCK_SKEW_S:
                return  # newest first: the rest are older still
            yield batch
        last = page.get("last_id")
        if page.get("has_more") is not True or not isinstance(last, str) or not last:
            return
        after = last


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
        for number, raw in enumerate(_lines(body), 1):
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
                f"{self.where}: {self.unreadable[0]}{more} of its results names no custom_id (no "
                "JSON object with a string custom_id): a request not read here may be answered "
                "there"
            )


def _lines(body: bytes) -> Iterator[bytes]:
    """The body's lines one at a time: a 256 MB file is not copied into a list of lines."""
    start = 0
    while start < len(body):
        end = body.find(b"\n", start)
        end = len(body) if end < 0 else end
        yield body[start:end]
        start = end + 1


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
