"""What ``batch_server`` reads and writes besides its lifecycle: an uploaded form, OpenAI's input
file validated line by line, and the errors each API reports for a failed request."""

from __future__ import annotations

import json
from typing import Any

from anthropic_server import API_ERROR, BAD_REQUEST, CREDIT, RATE_LIMIT
from openai_server import BAD_REQUEST as OPENAI_BAD_REQUEST
from openai_server import QUOTA
from openai_server import RATE_LIMIT as OPENAI_RATE_LIMIT

ENDPOINT = "/v1/chat/completions"
# A failed request's status and error, by the name a test gives it (``BatchServer.fail``).
OPENAI_ERRORS: dict[str, tuple[int, dict[str, Any]]] = {
    "400": (400, OPENAI_BAD_REQUEST),
    "429": (429, OPENAI_RATE_LIMIT),
    "500": (500, {"message": "The server had an error", "type": "server_error", "code": None}),
    "quota": (429, QUOTA),
}
_ANTHROPIC_ERRORS = {"400": BAD_REQUEST, "429": RATE_LIMIT, "500": API_ERROR, "quota": CREDIT}


def anthropic_error(name: str) -> dict[str, Any]:
    """The ``error`` object of a failed request's ``errored`` result."""
    return _ANTHROPIC_ERRORS[name]


def multipart_file(content_type: str, body: bytes) -> tuple[dict[str, str], bytes | None]:
    """A ``multipart/form-data`` body's fields and its file's bytes (None: no file); the file's
    name is the field ``filename``."""
    marker = "boundary="
    if "multipart/form-data" not in content_type or marker not in content_type:
        return {}, None
    boundary = content_type.split(marker, 1)[1].strip().strip('"').encode()
    fields: dict[str, str] = {}
    content = None
    for part in body.split(b"--" + boundary)[1:]:
        if part.startswith(b"--"):
            break
        head, _, value = part.strip(b"\r\n").partition(b"\r\n\r\n")
        disposition = head.decode("latin-1")
        name = _param(disposition, "name")
        if name == "file":
            content = part[part.index(b"\r\n\r\n") + 4: -2]  # the bytes as sent, less the CRLF
            fields["filename"] = _param(disposition, "filename")
        elif name:
            fields[name] = value.decode()
    return fields, content


def _param(disposition: str, key: str) -> str:
    needle = f'{key}="'
    at = disposition.find(needle)
    if at < 0 or (key == "name" and disposition[at - 1:at] not in (" ", ";")):
        return ""
    start = at + len(needle)
    return disposition[start:disposition.index('"', start)]


def validate_lines(content: bytes) -> tuple[list[tuple[str, dict[str, Any]]], list[dict[str, Any]]]:
    """An input file's requests, and OpenAI's validation errors (each naming its line)."""
    requests: list[tuple[str, dict[str, Any]]] = []
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()
    for number, raw in enumerate(content.splitlines(), 1):
        problem, line = _problem(raw)
        if problem is None and line["custom_id"] in seen:
            problem = ("duplicate_custom_id", "custom_id must be unique within a batch")
        if problem is not None:
            code, message = problem
            errors.append({"code": code, "message": message, "param": None, "line": number})
            continue
        seen.add(line["custom_id"])
        requests.append((line["custom_id"], line["body"]))
    if not requests and not errors:
        errors.append({"code": "empty_file", "message": "the file has no requests",
                       "param": None, "line": None})
    return requests, errors


def _problem(raw: bytes) -> tuple[tuple[str, str] | None, Any]:
    try:
        line = json.loads(raw)
    except ValueError:
        return ("invalid_json_line", "the line is not valid JSON"), None
    if not isinstance(line, dict) or not isinstance(line.get("custom_id"), str):
        return ("missing_required_parameter", "custom_id is required"), None
    if line.get("method") != "POST":
        return ("invalid_method", "the method must be POST"), None
    if line.get("url") != ENDPOINT:
        return ("invalid_url", f"the url must be {ENDPOINT}, as the batch's endpoint"), None
    body = line.get("body")
    if not isinstance(body, dict) or not body.get("model") or not body.get("messages"):
        return ("missing_required_parameter", "body.model and body.messages are required"), None
    return None, line
