"""The fast read of a results file's keys for resume: one compiled pattern over the bytes.

Resume reads every recorded ``(benchmark, task_id, arm)`` on the controller (and on every worker,
up to the controller's offset). ``json.loads`` of each row costs about 6 s for a million rows;
most of them are lines our own writer produced, which this pattern recognises whole, taking the
three keys from the fields. The pattern accepts only a subset of JSON (no whitespace, ASCII,
objects and arrays nested at most ``DEPTH`` deep, field names that need no escapes), so a line
it accepts is a line ``json.loads`` reads to the same keys. Any other line goes to the full
parser, which refuses garbage with its line number exactly as before.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from .records import Key, row_key

DEPTH = 4  # nesting of objects and arrays inside a field (e.g. extra.sandbox.limits)

# A JSON string of printable ASCII with JSON's escapes; raw control characters are not JSON.
_STR = rb'"(?:[\x20\x21\x23-\x5b\x5d-\x7f]++|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*+"'
_NUM = rb"-?(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?(?:[eE][+-]?[0-9]++)?"
_SCALAR = rb"(?:" + _STR + rb"|" + _NUM + rb"|true|false|null)"
# The keys must not repeat elsewhere in the row: json.loads keeps the last of duplicates, and
# ``_meta`` makes a line the meta line. Other field names are plain identifiers.
_OTHER_NAME = rb'"(?!(?:task_id|arm|benchmark|_meta)")[A-Za-z0-9_]++"'


def _value(depth: int) -> bytes:
    if depth == 0:
        return _SCALAR
    inner = _value(depth - 1)
    # Members separated by commas, none trailing: a comma must be followed by another member.
    obj = rb"\{(?:" + _STR + rb":" + inner + rb"(?:,(?!\})|(?=\})))*+\}"
    arr = rb"\[(?:" + inner + rb"(?:,(?!\])|(?=\])))*+\]"
    return rb"(?:" + _SCALAR + rb"|" + obj + rb"|" + arr + rb")"


_FIELD = rb"," + _OTHER_NAME + rb":" + _value(DEPTH)
_KEY = rb'"((?:[\x20\x21\x23-\x5b\x5d-\x7f]++|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*+)"'
# task_id and arm open every row our writer produces; benchmark follows a few fields later.
ROW = re.compile(rb'^\{"task_id":' + _KEY + rb',"arm":' + _KEY + rb"(?:" + _FIELD + rb')*+,"benchmark":' + _KEY
                 + rb"(?:" + _FIELD + rb")*+\}$", re.MULTILINE)

Parse = Callable[[bytes, int, bool], "dict[str, Any] | None"]  # (line, line number, strict) -> record


def scan_keys(data: bytes, parse: Parse) -> tuple[dict[str, Any] | None, set[Key]]:
    """The meta line and the keys of every row of ``data``, with the semantics of ``read_records``.

    ``parse`` is the full parser for the lines the pattern does not read: it returns the record,
    None for a line to skip, or raises for garbage (strict everywhere but on the last line).
    """
    last = data.count(b"\n") + 1  # the line number of the last line (after the final newline)
    fast: list[tuple[bytes, bytes, bytes]] = []
    slow: list[dict[str, Any]] = []
    meta: dict[str, Any] | None = None
    pos, lineno = 0, 1

    def read_slowly(chunk: bytes, first: int) -> None:
        nonlocal meta
        for n, raw in enumerate(chunk.split(b"\n"), first):
            if not raw.strip():
                continue
            record = parse(raw, n, n != last)
            if record is None:
                continue
            if record.get("_meta"):
                meta = record if n == 1 else meta
            else:
                slow.append(record)

    for match in ROW.finditer(data):
        start = match.start()
        if start != pos:  # whole lines the pattern did not read, the newline before this match excluded
            chunk = data[pos : start - 1]
            read_slowly(chunk, lineno)
            lineno += chunk.count(b"\n") + 1
        fast.append((match[3], match[1], match[2]))
        lineno += 1
        pos = match.end() + 1
    if pos <= len(data):
        read_slowly(data[pos:], lineno)
    default = str((meta or {}).get("benchmark", ""))
    keys = {(_text(b) or default, _text(t), _text(a)) for b, t, a in fast}
    keys.update(row_key(r, default) for r in slow)
    return meta, keys


def _text(raw: bytes) -> str:
    """A JSON string's contents (without its quotes) as json.loads decodes them."""
    if b"\\" not in raw:
        return raw.decode("ascii")
    text: str = json.loads(b'"' + raw + b'"')
    return text
