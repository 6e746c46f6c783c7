"""An arm's prompt templates over arbitrary templates and field values: refused with a SpecError or
rendered exactly (a field's text is never formatted), and few-shot
draws that never show the item."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.datasets.prompts import prompter, render_for
from pytest_echo_bench.errors import SpecError
from pytest_echo_bench.spec.load import ArmSpec, Spec, load_spec
from pytest_echo_bench.spec.prompting import FewShot, Prompting

FIELDS = ("id", "input", "subtask", "topic")
SPEC = (
    "benchmark: demo\ndataset: {loader: inline, items: [{id: a, input: x, target: y}]}\nscorer: "
    "exact\narms:\n  a: {provider: sim}\n"
)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Spec:
    path = tmp_path_factory.mktemp("prompts") / "demo.yaml"
    path.write_text(SPEC)
    return load_spec(path)


def with_prompt(spec: Spec, prompt: Prompting) -> Spec:
    return dataclasses.replace(spec, arms={"a": ArmSpec("a", "sim", {}, 5, prompt=prompt)})


def example(ident: str, text: str, topic: str = "t") -> Example:
    return Example(ident, text, "T", "sub", {"topic": topic})


_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)
_SEGMENTS = st.lists(
    st.one_of(
        _TEXT.map(lambda t: ("text", t)), st.sampled_from(FIELDS).map(lambda f: ("field", f))
    ),
    max_size=8,
)


@settings(max_examples=200, derandomize=True, database=None, deadline=None)
@given(_SEGMENTS, _TEXT, _TEXT)
def test_a_template_renders_each_field_as_its_text(
    base: Spec, segments: list[tuple[str, str]], text: str, topic: str
) -> None:
    """Braces, format specs and attribute lookups inside a field's value stay text: nothing but the
    template's own ``{name}`` is ever substituted."""
    template = "".join(
        v.replace("{", "{{").replace("}", "}}") if kind == "text" else "{" + v + "}"
        for kind, v in segments
    )
    assume(template)  # an empty prompt is refused when the spec is read
    item = example("q1", text, topic)
    values = {"id": "q1", "input": text, "subtask": "sub", "topic": topic}
    made = prompter(with_prompt(base, Prompting(template)), "a", [item])
    assert made is not None
    assert made.render(item) == "".join(v if kind == "text" else values[v] for kind, v in segments)


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(st.text(st.sampled_from("{}!:.[]0a_input target"), max_size=24), _TEXT)
def test_any_template_is_rendered_or_refused_as_a_spec_error(
    base: Spec, template: str, text: str
) -> None:
    spec = with_prompt(base, Prompting(template))
    item = example("q1", "{input.__class__}{0:>99999}" + text)
    try:
        made = prompter(spec, "a", [item])
    except SpecError as exc:
        assert exc.path == str(base.path) and exc.line == 5 and exc.key == "arms.a.prompt"
        return
    assert made is not None
    out = made.render(item)
    # neither a lookup nor a padded format spec ran
    assert "__class__'>" not in out and len(out) < 1000


@settings(max_examples=100, derandomize=True, database=None, deadline=None)
@given(st.integers(2, 30), st.data(), st.integers(-(2**40), 2**40))
def test_examples_from_the_dataset_are_other_items_drawn_by_seed(
    base: Spec, n: int, data: st.DataObject, seed: int
) -> None:
    k = data.draw(st.integers(1, n - 1))
    items = [example(f"q{i}", f"question {i}") for i in range(n)]
    spec = with_prompt(
        base, Prompting(None, FewShot(from_dataset=k, template="{input}", seed=seed))
    )
    made = prompter(spec, "a", items)
    assert made is not None
    for item in items:
        shots = made.chosen(item)
        assert len(shots) == k and len({s.id for s in shots}) == k and item not in shots
        assert render_for({"a": made}, "a", item) == "\n\n".join(
            [*(s.input for s in shots), item.input]
        )
        again = prompter(spec, "a", list(items))  # built again (another process): the same draw
        assert again is not None and again.chosen(item) == shots


def test_a_fewshot_file_is_read_relative_to_the_spec(base: Spec, tmp_path: Path) -> None:
    (tmp_path / "shots.jsonl").write_text('{"id": "s", "input": "1+1", "target": "2"}\n')
    spec = dataclasses.replace(
        with_prompt(
            base,
            Prompting(
                "Q: {input}", FewShot(path="shots.jsonl", template="Q: {input}\nA: {target}")
            ),
        ),
        path=tmp_path / "demo.yaml",
    )
    made = prompter(spec, "a", [])
    assert made is not None and made.render(example("q", "2+2")) == "Q: 1+1\nA: 2\n\nQ: 2+2"


def test_a_field_holding_a_list_is_refused_naming_the_item(base: Spec) -> None:
    item = Example("q7", "x", "y", None, {"choices": ["a", "b"]})
    with pytest.raises(SpecError, match=r"item 'q7': the prompt: column 'choices' holds a list"):
        prompter(with_prompt(base, Prompting("{input} {choices}")), "a", [item])
