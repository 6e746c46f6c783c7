"""MT-bench: the loader (FastChat's ``question.jsonl``, the first turn of each question, with the
reference answers of a ``reference_answer/<model>.jsonl``), the scorer (a judge grades each answer
by FastChat's prompts and grade rule), and the reader of FastChat's JSON Lines files that the
loader and the replay of answers and judgments share.

The files are FastChat's (lm-sys/FastChat, ``fastchat/llm_judge``, Apache-2.0): questions
``{question_id, category, turns}``, answers and references ``{question_id, choices: [{turns}]}``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.datasets.loaders import dataset_path, slice_examples
from pytest_echo_bench.scoring.fastchat_prompts import SINGLE_MATH_V1, SINGLE_V1
from pytest_echo_bench.scoring.grades import GradeRule
from pytest_echo_bench.scoring.judging import Judges
from pytest_echo_bench.scoring.model_graded import (
    OptionError,
    aggregate,
    ask_panel,
    judge_names,
    option_problem,
)
from pytest_echo_bench.scoring.verdict import Verdict, unjudged
from pytest_echo_bench.spec.load import Spec
from pytest_echo_bench.store.paths import read_regular

MAX_FILE_BYTES = 256 << 20  # far above FastChat's judgment files (2 MB for three models)
# The categories whose questions FastChat judges against a reference answer (its NEED_REF_CATS).
NEEDS_REFERENCE = frozenset({"math", "reasoning", "coding"})

Fail = Callable[[str], Exception]
Record = tuple[int, dict[str, Any]]  # (line number from 1, the line's object)


def records(path: Path, fail: Fail) -> list[Record]:
    """The objects of the JSON Lines file ``path`` with their line numbers; ``fail(message)``
    (the message names ``path:line``) for a line that is not one JSON object."""
    data = read_regular(path, MAX_FILE_BYTES, lambda why: fail(f"{path} {why}"))
    found: list[Record] = []
    for lineno, raw in enumerate(data.split(b"\n"), 1):
        if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):  # a byte order mark is no part of it
            raw = raw[3:]
        if not raw.strip():
            continue
        try:
            record = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise fail(f"{path}:{lineno}: not UTF-8 (byte 0x{raw[exc.start]:02x} at column "
                       f"{exc.start + 1})") from None
        # a 5,000-digit number; [[[[... nested 100,000 deep
        except (ValueError, RecursionError) as exc:
            raise fail(f"{path}:{lineno}: not valid JSON ({getattr(exc, 'msg', None) or exc})"
                       ) from None
        if not isinstance(record, dict):
            raise fail(f"{path}:{lineno}: a record must be a JSON object")
        found.append((lineno, record))
    return found


def question_key(record: dict[str, Any], where: str, fail: Fail) -> str:
    """A record's ``question_id`` as text (FastChat's are whole numbers; a text is kept)."""
    qid = record.get("question_id")
    if isinstance(qid, bool) or not isinstance(qid, int | str) or qid == "":
        raise fail(f"{where}: question_id must be a whole number or a text, got {qid!r:.60}")
    return str(qid)


def first_turn(record: dict[str, Any], where: str, fail: Fail) -> str:
    """``choices[0].turns[0]`` of an answer or reference record: its first turn's text."""
    choices = record.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    turns = first.get("turns") if isinstance(first, dict) else None
    if not isinstance(turns, list) or not turns or not isinstance(turns[0], str):
        raise fail(f"{where}: needs choices[0].turns[0], the first turn's text (FastChat's "
                   "answer format: {question_id, choices: [{turns: [...]}]})")
    return turns[0]


def keyed(found: list[Record], path: Path, fail: Fail) -> dict[str, Record]:
    """``found`` by question id; an id twice is refused, naming both lines."""
    by_id: dict[str, Record] = {}
    for lineno, record in found:
        qid = question_key(record, f"{path}:{lineno}", fail)
        if qid in by_id:
            raise fail(f"{path}:{lineno}: question_id {qid} again (first on line "
                       f"{by_id[qid][0]}): which record holds cannot be told")
        by_id[qid] = (lineno, record)
    return by_id


# ---- the loader ------------------------------------------------------------------------------


def load(spec: Spec) -> list[Example]:
    """One item per question, its first turn: ids ``mt_bench/<question_id>``, subtask the
    category, metadata its ``question_id``, ``category`` and (given ``reference:``) the
    reference answer's first turn as ``reference``. No target: an answer is judged, not
    compared. ``start``/``limit`` apply per category."""
    path = dataset_path(spec)

    def fail(message: str) -> Exception:
        return spec.error(message, "dataset", "path")

    questions = keyed(records(path, fail), path, fail)
    if not questions:
        raise fail(f"{path} has no questions")
    references = _references(spec)
    by_category: dict[str, list[Example]] = {}
    for qid, (lineno, record) in questions.items():
        example = _example(qid, record, f"{path}:{lineno}", fail, references.get(qid))
        by_category.setdefault(str(example.subtask), []).append(example)
    return [ex for cat in by_category for ex in slice_examples(spec, by_category[cat])]


