"""Reading an Inspect (``inspect_ai``) eval log as plain JSON data, and Inspect's scores as numbers.

Two readers give the same dicts, the field names of Inspect's ``EvalLog`` (``log/_log.py``):

- with ``inspect_ai`` installed (the ``inspect`` extra), Inspect's own ``read_eval_log``, which
  knows every log version and compression Inspect has written, dumped to JSON data;
- without it, the standard library: a ``.json`` log is that JSON; a ``.eval`` log is a zip of
  ``header.json`` and one ``samples/ID_epoch_N.json`` per sample. Entries stored or deflated
  (Inspect before zstd) are read with ``zipfile``; zstd entries (the default of the Inspect
  tested, 0.3.285) need the extra, and say so. Attachments (``attachment://HASH`` in place of
  long text) are resolved by both.

A log is data from anywhere: read within the bounds of ``bounds`` (its size inflated, checked
before inflating; its nesting), a field of the wrong type refused naming the file and the sample,
never trusted to index or sum.
"""

from __future__ import annotations

import json
import math
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.interop.inspect.bounds import (
    LOG_LIMIT,
    MAX_DEPTH,
    deep_path,
    inflate,
    open_zip,
    scan,
    too_deep,
)
from pytest_echo_bench.spec.load import MAX_EPOCHS
from pytest_echo_bench.store.paths import read_regular, refusal

ATTACHMENT = "attachment://"


@dataclass
class InspectLog:
    """One log: its header (``version``, ``status``, ``eval``,
    ``results``, ``stats``) and its samples."""

    path: Path
    header: dict[str, Any]
    samples: list[dict[str, Any]] = field(default_factory=list)
    reader: str = "json"  # what read it: "inspect_ai X.Y.Z", "zipfile" or "json"


def inspect_version() -> str | None:
    """The installed ``inspect_ai``'s version, or None when it is not installed."""
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover - the stdlib has it from 3.8
        return None
    try:
        return version("inspect_ai")
    except PackageNotFoundError:
        return None


def read_log(path: Path) -> InspectLog:
    """The log at ``path`` (``.eval`` or ``.json``), through
    Inspect's reader when it is installed."""
    if path.suffix not in (".eval", ".json"):
        raise StoreError(f"{path}: not an Inspect log (want a .eval or .json file)")
    version = inspect_version()
    return _resolved(_read_with_inspect(path, version) if version else _read_plain(path))


def _resolved(log: InspectLog) -> InspectLog:
    """``log`` with its attachments resolved, and its nesting checked
    on the way (one walk for both)."""
    deep = too_deep(log.header)
    if deep is not None:
        raise StoreError(
            f"{log.path}: nested deeper than {MAX_DEPTH} levels (Inspect's own reader "
            f"refuses it) at {deep}"
        )
    for sample in log.samples:
        attachments = sample.get("attachments")
        if not _resolve(sample, attachments if isinstance(attachments, dict) else {}):
            raise StoreError(
                f"{log.path}: sample {_shown(sample['id'])} (epoch {sample.get('epoch', 1)}) "
                "is nested "
                f"deeper than {MAX_DEPTH} levels (Inspect's own reader refuses it) at "
                f"{deep_path(sample)}"
            )
    return log


def _read_with_inspect(path: Path, version: str) -> InspectLog:
    # the optional extra
    from inspect_ai.log import read_eval_log  # type: ignore[import-not-found,unused-ignore]

    problem = refusal(path)  # a FIFO or a device: refused before Inspect opens it
    if problem is not None:
        raise StoreError(f"{path}: {problem}")
    # Inspect reads a whole log and trusts a zip's declared sizes: the caps hold before it opens it
    # (its import taught zipfile zstd, so the scan inflates its entries too).
    if path.suffix == ".eval":
        scan(path)
    elif path.exists() and path.stat().st_size > LOG_LIMIT:
        raise StoreError(
            f"{path} is {path.stat().st_size:,} bytes, over the limit of {LOG_LIMIT:,}"
        )
    try:
        log = read_eval_log(str(path))
    # pydantic, zip and JSON errors alike: the file is not a log it reads
    except Exception as exc:  # noqa: BLE001
        # the plain reader names the entry, sample and field where it can
        _resolved(_read_plain(path))
        raise StoreError(f"{path}: Inspect cannot read it: {_why(exc)}") from exc
    data = log.model_dump(mode="json", exclude={"location", "etag"})
    samples = data.pop("samples", None) or []
    return _checked(InspectLog(path, data, samples, reader=f"inspect_ai {version}"))


def _why(exc: Exception) -> str:
    """Inspect's error in a line: pydantic's errors as ``field: message`` (its location names the
    sample and field), at most three of them."""
    errors = getattr(exc, "errors", None)
    try:
        found = errors(include_url=False) if callable(errors) else None
    except Exception:  # noqa: BLE001 - not pydantic's errors(): its text below
        found = None
    if not isinstance(found, list) or not found:
        return f"{type(exc).__name__}: {' '.join(str(exc).split())[:500]}"
    said = [
        f"{'.'.join(map(str, e.get('loc', ()))) or 'the log'}: {e.get('msg')}" for e in found[:3]
    ]
    more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
    return "; ".join(said) + more


def _read_plain(path: Path) -> InspectLog:
    fail: Callable[[str], Exception] = lambda why: StoreError(f"{path} {why}")  # noqa: E731
    data = read_regular(path, LOG_LIMIT, fail)
    if path.suffix == ".json":
        header = _json(data, path, "")
        samples = header.pop("samples", None) or []
        return _checked(InspectLog(path, header, samples, reader="json"))
    return _checked(_read_zip(path, data))


