"""Every dataset key is checked against what its loader reads (a typo such as ``limt: 5`` once ran
the whole dataset), and ``fields:`` maps a JSON Lines or inline dataset's own keys, as it maps a
table's; a file without the usual keys is refused naming the keys it has and ``fields:``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import Sweep, make_spec
from pytest_echo_bench.datasets.registry import LOADER_KEYS, LOADERS, load_benchmark
from pytest_echo_bench.errors import SpecError

QA = [{"question": f"{i}+{i}=?", "answer": str(2 * i), "topic": "add"} for i in range(6)]
WORKERS = pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])


def qa_spec(pytester: pytest.Pytester, dataset: str, name: str = "demo") -> Path:
    (pytester.path / "qa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in QA))
    return make_spec(
        pytester,
        f"benchmark: {name}\ndataset:\n  loader: jsonl\n  path: qa.jsonl\n{dataset}"
        "scorer: exact\narms:\n  a: {provider: sim, accuracy: 1.0}\n",
        name,
    )


def test_every_loader_has_its_keys_listed() -> None:
    assert set(LOADER_KEYS) == set(LOADERS)  # a loader added without its keys would check nothing


@WORKERS
@pytest.mark.parametrize(
    ("dataset", "expected"),
    [
        (
            "  limt: 5\n  fields: {input: '{question}', target: answer}\n",
            "*demo.yaml:5 [[]dataset.limt[]]: unknown key 'limt' for loader jsonl; known "
            "keys: choices, fields, limit, loader, "
            "optional, path, shuffle_choices, start, target_kind*",
        ),
        (
            "  limit: 2\n  feilds: {input: '{question}'}\n",
            "*demo.yaml:6 [[]dataset.feilds[]]: unknown key 'feilds'*",
        ),
    ],
    ids=["limt", "feilds"],
)
def test_an_unknown_dataset_key_stops_the_run_before_any_call(
    pytester: pytest.Pytester, sweep: Sweep, workers: list[str], dataset: str, expected: str
) -> None:
    qa_spec(pytester, dataset)
    result, _, rows = sweep.run(*workers)
    # as every other spec error, with or without workers
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*echo-bench: invalid benchmark spec: *" + expected.lstrip("*")])
    assert rows == []


@pytest.mark.parametrize(("loader", "extra", "key"), [
    ("inline", "  items: [{id: a, input: x, target: y}]\n  limt: 1\n", "limt"),
    ("bbh", "  path: .\n  fields: {input: '{q}'}\n", "fields"),
    ("humaneval", "  path: x.jsonl\n", "path"),
    ("mmlu_pro", "  path: x.json\n  subtasks: [a]\n", "subtasks"),
    ("parquet", "  path: x.csv\n  item: [1]\n", "item"),
])
def test_each_loader_names_its_own_keys(tmp_path: Path, loader: str, extra: str, key: str) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(
        f"benchmark: s\ndataset:\n  loader: {loader}\n{extra}scorer: exact\narms:\n  a: "
        "{provider: sim}\n"
    )
    with pytest.raises(
        SpecError,
        match=rf"\[dataset\.{key}\]: unknown key '{key}' for loader {loader}; known keys: ",
    ) as exc:
        load_benchmark(spec)
    assert ", ".join(sorted({"loader", *LOADER_KEYS[loader]})) in str(exc.value)


@WORKERS
def test_fields_map_a_jsonl_files_own_keys_and_limit_is_kept(
    pytester: pytest.Pytester, sweep: Sweep, workers: list[str]
) -> None:
    qa_spec(
        pytester,
        "  start: 1\n  limit: 3\n  fields: {input: 'Q: {question}', target: answer, subtask: "
        "topic}\n",
    )
    result, _, rows = sweep.run(*workers)
    assert result.ret == 0, result.stdout.str()[-2000:]
    # the window, ids by record index
    assert sorted(r["task_id"] for r in rows) == ["demo/1", "demo/2", "demo/3"]
    assert all(r["passed"] and r["subtask"] == "add" for r in rows)


def test_a_jsonl_file_without_the_usual_keys_is_refused_with_a_hint(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    qa_spec(pytester, "")
    result, _, rows = sweep.run()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "*qa.jsonl:1: item is missing 'id' (it has question, answer, topic): name the "
            "record's own keys with the dataset's fields:, e.g. fields: {input: \"{question}\", "
            "target: answer}*"
        ]
    )
    assert rows == []


def test_a_field_the_jsonl_record_lacks_names_the_record(tmp_path: Path) -> None:
    (tmp_path / "qa.jsonl").write_text('{"question": "1+1", "answer": "2"}\n{"question": "2+2"}\n')
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "benchmark: s\ndataset:\n  loader: jsonl\n  path: qa.jsonl\n  fields: {input: "
        "'{question}', "
        "target: answer}\nscorer: exact\narms:\n  a: {provider: sim}\n"
    )
    with pytest.raises(
        SpecError,
        match=r"qa\.jsonl record 1: no value in field 'answer' \(the record has question\)",
    ):
        load_benchmark(spec)
    (tmp_path / "qa.jsonl").write_text('["not", "a", "record"]\n')
    with pytest.raises(SpecError, match=r"qa\.jsonl:1: an item must be a JSON object"):
        load_benchmark(spec)


def test_inline_items_take_fields_choices_and_a_window(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "benchmark: s\ndataset:\n  loader: inline\n  start: 1\n  limit: 1\n"
        "  items:\n    - {q: one, options: [x, y], right: 0}\n    - {q: two, options: [x, "
        "y], right: 1}\n"
        "    - {q: three, options: [x, y], right: 0}\n"
        "  fields: {input: '{q}', target: right}\n  choices: options\n"
        "scorer: choice\narms:\n  a: {provider: sim}\n"
    )
    _, examples = load_benchmark(spec)
    assert [(e.id, e.input, e.target) for e in examples] == [("s/1", "two\n\nA. x\nB. y", "B")]


def test_inline_items_keep_start_and_limit_without_fields(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    items = "".join(f"    - {{id: q{i}, input: x, target: y}}\n" for i in range(4))
    spec.write_text(
        f"benchmark: s\ndataset:\n  loader: inline\n  limit: 2\n  items:\n{items}scorer: exact\n"
        "arms:\n  a: {provider: sim}\n"
    )
    # before this, limit was ignored here
    assert [e.id for e in load_benchmark(spec)[1]] == ["q0", "q1"]


def test_an_item_missing_only_its_target_gets_no_fields_hint(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("benchmark: s\ndataset:\n  loader: inline\n  items:\n    - {id: a, input: x}\n"
                    "scorer: exact\narms:\n  a: {provider: sim}\n")
    with pytest.raises(SpecError, match=r"item is missing 'target'$"):
        load_benchmark(spec)
