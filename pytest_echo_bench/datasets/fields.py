"""Items from any table of records, by a field map written in the spec::

    fields: {id: record_id, input: "{question}", target: answer, subtask: category, metadata: [src]}
    choices: [Correct Answer, Incorrect Answer 1, Incorrect Answer 2]   # or one list-valued field
    shuffle_choices: 7          # a seed: options in a stable order per item

``input`` is a template over the record's fields (``{name}``, ``{{`` for a brace; no attribute,
index or format spec: a dataset's text never reaches ``str.format``). With ``choices`` the options
are lettered A, B, ... into ``{choices}`` (appended when the template does not place it), and the
target (an option's text, its letter or its index) becomes the letter, so a GPQA-style dataset needs
only YAML and the ``choice`` or ``mmlu_pro`` scorer.

Without ``target_kind`` the target is read in this order: an integer is an index (0 the first
option); a text is an option's text if one is exactly it, else a letter (``B`` or ``(B)``). So
options ``["1", "0", "2"]`` with target ``1`` (an integer) give B, with ``"1"`` (a text, as every
CSV value is) give A. ``target_kind: index | letter | text`` reads every target one way only
(``index`` takes ``"2"`` from a CSV as 2) and refuses a target that is not of that kind.

A column read as text (the id, the target, the subtask, every ``{name}`` of the template, an option)
must hold text: a number or a boolean is its text, bytes are decoded as UTF-8, an empty value is
empty; bytes that are not UTF-8, and lists and mappings, are refused naming the file, the record and
the column (before this they reached the model as Python reprs, ``b'b'`` and ``{'k': 2}``).
"""

from __future__ import annotations

import json
import random
import string
import warnings
from collections.abc import Callable
from typing import Any

from pytest_echo_bench.datasets.example import NO_METADATA, Example
from pytest_echo_bench.errors import DatasetWarning
from pytest_echo_bench.spec.load import Spec

LETTERS = string.ascii_uppercase
TARGET_KINDS = ("index", "letter", "text")
FIELD_KEYS = ("id", "input", "target", "subtask", "metadata")
Piece = tuple[str, str | None]  # literal text, then the field after it (None at the end)


def to_examples(
    spec: Spec, records: list[dict[str, Any]], offset: int = 0, source: str = ""
) -> list[Example]:
    """One item per record; ``offset`` is the first record's index in the whole table (for default
    ids), ``source`` the file or dataset named in the messages."""
    fields = _field_map(spec)
    template = parse_template(spec, str(fields.get("input", "{input}")))
    choices = _choices(spec)
    kind = _target_kind(spec, choices)
    examples = []
    where = f"{source} " if source else ""
    for i, rec in enumerate(records, offset):
        def fail(why: str, *keys: str, i: int = i) -> Exception:
            return spec.error(f"{where}record {i}: {why}", "dataset", *(keys or ("fields",)))
        examples.append(_example(spec, rec, i, fields, template, (choices, kind), fail))
    if choices is not None:
        _warn_one_letter(spec, examples)
    return examples


# items: below this, one letter throughout can be chance (1 in 3**9 with 3 options)
ONE_LETTER_MIN = 10


def _warn_one_letter(spec: Spec, examples: list[Example]) -> None:
    """GPQA lists the correct answer first: without ``shuffle_choices`` every target is "A", and a
    model that always answers A scores 100%. Said at load, the only
    moment the whole dataset is seen."""
    targets = {ex.target for ex in examples}
    if len(examples) >= ONE_LETTER_MIN and len(targets) == 1:
        hint = " (the options are in the file's order: set shuffle_choices: SEED)" if (
            spec.dataset.get("shuffle_choices") is None) else ""
        warnings.warn(
            f"{spec.path}: every one of the {len(examples)} items has target "
            f"{targets.pop()!r}{hint}: an arm "
            "that always answers that letter scores 100%",
            DatasetWarning,
            stacklevel=2,
        )


