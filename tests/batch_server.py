"""A loopback server implementing OpenAI's Batch API and Anthropic's Message Batches, counting
what it bills.

One server answers both, as their documentation describes them. OpenAI (under ``/v1``): a JSON
Lines file uploaded as ``multipart/form-data`` (``POST /v1/files``, ``purpose=batch``), ``POST
/v1/batches``, ``GET /v1/batches/{id}``, ``POST /v1/batches/{id}/cancel``, ``GET /v1/batches``
(``limit``, ``after``; newest first), ``GET /v1/files/{id}/content``; a file whose lines are not
what the API takes (no JSON, another url or method, a repeated ``custom_id``) makes its batch
``failed`` with ``errors`` naming the lines, as OpenAI validates after accepting it. Anthropic:
``POST /v1/messages/batches`` (validated at once: a bad request is a 400),
``GET /v1/messages/batches/{id}``, ``.../{id}/results``, ``.../{id}/cancel``, and the listing
(``limit``, ``after_id``; newest first).

A batch moves one step (``advance``) on each status request (``steps_per_poll``; 0: only when a
test calls ``advance``): validating, then in progress (``per_step`` requests run a step, all by
default), finalizing, ended. ``fail[custom_id]`` makes that request's next run fail (``"400"``,
``"429"``, ``"500"`` or ``"quota"``); ``expire(id)`` ends a batch as expired and ``cancel``
ends it as cancelled at its next step, the requests not yet run unrun in its results. Each
request that succeeds is billed (``billed[custom_id]``, once per batch it ran in): a test asserts
each was billed once.

``hooks[step]`` lets a test act at a step: called with the batch (or None) once the server has
done the step's work and before it replies (``"upload"``, ``"create"``, ``"status"``,
``"results"``, ``"cancel"``, ``"list"``); it may block (the reply waits: "after submit, before
the record"), return ``"reset"`` (the connection is dropped, no reply), for a results file
``"cut"`` (half the body, then the connection drops), or ``(status, bytes)``: the reply to send
instead (a hostile body).
"""

from __future__ import annotations

import datetime
import itertools
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar, Self
from urllib.parse import parse_qs, urlsplit

from batch_files import OPENAI_ERRORS, anthropic_error, multipart_file, validate_lines
from fake_server import Server, reset_connection

OPENAI_ENDPOINT = "/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages/batches"
# what a hook answers: None (reply), "reset", "cut", or the reply to send instead (status, bytes)
Hook = Callable[["Job | None"], "str | tuple[int, bytes] | None"]


@dataclass
class Job:
    """One batch, of either API."""

    id: str
    api: str  # "openai" or "anthropic"
    created: float
    requests: list[tuple[str, dict[str, Any]]]  # (custom_id, body), in the order sent
    metadata: dict[str, Any] = field(default_factory=dict)
    input_file_id: str | None = None
    phase: str = "validating"  # validating, running, finalizing, cancelling, ended, failed
    end: str = ""  # how it ended: completed, expired, cancelled
    ran: dict[str, dict[str, Any]] = field(default_factory=dict)  # custom_id -> outcome
    errors: list[dict[str, Any]] = field(default_factory=list)  # why it failed validation
    expire: bool = False
    files: tuple[str | None, str | None] = (None, None)  # OpenAI's output and error files

    def unrun(self) -> list[str]:
        return [custom_id for custom_id, _ in self.requests if custom_id not in self.ran]


