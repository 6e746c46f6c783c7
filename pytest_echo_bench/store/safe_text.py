"""Text from a model, a dataset or a spec made safe to show (secrets are kept out by ``redaction``).

A terminal obeys escape sequences wherever they come from: a model's output holding ESC or OSC
can clear the screen, draw a fake "===== 2 passed =====" line or write the clipboard (OSC 52),
and bidi overrides reorder what a reader sees. So whatever such text reaches a terminal, a failure
report, JUnit XML or json-report goes through ``shown`` (or ``escape_id`` for node names); the
results file keeps the exact text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# C0 and C1 controls, DEL, the bidi embeddings, overrides and isolates (and the marks beside
# them), and lone surrogates (they cannot be encoded for a terminal or sent to an xdist controller).
_OTHERS = "\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_UNSAFE = "\x00-\x1f" + _OTHERS
_UNSAFE_TEXT = re.compile(f"[{_UNSAFE}]")
# The same but line feed and tab: text with lines (a report, a failure text) is searched without
# stopping at every line end (a 1 MB report took 35 ms, each line feed through a callback; now 10).
_UNSAFE_IN_LINES = re.compile(f"[\x00-\x08\x0b-\x1f{_OTHERS}]")
_UNSAFE_ID = re.compile(f"[\\\\{_UNSAFE}]")
_ESCAPE = re.compile(r"\\(?:\\|x[0-9a-f]{2}|u[0-9a-f]{4})")


def _code(char: str) -> str:
    point = ord(char)
    return f"\\x{point:02x}" if point <= 0xFF else f"\\u{point:04x}"


def _escape(match: re.Match[str]) -> str:
    return _code(match.group())


def shown(text: str, newlines: bool = True) -> str:
    """``text`` with every control and bidi character shown escaped (``\\x1b``), for display.

    ``newlines`` keeps line feeds and tabs, where the layout needs them (a failure report);
    a CR LF pair becomes one line feed, a lone CR (which rewinds the line) is escaped.
    """
    if newlines:
        if "\r\n" in text:
            text = text.replace("\r\n", "\n")
        return _UNSAFE_IN_LINES.sub(_escape, text) if _UNSAFE_IN_LINES.search(text) else text
    if not _UNSAFE_TEXT.search(text):
        return text  # the common case: nothing to copy
    return _UNSAFE_TEXT.sub(_escape, text)


def shown_json(value: Any) -> Any:
    """A JSON-like value with every string in it (keys too) passed through ``shown``."""
    if isinstance(value, str):
        return shown(value)
    if isinstance(value, Mapping):
        return {shown(str(k)): shown_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [shown_json(v) for v in value]
    return value


def escape_id(text: str) -> str:
    """A task id as a node name: controls, bidi characters and the backslash escaped.

    Reversible (``unescape_id``), so two different ids never share a node id.
    """
    if not _UNSAFE_ID.search(text):
        return text
    return _UNSAFE_ID.sub(lambda m: "\\\\" if m.group() == "\\" else _code(m.group()), text)


def unescape_id(name: str) -> str:
    """The task id ``escape_id`` made ``name`` from."""
    if "\\" not in name:
        return name
    return _ESCAPE.sub(lambda m: "\\" if m.group() == "\\\\" else chr(int(m.group()[2:], 16)), name)