def _field_map(spec: Spec) -> dict[str, Any]:
    fields = spec.dataset.get("fields", {})
    if not isinstance(fields, dict):
        raise spec.error(
            f"fields must be a mapping of {', '.join(FIELD_KEYS)} to the record's fields",
            "dataset",
            "fields",
        )
    unknown = sorted(set(map(str, fields)) - set(FIELD_KEYS))
    if unknown:
        raise spec.error(
            f"unknown field {unknown[0]!r}; known: {', '.join(FIELD_KEYS)}",
            "dataset",
            "fields",
            unknown[0],
        )
    for key in ("id", "target", "subtask"):
        if key in fields and not isinstance(fields[key], str):
            raise spec.error(f"{key} must name one field of the record", "dataset", "fields", key)
    meta = fields.get("metadata", [])
    if not isinstance(meta, list) or not all(isinstance(m, str) for m in meta):
        raise spec.error(
            "metadata must be a list of the record's field names", "dataset", "fields", "metadata"
        )
    return fields


def parse_template(spec: Spec, text: str) -> list[Piece]:
    """``text`` as literal pieces and the plain field names between them; anything else refused."""
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:  # a lone "{" or "}"
        raise spec.error(
            f"input template {text!r}: {exc} (write {{{{ and }}}} for braces)",
            "dataset",
            "fields",
            "input",
        ) from None
    pieces: list[Piece] = []
    for literal, name, spec_text, conversion in parsed:
        if name is not None and (not name or conversion or spec_text or "." in name or "[" in name):
            raise spec.error(
                f"input template {text!r}: {{{name}}} must be a plain field name (no '.', "
                "'[', '!' or ':')",
                "dataset",
                "fields",
                "input",
            )
        pieces.append((literal, name))
    return pieces


def render(pieces: list[Piece], values: dict[str, Any], fail: Callable[[str], Exception]) -> str:
    out = []
    for literal, name in pieces:
        out.append(literal)
        if name is not None:
            if name not in values:
                raise fail(
                    f"the input template names {name!r}, which the record lacks (it has "
                    f"{', '.join(map(str, values))})"
                )
            out.append(cell_text(values[name], name, fail))
    return "".join(out)


