"""BIG-Bench Hard: the loader (task files, optional chain-of-thought prompts) and the scorer (the
paper's strict rule, and a parser robust to real model outputs)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.datasets.loaders import dataset_path, slice_examples
from pytest_echo_bench.scoring.text import declaration_pattern
from pytest_echo_bench.scoring.verdict import Verdict, judge
from pytest_echo_bench.spec.load import Spec
from pytest_echo_bench.store.paths import read_regular, refusal

PAPER_CUE = "the answer is "
# a file name under the task directory, never a path
_TASK_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
# a task file is under 1 MB; the limit only keeps a wrong path from filling memory
MAX_FILE_BYTES = 64 << 20

# A declaration: "the answer is X", "The final answer is: X", "**Answer:** X". The answer runs to
# the end of its line or to the next cue, so "... is (A). No: the answer is (C)" yields both and
# the later one wins; a cue ending its line ("Answer:\n\n(B)") takes the next non-empty line.
_CUE = (
    r"(?:\bthe\s+(?:final\s+|correct\s+|best\s+|right\s+)?answer\s+(?:is|would\s+be)\b|\banswer\*"
    r"*\s*:)"
)
_DECLARED = declaration_pattern(_CUE, r"[\s:*]*")

_OPTION = re.compile(r"\(([A-R])\)")
_TARGET_OPTION = re.compile(r"\(?([A-R])\)?")
# "A" and "I" are English words: "the answer is A bit subtle" must not read as option A.
_BARE_LETTER = re.compile(r"([B-HJ-R])(?=$|[\s.,:;)\]])|([AI])(?=$|[.,:;)\]]|\s+(?![a-z]))")
_HEDGE = re.compile(r"\(?[A-R]\)?\s*(?:,|or|and|/|&)\s*\(?[A-R]\)?(?=$|[\s.,:;)])")
_NON_OPTION = {"none", "neither", "both", "all"}  # a committed answer that names no single option
_ONLY_LETTER = re.compile(r"\(?([A-R])\)?\.?")

_BINARY = {
    "yes": "Yes",
    "no": "No",
    "true": "True",
    "false": "False",
    "valid": "valid",
    "invalid": "invalid",
}
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_NUMBER_WORDS = {
    w: str(i)
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen "
        "fourteen fifteen sixteen seventeen "
        "eighteen nineteen twenty".split()
    )
}
_BRACKETS = set("()[]{}<> ")
_NOTHING = {"empty", "nothing", "none"}


def load(spec: Spec) -> list[Example]:
    """The items of the task files under `path` (all, or `subtasks`), ids `bbh/<task>/<index>`."""
    root = dataset_path(spec, "directory")
    subtasks = spec.dataset.get("subtasks") or sorted(p.stem for p in root.glob("*.json"))
    if not isinstance(subtasks, list) or not all(
        isinstance(s, str) and _TASK_NAME.fullmatch(s) for s in subtasks
    ):
        raise spec.error(
            "subtasks must be a list of BBH task names (file names in the task directory, "
            "not paths)",
            "dataset",
            "subtasks",
        )
    prompts = spec.dataset.get("cot_prompts")
    examples: list[Example] = []
    for sub in subtasks:
        file = root / f"{sub}.json"
        if not file.exists():
            raise spec.error(f"BBH task file not found: {file}", "dataset", "subtasks")
        records = json.loads(_read(spec, file, "subtasks")).get("examples", [])
        prefix = _cot_prefix(spec, prompts, sub)
        rows = [
            Example(
                f"bbh/{sub}/{i}",
                prefix + rec["input"] + ("\nA: Let's think step by step." if prefix else ""),
                str(rec["target"]),
                sub,
            )
            for i, rec in enumerate(records)
        ]
        examples.extend(slice_examples(spec, rows))
    return examples


def _read(spec: Spec, file: Path, key: str) -> str:
    """A task or prompt file: a regular file of at most MAX_FILE_BYTES (a
    FIFO, a device: refused unopened)."""
    def fail(why: str) -> Exception:
        return spec.error(f"{file} {why}", "dataset", key)

    try:
        return read_regular(file, MAX_FILE_BYTES, fail).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(f"cannot be read: {exc}") from exc


def _cot_prefix(spec: Spec, prompts: Any, subtask: str) -> str:
    """The paper's 3-shot chain-of-thought prompt for ``subtask``, when ``cot_prompts`` is set."""
    if not prompts:
        return ""
    if not isinstance(prompts, str):
        raise spec.error(
            "cot_prompts must be the path of a directory of <task>.txt files",
            "dataset",
            "cot_prompts",
        )
    directory = Path(prompts).expanduser()
    if not directory.is_absolute():
        directory = spec.path.parent / directory
    why = refusal(directory, "directory")
    if why is not None:
        raise spec.error(f"cot_prompts {directory} {why}", "dataset", "cot_prompts")
    file = directory / f"{subtask}.txt"
    if not file.exists():
        raise spec.error(f"chain-of-thought prompt not found: {file}", "dataset", "cot_prompts")
    text = _read(spec, file, "cot_prompts")
    body = text.split("-----", 1)[-1].strip()  # the files open with a canary/title block
    return body + "\n\nQ: "


