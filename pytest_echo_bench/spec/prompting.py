"""An arm's prompt as data: its ``prompt:`` template and ``fewshot:`` examples, their keys checked.

    arms:
      plain: {provider: openai, model: gpt-4o-mini}
      steps:
        provider: openai
        model: gpt-4o-mini
        prompt: "Q: {input}\\nThink step by step, then answer."
        # or fewshot: {from_dataset: 3, seed: 1}
        fewshot: {path: shots.jsonl, n: 3, template: "Q: {input}\\nA: {target}"}

What the templates name is checked against the items when the dataset is loaded
(``datasets.prompts``); here only the shape: a text template, known keys, whole numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_echo_bench.errors import SpecError

FEWSHOT_KEYS = ("from_dataset", "n", "path", "seed", "separator", "template")
SHOT_TEMPLATE = "{input}\n{target}"  # one example: its question, then its answer
SEPARATOR = "\n\n"  # between the examples, and before the item's own prompt
MAX_SHOTS = 1000

Fail = Callable[..., SpecError]


@dataclass(frozen=True)
class FewShot:
    """``fewshot:``: examples from a JSON Lines file (the first ``n``) or ``from_dataset`` items."""

    path: str | None = None  # as written, relative to the spec
    n: int | None = None  # with path: how many of the file's items (None: all)
    # how many of the dataset's other items, chosen per item by ``seed``
    from_dataset: int | None = None
    template: str = SHOT_TEMPLATE
    separator: str = SEPARATOR
    seed: int = 0


@dataclass(frozen=True)
class Prompting:
    """An arm's prompt: its template over the item's fields (None: the
    item's input) and its examples."""

    template: str | None = None
    fewshot: FewShot | None = None

    def settings(self) -> dict[str, Any]:
        """What the answers depend on, as plain data (the file's contents are digested apart)."""
        shots = self.fewshot
        return {
            "template": self.template,
            "fewshot": None
            if shots is None
            else {
                "path": shots.path,
                "n": shots.n,
                "from_dataset": shots.from_dataset,
                "template": shots.template,
                "separator": shots.separator,
                "seed": shots.seed,
            },
        }


PROMPT_KEYS = ("fewshot", "template")
# a command arm's ``prompt:`` of old: how its program is handed the prompt
DELIVERY = ("stdin", "arg")


def prompt_keys(conf: dict[str, Any]) -> tuple[str, ...]:
    """The arm keys that are its prompt: a command arm's ``prompt: stdin |
    arg`` is its delivery instead."""
    delivery = conf.get("provider") == "command" and conf.get("prompt") in DELIVERY
    return ("fewshot",) if delivery else ("prompt", "fewshot")


def prompting(conf: dict[str, Any], arm: str, fail: Fail) -> Prompting | None:
    """The arm's ``prompt:`` (a template, or ``{template, fewshot}``)
    and ``fewshot:`` (None: neither)."""
    template = conf.get("prompt") if "prompt" in prompt_keys(conf) else None
    shots, where = conf.get("fewshot"), ("arms", arm, "fewshot")
    if isinstance(template, dict):
        unknown = sorted(set(map(str, template)) - set(PROMPT_KEYS))
        if unknown:
            raise fail(
                f"unknown prompt key {unknown[0]!r}; known: {', '.join(PROMPT_KEYS)}",
                "arms",
                arm,
                "prompt",
                unknown[0],
            )
        if shots is not None and "fewshot" in template:
            raise fail(
                "fewshot is given twice: under the arm and under its prompt",
                "arms",
                arm,
                "prompt",
                "fewshot",
            )
        shots, where = (
            template.get("fewshot", shots),
            (("arms", arm, "prompt", "fewshot") if "fewshot" in template else where),
        )
        template = template.get("template")
    if template is None and shots is None:
        return None
    if template is not None and (not isinstance(template, str) or not template):
        raise fail(
            'prompt must be a template text over the item\'s fields, e.g. "Q: {input}\\nA:" '
            "(few-shot examples go under the arm's fewshot:)",
            "arms",
            arm,
            "prompt",
        )
    return Prompting(template, None if shots is None else _fewshot(shots, where, fail))


def _fewshot(value: Any, where: tuple[str, ...], fail: Fail) -> FewShot:
    if not isinstance(value, dict):
        raise fail("fewshot must be a mapping: {path: FILE, n: K} or {from_dataset: K}", *where)
    unknown = sorted(set(map(str, value)) - set(FEWSHOT_KEYS))
    if unknown:
        raise fail(
            f"unknown fewshot key {unknown[0]!r}; known: {', '.join(FEWSHOT_KEYS)}",
            *where,
            unknown[0],
        )
    path, count = value.get("path"), value.get("from_dataset")
    if (path is None) == (count is None):
        raise fail(
            "fewshot needs one of path (a JSON Lines file of items) or from_dataset (how "
            "many items)",
            *where,
        )
    if path is not None and (not isinstance(path, str) or not path):
        raise fail(
            "fewshot.path must name a JSON Lines file of items (relative to the spec)",
            *where,
            "path",
        )
    if count is not None and "n" in value:
        raise fail("n goes with path; from_dataset is itself the number of examples", *where, "n")
    for key in ("template", "separator"):
        if key in value and not isinstance(value[key], str):
            raise fail(f"fewshot.{key} must be text", *where, key)
    return FewShot(
        path,
        _count(value.get("n"), (*where, "n"), fail),
        _count(count, (*where, "from_dataset"), fail),
        value.get("template", SHOT_TEMPLATE),
        value.get("separator", SEPARATOR),
        _seed(value.get("seed", 0), (*where, "seed"), fail),
    )


def _count(value: Any, where: tuple[str, ...], fail: Fail) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SHOTS:
        raise fail(f"must be a whole number from 1 to {MAX_SHOTS}, got {value!r:.80}", *where)
    return value


def _seed(value: Any, where: tuple[str, ...], fail: Fail) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) >= 2**63:
        raise fail(f"seed must be a whole number, got {value!r:.80}", *where)
    return value