def _read_zip(path: Path, data: bytes) -> InspectLog:
    with open_zip(path, data) as archive:  # the bytes read_regular checked, not the path again
        entries = {info.filename: info for info in archive.infolist()}
        if "header.json" not in entries:
            raise StoreError(
                f"{path}: a .eval log without header.json (a log still being written?)"
            )
        raw = _entry(archive, entries["header.json"], path, LOG_LIMIT)
        # what the entries inflate to, counted: their declared sizes can lie
        left = LOG_LIMIT - len(raw)
        header = _json(raw, path, "header.json")
        names = sorted(n for n in entries if n.startswith("samples/") and n.endswith(".json"))
        samples = []
        for name in names:
            raw = _entry(archive, entries[name], path, left)
            left -= len(raw)
            samples.append(_json(raw, path, name))
    log = _checked(InspectLog(path, header, samples, reader="zipfile"))
    # the epochs checked whole numbers
    log.samples.sort(key=lambda s: (s.get("epoch", 1), str(s.get("id"))))
    return log


def _entry(archive: zipfile.ZipFile, info: zipfile.ZipInfo, path: Path, left: int) -> bytearray:
    return inflate(archive, info, path, left)[0]


def _json(data: bytes | bytearray, path: Path, entry: str) -> dict[str, Any]:
    where = f"{path}" + (f" ({entry})" if entry else "")
    try:
        value = json.loads(data)
    except RecursionError:
        raise StoreError(
            f"{where}: nested too deep to read (a log's JSON nests at most {MAX_DEPTH} levels)"
        ) from None
    except ValueError as exc:
        raise StoreError(f"{where}: not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise StoreError(
            f"{where}: not an Inspect log (a JSON object expected, got {type(value).__name__})"
        )
    return value


def _checked(log: InspectLog) -> InspectLog:
    """The fields the import reads must have their types: a log edited
    by hand or cut short is refused."""
    spec = log.header.get("eval")
    if (
        not isinstance(spec, dict)
        or not isinstance(spec.get("task"), str)
        or not isinstance(spec.get("model"), str)
    ):
        raise StoreError(f"{log.path}: not an Inspect eval log (no eval.task and eval.model)")
    if not isinstance(log.samples, list) or not all(isinstance(s, dict) for s in log.samples):
        raise StoreError(f"{log.path}: its samples are not a list of objects")
    for i, sample in enumerate(log.samples):
        if not isinstance(sample.get("id"), str | int) or isinstance(sample.get("id"), bool):
            raise StoreError(f"{log.path}: sample {i}'s id is not a string or an integer: "
                             f"{_shown(sample.get('id'))}")
        if not _positive(sample.get("epoch", 1)):
            raise StoreError(
                f"{log.path}: sample {_shown(sample['id'])} has epoch "
                f"{_shown(sample.get('epoch'))}, "
                f"not a whole number from 1 to {MAX_EPOCHS}"
            )
    return log


def _shown(value: object) -> str:
    """A value of the log in a message: its JSON, cut short (repr of
    a 10**400 would be 400 digits)."""
    try:
        text = (
            json.dumps(value, ensure_ascii=False)
            if not isinstance(value, int) or abs(value) < 10**30
            else "a huge number"
        )
    except (ValueError, TypeError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_EPOCHS


def _resolve(sample: dict[str, Any], attachments: dict[str, Any]) -> bool:
    """Replace every ``attachment://HASH`` string in ``sample`` by its text, in
    place; False (and the walk stopped) where it nests deeper than ``MAX_DEPTH``.
    Iterative: no depth runs out of stack."""
    stack: list[tuple[dict[str, Any] | list[Any], int]] = [(sample, 0)]
    while stack:
        item, depth = stack.pop()
        pairs: Iterable[tuple[Any, Any]] = (
            [(k, v) for k, v in item.items() if k != "attachments"]
            if isinstance(item, dict)
            else enumerate(item)
        )
        for key, value in pairs:
            if isinstance(value, dict | list):
                if depth >= MAX_DEPTH:
                    return False
                stack.append((value, depth + 1))
            elif attachments and isinstance(value, str) and value.startswith(ATTACHMENT):
                text = attachments.get(value[len(ATTACHMENT):])
                if isinstance(text, str):
                    item[key] = text
    return True


# Inspect's default sentinels (``scorer/_metric.py``: CORRECT, INCORRECT, PARTIAL, NOANSWER).
CORRECT, INCORRECT, PARTIAL, NOANSWER = "C", "I", "P", "N"


def value_to_float(value: object) -> float:
    """A score value as Inspect's default ``value_to_float()`` maps it: C 1, P 0.5, I and N 0,
    numbers and bools as floats, "yes"/"true" 1 and "no"/"false" 0 (any case), a numeric string its
    number, anything else (lists, dicts, other text) 0, as Inspect's accuracy counts it."""
    if value == CORRECT:
        return 1.0
    if value == PARTIAL:
        return 0.5
    if value in (INCORRECT, NOANSWER):
        return 0.0
    # bool included, as Inspect's isinstance(value, int | float | bool)
    if isinstance(value, int | float):
        return _float(value)
    if isinstance(value, str):
        text = value.lower()
        if text in ("yes", "true"):
            return 1.0
        if text in ("no", "false"):
            return 0.0
        return _finite(text)
    return 0.0


def _float(value: int | float) -> float:
    """A number as a float; an integer beyond a float's range (10**400) its signed infinity, where
    ``float()`` would raise OverflowError (Inspect's own function does)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _finite(text: str) -> float:
    """Inspect's ``is_finite_number`` then ``float``: a string that is a finite number, else 0."""
    try:
        number = float(text)
    except ValueError:
        return 0.0
    return number if math.isfinite(number) else 0.0