Parse = Callable[[str], "str | None"]
Same = Callable[[str, str], bool]


def score(output: str, target: str, options: dict[str, Any]) -> Verdict:
    """Score one BBH output; ``strict`` follows the paper exactly,
    the default reads real outputs."""
    if options.get("strict"):
        return strict(output, target)
    parse, same = _shape(target.strip())
    answer = _latest(output, parse)
    return judge(answer, target, answer is not None and same(answer, target.strip()))


def strict(output: str, target: str) -> Verdict:
    """The paper's evaluation: the text after the last "the answer is ", without a
    final period, equals the target."""
    # str.split keeps the whole output when the cue is missing, so the paper counts a bare exact
    # answer as correct; anything else without the cue is no answer at all.
    answer = output.split(PAPER_CUE)[-1].strip()
    if answer.endswith("."):
        answer = answer[:-1]
    if PAPER_CUE not in output and answer != target:
        return judge(None, target, False)
    return judge(answer, target, answer == target)


def declarations(output: str) -> list[str]:
    """Every declared answer in order, markdown emphasis removed; the latest declaration wins."""
    return [_clean(m.group("ans")) for m in _DECLARED.finditer(output)]


def _clean(text: str) -> str:
    return text.replace("**", "").replace("`", "").strip().strip("*\"'").strip()


def _latest(output: str, parse: Parse) -> str | None:
    for text in reversed(declarations(output)):
        answer = parse(text)
        if answer is not None:
            return answer
    return _undeclared(output, parse)


def _undeclared(output: str, parse: Parse) -> str | None:
    lines = [ln.strip() for ln in output.strip().splitlines() if ln.strip()]
    if not lines:
        return None
    if len(lines) == 1 and len(lines[0]) <= 200:
        return parse(_clean(lines[0]))  # a bare short answer, "(B)" or "Yes."
    # Reasoning followed by a last line that is only a letter ("...\n(B)") is still an answer;
    # a paragraph of reasoning with no declaration is not.
    last = _ONLY_LETTER.fullmatch(_clean(lines[-1]))
    return f"({last.group(1)})" if last else None


def _shape(target: str) -> tuple[Parse, Same]:
    """How to read and compare an answer, decided by the target's shape (BBH
    targets are uniform per task)."""
    if _TARGET_OPTION.fullmatch(target):
        return _parse_choice, _same_choice
    if target.casefold() in _BINARY:
        return _parse_binary, lambda a, t: a.casefold() == t.casefold()
    if _NUMBER.fullmatch(target):
        return _parse_number, _same_number
    if target and set(target) <= _BRACKETS:
        return _parse_brackets, lambda a, t: a.replace(" ", "") == t.replace(" ", "")
    return _parse_text, lambda a, t: _words(a) == _words(t)


def _parse_choice(text: str) -> str | None:
    text = _final_period(text)
    if _HEDGE.match(text):
        return text  # "(A) or (B)" commits to no single option: a wrong answer, not a missing one
    m = _OPTION.match(text) or _BARE_LETTER.match(text)
    if m:
        return f"({next(g for g in m.groups() if g)})"
    words = text.split()
    if text.startswith("(") or (words and words[0].strip(".,:;").casefold() in _NON_OPTION):
        return text  # "(None of the above)": a declared answer that is no option
    letters = set(_OPTION.findall(text))
    # "Answer: I think (B)": one option in a short declaration; prose
    # mentioning options is not an answer.
    return f"({letters.pop()})" if len(letters) == 1 and len(words) <= 6 else None


def _same_choice(answer: str, target: str) -> bool:
    m = _TARGET_OPTION.fullmatch(target)
    return m is not None and answer == f"({m.group(1)})"


def _parse_binary(text: str) -> str | None:
    words = text.split()
    word = words[0].strip(".,;:!()").casefold() if words else ""
    return _BINARY.get(word)  # "the answer is not obvious" declares nothing


def _parse_number(text: str) -> str | None:
    text = text.lstrip("=$ ")
    m = _NUMBER.match(text)
    if m:
        return m.group(0)
    words = text.split()
    if words and words[0].strip(".,;:!").casefold() in _NUMBER_WORDS:
        return _NUMBER_WORDS[words[0].strip(".,;:!").casefold()]
    found = _NUMBER.findall(text)
    return found[-1] if found else None


def _same_number(answer: str, target: str) -> bool:
    try:
        return float(answer.replace(",", "")) == float(target.replace(",", ""))
    except ValueError:
        return False


def _parse_brackets(text: str) -> str | None:
    text = _final_period(text)
    if text.split()[:1] and text.split()[0].strip(".,:;\"").casefold() in _NOTHING:
        return text  # "the answer is empty": a committed (wrong) answer, not a missing one
    return text if text and set(text) <= _BRACKETS else None


def _parse_text(text: str) -> str | None:
    return _final_period(text) or None


def _words(text: str) -> list[str]:
    # Word lists compare as words: "apple, Banana cherry" is "apple banana cherry".
    return text.replace(",", " ").casefold().split()


def _final_period(text: str) -> str:
    text = text.strip()
    return text[:-1].rstrip() if text.endswith(".") else text
