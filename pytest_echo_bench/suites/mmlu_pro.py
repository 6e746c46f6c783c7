"""MMLU-Pro: the loader (the official records from a local file, in the authors' chain-of-thought
prompt format, k-shot from a validation file) and the scorer (the authors' answer extraction).

The prompt and the extraction follow the authors' ``evaluate_from_local.py`` (TIGER-AI-Lab/MMLU-Pro,
Apache-2.0): ``generate_cot_prompt``, ``format_cot_example``, ``extract_answer`` / ``extract_again``
/ ``extract_final``, and the seeded random guess of their ``save_res``.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.datasets.loaders import dataset_path, slice_examples
from pytest_echo_bench.datasets.tables import read_table
from pytest_echo_bench.scoring.verdict import Verdict, judge
from pytest_echo_bench.spec.load import Spec

LETTERS = "ABCDEFGHIJ"  # the authors' extraction reads A-J: ten options at most
INITIAL_PROMPT = (
    "You are an expert in {$}. Below is a series of example questions (with answers) about {$} for "
    "demonstration. You will be given a question at the end, after the examples, for you to "
    "answer. "
    "First give step-by-step reasoning about how to solve the question. Then output the answer."
)
COT_CUE = "Answer: Let's think step by step."
MAX_SHOTS = 20

# The authors' extraction, in order. The first is all of it under ``strict``.
PAPER_PATTERN = re.compile(r"answer is \(?([A-J])\)?")
# Their fallbacks, ``.*[aA]nswer:\s*([A-J])`` and ``\b[A-J]\b(?!.*\b[A-J]\b)`` (DOTALL), backtrack
# over a whole line or text for every start: quadratic in its length. The same matches, in one pass:
# every start, overlapping ("answer: Answer: B")
_ANSWER_COLON = re.compile(r"(?=[aA]nswer:\s*([A-J]))")
_STANDALONE = re.compile(r"\b[A-J]\b")


def load(spec: Spec) -> list[Example]:
    """One item per question, ids ``mmlu_pro/<question_id>``, subtask the
    category (all, or ``categories``)."""
    path = dataset_path(spec)
    records = _records(spec, path, "path")
    wanted = _categories(spec)
    count, shots = _shots(spec)
    by_category: dict[str, list[Example]] = {}
    for rec in records:
        if wanted is None or rec["category"] in wanted:
            by_category.setdefault(rec["category"], []).append(
                _example(rec, shots.get(rec["category"], []))
            )
    if wanted is not None and (missing := sorted(wanted - set(by_category))):
        raise spec.error(
            f"no question of category {missing[0]!r} in {path}; it has "
            f"{', '.join(sorted({r['category'] for r in records}))}",
            "dataset",
            "categories",
        )
    _check_shots(spec, count, {cat: len(shots.get(cat, [])) for cat in by_category})
    return [ex for cat in by_category for ex in slice_examples(spec, by_category[cat])]


def _records(spec: Spec, path: Path, key: str) -> list[dict[str, Any]]:
    """The file's records, each checked as the official format has it; options
    "N/A" dropped as the authors do."""
    def fail(why: str) -> Exception:
        return spec.error(f"{path} {why}", "dataset", key)

    records = read_table(path, fail)
    if not records:
        raise fail("has no records")
    return [_checked(rec, i, fail) for i, rec in enumerate(records)]


def _checked(rec: dict[str, Any], i: int, fail: Any) -> dict[str, Any]:
    """Record ``i`` as the official format has it, or ``fail``'s error naming what is wrong."""
    for field in ("question_id", "question", "options", "answer", "category"):
        if rec.get(field) is None:
            raise fail(f"record {i} has no {field!r} (MMLU-Pro records carry question_id, "
                       "question, options, answer, category)")
    options = _options(rec["options"], i, fail)
    answer = _answer(rec, i, len(options), fail)
    if not isinstance(rec["question"], str) or not isinstance(rec["category"], str):
        raise fail(f"record {i}: question and category must be text")
    qid = question_id(rec["question_id"])
    if qid is None:
        raise fail(f"record {i}: question_id {rec['question_id']!r:.60} is not a whole number "
                   "or a text")
    cot = str(rec.get("cot_content") or "")
    return {**rec, "question_id": qid, "options": options, "answer": answer, "cot_content": cot}


