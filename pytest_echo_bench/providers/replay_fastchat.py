"""Replay of FastChat's MT-bench files, read as they are: an answer file
(``model_answer/<model>.jsonl``) answers as an arm, and a judgment file
(``model_judgment/gpt-4_single.jsonl``) answers as a judge.

A recorded judgment is found by the exact prompt the judge is sent (its ``user_prompt``), so a
replay that grades at all proves the prompt is the recorded judge's byte for byte; a prompt not
found names the first character where it leaves the closest prompt recorded for its question.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pytest_echo_bench.errors import PermanentError
from pytest_echo_bench.providers.base import BaseProvider, Completion, Request
from pytest_echo_bench.suites.mt_bench import Record, first_turn, keyed, question_key, records

T = TypeVar("T")
SNIPPET = 40  # characters of each prompt shown either side of where they part

_loaded: dict[tuple[str, Path], Any] = {}  # one read per file per process, shared by threads
_load_lock = threading.Lock()


def _once(kind: str, path: Path, read: Callable[[Path], T]) -> T:
    with _load_lock:
        if (kind, path) not in _loaded:
            try:
                _loaded[(kind, path)] = read(path)
            except PermanentError as exc:  # a bad file fails every item at once, read once
                _loaded[(kind, path)] = exc
        loaded = _loaded[(kind, path)]
    if isinstance(loaded, PermanentError):
        raise PermanentError(str(loaded))
    return loaded  # type: ignore[no-any-return]


def _question(request: Request) -> str:
    """The item's FastChat question id: its loader's ``question_id``, else its id's last part."""
    qid = request.example.metadata.get("question_id")
    return str(qid) if qid is not None else request.example.id.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class FastChatAnswers(BaseProvider):
    """A FastChat answer file: the first turn of the answer to the item's question."""

    instant = True  # recorded outputs, read once: nothing to wait for

    path: Path

    def complete(self, request: Request) -> Completion:
        answers = _once("fastchat-answers", self.path, _read_answers)
        qid = _question(request)
        if qid not in answers:
            raise PermanentError(f"no recorded answer for {request.example.id}: no question_id "
                                 f"{qid} in {self.path}")
        return Completion(answers[qid], usage=None, sub_calls=0, extra={"replayed": True})


def _read_answers(path: Path) -> dict[str, str]:
    found = keyed(records(path, PermanentError), path, PermanentError)
    return {qid: first_turn(rec, f"{path}:{line}", PermanentError)
            for qid, (line, rec) in found.items()}


@dataclass(frozen=True)
class Judgments:
    """A judgment file read: records by their exact prompt, and every prompt of each question."""

    by_prompt: dict[str, list[Record]]
    by_question: dict[str, list[Record]]


@dataclass(frozen=True)
class FastChatJudgments(BaseProvider):
    """A FastChat judgment file as a judge: the recorded judgment of the exact prompt sent."""

    instant = True  # recorded judgments, read once: nothing to wait for

    path: Path

    def complete(self, request: Request) -> Completion:
        judgments = _once("fastchat-judgments", self.path, _read_judgments)
        found = judgments.by_prompt.get(request.prompt)
        if not found:
            raise PermanentError(self._not_found(request, judgments))
        texts = {rec["judgment"] for _, rec in found}
        if len(texts) > 1:  # the same prompt judged twice, differently: which one cannot be told
            lines = ", ".join(str(line) for line, _ in found)
            raise PermanentError(f"{self.path} records {len(texts)} different judgments of this "
                                 f"exact prompt (lines {lines}): which to replay cannot be told")
        record = found[0][1]
        judge = record.get("judge")  # [the judge that gave it ("gpt-4"), the prompt's name]
        model = judge[0] if isinstance(judge, list) and judge else None
        return Completion(record["judgment"], usage=None, sub_calls=0, extra={"replayed": True},
                          model=model if isinstance(model, str) else None)

    def _not_found(self, request: Request, judgments: Judgments) -> str:
        qid = _question(request)
        recorded = judgments.by_question.get(qid, [])
        if not recorded:
            return f"no recorded judgment for question {qid} in {self.path}"
        line, at, closest = max(
            ((ln, _common(rec["user_prompt"], request.prompt), rec["user_prompt"])
             for ln, rec in recorded),
            key=lambda found: found[1],
        )
        start = max(0, at - SNIPPET)
        return (f"no recorded judgment of this prompt for question {qid} in {self.path}: it "
                f"leaves the closest recorded prompt (line {line}) at character {at}: recorded "
                f"{closest[start:at + SNIPPET]!r}, sent {request.prompt[start:at + SNIPPET]!r}")


def _common(a: str, b: str) -> int:
    """The length of the prefix ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def _read_judgments(path: Path) -> Judgments:
    by_prompt: dict[str, list[Record]] = {}
    by_question: dict[str, list[Record]] = {}
    for line, rec in records(path, PermanentError):
        where = f"{path}:{line}"
        qid = question_key(rec, where, PermanentError)
        if not isinstance(rec.get("user_prompt"), str) or not isinstance(rec.get("judgment"), str):
            raise PermanentError(f"{where}: a judgment needs user_prompt and judgment texts "
                                 "(FastChat's model_judgment format)")
        by_prompt.setdefault(rec["user_prompt"], []).append((line, rec))
        by_question.setdefault(qid, []).append((line, rec))
    return Judgments(by_prompt, by_question)


def recording(path: Path, first: object) -> FastChatAnswers | FastChatJudgments | None:
    """The FastChat replay of ``path`` when its ``first`` line is one of FastChat's records (a
    judgment: ``user_prompt`` and ``judgment``; an answer: ``question_id`` and ``choices``)."""
    if not isinstance(first, dict):
        return None
    if {"user_prompt", "judgment"} <= first.keys():
        return FastChatJudgments(path)
    if {"question_id", "choices"} <= first.keys():
        return FastChatAnswers(path)
    return None