def cell_text(value: Any, column: str, fail: Callable[[str], Exception]) -> str:
    """The text of a column's value: text as it is, a number or boolean its text, bytes decoded as
    UTF-8, an empty value empty; a list or mapping (and bytes that are not UTF-8) refused."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise fail(
                f"column {column!r} holds bytes that are not UTF-8 text (byte "
                f"0x{raw[exc.start]:02x} at "
                f"offset {exc.start})"
            ) from None
    if isinstance(value, dict | list | tuple | set | frozenset):
        kind = "a mapping" if isinstance(value, dict) else "a list"
        raise fail(
            f"column {column!r} holds {kind} ({_preview(value)}), not text: name a column of "
            "text or "
            "numbers (a list of options goes under choices)"
        )
    return str(value)  # a number, a boolean, a date


def _preview(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def _text(value: Any) -> str:
    return "" if value is None else value if isinstance(value, str) else str(value)


def _choices(spec: Spec) -> str | list[str] | None:
    value = spec.dataset.get("choices")
    ok = isinstance(value, str) or (
        isinstance(value, list) and value and all(isinstance(v, str) for v in value)
    )
    if value is not None and not ok:
        raise spec.error(
            "choices must name one list-valued field, or list the fields holding one option each",
            "dataset",
            "choices",
        )
    seed = spec.dataset.get("shuffle_choices")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise spec.error(
            f"shuffle_choices must be a whole number (a seed), got {seed!r}",
            "dataset",
            "shuffle_choices",
        )
    if seed is not None and value is None:
        raise spec.error("shuffle_choices needs choices", "dataset", "shuffle_choices")
    return value


def _target_kind(spec: Spec, choices: object) -> str | None:
    kind = spec.dataset.get("target_kind")
    if kind is None:
        return None
    if kind not in TARGET_KINDS:
        raise spec.error(
            f"target_kind must be one of {', '.join(TARGET_KINDS)}, got {kind!r}",
            "dataset",
            "target_kind",
        )
    if choices is None:
        raise spec.error(
            "target_kind needs choices: it says how a target names one of them",
            "dataset",
            "target_kind",
        )
    return str(kind)


def _field(rec: dict[str, Any], name: str, fail: Callable[..., Exception], key: str) -> Any:
    if rec.get(name) is None:
        raise fail(f"no value in field {name!r} (the record has {', '.join(map(str, rec))})", key)
    return rec[name]


def _cell(rec: dict[str, Any], name: str, fail: Callable[..., Exception], key: str) -> str:
    """Column ``name`` of the record, present and text (``cell_text``)."""
    return cell_text(_field(rec, name, fail, key), name, lambda m: fail(m, key))


def _example(
    spec: Spec,
    rec: dict[str, Any],
    index: int,
    fields: dict[str, Any],
    template: list[Piece],
    choosing: tuple[str | list[str] | None, str | None],
    fail: Callable[..., Exception],
) -> Example:
    ident = (
        _cell(rec, fields["id"], fail, "fields") if "id" in fields else f"{spec.benchmark}/{index}"
    )
    target = _field(rec, fields.get("target", "target"), fail, "fields")
    # an integer may be an option's index
    if not isinstance(target, int | float) or isinstance(target, bool):
        target = cell_text(target, fields.get("target", "target"), fail)
    values = dict(rec)
    metadata: dict[str, Any] = {
        m: _field(rec, m, fail, "fields") for m in fields.get("metadata", [])
    }
    choices, kind = choosing
    if choices is not None:
        options = _options(rec, choices, fail)
        correct = (
            _target_index(target, options, fail)
            if kind is None
            else _target_as(kind, target, options, fail)
        )
        order = list(range(len(options)))
        if spec.dataset.get("shuffle_choices") is not None:
            # stable per item and seed
            random.Random(f"{spec.dataset['shuffle_choices']}/{ident}").shuffle(order)
        values["choices"] = "\n".join(f"{LETTERS[k]}. {options[j]}" for k, j in enumerate(order))
        target = LETTERS[order.index(correct)]
        metadata["n_options"] = len(options)
        if not any(name == "choices" for _, name in template):
            template = [*template, ("\n\n", "choices")]
    subtask = _cell(rec, fields["subtask"], fail, "fields") if "subtask" in fields else None
    return Example(
        ident,
        render(template, values, lambda m: fail(m, "fields", "input")),
        _text(target),
        subtask,
        metadata or NO_METADATA,
    )


def _options(
    rec: dict[str, Any], choices: str | list[str], fail: Callable[..., Exception]
) -> list[str]:
    if isinstance(choices, str):
        options = _field(rec, choices, fail, "choices")
        if not isinstance(options, list) or not all(
            isinstance(o, (str, int, float, bytes)) for o in options
        ):
            raise fail(f"field {choices!r} must hold a list of options", "choices")
        texts = [cell_text(o, choices, lambda m: fail(m, "choices")) for o in options]
    else:
        texts = [_cell(rec, name, fail, "choices") for name in choices]
    if not 2 <= len(texts) <= len(LETTERS):
        raise fail(f"{len(texts)} options; a choice question has 2 to {len(LETTERS)}", "choices")
    return [t.strip() for t in texts]


def _target_as(kind: str, target: Any, options: list[str], fail: Callable[..., Exception]) -> int:
    """The correct option, the target read as ``kind`` only (``target_kind``)."""
    text = _text(target).strip()
    if kind == "index":
        number = target if isinstance(target, int) and not isinstance(target, bool) else (
            int(text) if text.isdigit() and text.isascii() else None)
        if number is not None and 0 <= number < len(options):
            return number
        raise fail(
            f"target {text[:80]!r} is not the index of one of the {len(options)} options "
            "(target_kind: index)",
            "fields",
        )
    if kind == "letter":
        letter = text.strip("()")
        if isinstance(target, str) and len(letter) == 1 and letter in LETTERS[: len(options)]:
            return LETTERS.index(letter)
        raise fail(
            f"target {text[:80]!r} is not the letter of one of the {len(options)} options "
            "(target_kind: letter)",
            "fields",
        )
    if isinstance(target, str) and text in options:
        return options.index(text)
    raise fail(
        f"target {text[:80]!r} is not the text of one of the options (target_kind: text)", "fields"
    )


def _target_index(target: Any, options: list[str], fail: Callable[..., Exception]) -> int:
    """The correct option: the target's index, its text among the options, or its letter."""
    if isinstance(target, int) and not isinstance(target, bool):
        if 0 <= target < len(options):
            return target
        raise fail(f"target index {target} is not one of the {len(options)} options", "fields")
    text = _text(target).strip()
    if text in options:
        return options.index(text)
    letter = text.strip("()")
    if len(letter) == 1 and letter in LETTERS[: len(options)]:
        return LETTERS.index(letter)
    raise fail(
        f"target {text[:80]!r} is neither an option's text, its letter nor its index", "fields"
    )
