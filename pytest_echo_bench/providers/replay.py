"""Replay: answer from recorded outputs (the BBH paper's files, an MMLU-Pro outputs file, FastChat's
MT-bench answers and judgments (``replay_fastchat``), or our own results) with no model calls."""

from __future__ import annotations

import gzip
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pytest_echo_bench.datasets.tables import file_format, read_table
from pytest_echo_bench.errors import PermanentError, StoreError, UnavailableError
from pytest_echo_bench.providers import replay_fastchat
from pytest_echo_bench.providers.base import (
    BaseProvider,
    Caller,
    Completion,
    Provider,
    ProviderInfo,
    Request,
    check_options,
    option,
)
from pytest_echo_bench.spec.load import ArmSpec, Spec
from pytest_echo_bench.store.reader import read_records
from pytest_echo_bench.store.records import row_epoch
from pytest_echo_bench.suites.mmlu_pro import question_id

T = TypeVar("T")
_KNOWN = {"path", "arm"}
PAPER_SUFFIX = "_few_shot_template_0-255000"  # the BBH paper's output files: <subtask><suffix>.json
_BBH_ID = re.compile(r"bbh/(?P<subtask>[^/]+)/(?P<index>\d+)")

# One load per file per process, shared by every arm and thread that replays it.
_loaded: dict[tuple[str, Path], Any] = {}  # (kind, path) -> what that kind's reader returned
_load_lock = threading.Lock()


@dataclass(frozen=True)
class BbhRecording(BaseProvider):
    """A directory of ``<subtask>.json[.gz]`` files (or the paper's names, ``recording_names``),
    ``{"outputs": [{"input", "prediction", "target"}]}``."""

    instant = True  # recorded outputs, read once: nothing to wait for

    root: Path

    def complete(self, request: Request) -> Completion:
        ex = request.example
        m = _BBH_ID.fullmatch(ex.id)
        if m is None:
            raise PermanentError(
                f"replay from a directory answers BBH task ids bbh/<subtask>/<index>, not {ex.id!r}"
            )
        file, outputs = _once("bbh", self._file(m.group("subtask")), _read_outputs)
        index = int(m.group("index"))
        if index >= len(outputs):
            raise PermanentError(
                f"no recorded output for {ex.id}: {file} holds {len(outputs)} outputs"
            )
        record = outputs[index]
        if str(record.get("target")) != ex.target:
            # A file of another task or another ordering would
            # otherwise score as plausible nonsense.
            raise PermanentError(
                f"the recording does not line up with the dataset: {file} output {index} has "
                "target "
                f"{record.get('target')!r} but {ex.id} has target {ex.target!r}"
            )
        return _replayed(str(record.get("prediction", "")))

    def _file(self, subtask: str) -> Path:
        names = recording_names(subtask)
        for name in names:
            if (self.root / name).is_file():
                return self.root / name
        raise PermanentError(
            f"no recording for BBH task {subtask!r}: none of {', '.join(names)} in {self.root}"
        )


def recording_names(subtask: str) -> tuple[str, ...]:
    """The file names a recording of ``subtask`` may have, first found wins: ours, then the paper's.

    The paper's repository names its outputs ``<subtask>_few_shot_template_0-255000.json`` (one
    directory per model and prompt style); they are read as they are, without renaming.
    """
    stems = (subtask, f"{subtask}{PAPER_SUFFIX}")
    return tuple(f"{stem}{ext}" for stem in stems for ext in (".json", ".json.gz"))


@dataclass(frozen=True)
class ResultsRecording(BaseProvider):
    """One of our own results files: the output of the row with the item's task id and ``arm``."""

    instant = True  # recorded outputs, read once: nothing to wait for

    path: Path
    arm: str | None  # None: the file's only arm, else the replaying arm's own name

    def complete(self, request: Request) -> Completion:
        arms, outputs = _once("results", self.path, _read_results)
        arm = self.arm or (next(iter(arms)) if len(arms) == 1 else request.arm)
        # The same epoch's output; a recording of one sample per item replays it for every epoch.
        output = outputs.get((request.example.id, arm, request.epoch))
        if output is None:
            output = outputs.get((request.example.id, arm, 1))
        if output is None:
            known = ", ".join(sorted(arms)) or "none"
            raise PermanentError(
                f"no recorded output for {request.example.id} of arm {arm!r} in {self.path} "
                f"(arms: {known})"
            )
        return _replayed(output)


