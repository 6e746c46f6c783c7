"""An arm's prompt for each item: its few-shot examples, then its template over the item's fields.

Templates substitute as the datasets' ``input`` template does (``datasets.fields``): ``{name}`` of a
field, ``{{`` and ``}}`` for braces, and nothing else (no attribute, index, conversion or format
spec), so an item's text never reaches ``str.format``. An item's fields are ``id``, ``input``,
``subtask`` (when it has one) and its metadata; an example's fields add ``target``. The arm's own
template may not name ``{target}``: that would hand the model the answer.

Examples come from a JSON Lines file of items (its first ``n``) or from the dataset: per item,
``from_dataset`` of the other items, drawn by ``seed`` and the item's id (the same shots on every
run, worker and shard; never the item itself). Everything a template names is checked against
every item when the arm's prompter is built, at collection, naming the item and the field.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import string
from collections.abc import Callable, Mapping
from typing import Any

from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.datasets.fields import Piece, cell_text
from pytest_echo_bench.errors import SpecError
from pytest_echo_bench.spec.load import ArmSpec, Spec
from pytest_echo_bench.spec.prompting import FewShot

Fail = Callable[[str], Exception]


def item_fields(example: Example, with_target: bool) -> dict[str, Any]:
    """The fields a template may name: the item's own over its metadata's."""
    values = dict(example.metadata)
    values.update(id=example.id, input=example.input)
    if example.subtask is not None:
        values["subtask"] = example.subtask
    if with_target:
        values["target"] = example.target
    return values


def pieces(text: str, what: str, fail: Fail) -> list[Piece]:
    """``text`` as literal pieces and the plain field names between them; anything else refused."""
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:  # a lone "{" or "}"
        raise fail(f"{what} {text[:80]!r}: {exc} (write {{{{ and }}}} for braces)") from None
    out: list[Piece] = []
    for literal, name, spec_text, conversion in parsed:
        if name is not None and (not name or conversion or spec_text or "." in name or "[" in name):
            raise fail(
                f"{what} {text[:80]!r}: {{{name}{'!' + conversion if conversion else ''}"
                f"{':' + spec_text if spec_text else ''}}} must be a plain field name (no "
                "'.', '[', '!' or ':')"
            )
        out.append((literal, name))
    return out


def fill(template: list[Piece], values: dict[str, Any], fail: Fail) -> str:
    """The template with each field's text (``fields.cell_text``: a list or mapping refused)."""
    out = []
    for literal, name in template:
        out.append(literal)
        if name is not None:
            out.append(cell_text(values[name], name, fail))
    return "".join(out)


@dataclasses.dataclass(frozen=True)
class Prompter:
    """One arm's prompts: built once per spec and arm, rendered per item."""

    template: list[Piece]
    shots: FewShot | None = None
    shot_template: list[Piece] = dataclasses.field(default_factory=list)
    fixed: tuple[str, ...] = ()  # the file's examples, rendered once
    # the dataset, for from_dataset
    examples: list[Example] = dataclasses.field(default_factory=list)
    index: dict[str, int] = dataclasses.field(default_factory=dict)
    # An item's text as an example, rendered once: each is shown to several items. Threads may both
    # render one; they store the same text.
    _shown: dict[str, str] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    def render(self, example: Example) -> str:
        own = fill(self.template, item_fields(example, False), _never)
        if self.shots is None:
            return own
        shown = (
            self.fixed
            if self.shots.from_dataset is None
            else tuple(self._example(ex) for ex in self.chosen(example))
        )
        return self.shots.separator.join((*shown, own))

    def _example(self, example: Example) -> str:
        text = self._shown.get(example.id)
        if text is None:
            text = self._shown[example.id] = fill(
                self.shot_template, item_fields(example, True), _never
            )
        return text

    def chosen(self, example: Example) -> list[Example]:
        """``from_dataset`` other items, drawn by the seed and the
        item's id: the same on every run."""
        assert self.shots is not None and self.shots.from_dataset is not None
        k, own = self.shots.from_dataset, self.index.get(example.id)
        drawn = random.Random(f"{self.shots.seed}/{example.id}").sample(
            range(len(self.examples)), k + 1
        )
        return [self.examples[i] for i in drawn if i != own][:k]


def render_for(
    prompters: Mapping[str, Prompter] | None, arm: str, example: Example, asked: str | None = None
) -> str:
    """What ``arm`` is sent for ``example``: its prompt rendered, else the item's input as it is.

    ``asked``: what a routing or Python arm asked it (``ArmContext.call``): a prompt of its own is
    sent as it is; the item's input (the default) gets the arm's own prompt, as its own items do.
    """
    if asked is not None and asked != example.input:
        return asked
    made = prompters.get(arm) if prompters else None
    return made.render(example) if made is not None else example.input


