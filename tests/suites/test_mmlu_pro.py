"""MMLU-Pro: the paper's own figures reproduced from its recorded outputs, the authors' prompt and
extraction, and replay of their outputs files."""

from __future__ import annotations

import gzip
import json
import random
import re
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import SHARED_DATA, Sweep, make_spec
from pytest_echo_bench.cli.main import main
from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.datasets.registry import load_benchmark
from pytest_echo_bench.providers import replay
from pytest_echo_bench.suites import mmlu_pro

OUTPUTS = SHARED_DATA / "mmlu-pro" / "model_outputs_Meta-Llama-3-8B_5shots.json.gz"
needs_outputs = pytest.mark.skipif(
    not OUTPUTS.is_file(), reason=f"the MMLU-Pro authors' recorded outputs are not at {OUTPUTS}"
)


@cache
def recorded() -> list[dict[str, Any]]:
    with gzip.open(OUTPUTS, "rt", encoding="utf-8") as f:
        records: list[dict[str, Any]] = json.load(f)
    return records


def spec_text(path: Path | str, scorer: str = "{name: mmlu_pro, strict: true}", extra: str = "",
              arm: str | None = None) -> str:
    arm = arm or f"{{provider: replay, path: {path}}}"
    return (f"benchmark: mmlu_pro\ndataset:\n  loader: mmlu_pro\n  path: {path}\n{extra}"
            f"scorer: {scorer}\narms:\n  llama3-8b: {arm}\n")


# ---- the paper's own figures ---------------------------------------------------------------------


@needs_outputs
# 12,032 items through a sweep under -n 2: started first, see tests/conftest.py
@pytest.mark.long_running
def test_replaying_the_papers_outputs_gives_its_counts_per_category(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, spec_text(OUTPUTS))
    result, _, rows = sweep.run("-n", "2")
    want = Counter(r["category"] for r in recorded() if r["pred"] == r["answer"])
    got = Counter(r["subtask"] for r in rows if r["status"] == "correct")
    assert len(rows) == len(recorded()) == 12032
    assert got == want and len(want) == 14
    assert sum(got.values()) == 4112 and round(4112 / 12032, 5) == 0.34176
    # The file's None preds are exactly the unparseable rows: the same
    # extraction, not just the same total.
    none = {f"mmlu_pro/{r['question_id']}" for r in recorded() if r["pred"] is None}
    assert {r["task_id"] for r in rows if r["status"] == "unparseable"} == none and len(
        none
    ) == 1290
    assert all(r["extra"].get("replayed") is True and r["sub_calls"] == 0 for r in rows)
    result.assert_outcomes(passed=4112, failed=12032 - 4112)


@needs_outputs
def test_strict_extraction_is_the_files_pred_on_every_record() -> None:
    assert all(mmlu_pro.extract(r["generated_text"], strict=True) == r["pred"] for r in recorded())


@needs_outputs
def test_the_random_guess_convention_gives_the_authors_save_res_figure() -> None:
    def authors(each: dict[str, Any]) -> bool:  # their save_res, as written
        if not each["pred"]:
            random.seed(12345)
            return random.randint(0, len(each["options"]) - 1) == each["answer_index"]
        return bool(each["pred"] == each["answer"])

    ours = sum(
        mmlu_pro.score(
            r["generated_text"], example(r), {"strict": True, "random_guess_seed": 12345}
        ).passed
        for r in recorded()
    )
    assert ours == sum(map(authors, recorded())) > 4112


def example(rec: dict[str, Any]) -> Example:
    return Example(f"mmlu_pro/{rec['question_id']}", "", rec["answer"], rec["category"],
                   {"question_id": rec["question_id"], "n_options": len(rec["options"])})


# ---- the extraction ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "strict", "answer"),
    [
        ("so the answer is (C).", True, "C"),
        ("The answer is D", True, "D"),
        ("So The Answer Is (C).", True, None),  # the authors' first pattern is case-sensitive
        ("Answer: B", True, None),  # strict: their first pattern only
        ("Answer: B", False, "B"),
        ("answer: Answer: B", False, "B"),  # overlapping: their greedy .* finds the later one
        ("x\nAnswer: C then Answer: D\nAnswer: E", False, "D"),  # the first line with one, its last
        ("I would pick B or maybe J.", False, "J"),  # the last standalone letter
        ("BJ is a code", False, None),
        ("the answer is (K)", False, None),
    ],
)
def test_the_authors_extraction(output: str, strict: bool, answer: str | None) -> None:
    assert mmlu_pro.extract(output, strict) == answer