@dataclass(frozen=True)
class OutputsRecording(BaseProvider):
    """A JSON list (or JSON Lines) of records keyed by ``question_id``, each with the model's
    ``generated_text`` (or ``model_outputs``): the outputs files the MMLU-Pro authors publish, read
    as they are. A question_id twice is refused: which output the model gave cannot be told."""

    instant = True  # recorded outputs, read once: nothing to wait for

    path: Path

    def complete(self, request: Request) -> Completion:
        ex = request.example
        # the item's own id where its loader kept none
        key = str(ex.metadata.get("question_id", ex.id))
        keyed = _once("outputs", self.path, _read_keyed)
        # read once: a bad file fails every item at once, not by re-reading
        if isinstance(keyed, PermanentError):
            raise PermanentError(str(keyed))
        record = keyed.get(key)
        if record is None:
            raise PermanentError(
                f"no recorded output for {ex.id}: no question_id {key} in {self.path}"
            )
        answer = record.get("answer")
        if answer is not None and str(answer) != ex.target.strip().strip("()"):
            # Another split or a renumbered file would otherwise score as plausible nonsense.
            raise PermanentError(
                f"the recording does not line up with the dataset: question_id {key} in "
                f"{self.path} "
                f"has answer {answer!r} but {ex.id} has target {ex.target!r}"
            )
        text = record.get("generated_text", record.get("model_outputs"))
        if not isinstance(text, str):
            raise PermanentError(
                f"question_id {key} in {self.path} has no generated_text or model_outputs text"
            )
        return _replayed(text)


def _first_line(path: Path, arm: ArmSpec, spec: Spec) -> Any:
    """The first line of a ``.jsonl`` replay file, read at collection: what the file holds."""
    try:
        with open(path, "rb") as f:
            line = f.readline(1 << 20)
        return json.loads(line) if line.strip() else {}
    except (OSError, ValueError) as exc:
        raise spec.error(
            f"cannot read replay file {path}: {exc}", "arms", arm.name, "path"
        ) from None


def _outputs_lines(first: Any, path: Path, arm: ArmSpec, spec: Spec) -> bool:
    """Whether a ``.jsonl`` file holds outputs records (``question_id``) rather than our results (a
    meta line, or rows with ``task_id`` and ``arm``), told from its ``first`` line."""
    if isinstance(first, dict) and (
        first.get("_meta") is True or {"task_id", "arm"} <= first.keys()
    ):
        return False
    if isinstance(first, dict) and "question_id" in first:
        return True
    raise spec.error(
        f"{path} is neither a results file of ours (a meta line, or rows with task_id and "
        "arm) nor an "
        "outputs file (records with question_id): its first line has neither",
        "arms",
        arm.name,
        "path",
    )


def _read_keyed(path: Path) -> dict[str, dict[str, Any]] | PermanentError:
    def fail(why: str) -> PermanentError:
        return PermanentError(f"cannot read recording {path}: it {why}")

    keyed: dict[str, dict[str, Any]] = {}
    first: dict[str, int] = {}
    try:
        records = read_table(path, fail)
    except PermanentError as exc:
        return exc
    for i, rec in enumerate(records):
        if rec.get("question_id") is None:
            return fail(f"has a record without question_id (record {i})")
        qid = question_id(rec["question_id"])
        if qid is None:
            return fail(f"has a question_id that is not a whole number or a text (record {i}: "
                        f"{rec['question_id']!r:.60})")
        if str(qid) in first:  # two outputs for one question: which the model gave cannot be told
            return fail(f"has question_id {qid} twice (records {first[str(qid)]} and {i})")
        first[str(qid)] = i
        keyed[str(qid)] = rec
    return keyed