class BatchServer:
    """The server, its batches, its bills and its hooks."""

    def __init__(self, answer: Callable[[str], str] = lambda prompt: f"echo {prompt}") -> None:
        self.answer = answer
        self.steps_per_poll = 1
        self.per_step: int | None = None  # requests run per step (None: all)
        self.fail: dict[str, str] = {}  # custom_id -> its next run's failure
        self.hooks: dict[str, Hook] = {}
        self.billed: Counter[str] = Counter()
        self.jobs: dict[str, Job] = {}
        self.files: dict[str, bytes] = {}
        self.calls: list[tuple[str, str, dict[str, str]]] = []  # method, path, headers
        self.clock: Callable[[], float] = time.time
        self.lock = threading.RLock()
        self._ids = itertools.count(1)
        self.httpd = Server(("127.0.0.1", 0), type("Handler", (Handler,), {"fake": self}))
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        """An ``anthropic`` arm's base_url; an ``openai`` arm's is ``openai_url``."""
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def openai_url(self) -> str:
        return self.base_url + "/v1"

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):06d}"

    # The lifecycle, the same for both APIs (each names the phases its own way).
    def advance(self, batch_id: str | None = None) -> None:
        """Move one batch (None: every batch) on by one step."""
        with self.lock:
            for job in [self.jobs[batch_id]] if batch_id else list(self.jobs.values()):
                self._step(job)

    def expire(self, batch_id: str) -> None:
        """The batch's window runs out: at its next step it ends, its unrun requests expired."""
        with self.lock:
            self.jobs[batch_id].expire = True

    def _step(self, job: Job) -> None:
        if job.phase == "validating":
            job.phase = "failed" if job.errors else "running"
        elif job.phase == "running":
            self._run(job)
        elif job.phase == "finalizing":
            self._finish(job, "completed")
        elif job.phase == "cancelling":
            self._finish(job, "cancelled")

    def _run(self, job: Job) -> None:
        if job.expire:
            return self._finish(job, "expired")
        todo = job.unrun()
        for custom_id in todo[: self.per_step or len(todo)]:
            body = dict(job.requests)[custom_id]
            failure = self.fail.pop(custom_id, None)
            job.ran[custom_id] = {"fail": failure} if failure else {"reply": self._reply(job, body)}
            if failure is None:
                self.billed[custom_id] += 1
        if not job.unrun():
            if job.api == "openai":
                job.phase = "finalizing"
            else:
                self._finish(job, "completed")
        return None

    def _finish(self, job: Job, end: str) -> None:
        job.phase, job.end = "ended", end
        if job.api == "openai":
            output, errors = openai_results(job)
            out_id = self._file(output) if output else None
            err_id = self._file(errors) if errors else None
            job.files = (out_id, err_id)

    def _file(self, lines: list[dict[str, Any]]) -> str:
        file_id = self.new_id("file-")
        self.files[file_id] = "".join(json.dumps(line) + "\n" for line in lines).encode()
        return file_id

    def _reply(self, job: Job, body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages") or [{}]
        prompt = str(messages[-1].get("content", ""))
        text = self.answer(prompt)
        usage = (len(prompt.split()), len(text.split()))
        if job.api == "openai":
            return {
                "id": "chatcmpl-batch", "object": "chat.completion", "model": body.get("model"),
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                          "total_tokens": sum(usage)},
            }
        return {
            "id": "msg_batch", "type": "message", "role": "assistant", "model": body.get("model"),
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
            "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
        }

    # Each API's words for the same batch.
    def openai_batch(self, job: Job) -> dict[str, Any]:
        words = {"running": "in_progress", "ended": job.end}
        failed = sum(1 for outcome in job.ran.values() if "fail" in outcome)
        return {
            "id": job.id, "object": "batch", "endpoint": OPENAI_ENDPOINT,
            "errors": {"object": "list", "data": job.errors} if job.errors else None,
            "input_file_id": job.input_file_id, "completion_window": "24h",
            "status": words.get(job.phase, job.phase), "created_at": int(job.created),
            "output_file_id": job.files[0], "error_file_id": job.files[1],
            "request_counts": {"total": len(job.requests), "completed": len(job.ran) - failed,
                               "failed": failed},
            "metadata": job.metadata,
        }

    def anthropic_batch(self, job: Job) -> dict[str, Any]:
        words = {"cancelling": "canceling", "ended": "ended"}
        failed = sum(1 for outcome in job.ran.values() if "fail" in outcome)
        unrun = len(job.unrun())
        ended = job.phase == "ended"
        created = datetime.datetime.fromtimestamp(job.created, datetime.UTC)
        return {
            "id": job.id, "type": "message_batch",
            "processing_status": words.get(job.phase, "in_progress"),
            "request_counts": {
                "processing": 0 if ended else unrun, "succeeded": len(job.ran) - failed,
                "errored": failed, "canceled": unrun if job.end == "cancelled" else 0,
                "expired": unrun if job.end == "expired" else 0,
            },
            "created_at": created.isoformat().replace("+00:00", "Z"),
            "ended_at": None, "expires_at": None, "cancel_initiated_at": None,
            "results_url": f"{self.base_url}{ANTHROPIC_PATH}/{job.id}/results" if ended else None,
        }

    def anthropic_results(self, job: Job) -> bytes:
        lines = []
        for custom_id, _ in reversed(job.requests):  # "in any order", as Anthropic says
            outcome = job.ran.get(custom_id)
            if outcome is None:
                result: dict[str, Any] = {"type": "expired" if job.end == "expired"
                                          else "canceled"}
            elif "fail" in outcome:
                result = {"type": "errored", "error": {"type": "error",
                                                       "error": anthropic_error(outcome["fail"])}}
            else:
                result = {"type": "succeeded", "message": outcome["reply"]}
            lines.append(json.dumps({"custom_id": custom_id, "result": result}) + "\n")
        return "".join(lines).encode()

    def listing(self, api: str, query: dict[str, list[str]], cursor: str) -> dict[str, Any]:
        """A page of ``api``'s batches, newest first, after the cursor's batch."""
        jobs = sorted((j for j in self.jobs.values() if j.api == api),
                      key=lambda j: (j.created, j.id), reverse=True)
        after = query.get(cursor, [None])[0]
        if after is not None:
            ids = [j.id for j in jobs]
            jobs = jobs[ids.index(after) + 1:] if after in ids else []
        limit = int(query.get("limit", ["20"])[0])
        page, more = jobs[:limit], len(jobs) > limit
        shown = self.openai_batch if api == "openai" else self.anthropic_batch
        return {"object": "list", "data": [shown(j) for j in page], "has_more": more,
                "first_id": page[0].id if page else None,
                "last_id": page[-1].id if page else None}

    def create_openai(self, payload: Any) -> tuple[int, dict[str, Any]]:
        if not isinstance(payload, dict) or payload.get("input_file_id") not in self.files:
            return 400, {"error": {"message": "input_file_id: no such file",
                                   "type": "invalid_request_error", "code": "invalid_file"}}
        if payload.get("endpoint") != OPENAI_ENDPOINT or payload.get("completion_window") != "24h":
            return 400, {"error": {"message": "endpoint or completion_window unsupported",
                                   "type": "invalid_request_error", "code": "invalid_value"}}
        file_id = payload["input_file_id"]
        requests, errors = validate_lines(self.files[file_id])
        job = Job(self.new_id("batch_"), "openai", self.clock(), requests,
                  dict(payload.get("metadata") or {}), file_id, errors=errors)
        self.jobs[job.id] = job
        return 200, self.openai_batch(job)

    def create_anthropic(self, payload: Any) -> tuple[int, dict[str, Any]]:
        requests = payload.get("requests") if isinstance(payload, dict) else None
        problem = anthropic_problem(requests)
        if problem:
            return 400, {"type": "error", "error": {"type": "invalid_request_error",
                                                    "message": problem}}
        job = Job(self.new_id("msgbatch_"), "anthropic", self.clock(),
                  [(r["custom_id"], r["params"]) for r in requests], phase="running")
        self.jobs[job.id] = job
        return 200, self.anthropic_batch(job)


