"""Secrets kept out of every text we show or store: any run of eight characters of one is redacted.

Servers, proxies and CLIs quote what they were sent (a header, a body that echoes it, their
environment in a traceback), and a message is cut to a few hundred characters before it is
shown. Cutting first and redacting after let the piece of a key on the near side of the cut
through (21 characters of it on the terminal, in rows, JUnit XML and the json-report), since
only the whole key was looked for. So ``redact`` redacts before it cuts, and it looks for any
run of ``MIN_RUN`` characters of a secret rather than the whole one: a key cut by the server,
or echoed in part, is caught too. Every text from a provider, a CLI or a proxy passes here on
its way out (``engine.failures.Failures.text``; the providers where they cut a body or a tail).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

REDACTED = "[redacted]"
MIN_SECRET = 4  # shorter values are no key; redacting them would shred every message
MIN_RUN = 8  # any run this long of a secret is redacted, wherever it starts in the secret
# a whole secret at least this long shows its first three characters (``sk-…[redacted]``)
WHOLE_SHOWN = 12
# Keys are tens of characters; a variable may hold kilobytes (a JSON config), whose windows would
# cost a find each per message. Beyond this length a value's windows are taken from its first part.
MAX_WINDOWED = 4096
_WORD = "A-Za-z0-9"


class Secrets:
    """Values no text may show, prepared once for ``redact``: every ``MIN_RUN``-character window of
    each long value; a value shorter than that is matched whole, only where it stands alone (a
    five-letter proxy user inside a longer word is that word, not the user)."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        kept = frozenset(v for v in values if isinstance(v, str) and len(v) >= MIN_SECRET)
        self.values = kept
        self._windows = frozenset(v[i:i + MIN_RUN] for v in kept if len(v) >= MIN_RUN
                                  for i in range(min(len(v), MAX_WINDOWED) - MIN_RUN + 1))
        self._whole = frozenset(v for v in kept if len(v) >= WHOLE_SHOWN)
        short = sorted((v for v in kept if len(v) < MIN_RUN), key=len, reverse=True)
        self._short = (
            re.compile(f"(?<![{_WORD}])(?:{'|'.join(map(re.escape, short))})(?![{_WORD}])")
            if short
            else None
        )

    def __bool__(self) -> bool:
        return bool(self.values)

    def __or__(self, other: Secrets) -> Secrets:
        return Secrets(self.values | other.values)

    def __repr__(self) -> str:  # never the values: a Secrets may end up in a log or a traceback
        return f"Secrets({len(self.values)} values)"

    def apply(self, text: str) -> str:
        """``text`` with every run of a secret replaced (see ``redact``)."""
        if self._windows:
            text = self._runs(text)
        if self._short is not None:
            text = self._short.sub(REDACTED, text)
        return text

    def _runs(self, text: str) -> str:
        # One str.find per window of each secret: C-speed scans, ~0.1 ms for a 2,000-character
        # tail and three 50-character keys (docs/reliability.md).
        spans: list[tuple[int, int]] = []
        for window in self._windows:
            at = text.find(window)
            while at >= 0:
                spans.append((at, at + MIN_RUN))
                at = text.find(window, at + 1)
        if not spans:
            return text
        return "".join(self._rebuilt(text, _merged(spans)))

    def _rebuilt(self, text: str, spans: list[tuple[int, int]]) -> Iterable[str]:
        end = 0
        for start, stop in spans:
            yield text[end:start]
            run = text[start:stop]
            yield f"{run[:3]}…{REDACTED}" if run in self._whole else REDACTED
            end = stop
        yield text[end:]


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Overlapping or touching spans joined: two pieces of secrets side by side are one run."""
    spans.sort()
    out = [spans[0]]
    for start, stop in spans[1:]:
        last_start, last_stop = out[-1]
        if start <= last_stop:
            out[-1] = (last_start, max(last_stop, stop))
        else:
            out.append((start, stop))
    return out


def redact(
    text: str, secrets: Secrets | Iterable[str], limit: int | None = None, tail: bool = False
) -> str:
    """``text`` with every run of ``MIN_RUN`` or more characters of a secret replaced by
    ``[redacted]`` (a whole secret of ``WHOLE_SHOWN`` or more by ``sk-…[redacted]``), then cut to
    its first ``limit`` characters (its last, with ``tail``).

    Redacted first, then cut: the other way round, a key across the cut left its near piece.
    """
    known = secrets if isinstance(secrets, Secrets) else Secrets(secrets)
    text = known.apply(text)
    if limit is not None and len(text) > limit:
        # not text[-limit:]: -0 would keep it all
        text = text[len(text) - limit:] if tail else text[:limit]
    return text