def _replayed(text: str) -> Completion:
    return Completion(text, usage=None, sub_calls=0, extra={"replayed": True})


def _once(kind: str, path: Path, read: Callable[[Path], T]) -> T:
    key = (kind, path)
    with _load_lock:
        if key not in _loaded:
            _loaded[key] = read(path)
        loaded: T = _loaded[key]
        return loaded


def _read_outputs(path: Path) -> tuple[Path, list[dict[str, Any]]]:
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            outputs = json.load(f)["outputs"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PermanentError(f"cannot read recording {path}: {exc}") from exc
    if not isinstance(outputs, list) or not all(isinstance(o, dict) for o in outputs):
        raise PermanentError(f"recording {path} has no list of outputs")
    return path, outputs


def _read_results(path: Path) -> tuple[set[str], dict[tuple[str, str, int], str]]:
    try:
        _, records = read_records(path)
    except StoreError as exc:
        raise PermanentError(str(exc)) from exc
    arms: set[str] = set()
    outputs: dict[tuple[str, str, int], str] = {}
    for rec in records:
        row = rec.data
        if isinstance(row.get("task_id"), str) and isinstance(row.get("arm"), str):
            arms.add(row["arm"])
            if isinstance(row.get("output"), str):
                # a later row (a re-run) wins
                outputs[(row["task_id"], row["arm"], row_epoch(row))] = row["output"]
    return arms, outputs


def _outputs_file(path: Path, arm: ArmSpec, spec: Spec) -> Provider | None:
    """The replay of an outputs file (MMLU-Pro's, or FastChat's answers or judgments), or None
    for a file that is none (one of our results files, or no recording at all)."""
    if file_format(path) == "json":
        return OutputsRecording(path.resolve())
    if file_format(path) != "jsonl":
        return None
    first = _first_line(path, arm, spec)
    fastchat = replay_fastchat.recording(path.resolve(), first)
    if fastchat is not None:
        return fastchat
    return OutputsRecording(path.resolve()) if _outputs_lines(first, path, arm, spec) else None


def build(arm: ArmSpec, spec: Spec, caller: Caller) -> Provider:
    check_options(arm, spec, "replay", _KNOWN)
    raw = option(arm, "path", str, None, spec)
    if not raw:
        raise spec.error(
            "replay needs a 'path': a directory of BBH recordings, a .json[.gz] outputs file "
            "or a .jsonl "
            "results file",
            "arms",
            arm.name,
        )
    path = Path(raw).expanduser()
    if not path.is_absolute():
        path = spec.path.parent / path  # relative to the spec, like a dataset path
    if not path.exists():
        # a shipped spec's replay of a published run the user may not have: its items skip
        if arm.optional:
            raise UnavailableError(f"replay path not found: {path} (the arm is optional)")
        raise spec.error(f"replay path not found: {path}", "arms", arm.name, "path")
    source = option(arm, "arm", str, None, spec)
    if path.is_dir():
        if source is not None:
            raise spec.error(
                "'arm' selects a row of a .jsonl results file; a directory of BBH recordings "
                "has none",
                "arms",
                arm.name,
                "arm",
            )
        return BbhRecording(path.resolve())
    outputs = _outputs_file(path, arm, spec)
    if outputs is not None:
        if source is not None:
            raise spec.error(
                "'arm' selects a row of a .jsonl results file; an outputs file has none",
                "arms",
                arm.name,
                "arm",
            )
        return outputs
    if path.suffix != ".jsonl":
        raise spec.error(
            "replay path must be a directory of BBH recordings, a .json[.gz] outputs file "
            "or a .jsonl "
            f"results file: {path}",
            "arms",
            arm.name,
            "path",
        )
    return ResultsRecording(path.resolve(), source)


# ``system``: a judge's system text is not part of what a recording is found by.
PROVIDER = ProviderInfo(build, no_prompt="answers from its recording", system=True)