def _options(options: Any, i: int, fail: Any) -> list[str]:
    """A record's options, "N/A" dropped as the authors do."""
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        raise fail(f"record {i}: options must be a list of strings")
    kept = [o for o in options if o != "N/A"]
    if not 1 <= len(kept) <= len(LETTERS):
        raise fail(f"record {i}: {len(kept)} options; MMLU-Pro has 1 to {len(LETTERS)}")
    return kept


def _answer(rec: dict[str, Any], i: int, options: int, fail: Any) -> str:
    """A record's answer: the letter of one of its ``options``, agreeing with its answer_index."""
    answer = str(rec["answer"])
    if len(answer) != 1 or answer not in LETTERS[:options]:
        raise fail(f"record {i}: answer {answer!r} is not the letter of one of its {options} "
                   "options")
    index = rec.get("answer_index")
    # A file edited by hand, or options reordered.
    if index is not None and index != LETTERS.index(answer):
        raise fail(f"record {i}: answer {answer!r} and answer_index {index!r} disagree")
    return answer


def question_id(value: object) -> int | str | None:
    """A record's ``question_id`` as the authors' files give it (a whole number), or None when it is
    none. Parquet and pandas turn an integer column with a gap into floats: ``2805.0`` is 2805."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | str):
        return value if value != "" else None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _categories(spec: Spec) -> set[str] | None:
    value = spec.dataset.get("categories")
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise spec.error(
            "categories must be a list of MMLU-Pro categories (biology, ..., psychology)",
            "dataset",
            "categories",
        )
    return set(value)


def _check_shots(spec: Spec, shots: int, found: dict[str, int]) -> None:
    """Every category asked for gets its ``shots`` examples, unless ``allow_fewer_shots: true``: a
    validation file short of one would make its questions fewer-shot,
    a different benchmark, unseen."""
    allow = spec.dataset.get("allow_fewer_shots", False)
    if not isinstance(allow, bool):
        raise spec.error(
            f"allow_fewer_shots must be true or false, got {allow!r}",
            "dataset",
            "allow_fewer_shots",
        )
    short = {cat: n for cat, n in sorted(found.items()) if n < shots}
    if short and not allow:
        counts = ", ".join(f"{cat} {n}" for cat, n in short.items())
        raise spec.error(
            f"the validation file has fewer than {shots} examples for {len(short)} "
            f"categor{'y' if len(short) == 1 else 'ies'} of the test set ({counts}); give a "
            "file with "
            f"{shots} per category, a smaller shots, or allow_fewer_shots: true",
            "dataset",
            "dev_path",
        )


def _shots(spec: Spec) -> tuple[int, dict[str, list[dict[str, Any]]]]:
    """``shots`` and the first ``shots`` validation records of each category (5 by default with a
    ``dev_path``, else none)."""
    dev = spec.dataset.get("dev_path")
    shots = spec.dataset.get("shots", 5 if dev else 0)
    if isinstance(shots, bool) or not isinstance(shots, int) or not 0 <= shots <= MAX_SHOTS:
        raise spec.error(
            f"shots must be a whole number from 0 to {MAX_SHOTS}, got {shots!r}", "dataset", "shots"
        )
    if shots and not dev:
        raise spec.error(
            "shots needs a dev_path: the validation file the examples come from", "dataset", "shots"
        )
    if not shots:
        return 0, {}
    if not isinstance(dev, str):
        raise spec.error("dev_path must be the path of the validation file", "dataset", "dev_path")
    path = Path(dev).expanduser()
    path = path if path.is_absolute() else spec.path.parent / path
    if not path.is_file():
        raise spec.error(f"validation file not found: {path}", "dataset", "dev_path")
    by_category: dict[str, list[dict[str, Any]]] = {}
    for rec in _records(spec, path, "dev_path"):
        kept = by_category.setdefault(rec["category"], [])
        if len(kept) < shots:
            kept.append(rec)
    return shots, by_category


def _example(rec: dict[str, Any], shots: list[dict[str, Any]]) -> Example:
    metadata = {
        "question_id": rec["question_id"],
        "n_options": len(rec["options"]),
        "src": rec.get("src"),
    }
    return Example(
        f"mmlu_pro/{rec['question_id']}",
        prompt(rec, shots),
        rec["answer"],
        rec["category"],
        metadata,
    )


def prompt(rec: dict[str, Any], shots: list[dict[str, Any]]) -> str:
    """The authors' ``generate_cot_prompt``: the instruction, the
    worked examples, then the question."""
    head = INITIAL_PROMPT.replace("{$}", rec["category"]) + "\n"
    return (
        head + "".join(format_cot_example(s, True) for s in shots) + format_cot_example(rec, False)
    )


def format_cot_example(rec: dict[str, Any], including_answer: bool) -> str:
    """The authors' ``format_cot_example``: the question, the lettered options,
    the chain of thought or its cue."""
    text = "Question:\n" + str(rec["question"]) + "\nOptions:\n"
    text += "".join(f"{LETTERS[i]}. {opt}\n" for i, opt in enumerate(rec["options"]))
    if including_answer:
        return (
            text + str(rec["cot_content"]).replace("A: Let's think step by step.", COT_CUE) + "\n\n"
        )
    return text + COT_CUE


# ---- scoring ---------------------------------------------------------------------------------


def extract(output: str, strict: bool) -> str | None:
    """The authors' ``extract_answer``: "answer is (X)", then (unless
    ``strict``) their two fallbacks."""
    m = PAPER_PATTERN.search(output)
    if m:
        return m.group(1)
    if strict:
        return None
    return answer_colon(output) or last_letter(output)


def answer_colon(text: str) -> str | None:
    """``re.search(r".*[aA]nswer:\\s*([A-J])", text)``: the last match starting
    on the first line that has one."""
    found, line_end = None, -1
    for m in _ANSWER_COLON.finditer(text):
        if found is not None and m.start() > line_end:
            break
        if found is None:
            line_end = text.find("\n", m.start())
            line_end = len(text) if line_end < 0 else line_end
        found = m.group(1)
    return found


def last_letter(text: str) -> str | None:
    """``re.search(r"\\b[A-J]\\b(?!.*\\b[A-J]\\b)", text, re.DOTALL)``:
    the last standalone letter A-J."""
    found = None
    for m in _STANDALONE.finditer(text):
        found = m.group(0)
    return found


def score(output: str, example: Example, options: dict[str, Any]) -> Verdict:
    """Score one output: the extracted letter against the answer; no answer is unparseable.

    ``random_guess_seed`` follows the authors' published figure instead: where nothing is extracted,
    ``random.seed(seed); randint(0, n_options - 1)`` picks the answer, and the row says so.
    """
    letter = extract(output, bool(options.get("strict")))
    target = example.target.strip().strip("()")
    seed = options.get("random_guess_seed")
    if letter is not None or seed is None:
        return judge(letter, target, letter == target)
    n = example.metadata.get("n_options")
    guess = LETTERS[
        random.Random(seed).randint(0, (n if isinstance(n, int) and 0 < n <= 10 else 10) - 1)
    ]
    verdict = judge(guess, target, guess == target)
    return Verdict(
        verdict.status,
        guess,
        f"random guess (random_guess_seed {seed}): {verdict.detail}",
        {"random_guess": True},
    )


def check_options(options: dict[str, Any]) -> str | None:
    """Why ``scorer: {name: mmlu_pro, ...}`` options are wrong, or None."""
    unknown = sorted(set(options) - {"strict", "random_guess_seed"})
    if unknown:
        return f"unknown mmlu_pro scorer option {unknown[0]!r}; known: random_guess_seed, strict"
    if not isinstance(options.get("strict", False), bool):
        return f"strict must be true or false, got {options['strict']!r}"
    seed = options.get("random_guess_seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        return f"random_guess_seed must be a whole number (the authors use 12345), got {seed!r}"
    return None