ALPHABET = st.text(alphabet="aAnswer: BJKi s()\n.x", max_size=60)


@settings(max_examples=200, derandomize=True, database=None, deadline=None)
@given(ALPHABET)
def test_the_one_pass_fallbacks_match_the_authors_regexes(text: str) -> None:
    colon = re.search(r".*[aA]nswer:\s*([A-J])", text)
    assert mmlu_pro.answer_colon(text) == (colon.group(1) if colon else None)
    final = re.search(r"\b[A-J]\b(?!.*\b[A-J]\b)", text, re.DOTALL)
    assert mmlu_pro.last_letter(text) == (final.group(0) if final else None)


def test_the_fallbacks_stay_linear_on_a_long_line() -> None:
    # The authors' regexes backtrack over the whole line for every start: seconds at this size.
    text = "x " * 200_000 + "Answer: C"
    assert (mmlu_pro.answer_colon(text), mmlu_pro.last_letter(text)) == ("C", "C")


def test_a_random_guess_only_when_asked_and_the_row_says_so() -> None:
    ex = Example("mmlu_pro/1", "", "C", "math", {"n_options": 4})
    assert mmlu_pro.score("no idea", ex, {}).status == "unparseable"
    random.seed(12345)
    expected = "ABCD"[random.randint(0, 3)]
    verdict = mmlu_pro.score("no idea", ex, {"random_guess_seed": 12345})
    assert verdict.answer == expected and verdict.extra == {"random_guess": True}
    assert verdict.detail.startswith("random guess (random_guess_seed 12345)")
    assert mmlu_pro.score("the answer is (C)", ex, {"random_guess_seed": 12345}).extra == {}


@pytest.mark.parametrize(
    ("scorer", "message"),
    [
        (
            "{name: mmlu_pro, strct: true}",
            "*demo.yaml:*[[]scorer[]]: unknown mmlu_pro scorer option 'strct'*",
        ),
        (
            "{name: mmlu_pro, random_guess_seed: lucky}",
            "*demo.yaml:*[[]scorer[]]: random_guess_seed must be a whole number*",
        ),
    ],
)
def test_scorer_options_are_checked_with_file_line_and_key(pytester: pytest.Pytester, sweep: Sweep,
                                                           scorer: str, message: str) -> None:
    write(pytester.path / "test.json", [record(1)])
    make_spec(pytester, spec_text("test.json", scorer, arm="{provider: sim, accuracy: 1.0}"))
    result, _, rows = sweep.run()
    result.stdout.fnmatch_lines([message])
    assert rows == []


# ---- the loader -------------------------------------------------------------------------------


def record(qid: int, category: str = "math", answer: str = "B", **extra: Any) -> dict[str, Any]:
    return {
        "question_id": qid,
        "question": f"What is {qid}?",
        "options": ["one", "two", "three", "N/A"],
        "answer": answer,
        "answer_index": "ABC".index(answer),
        "cot_content": "",
        "category": category,
        "src": "ori",
        **extra,
    }


def write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps(records))
    return path


INSTRUCTION = (
    "You are an expert in {c}. Below is a series of example questions (with answers) about {c} for "
    "demonstration. You will be given a question at the end, after the examples, for you to "
    "answer. "
    "First give step-by-step reasoning about how to solve the question. Then output the answer.\n"
)


def test_zero_shot_prompt_is_the_authors_format() -> None:
    rec = mmlu_pro._checked(record(7), 0, ValueError)
    assert mmlu_pro.prompt(rec, []) == (
        INSTRUCTION.format(c="math") + "Question:\nWhat is 7?\nOptions:\n"
        "A. one\nB. two\nC. three\nAnswer: Let's think step by step."
    )


