"""What a provider's answer may hold, and what of it is kept: its text, its token counts, its cost.

The rules at the reply boundary (a server's JSON, an SDK's object, a Python arm's return value):

- text: a string as it is; ``null`` is no text; a list of content parts (OpenAI-compatible
  gateways) or content blocks (Anthropic) is joined from its ``text`` parts, in order, other
  types ignored. Anything else is this item's error (``PermanentError``), never a crash later.
- usage: a token count is a non-negative integer a JSON reader holds exactly (at most 2**53 - 1;
  ``true`` and ``12.5`` are no counts, ``12.0`` is 12). One value that is no count makes the
  whole usage unknown (None) with a one-line note in the row's ``extra``: a cost from half a
  usage would be too low without saying so. The answer is kept either way. The billed token
  classes (``cache_read_tokens``, ``cache_write_tokens``, ``reasoning_tokens``: docs/results.md)
  are kept only when the provider reports them: a ``null`` or an absent one is not reported, a
  reported 0 is kept; a provider that counts a class apart from its total (Anthropic's input
  tokens leave the cache's out) has it added in, so ``prompt_tokens`` is always all input billed.
- cost: never negative, NaN, infinite or above ``store.checks.FIGURE_MAX``; unknown (None) instead.

The limits are the readers' (``store.checks``): a figure the run records, every reader reads back
as it was. A cost of 1e13 was written as it came and then read as unknown by the report.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from pytest_echo_bench.errors import PermanentError
from pytest_echo_bench.providers.base import Completion
from pytest_echo_bench.store.checks import FIGURE_MAX, figure

NOTE = "usage_note"  # the key of the note in a row's ``extra`` when usage was recorded as unknown
# the readers' limit; below 2**53, so every JSON reader (a browser too) holds it exactly
MAX_COUNT = int(FIGURE_MAX)
# A usage's names: theirs (a key of the usage object, or a path into it) -> ours.
UsageNames = Mapping[str | tuple[str, ...], str]
OPENAI_USAGE: UsageNames = {
    "prompt_tokens": "prompt_tokens",
    "completion_tokens": "completion_tokens",
    ("prompt_tokens_details", "cached_tokens"): "cache_read_tokens",
    ("completion_tokens_details", "reasoning_tokens"): "reasoning_tokens",
}
ANTHROPIC_USAGE: UsageNames = {
    "input_tokens": "prompt_tokens",
    "output_tokens": "completion_tokens",
    "cache_read_input_tokens": "cache_read_tokens",
    "cache_creation_input_tokens": "cache_write_tokens",
}
# The classes billed apart, each a part of its side's total: optional (a null is no report).
CLASSES = {"cache_read_tokens": "prompt_tokens", "cache_write_tokens": "prompt_tokens",
           "reasoning_tokens": "completion_tokens"}
# Anthropic's (and Bedrock's) input count leaves the cache's reads and writes out.
CACHE_APART = ("cache_read_tokens", "cache_write_tokens")


def text_of(content: Any, where: str) -> str:
    """The answer's text from a reply's ``content`` (``where`` names it in the error)."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(_part_text(part, f"{where}[{i}]") for i, part in enumerate(content))
    raise PermanentError(
        f"the reply's {where} is {kind(content)}, not text or a list of content parts"
    )


def _part_text(part: Any, where: str) -> str:
    if not isinstance(part, Mapping):
        raise PermanentError(f"the reply's {where} is {kind(part)}, not a content part")
    if part.get("type") != "text":
        return ""  # an image, a tool call, a thinking block: not the answer's text
    text = part.get("text")
    if not isinstance(text, str):
        raise PermanentError(
            f"the reply's {where} is a text part whose text is {kind(text)}, not a string"
        )
    return text


def count(value: Any) -> int | None:
    """``value`` as a token count, or None when it is none."""
    if isinstance(value, bool):  # an int in Python, but no count
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and 0 <= value <= MAX_COUNT:
        return value
    return None


