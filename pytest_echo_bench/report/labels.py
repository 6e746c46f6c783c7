"""Human labels for ``echo-bench report --labels LABELS.jsonl``: one ``{task_id, arm, label}`` a
line (``benchmark`` and ``epoch`` optional), the label a number or a word. A bad line is refused
with its file and line and what to write; nothing is guessed."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from pytest_echo_bench.store.paths import read_regular

LABELS_MAX = 256 << 20  # a labels file of a million lines is ~100 MB; more is not one
EXAMPLE = '{"task_id": "q1", "arm": "fast", "label": 7} (or "label": "correct")'
KEYS = frozenset({"task_id", "arm", "label", "benchmark", "epoch"})

Label = float | str  # a grade, or a verdict word (lowercased)


@dataclass(frozen=True)
class HumanLabel:
    benchmark: str | None  # None: the item of any benchmark with this task id and arm
    task_id: str
    arm: str
    epoch: int
    label: Label


def read_labels(path: Path) -> list[HumanLabel]:
    """Every line of ``path`` as a label; ValueError naming ``path:line`` for a bad one."""
    try:
        text = read_regular(path, LABELS_MAX, lambda why: ValueError(f"labels {path}: {why}")
                            ).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: labels must be UTF-8 text ({exc})") from None
    except OSError as exc:
        raise ValueError(f"cannot read labels {path}: {exc.strerror or exc}") from None
    labels = []
    # Lines end at LF (or CR LF) only: ``splitlines`` also splits at U+2028, U+2029, U+0085 and
    # the like, which JSON allows raw inside a string (a task id holding one was refused, named by
    # the wrong line).
    for lineno, line in enumerate(text.split("\n"), 1):
        line = line.removesuffix("\r")
        if line.strip():
            labels.append(_label(line, f"{path}:{lineno}"))
    if not labels:
        raise ValueError(f"{path}: no labels; write one a line, e.g. {EXAMPLE}")
    return labels


def _label(line: str, where: str) -> HumanLabel:
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        raise ValueError(f"{where}: not a JSON object; write {EXAMPLE}") from None
    if not isinstance(record, dict):
        raise ValueError(f"{where}: not a JSON object; write {EXAMPLE}")
    unknown = sorted(set(record) - KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0][:40]!r}; a label has task_id, arm, "
                         f"label and optionally benchmark and epoch, e.g. {EXAMPLE}")
    task_id, arm, bench = record.get("task_id"), record.get("arm"), record.get("benchmark")
    for key, value in (("task_id", task_id), ("arm", arm)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"{where}: {key} must be text; write {EXAMPLE}")
    if bench is not None and (not isinstance(bench, str) or not bench):
        raise ValueError(f"{where}: benchmark must be text (or left out); write {EXAMPLE}")
    epoch = record.get("epoch", 1)
    if type(epoch) is not int or epoch < 1:
        raise ValueError(f"{where}: epoch must be a whole number >= 1 (or left out for 1); "
                         f"write {EXAMPLE}")
    return HumanLabel(bench, task_id, arm, epoch, _value(record.get("label"), where))


def _value(label: object, where: str) -> Label:
    if isinstance(label, str) and label.strip():
        return label.strip().lower()
    if not isinstance(label, bool) and isinstance(label, (int, float)):
        number = float(label) if abs(label) < 1e300 else math.inf
        if math.isfinite(number):
            return number
    raise ValueError(f"{where}: label must be a finite number (a grade) or a word (a verdict), "
                     f"got {json.dumps(label)[:40]}; write {EXAMPLE}")