def _example(qid: str, record: dict[str, Any], where: str, fail: Fail,
             reference: str | None) -> Example:
    category, turns = record.get("category"), record.get("turns")
    if not isinstance(category, str) or not category:
        raise fail(f"{where}: needs a category (FastChat's question format: {{question_id, "
                   "category, turns}})")
    if not isinstance(turns, list) or not turns or not isinstance(turns[0], str):
        raise fail(f"{where}: needs turns, a list whose first is the question's text")
    metadata: dict[str, Any] = {"question_id": record["question_id"], "category": category}
    if reference is not None:
        metadata["reference"] = reference
    return Example(f"mt_bench/{qid}", turns[0], "", category, metadata)


def _references(spec: Spec) -> dict[str, str]:
    """The first turn of each reference answer by question id; none without ``reference:``."""
    raw = spec.dataset.get("reference")
    if raw is None:
        return {}
    if not isinstance(raw, str) or not raw:
        raise spec.error("reference must be the path of a reference answer file "
                         "(FastChat's reference_answer/gpt-4.jsonl)", "dataset", "reference")
    path = Path(raw).expanduser()
    path = path if path.is_absolute() else spec.path.parent / path

    def fail(message: str) -> Exception:
        return spec.error(message, "dataset", "reference")

    if not path.exists():
        raise fail(f"reference answer file not found: {path}")
    return {qid: first_turn(record, f"{path}:{lineno}", fail)
            for qid, (lineno, record) in keyed(records(path, fail), path, fail).items()}


# ---- the scorer ------------------------------------------------------------------------------

# FastChat's grade: the first ``[[n]]``, else the first ``[n]`` (its ``one_score_pattern`` and
# ``one_score_pattern_backup``); none is its -1, which its averages leave out. The scale is the
# one its prompts ask for: a grade outside 1-10 is no grade here (FastChat would count it; the
# recorded GPT-4 judgments have none).
RULE_PATTERN, RULE_FALLBACK = r"\[\[(\d+\.?\d*)\]\]", r"\[(\d+\.?\d*)\]"
SCALE = (1.0, 10.0)
PASS_AT = 8.0  # a choice: FastChat reports the mean grade alone, and pass rates need a line
OPTIONS = frozenset({"judge", "pass_at", "judges"})  # judges: the older way to declare them


def rule(pass_at: float = PASS_AT) -> GradeRule:
    """FastChat's single-answer grade rule, passing at ``pass_at``."""
    return GradeRule(re.compile(RULE_PATTERN), SCALE, pass_at, pick="first",
                     fallback=re.compile(RULE_FALLBACK))


def score(output: str, example: Example, options: dict[str, Any], *, judges: Judges) -> Verdict:
    """The judges' grade of ``output`` by FastChat's prompt for the item's category:
    ``single-math-v1`` with its reference for math, reasoning and coding, else ``single-v1``."""
    names, pass_at = _read(options)
    category = str(example.metadata.get("category", example.subtask))
    if category not in NEEDS_REFERENCE:
        judge_prompt = SINGLE_V1
        prompt = SINGLE_V1.render(question=example.input, answer=output)
    else:
        reference = example.metadata.get("reference")
        if not isinstance(reference, str):
            return unjudged(f"unjudged: {example.id} ({category}) is judged against a reference "
                            "answer (single-math-v1): give the loader's reference: file")
        judge_prompt = SINGLE_MATH_V1
        prompt = SINGLE_MATH_V1.render(question=example.input, answer=output,
                                       ref_answer_1=reference)
    graded = rule(pass_at)
    return aggregate(ask_panel(judges, names, prompt, judge_prompt.system, graded, output),
                     graded, "mean")


def _read(options: Mapping[str, Any]) -> tuple[tuple[str, ...], float]:
    """The judges to ask and ``pass_at``; OptionError for options that cannot work."""
    unknown = sorted(set(map(str, options)) - OPTIONS)
    if unknown:
        raise OptionError(f"unknown mt_bench scorer option {unknown[0]!r}; known: judge, "
                          "pass_at")
    pass_at = options.get("pass_at", PASS_AT)
    if (isinstance(pass_at, bool) or not isinstance(pass_at, int | float)
            or not SCALE[0] <= pass_at <= SCALE[1]):
        raise OptionError(f"pass_at must be a grade from 1 to 10 (default {PASS_AT:g}), got "
                          f"{pass_at!r}")
    return judge_names(options.get("judge")), float(pass_at)


def check_options(options: Mapping[str, Any]) -> str | None:
    """Why ``scorer: {name: mt_bench, ...}`` options are wrong, or None."""
    return option_problem(_read, options)