def read_usage(
    raw: Any, names: UsageNames, apart: tuple[str, ...] = ()
) -> tuple[dict[str, int] | None, str | None]:
    """(usage in our names, note): the counts ``names`` maps (theirs -> ours) that ``raw`` holds,
    or (None, why) when one of them, or ``raw`` itself, is not what a usage is. ``apart``: the
    classes the provider leaves out of its total, added to their side's total here."""
    if raw is None:
        return None, None
    if not isinstance(raw, Mapping):
        return None, f"usage was {shown(raw)}, not an object: usage recorded as unknown"
    usage: dict[str, int] = {}
    for theirs, ours in names.items():
        path = (theirs,) if isinstance(theirs, str) else theirs
        value, where = _at(raw, path)
        if value is _ABSENT or (value is None and ours in CLASSES):
            continue
        tokens = count(value)
        if tokens is None:
            return None, f"usage.{where} was {shown(value)}, {_UNKNOWN}"
        usage[ours] = tokens
    return _added(usage, apart)


_ABSENT = object()
_UNKNOWN = "not a token count: usage recorded as unknown"


def _at(raw: Mapping[str, Any], path: tuple[str, ...]) -> tuple[Any, str]:
    """The value at ``path`` in ``raw`` (``_ABSENT``: not there, or under a null detail object),
    and its dotted name; a detail that is neither an object nor null is returned as the value,
    which is then no count."""
    value: Any = raw
    for depth, key in enumerate(path):
        if value is None and depth:
            return _ABSENT, ""
        if not isinstance(value, Mapping):
            return value, ".".join(path[:depth])
        if key not in value:
            return _ABSENT, ""
        value = value[key]
    return value, ".".join(path)


def _added(
    usage: dict[str, int], apart: tuple[str, ...]
) -> tuple[dict[str, int] | None, str | None]:
    """``usage`` with each class of ``apart`` it holds added to its side's total."""
    for ours in apart:
        side = CLASSES[ours]
        if ours in usage and side in usage:
            usage[side] += usage[ours]
            if usage[side] > MAX_COUNT:
                return None, f"usage.{side} with its {ours} is {usage[side]}, {_UNKNOWN}"
    return usage or None, None


def completion(text: str, raw_usage: Any, names: UsageNames, served: Any = None,
               fingerprint: Any = None, apart: tuple[str, ...] = ()) -> Completion:
    """A Completion of ``text`` with the usage ``raw_usage`` holds (``read_usage``), noted when it
    is unknown, the model the reply says served it (``served``) and its ``system_fingerprint``
    (``fingerprint``), each kept only when it is a short text."""
    usage, note = read_usage(raw_usage, names, apart)
    return Completion(text, usage, extra={NOTE: note} if note else {}, model=served_text(served),
                      fingerprint=served_text(fingerprint))


MAX_MODEL = 200  # characters of a served model's name kept (a reply's own text, untrusted)
# ... and of a composite arm's, its calls' names joined (``python_arm.ArmContext``)
MAX_SERVED = 1000


def served_text(value: Any, limit: int = MAX_MODEL) -> str | None:
    """``value`` when it is a text of 1 to ``limit`` characters, else unknown: a reply's own
    field, which may hold anything. Kept exact, as the results file keeps every text; what shows
    it escapes it (``store.safe_text``)."""
    return value if isinstance(value, str) and 0 < len(value) <= limit else None


def checked(done: Completion) -> Completion:
    """Any provider's Completion held to the rules above (a Python arm returns what it likes)."""
    if not isinstance(done.text, str):
        raise PermanentError(f"the arm answered {kind(done.text)}, not text")
    if done.usage is not None:
        names = {name: name for name in done.usage} if isinstance(done.usage, Mapping) else {}
        done.usage, note = read_usage(done.usage, names)
        if note is not None:
            done.extra = {**done.extra, NOTE: note}
    done.cost_usd = finite_cost(done.cost_usd)
    done.model = served_text(done.model, MAX_SERVED)
    done.fingerprint = served_text(done.fingerprint, MAX_SERVED)
    return done


def finite_cost(cost: Any) -> float | None:
    """``cost`` when it is a usable amount of money (``store.checks.figure``: what every
    reader accepts), else unknown."""
    return figure(cost)


def kind(value: Any) -> str:
    """A value's JSON type, said in words ("a number", "null")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    return f"a {type(value).__name__}"


def shown(value: Any) -> str:
    """A short, ASCII rendering of a value from a reply, for a note."""
    try:
        text = json.dumps(value, ensure_ascii=True)
    except (TypeError, ValueError):
        return kind(value)
    return text if len(text) <= 40 else text[:37] + "..."
