"""Any dataset in YAML: ``loader: parquet`` (a plain file) and ``loader: hf`` (the datasets library,
offline), the field map and the choice-question template. Every file is written by the test."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import Sweep, make_spec
from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.datasets.registry import load_benchmark
from pytest_echo_bench.errors import DatasetWarning, SpecError, UnavailableError

pa = pytest.importorskip("pyarrow", reason="needs pip install 'pytest-echo-bench[parquet]'")
pq = pytest.importorskip("pyarrow.parquet")
# imported here, it outlives pytester's in-process runs (a second
# import re-registers its Arrow types)
try:
    import datasets
except ImportError:
    datasets = None

ROWS = [
    {
        "qid": f"q{i}",
        "question": f"What is {i} + {i}?",
        "answer": str(2 * i),
        "topic": "add" if i % 2 else "even",
        "source": f"s{i}",
    }
    for i in range(6)
]
FIELDS = (
    "  fields: {id: qid, input: 'Q: {question} ({{topic}})', target: answer, subtask: topic, "
    "metadata: [source]}\n"
)
GPQA = [
    {
        "Question": f"Which is {i}?",
        "Correct Answer": str(i),
        "Incorrect Answer 1": f"{i}1",
        "Incorrect Answer 2": f"{i}2",
        "Incorrect Answer 3": f"{i}3",
        "Record ID": f"rec{i}",
    }
    for i in range(8)
]
GPQA_CHOICES = (
    "  choices: [Correct Answer, Incorrect Answer 1, Incorrect Answer 2, Incorrect Answer 3]\n"
)


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def spec(pytester: pytest.Pytester, dataset: str, scorer: str = "exact",
         arm: str = "{provider: reference, template: '{target}'}") -> Path:
    return make_spec(
        pytester, f"benchmark: yamlset\ndataset:\n{dataset}scorer: {scorer}\narms:\n  ref: {arm}\n"
    )


def items(path: Path) -> list[Example]:
    return load_benchmark(path)[1]


def test_parquet_with_a_field_map(pytester: pytest.Pytester, sweep: Sweep) -> None:
    write_parquet(pytester.path / "set.parquet", ROWS)
    spec(pytester, "  loader: parquet\n  path: set.parquet\n  start: 1\n  limit: 3\n" + FIELDS)
    got = items(pytester.path / "demo.yaml")
    assert [(e.id, e.input, e.target, e.subtask, dict(e.metadata)) for e in got] == [
        (
            f"q{i}",
            f"Q: What is {i} + {i}? ({{topic}})",
            str(2 * i),
            ROWS[i]["topic"],
            {"source": f"s{i}"},
        )
        for i in (1, 2, 3)
    ]
    result, _, rows = sweep.run()
    result.assert_outcomes(passed=3)
    assert {r["subtask"] for r in rows} == {"add", "even"}


@pytest.mark.parametrize("name", ["set.csv", "set.jsonl", "set.json", "set.json.gz"])
def test_the_plain_loader_reads_every_table_format(pytester: pytest.Pytester, name: str) -> None:
    import csv
    import gzip
    path = pytester.path / name
    if name.endswith(".csv"):
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(ROWS[0]))
            writer.writeheader()
            writer.writerows(ROWS)
    elif name.endswith(".jsonl"):
        path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    elif name.endswith(".gz"):
        path.write_bytes(gzip.compress(json.dumps({"data": ROWS}).encode()))
    else:
        path.write_text(json.dumps(ROWS))
    spec(pytester, f"  loader: parquet\n  path: {name}\n" + FIELDS)
    assert [e.target for e in items(pytester.path / "demo.yaml")] == [r["answer"] for r in ROWS]


def test_default_ids_count_records_and_a_missing_field_names_the_record(
    pytester: pytest.Pytester,
) -> None:
    write_parquet(
        pytester.path / "set.parquet",
        [{"input": "a", "target": "1"}, {"input": "b", "target": None}],
    )
    spec(pytester, "  loader: parquet\n  path: set.parquet\n  limit: 1\n")
    assert [e.id for e in items(pytester.path / "demo.yaml")] == ["yamlset/0"]
    spec(pytester, "  loader: parquet\n  path: set.parquet\n")
    with pytest.raises(
        SpecError, match=r"demo.yaml:2 \[dataset.fields\].*record 1: no value in field 'target'"
    ):
        items(pytester.path / "demo.yaml")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            "{input: '{question.__class__}'}",
            r"\[dataset.fields.input\].*must be a plain field name",
        ),
        ("{input: '{question!r}'}", r"must be a plain field name"),
        ("{input: '{question:>99999999}'}", r"must be a plain field name"),
        ("{input: 'open {'}", r"\[dataset.fields.input\].*write \{\{ and \}\} for braces"),
        (
            "{input: '{nope}', target: answer}",
            r"\[dataset.fields.input\]: dataset \S*set.parquet record 0: the input template "
            r"names 'nope', which the "
            r"record lacks",
        ),
        ("{question: question}", r"\[dataset.fields.question\]: unknown field 'question'"),
        ("{metadata: source}", r"\[dataset.fields.metadata\]: metadata must be a list"),
    ],
)
def test_a_bad_field_map_names_file_line_and_key(
    pytester: pytest.Pytester, fields: str, message: str
) -> None:
    write_parquet(pytester.path / "set.parquet", ROWS)
    spec(pytester, f"  loader: parquet\n  path: set.parquet\n  fields: {fields}\n")
    with pytest.raises(SpecError, match=r"demo.yaml:\d+ .*" + message):
        items(pytester.path / "demo.yaml")


def test_without_pyarrow_the_message_names_the_extra(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_parquet(pytester.path / "set.parquet", ROWS)
    # what an environment without the extra imports
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    spec(pytester, "  loader: parquet\n  path: set.parquet\n" + FIELDS)
    with pytest.raises(
        SpecError,
        match=r"\[dataset.path\].*needs pyarrow: pip install 'pytest-echo-bench\[parquet\]'",
    ):
        items(pytester.path / "demo.yaml")
    spec(pytester, "  loader: parquet\n  path: set.parquet\n  optional: true\n" + FIELDS)
    with pytest.raises(
        UnavailableError, match=r"pytest-echo-bench\[parquet\].*marks its dataset optional"
    ):
        items(pytester.path / "demo.yaml")


# ---- choice questions --------------------------------------------------------------------------


def test_gpqa_style_choices_need_only_yaml(pytester: pytest.Pytester, sweep: Sweep) -> None:
    write_parquet(pytester.path / "gpqa.parquet", GPQA)
    dataset = (
        "  loader: parquet\n  path: gpqa.parquet\n  fields: {id: Record ID, target: Correct "
        "Answer, "
        "input: \"{Question}\\n{choices}\\nReply 'the answer is (X)'.\"}\n"
    )
    spec(pytester, dataset + GPQA_CHOICES + "  shuffle_choices: 3\n", "mmlu_pro",
         "{provider: reference, template: 'So the answer is ({target}).'}")
    got = items(pytester.path / "demo.yaml")
    letters = {e.target for e in got}
    assert len(letters) > 1  # shuffled: the correct answer is not always A
    for e, rec in zip(got, GPQA, strict=True):
        lines = e.input.splitlines()
        assert lines[0] == rec["Question"] and lines[-1] == "Reply 'the answer is (X)'."
        options = dict(line.split(". ", 1) for line in lines[1:-1])
        assert (
            sorted(options) == ["A", "B", "C", "D"] and options[e.target] == rec["Correct Answer"]
        )
        assert e.metadata["n_options"] == 4
    # stable
    assert [e.target for e in items(pytester.path / "demo.yaml")] == [e.target for e in got]
    result, _, rows = sweep.run()
    result.assert_outcomes(passed=8)


def test_choices_in_the_files_order_with_one_letter_throughout_warn(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    # GPQA lists the correct answer first: unshuffled, an arm that always says A would score 100%.
    rows = [
        {"q": f"Pick {i}", "options": [f"right {i}", f"wrong {i}", "other"], "label": f"right {i}"}
        for i in range(10)
    ]
    (pytester.path / "set.json").write_text(json.dumps(rows))
    spec(
        pytester,
        "  loader: parquet\n  path: set.json\n  fields: {input: '{q}', target: label}\n  "
        "choices: options\n",
        "mmlu_pro",
        "{provider: reference, template: 'The answer is ({target}).'}",
    )
    with pytest.warns(
        DatasetWarning,
        match=r"every one of the 10 items has target 'A' \(the options are in the "
        r"file's order: set shuffle_choices: SEED\)",
    ):
        items(pytester.path / "demo.yaml")
    result, _, _ = sweep.run()
    result.stdout.fnmatch_lines(
        ["*warnings summary*", "*DatasetWarning*every one of the 10 items has target 'A'*"]
    )
    # below 10 items one letter may be chance
    (pytester.path / "set.json").write_text(json.dumps(rows[:9]))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DatasetWarning)
        assert len(items(pytester.path / "demo.yaml")) == 9


@pytest.mark.parametrize(("kind", "answers", "targets"), [
    # an integer is an index; a text an option's text before a letter
    (None, [1, "1", "(C)"], ["B", "A", "C"]),
    ("index", [1, "1", "2"], ["B", "B", "C"]),  # "1" from a CSV read as the index it is
    ("text", ["1", "0", "2"], ["A", "B", "C"]),
    ("letter", ["A", "(B)", "c"], None),  # a lower-case letter is no letter: refused
    ("index", [0, 1, 3], None),
    ("text", ["1", "0", 2], None),  # an integer is not a text
])
def test_target_kind_reads_every_target_one_way(
    pytester: pytest.Pytester, kind: str | None, answers: list[Any], targets: list[str] | None
) -> None:
    rows = [
        {"q": f"how many {i}?", "options": ["1", "0", "2"], "answer": a}
        for i, a in enumerate(answers)
    ]
    (pytester.path / "set.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    extra = f"  target_kind: {kind}\n" if kind else ""
    spec(
        pytester,
        "  loader: parquet\n  path: set.jsonl\n  fields: {input: '{q}', target: answer}\n"
        "  choices: options\n" + extra,
    )
    if targets is None:
        with pytest.raises(
            SpecError, match=rf"record 2: target .* is not the .* \(target_kind: {kind}\)"
        ):
            items(pytester.path / "demo.yaml")
    else:
        assert [e.target for e in items(pytester.path / "demo.yaml")] == targets


OPTION = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zs", "Zl", "Zp")),
    min_size=1,
    max_size=6,
)


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(st.lists(OPTION, min_size=2, max_size=8, unique=True), st.data())
def test_each_target_kind_names_the_option_it_says(
    tmp_path_factory: pytest.TempPathFactory, options: list[str], data: st.DataObject
) -> None:
    # Whatever the options hold (digits, letters, another option's letter), each kind reads one way.
    i = data.draw(st.integers(0, len(options) - 1))
    tmp = tmp_path_factory.mktemp("kind")
    for kind, target in (
        ("index", i),
        ("index", str(i)),
        ("letter", "ABCDEFGH"[i]),
        ("text", options[i]),
    ):
        (tmp / "set.json").write_text(
            json.dumps([{"q": "pick", "options": options, "answer": target}])
        )
        (tmp / "demo.yaml").write_text(
            f"benchmark: k\ndataset:\n  loader: parquet\n  path: set.json\n  fields: "
            f"{{input: '{{q}}', target: answer}}\n  choices: options\n  target_kind: {kind}\n"
            "scorer: exact\narms:\n  a: {provider: sim}\n"
        )
        (example,) = items(tmp / "demo.yaml")
        assert example.target == "ABCDEFGH"[i], (kind, target)


def test_a_bad_target_kind_is_refused(pytester: pytest.Pytester) -> None:
    (pytester.path / "set.json").write_text(json.dumps([{"input": "q", "target": "a"}]))
    spec(pytester, "  loader: parquet\n  path: set.json\n  target_kind: index\n")
    with pytest.raises(SpecError, match=r"\[dataset.target_kind\]: target_kind needs choices"):
        items(pytester.path / "demo.yaml")
    spec(
        pytester, "  loader: parquet\n  path: set.json\n  choices: options\n  target_kind: number\n"
    )
    with pytest.raises(
        SpecError, match=r"\[dataset.target_kind\]: target_kind must be one of index, letter, text"
    ):
        items(pytester.path / "demo.yaml")


def test_choices_from_a_list_field_with_a_letter_or_index_target(pytester: pytest.Pytester) -> None:
    rows = [
        {"q": "Pick", "options": ["x", "y", "z"], "label": 2},
        {"q": "Again", "options": ["x", "y"], "label": "(B)"},
    ]
    (pytester.path / "set.json").write_text(json.dumps(rows))
    spec(
        pytester,
        "  loader: parquet\n  path: set.json\n  fields: {input: '{q}', target: label}\n  "
        "choices: options\n",
    )
    got = items(pytester.path / "demo.yaml")
    assert [(e.input, e.target) for e in got] == [
        ("Pick\n\nA. x\nB. y\nC. z", "C"),
        ("Again\n\nA. x\nB. y", "B"),
    ]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (
            [{"q": "Pick", "options": ["x", "y"], "label": 5}],
            r"record 0: target index 5 is not one of the 2 options",
        ),
        (
            [{"q": "Pick", "options": ["x", "y"], "label": "w"}],
            r"target 'w' is neither an option's text, its letter",
        ),
        (
            [{"q": "Pick", "options": "x, y", "label": "x"}],
            r"\[dataset.choices\].*field 'options' must hold a list",
        ),
    ],
)
def test_a_choice_target_that_is_no_option_is_refused(
    pytester: pytest.Pytester, rows: list[dict[str, Any]], message: str
) -> None:
    (pytester.path / "set.json").write_text(json.dumps(rows))
    spec(
        pytester,
        "  loader: parquet\n  path: set.json\n  fields: {input: '{q}', target: label}\n  "
        "choices: options\n",
    )
    with pytest.raises(SpecError, match=message):
        items(pytester.path / "demo.yaml")


# ---- the datasets library, offline -------------------------------------------------------------


@pytest.fixture
def offline_hf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    pytest.importorskip("datasets", reason="needs pip install 'pytest-echo-bench[hf]'")
    home = tmp_path / "hf-home"
    for key in ("HF_HUB_CACHE", "HF_DATASETS_CACHE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return home


def test_hf_reads_a_local_file_and_a_directory(pytester: pytest.Pytester, offline_hf: Path) -> None:
    write_parquet(pytester.path / "set.parquet", ROWS)
    spec(pytester, "  loader: hf\n  path: set.parquet\n  limit: 2\n" + FIELDS)
    assert [e.id for e in items(pytester.path / "demo.yaml")] == ["q0", "q1"]
    (pytester.path / "dir" / "data").mkdir(parents=True)
    write_parquet(pytester.path / "dir" / "data" / "test-00000-of-00001.parquet", ROWS[:4])
    spec(pytester, "  loader: hf\n  path: dir\n  split: test\n" + FIELDS)
    assert [e.target for e in items(pytester.path / "demo.yaml")] == ["0", "2", "4", "6"]
    # the cache went where HF_HOME says, not into ~/.cache
    assert (offline_hf / "datasets").is_dir()


@pytest.mark.parametrize(("loader", "key"), [("parquet", "split: test"), ("parquet", "config: x"),
                                             ("hf", "split: test"), ("hf", "config: x")])
def test_a_split_or_config_of_one_file_is_refused(
    pytester: pytest.Pytester, offline_hf: Path, loader: str, key: str
) -> None:
    # One file is one table: "split: test" read train.parquet whole before, and said nothing.
    write_parquet(pytester.path / "train.parquet", ROWS)
    spec(pytester, f"  loader: {loader}\n  path: train.parquet\n  {key}\n" + FIELDS)
    name = key.split(":")[0]
    with pytest.raises(
        SpecError, match=rf"\[dataset.{name}\]: .*one file, which has no {name}s: remove {name}"
    ):
        items(pytester.path / "demo.yaml")


def test_hf_reads_a_saved_dataset_and_names_its_splits(
    pytester: pytest.Pytester, offline_hf: Path
) -> None:
    datasets.DatasetDict(
        {
            "validation": datasets.Dataset.from_list(ROWS[:2]),
            "test": datasets.Dataset.from_list(ROWS),
        }
    ).save_to_disk(str(pytester.path / "saved"))
    spec(pytester, "  loader: hf\n  path: saved\n  split: validation\n" + FIELDS)
    assert [e.id for e in items(pytester.path / "demo.yaml")] == ["q0", "q1"]
    spec(pytester, "  loader: hf\n  path: saved\n  split: train\n" + FIELDS)
    with pytest.raises(
        SpecError, match=r"\[dataset.split\]: no split 'train'; the dataset has test, validation"
    ):
        items(pytester.path / "demo.yaml")


def cached_hub_dataset(home: Path) -> None:
    """acme/tiny in the hub cache under ``home``, as a download leaves it: one train split."""
    snapshot = home / "hub" / "datasets--acme--tiny" / "snapshots" / ("0" * 40)
    (snapshot / "data").mkdir(parents=True)
    (home / "hub" / "datasets--acme--tiny" / "refs").mkdir()
    (home / "hub" / "datasets--acme--tiny" / "refs" / "main").write_text("0" * 40)
    write_parquet(snapshot / "data" / "train-00000-of-00001.parquet", ROWS)


def test_hf_finds_a_hub_dataset_in_the_local_cache(
    pytester: pytest.Pytester, sweep: Sweep, offline_hf: Path
) -> None:
    cached_hub_dataset(offline_hf)
    spec(pytester, "  loader: hf\n  name: acme/tiny\n" + FIELDS)
    assert len(items(pytester.path / "demo.yaml")) == 6
    result, _, rows = sweep.run()
    result.assert_outcomes(passed=6)


@pytest.mark.parametrize(("choice", "message"), [
    ("split: test", r"\[dataset.split\]: no split 'test'; the dataset has train$"),
    ("config: nope", r"\[dataset.config\]: no config 'nope'; the dataset has default$"),
])
def test_a_cached_hub_dataset_names_a_misspelt_split_or_config(
    pytester: pytest.Pytester, offline_hf: Path, choice: str, message: str
) -> None:
    # The dataset is on this machine: "not on this machine" would send
    # the user to download it again.
    cached_hub_dataset(offline_hf)
    spec(pytester, f"  loader: hf\n  name: acme/tiny\n  {choice}\n" + FIELDS)
    with pytest.raises(SpecError, match=message):
        items(pytester.path / "demo.yaml")


def test_optional_never_skips_a_misspelt_split(
    pytester: pytest.Pytester, sweep: Sweep, offline_hf: Path
) -> None:
    # optional forgives a dataset that is absent, not a spec that names a split it does not have.
    cached_hub_dataset(offline_hf)
    spec(pytester, "  loader: hf\n  name: acme/tiny\n  split: tset\n  optional: true\n" + FIELDS)
    result, _, rows = sweep.run("-rs")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*no split 'tset'; the dataset has train*"])
    assert "SKIPPED" not in result.stdout.str() and rows == []


def test_hf_offline_without_the_dataset_says_so(
    pytester: pytest.Pytester, sweep: Sweep, offline_hf: Path
) -> None:
    spec(pytester, "  loader: hf\n  name: acme/absent\n" + FIELDS)
    with pytest.raises(
        SpecError,
        match=r"\[dataset.name\]: dataset 'acme/absent' is not on this machine \(not in the "
        r"hub cache .*hf-home/hub.*HF_DATASETS_OFFLINE / HF_HUB_OFFLINE forbids",
    ):
        items(pytester.path / "demo.yaml")
    spec(pytester, "  loader: hf\n  name: acme/absent\n  optional: true\n" + FIELDS)
    result, _, rows = sweep.run("-rs")
    result.stdout.fnmatch_lines(["*SKIPPED*acme/absent*is not on this machine*marks it optional*"])
    assert rows == []


def test_hf_without_the_library_names_the_extra(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)
    spec(pytester, "  loader: hf\n  name: acme/tiny\n")
    with pytest.raises(
        SpecError,
        match=r"\[dataset.loader\]: loader hf needs the datasets package: "
        r"pip install 'pytest-echo-bench\[hf\]'",
    ):
        items(pytester.path / "demo.yaml")


def test_json_lines_keep_line_separators_inside_strings(pytester: pytest.Pytester) -> None:
    rows = [{"input": "a\u2028b\u0085c", "target": "1"}, {"input": "d", "target": "2"}]
    (pytester.path / "set.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
    )
    spec(pytester, "  loader: parquet\n  path: set.jsonl\n")
    assert [e.input for e in items(pytester.path / "demo.yaml")] == ["a\u2028b\u0085c", "d"]


def test_a_csv_field_over_the_limit_is_an_error_naming_the_file(pytester: pytest.Pytester) -> None:
    (pytester.path / "set.csv").write_text("input,target\n" + "x" * 200_000 + ",1\n")
    spec(pytester, "  loader: parquet\n  path: set.csv\n")
    with pytest.raises(SpecError, match=r"\[dataset.path\]: dataset .*set.csv is not readable CSV"):
        items(pytester.path / "demo.yaml")