def _never(message: str) -> Exception:  # every field was checked when the prompter was built
    return ValueError(message)


def prompter(spec: Spec, arm: str, examples: list[Example]) -> Prompter | None:
    """Arm ``arm``'s prompter over ``examples``, every template checked
    against every item (None: no prompt)."""
    conf = spec.arms[arm]
    if conf.prompt is None:
        return None
    where = ("arms", arm, "prompt")
    template = pieces(
        "{input}" if conf.prompt.template is None else conf.prompt.template,
        "the prompt template",
        lambda m: spec.error(m, *where),
    )
    if any(name == "target" for _, name in template):
        raise spec.error(
            "the prompt names {target}, which would show the model the answer; the examples' "
            "template (fewshot.template) may name it",
            *where,
        )
    for ex in examples:
        _check_names(spec, template, ex, False, f"item {ex.id!r}: the prompt", where)
    shots = conf.prompt.fewshot
    if shots is None:
        return Prompter(template)
    at = ("arms", arm, "fewshot")
    shot_template = pieces(
        shots.template, "fewshot.template", lambda m: spec.error(m, *at, "template")
    )
    if shots.from_dataset is None:
        return Prompter(
            template, shots, shot_template, tuple(_file_shots(spec, conf, shot_template))
        )
    if shots.from_dataset >= len(examples):
        raise spec.error(
            f"from_dataset: {shots.from_dataset} needs more items than that (the dataset has "
            f"{len(examples)}): an item is never its own example",
            *at,
            "from_dataset",
        )
    for ex in examples:
        _check_names(
            spec,
            shot_template,
            ex,
            True,
            f"item {ex.id!r}, as an example: fewshot.template",
            (*at, "template"),
        )
    return Prompter(
        template, shots, shot_template, (), examples, {ex.id: i for i, ex in enumerate(examples)}
    )


def _check_names(spec: Spec, template: list[Piece], example: Example, with_target: bool, what: str,
                 where: tuple[str, ...]) -> None:
    values = item_fields(example, with_target)
    for _, name in template:
        if name is not None and name not in values:
            raise spec.error(
                f"{what} names {{{name}}}, which the item lacks (it has "
                f"{', '.join(map(str, values))})",
                *where,
            )
    # a list or mapping is no text
    fill(template, values, lambda m: spec.error(f"{what}: {m}", *where))


def _file_shots(spec: Spec, arm: ArmSpec, template: list[Piece]) -> list[str]:
    """The file's first ``n`` items, each rendered by the examples' template."""
    assert (
        arm.prompt is not None
        and arm.prompt.fewshot is not None
        and arm.prompt.fewshot.path is not None
    )
    shots = arm.prompt.fewshot
    where = ("arms", arm.name, "fewshot", "path")
    # the dataset reader, its bounds and messages
    from pytest_echo_bench.datasets.loaders import jsonl

    # Read as a dataset of its own, its errors pointed at this key (the
    # reader names the file and line).
    as_dataset = dataclasses.replace(
        spec,
        dataset={"loader": "jsonl", "path": shots.path},
        lines={**spec.lines, ("dataset", "path"): spec.line_of(*where) or 0},
    )
    try:
        items = jsonl(as_dataset)
    except SpecError as exc:
        raise spec.error(f"fewshot file: {str(exc).split(']: ', 1)[-1]}", *where) from None
    if shots.n is not None and shots.n > len(items):
        raise spec.error(
            f"n: {shots.n} but {shots.path} holds {len(items)} items",
            "arms",
            arm.name,
            "fewshot",
            "n",
        )
    chosen = items[: shots.n]
    for ex in chosen:
        _check_names(
            spec,
            template,
            ex,
            True,
            f"example {ex.id!r} of {shots.path}: fewshot.template",
            ("arms", arm.name, "fewshot", "template"),
        )
    return [fill(template, item_fields(ex, True), _never) for ex in chosen]


def prompt_settings(spec: Spec, arm: str) -> dict[str, Any] | None:
    """What an arm's prompt adds to its fingerprint: the settings, and
    the file's examples as rendered."""
    conf = spec.arms[arm]
    if conf.prompt is None:
        return None
    settings = conf.prompt.settings()
    shots = conf.prompt.fewshot
    if shots is not None and shots.path is not None:
        try:
            made = prompter(spec, arm, [])
        except SpecError:  # an unreadable file: collection refuses the spec, naming it
            settings["examples"] = None
            return settings
        rendered = made.fixed if made is not None else ()
        settings["examples"] = hashlib.sha256(
            json.dumps(rendered, ensure_ascii=True).encode()
        ).hexdigest()[:16]
    return settings