def test_k_shot_from_the_validation_file_per_category(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    shots = [
        record(
            100 + i,
            "math" if i != 1 else "law",
            cot_content=f"A: Let's think step by step. Work {i}. The answer is (B).",
        )
        for i in range(4)
    ]
    write(pytester.path / "dev.json", shots)
    write(pytester.path / "test.json", [record(1), record(2, "law"), record(3, "physics")])
    make_spec(
        pytester,
        spec_text(
            "test.json",
            "mmlu_pro",
            "  dev_path: dev.json\n  shots: 2\n  allow_fewer_shots: true\n",
            arm="{provider: reference, template: 'The answer is ({target}).'}",
        ),
    )
    result, _, rows = sweep.run()
    result.assert_outcomes(passed=3)
    _, items = load_benchmark(pytester.path / "demo.yaml")
    by_id = {ex.id: ex for ex in items}
    assert sorted(by_id) == ["mmlu_pro/1", "mmlu_pro/2", "mmlu_pro/3"]
    math = by_id["mmlu_pro/1"].input
    shot = (
        "Question:\nWhat is {q}?\nOptions:\nA. one\nB. two\nC. three\nAnswer: Let's think "
        "step by step. "
        "Work {w}. The answer is (B).\n\n"
    )
    assert (
        math
        == INSTRUCTION.format(c="math") + shot.format(q=100, w=0) + shot.format(q=102, w=2)
        + "Question:\nWhat is 1?\nOptions:\nA. one\nB. two\nC. three\nAnswer: Let's think step "
        "by step."
    )
    assert by_id["mmlu_pro/2"].input.count("Question:") == 2  # law has one example in the file
    assert by_id["mmlu_pro/3"].input.count("Question:") == 1  # physics has none: zero-shot
    assert (by_id["mmlu_pro/2"].subtask, by_id["mmlu_pro/2"].target) == ("law", "B")


def test_a_validation_file_short_of_a_category_is_an_error(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    # Without the opt-in, law (1 example) and physics (none) would silently be asked fewer-shot.
    write(
        pytester.path / "dev.json", [record(100 + i, "math" if i != 1 else "law") for i in range(4)]
    )
    write(pytester.path / "test.json", [record(1), record(2, "law"), record(3, "physics")])
    make_spec(pytester, spec_text("test.json", "mmlu_pro", "  dev_path: dev.json\n  shots: 2\n",
                                  arm="{provider: sim, accuracy: 1.0}"))
    result, _, rows = sweep.run()
    result.stdout.fnmatch_lines(
        [
            "*demo.yaml:*[[]dataset.dev_path[]]: the validation file has fewer than 2 examples "
            "for 2 categories of the test set (law 1, physics 0)*allow_fewer_shots: true*"
        ]
    )
    assert result.ret != 0 and rows == []
    make_spec(
        pytester,
        spec_text(
            "test.json",
            "mmlu_pro",
            "  dev_path: dev.json\n  shots: 2\n  categories: [math]\n",
            arm="{provider: sim, accuracy: 1.0}",
        ),
    )
    # only the categories asked for count
    assert len(load_benchmark(pytester.path / "demo.yaml")[1]) == 1


@pytest.mark.parametrize(
    ("records", "extra", "message"),
    [
        (
            [{"question_id": 1, "question": "q", "options": ["a"], "category": "math"}],
            "",
            "*demo.yaml:4*[[]dataset.path[]]:*record 0 has no 'answer'*",
        ),
        (
            [record(1, answer="C") | {"options": ["a", "b"]}],
            "",
            "*record 0: answer 'C' is not the letter of one of its 2*",
        ),
        (
            [record(1) | {"answer_index": 2}],
            "",
            "*record 0: answer 'B' and answer_index 2 disagree*",
        ),
        ([record(1)], "  shots: 3\n", "*demo.yaml:*[[]dataset.shots[]]: shots needs a dev_path*"),
        (
            [record(1)],
            "  categories: [chemistry]\n",
            "*[[]dataset.categories[]]: no question of category 'chemistry'*",
        ),
    ],
)
def test_bad_records_and_settings_name_file_line_and_key(
    pytester: pytest.Pytester, sweep: Sweep, records: list[dict[str, Any]], extra: str, message: str
) -> None:
    write(pytester.path / "test.json", records)
    make_spec(
        pytester, spec_text("test.json", "mmlu_pro", extra, arm="{provider: sim, accuracy: 1.0}")
    )
    result, _, rows = sweep.run()
    result.stdout.fnmatch_lines([message])
    assert rows == []


# ---- replay of an outputs file -------------------------------------------------------------------


def test_replay_reads_model_outputs_by_question_id(pytester: pytest.Pytester, sweep: Sweep) -> None:
    records = [
        record(i, model_outputs=f"Reasoning. The answer is ({'B' if i % 2 else 'A'}).")
        for i in range(1, 5)
    ]
    # another order: keyed by question_id, not position
    write(pytester.path / "outputs.json", records[::-1])
    write(pytester.path / "test.json", records + [record(9), record(10, answer="A")])
    write(
        pytester.path / "other.json",
        [record(9, answer="C") | {"generated_text": "the answer is C"}],
    )
    make_spec(
        pytester,
        spec_text("test.json", arm="{provider: replay, path: outputs.json}").replace(
            "arms:\n", "arms:\n  other: {provider: replay, path: other.json}\n"
        ),
    )
    result, _, rows = sweep.run()
    by = {(r["task_id"], r["arm"]): r for r in rows}
    assert [by[(f"mmlu_pro/{i}", "llama3-8b")]["status"] for i in range(1, 5)] == [
        "correct",
        "wrong",
    ] * 2
    assert "no question_id 9 in" in by[("mmlu_pro/9", "llama3-8b")]["detail"]
    assert "does not line up with the dataset" in by[("mmlu_pro/9", "other")]["detail"]
    result.assert_outcomes(passed=2, failed=10)


def test_the_report_says_how_many_rows_were_random_guesses(
    pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]
) -> None:
    records = [
        record(i, generated_text="The answer is (B)." if i < 3 else "no idea") for i in range(1, 6)
    ]
    write(pytester.path / "test.json", records)
    make_spec(pytester, spec_text("test.json", "{name: mmlu_pro, random_guess_seed: 12345}"))
    _, _, rows = sweep.run()
    assert sum(r["extra"].get("random_guess") is True for r in rows) == 3  # items 3, 4 and 5
    capsys.readouterr()
    assert main(["report", str(sweep.out)]) == 0
    assert "random guesses: 3 row(s) had no answer extracted" in capsys.readouterr().out
    assert main(["report", str(sweep.out), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["random_guesses"] == 3


def test_a_regrade_to_the_random_guess_convention_flags_its_rows(
    pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]
) -> None:
    records = [
        record(i, generated_text="The answer is (B)." if i < 3 else "no idea") for i in range(1, 6)
    ]
    write(pytester.path / "test.json", records)
    spec = make_spec(pytester, spec_text("test.json"))
    sweep.run()
    spec.write_text(
        spec_text("test.json", "{name: mmlu_pro, strict: true, random_guess_seed: 12345}")
    )
    seeded, strict = pytester.path / "seeded.jsonl", pytester.path / "strict.jsonl"
    assert main(["regrade", str(sweep.out), "-o", str(seeded)]) == 0
    rows = sorted(
        (json.loads(line) for line in seeded.read_text().splitlines()[1:]),
        key=lambda r: r["task_id"],
    )
    assert [r["extra"].get("random_guess") is True for r in rows] == [
        False,
        False,
        True,
        True,
        True,
    ]
    assert all(r["extra"]["replayed"] is True for r in rows)  # the provider's part of extra is kept
    capsys.readouterr()
    assert main(["report", str(seeded), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["random_guesses"] == 3
    # And back: a flag the new scorer no longer sets does not linger.
    spec.write_text(spec_text("test.json"))
    assert main(["regrade", str(seeded), "-o", str(strict)]) == 0
    assert not any(
        "random_guess" in json.loads(line)["extra"] for line in strict.read_text().splitlines()[1:]
    )


def test_the_test_set_as_parquet_gives_the_same_items(pytester: pytest.Pytester) -> None:
    pa = pytest.importorskip("pyarrow", reason="needs pip install 'pytest-echo-bench[parquet]'")
    import pyarrow.parquet as pq
    records = [record(1), record(2, "law", answer="C"), record(3)]
    write(pytester.path / "test.json", records)
    pq.write_table(pa.Table.from_pylist(records), pytester.path / "test.parquet")
    by_format = {}
    for name in ("test.json", "test.parquet"):
        make_spec(pytester, spec_text(name, "mmlu_pro", "  categories: [math, law]\n  limit: 1\n",
                                      arm="{provider: sim, accuracy: 1.0}"))
        by_format[name] = [
            (e.id, e.input, e.target, e.subtask)
            for e in load_benchmark(pytester.path / "demo.yaml")[1]
        ]
    assert by_format["test.json"] == by_format["test.parquet"]
    # limit 1 per category
    assert [i[0] for i in by_format["test.json"]] == ["mmlu_pro/1", "mmlu_pro/2"]


def test_integral_float_question_ids_replay_and_other_ids_are_refused(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    # pandas writes an integer column with a gap as floats: 2805.0 is question 2805, in both files.
    records = [record(2805, generated_text="The answer is (B).") | {"question_id": 2805.0},
               record(7, generated_text="The answer is (B).")]
    write(pytester.path / "test.json", records)
    make_spec(pytester, spec_text("test.json"))
    result, _, rows = sweep.run()
    result.assert_outcomes(passed=2)
    assert sorted(r["task_id"] for r in rows) == ["mmlu_pro/2805", "mmlu_pro/7"]
    for bad in ([1], 2.5, True):
        write(pytester.path / "test.json", [record(1) | {"question_id": bad}])
        with pytest.raises(
            Exception, match=r"test.json record 0: question_id .* is not a whole number or a text"
        ):
            load_benchmark(pytester.path / "demo.yaml")


def test_a_json_lines_outputs_file_replays(pytester: pytest.Pytester, sweep: Sweep) -> None:
    records = [
        record(i, generated_text=f"The answer is ({'B' if i % 2 else 'A'}).") for i in range(1, 5)
    ]
    write(pytester.path / "test.json", records)
    (pytester.path / "outputs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    make_spec(pytester, spec_text("test.json", arm="{provider: replay, path: outputs.jsonl}"))
    result, _, rows = sweep.run()
    result.assert_outcomes(passed=2, failed=2)
    assert {r["status"] for r in rows} == {"correct", "wrong"}
    (pytester.path / "outputs.jsonl").write_text('{"id": 1, "text": "x"}\n')
    sweep.out = pytester.path / "second.jsonl"
    result, _, rows = sweep.run()
    result.stdout.fnmatch_lines(
        [
            "*demo.yaml:*[[]arms.llama3-8b.path[]]*neither a results file of ours*nor an "
            "outputs file*"
        ]
    )
    assert result.ret != 0 and rows == []  # refused at collection: no arm ran to find out


def test_a_question_id_twice_in_an_outputs_file_is_refused(pytester: pytest.Pytester, sweep: Sweep,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay, "_loaded", {})
    write(pytester.path / "test.json", [record(1), record(2)])
    write(pytester.path / "outputs.json", [record(1, generated_text="The answer is (A)."),
                                           record(2, generated_text="The answer is (B)."),
                                           record(1, generated_text="The answer is (B).")])
    make_spec(pytester, spec_text("test.json", arm="{provider: replay, path: outputs.json}"))
    _, _, rows = sweep.run()
    assert rows and all("has question_id 1 twice (records 0 and 2)" in r["detail"] for r in rows)


def test_a_bad_outputs_file_is_read_once_and_fails_every_item(
    pytester: pytest.Pytester, sweep: Sweep, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[Path] = []
    real = replay._read_keyed

    def counting(path: Path) -> Any:
        reads.append(path)
        return real(path)

    monkeypatch.setattr(replay, "_loaded", {})
    monkeypatch.setattr(replay, "_read_keyed", counting)
    (pytester.path / "outputs.json").write_text(
        '[{"question_id": 1, "generated_text": "x"}, {"no": "id"}]'
    )
    write(pytester.path / "test.json", [record(i) for i in range(1, 5)])
    make_spec(pytester, spec_text("test.json", arm="{provider: replay, path: outputs.json}"))
    result, _, rows = sweep.run()
    assert len(reads) == 1 and rows  # the arm stops after its first errors: the rest skip
    assert all(
        r["status"] == "error" and "has a record without question_id (record 1)" in r["detail"]
        for r in rows
    )
    outcomes = result.parseoutcomes()
    assert (
        outcomes.get("failed", 0) == len(rows)
        and outcomes.get("failed", 0) + outcomes.get("skipped", 0) == 4
    )