def anthropic_problem(requests: Any) -> str | None:
    """Why Anthropic refuses a batch's ``requests`` at once (None: it takes them)."""
    if not isinstance(requests, list) or not requests:
        return "requests: must be a non-empty list"
    seen: set[str] = set()
    for n, entry in enumerate(requests):
        custom_id = entry.get("custom_id") if isinstance(entry, dict) else None
        params = entry.get("params") if isinstance(entry, dict) else None
        if not isinstance(custom_id, str) or not custom_id or len(custom_id) > 64:
            return f"requests.{n}.custom_id: must be 1 to 64 characters"
        if custom_id in seen:
            return f"requests.{n}.custom_id: {custom_id!r} is not unique"
        if not isinstance(params, dict) or "max_tokens" not in params:
            return f"requests.{n}.params.max_tokens: Field required"
        seen.add(custom_id)
    return None


def openai_results(job: Job) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The output file's lines (answers) and the error file's (errors, unrun requests)."""
    output, errors = [], []
    for n, (custom_id, _) in enumerate(job.requests):
        outcome = job.ran.get(custom_id)
        line: dict[str, Any] = {"id": f"batch_req_{n}", "custom_id": custom_id}
        if outcome is None:
            code = "batch_expired" if job.end == "expired" else "batch_cancelled"
            errors.append({**line, "response": None,
                           "error": {"code": code, "message": f"the request was not run: {code}"}})
        elif "fail" in outcome:
            status, error = OPENAI_ERRORS[outcome["fail"]]
            errors.append({**line, "response": {"status_code": status, "request_id": f"req_{n}",
                                                "body": {"error": error}}, "error": None})
        else:
            output.append({**line, "response": {"status_code": 200, "request_id": f"req_{n}",
                                                "body": outcome["reply"]}, "error": None})
    return output, errors


class Handler(BaseHTTPRequestHandler):
    """One connection's requests, routed to the server's two APIs."""

    protocol_version = "HTTP/1.1"
    fake: ClassVar[BatchServer]

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's naming
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._route("POST")

    def _route(self, method: str) -> None:
        fake = self.fake
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        with fake.lock:
            fake.calls.append((method, parts.path, {k.lower(): v for k, v in self.headers.items()}))
        route = ROUTES.get((method, _shape(parts.path)))
        if route is None:
            return self.send(404, {"error": {"message": f"no route {method} {parts.path}",
                                             "type": "invalid_request_error"}})
        step, job, reply = route(self, parts.path, query, body)
        hook = fake.hooks.get(step)
        action = hook(job) if hook is not None else None
        if action == "reset":
            return reset_connection(self)
        status, data = action if isinstance(action, tuple) else reply
        if isinstance(data, bytes):
            return self.send_bytes(status, data, cut=action == "cut")
        return self.send(status, data)

    def send(self, status: int, payload: Any) -> None:
        self.send_bytes(status, json.dumps(payload).encode(), content_type="application/json")

    def send_bytes(self, status: int, data: bytes, cut: bool = False,
                   content_type: str = "application/jsonl") -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[: len(data) // 2] if cut else data)
        if cut:
            self.wfile.flush()
            reset_connection(self)


def _shape(path: str) -> str:
    """A path with its ids replaced by ``*``: what routes are keyed by."""
    parts = path.rstrip("/").split("/")
    return "/".join("*" if part.startswith(("batch_", "msgbatch_", "file-")) else part
                    for part in parts)


Reply = tuple[int, Any]
Route = Callable[[Handler, str, dict[str, list[str]], bytes], tuple[str, "Job | None", Reply]]


def _job(fake: BatchServer, path: str, api: str) -> Job | None:
    batch_id = next((p for p in path.split("/") if p.startswith(("batch_", "msgbatch_"))), "")
    job = fake.jobs.get(batch_id)
    return job if job is not None and job.api == api else None


def _missing(api: str) -> Reply:
    if api == "openai":
        return 404, {"error": {"message": "No batch found", "type": "invalid_request_error"}}
    return 404, {"type": "error", "error": {"type": "not_found_error", "message": "not found"}}


def _upload(h: Handler, path: str, query: dict[str, list[str]], body: bytes) -> Any:
    fields, content = multipart_file(h.headers.get("content-type", ""), body)
    if fields.get("purpose") != "batch" or content is None:
        return "upload", None, (400, {"error": {"message": "purpose must be batch, with a file",
                                                "type": "invalid_request_error"}})
    with h.fake.lock:
        file_id = h.fake.new_id("file-")
        h.fake.files[file_id] = content
    return "upload", None, (200, {"id": file_id, "object": "file", "bytes": len(content),
                                  "purpose": "batch", "filename": fields.get("filename", "")})


def _file_content(h: Handler, path: str, query: dict[str, list[str]], body: bytes) -> Any:
    file_id = path.split("/")[3]
    with h.fake.lock:
        data = h.fake.files.get(file_id)
    if data is None:
        return "results", None, (404, {"error": {"message": "No such File object",
                                                 "type": "invalid_request_error"}})
    return "results", None, (200, data)


def _create(api: str) -> Route:
    def create(h: Handler, path: str, query: dict[str, list[str]], body: bytes) -> Any:
        try:
            payload = json.loads(body)
        except ValueError:
            payload = None
        with h.fake.lock:
            make = h.fake.create_openai if api == "openai" else h.fake.create_anthropic
            status, data = make(payload)
            job = h.fake.jobs.get(data.get("id", "")) if status == 200 else None
        return "create", job, (status, data)
    return create


def _status(api: str) -> Route:
    def status(h: Handler, path: str, query: dict[str, list[str]], body: bytes) -> Any:
        fake = h.fake
        with fake.lock:
            job = _job(fake, path, api)
            if job is None:
                return "status", None, _missing(api)
            for _ in range(fake.steps_per_poll):
                fake._step(job)
            shown = fake.openai_batch(job) if api == "openai" else fake.anthropic_batch(job)
        return "status", job, (200, shown)
    return status


def _cancel(api: str) -> Route:
    def cancel(h: Handler, path: str, query: dict[str, list[str]], body: bytes) -> Any:
        fake = h.fake
        with fake.lock:
            job = _job(fake, path, api)
            if job is None:
                return "cancel", None, _missing(api)
            if job.phase in ("validating", "running", "finalizing"):
                job.phase = "cancelling"
            shown = fake.openai_batch(job) if api == "openai" else fake.anthropic_batch(job)
        return "cancel", job, (200, shown)
    return cancel


def _results(h: Handler, path: str, query: dict[str, list[str]], body: bytes) -> Any:
    with h.fake.lock:
        job = _job(h.fake, path, "anthropic")
        if job is None or job.phase != "ended":
            return "results", job, _missing("anthropic")
        return "results", job, (200, h.fake.anthropic_results(job))


def _list(api: str, cursor: str) -> Route:
    def listing(h: Handler, path: str, query: dict[str, list[str]], body: bytes) -> Any:
        with h.fake.lock:
            return "list", None, (200, h.fake.listing(api, query, cursor))
    return listing


ROUTES: dict[tuple[str, str], Route] = {
    ("POST", "/v1/files"): _upload,
    ("GET", "/v1/files/*/content"): _file_content,
    ("POST", "/v1/batches"): _create("openai"),
    ("GET", "/v1/batches"): _list("openai", "after"),
    ("GET", "/v1/batches/*"): _status("openai"),
    ("POST", "/v1/batches/*/cancel"): _cancel("openai"),
    ("POST", ANTHROPIC_PATH): _create("anthropic"),
    ("GET", ANTHROPIC_PATH): _list("anthropic", "after_id"),
    ("GET", ANTHROPIC_PATH + "/*"): _status("anthropic"),
    ("GET", ANTHROPIC_PATH + "/*/results"): _results,
    ("POST", ANTHROPIC_PATH + "/*/cancel"): _cancel("anthropic"),
}
