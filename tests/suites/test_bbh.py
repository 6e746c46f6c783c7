"""BIG-Bench Hard: the paper's scores reproduced from its recorded outputs, the robust
parser, replay and reference arms."""

from __future__ import annotations

import gzip
import json
import threading
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from conftest import (
    SHARED_DATA,
    Sweep,
    bbh_data,
    bbh_examples,
    make_spec,
    paper_recordings,
    read_rows,
    write_stand_in_recording,
)
from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.errors import PermanentError
from pytest_echo_bench.providers import replay
from pytest_echo_bench.providers.base import Request
from pytest_echo_bench.providers.reference import ReferenceProvider
from pytest_echo_bench.suites.bbh import score as bbh

# The task files: all 6,511 items beside the project, else the fixture (three per task).
BBH = bbh_data()
CODEX = SHARED_DATA / "bbh-codex-cot"
TASKS = [
    "boolean_expressions",
    "causal_judgement",
    "date_understanding",
    "disambiguation_qa",
    "dyck_languages",
    "formal_fallacies",
    "geometric_shapes",
    "hyperbaton",
    "logical_deduction_five_objects",
    "logical_deduction_seven_objects",
    "logical_deduction_three_objects",
    "movie_recommendation",
    "multistep_arithmetic_two",
    "navigate",
    "object_counting",
    "penguins_in_a_table",
    "reasoning_about_colored_objects",
    "ruin_names",
    "salient_translation_error_detection",
    "snarks",
    "sports_understanding",
    "temporal_sequences",
    "tracking_shuffled_objects_five_objects",
    "tracking_shuffled_objects_seven_objects",
    "tracking_shuffled_objects_three_objects",
    "web_of_lies",
    "word_sorting",
]
# The paper's recorded outputs are not in the fixture: what is scored against them stays tied to
# the shared data, where the items and their recordings are whole and line up.
needs_recordings = pytest.mark.skipif(
    paper_recordings() is None,
    reason=f"the paper's recorded BBH outputs are not at {SHARED_DATA} (bbh/ and bbh-codex-cot/)",
)
STRICT = {"strict": True}


@cache
def outputs(task: str, root: Path = CODEX) -> list[dict[str, Any]]:
    with gzip.open(root / f"{task}.json.gz", "rt", encoding="utf-8") as f:
        recorded: list[dict[str, Any]] = json.load(f)["outputs"]
    return recorded


def published(task: str) -> float:
    return float(
        json.loads((CODEX / f"{task}_eval_metrics.jsonl").read_text().splitlines()[0])["accuracy"]
    )


def correct(task: str, options: dict[str, Any]) -> int:
    return sum(bbh(o["prediction"], o["target"], options).passed for o in outputs(task))


@needs_recordings
@pytest.mark.parametrize("task", TASKS)
def test_strict_scoring_reproduces_the_published_accuracy(task: str) -> None:
    n = len(outputs(task))
    assert abs(100 * correct(task, STRICT) / n - published(task)) <= 0.1


@needs_recordings
def test_the_recordings_cover_the_whole_benchmark() -> None:
    assert sum(len(outputs(t)) for t in TASKS) == 6511


# Measured on the recordings: the robust parser gives the strict verdict on all 6,511 items (0
# items apart on every task). Before hedges ("(A) or (B)") and "None of the above" counted as
# wrong, it was 1 to 7 items *above* strict on hyperbaton, ruin_names and snarks. One item either
# way per task (at most 0.54 points) leaves room for one deliberate divergence and still catches
# a parser that turns lenient or starts missing a whole answer pattern.
MARGIN_ITEMS = 1


@needs_recordings
@pytest.mark.parametrize("task", TASKS)
def test_robust_parser_agrees_with_strict_scoring_on_real_outputs(task: str) -> None:
    assert abs(correct(task, {}) - correct(task, STRICT)) <= MARGIN_ITEMS


@needs_recordings
@pytest.mark.parametrize(
    ("task", "index", "status", "answer"),
    [
        ("date_understanding", 0, "correct", "(B)"),
        ("geometric_shapes", 0, "wrong", "(J)"),
        ("hyperbaton", 142, "wrong", "(A) or (B)"),  # a hedge names no single option
        ("snarks", 98, "wrong", "(A) and (B)"),
        ("ruin_names", 16, "wrong", "(None of the above)"),
        ("dyck_languages", 1, "correct", "] ] >"),
        ("dyck_languages", 9, "wrong", "empty"),
        ("dyck_languages", 2, "unparseable", None),  # cut off mid-trace
        ("word_sorting", 0, "correct", "syndrome therefrom"),
        ("word_sorting", 1, "unparseable", None),
        ("object_counting", 0, "wrong", "14"),
        ("multistep_arithmetic_two", 0, "correct", "24"),
        ("multistep_arithmetic_two", 12, "unparseable", None),
        ("boolean_expressions", 0, "correct", "False"),
        ("boolean_expressions", 4, "unparseable", None),
        ("sports_understanding", 0, "wrong", "Yes"),
        ("formal_fallacies", 0, "wrong", "valid"),
        ("navigate", 0, "correct", "No"),
        ("web_of_lies", 0, "correct", "No"),
        ("causal_judgement", 0, "correct", "No"),
    ],
)
def test_robust_parser_on_real_predictions(
    task: str, index: int, status: str, answer: str | None
) -> None:
    record = outputs(task)[index]
    verdict = bbh(record["prediction"], record["target"], {})
    assert (verdict.status, verdict.answer) == (status, answer)


@pytest.mark.parametrize(
    ("output", "target", "status", "answer"),
    [
        ("Reasoning...\n\n**Answer:** (B)", "(B)", "correct", "(B)"),
        ("The final answer is: B", "(B)", "correct", "(B)"),
        ("Let me check each option.\nAnswer:\n\n(C)", "(C)", "correct", "(C)"),
        (
            "The answer is straightforward: (A) fails. So the answer is (D).",
            "(D)",
            "correct",
            "(D)",
        ),
        ("So the answer is (D). Answer: I think (A)", "(A)", "correct", "(A)"),
        ("the answer is A bit subtle, it depends", "(A)", "unparseable", None),
        ("Options (A) and (C) look wrong to me.", "(B)", "unparseable", None),
        ("Step 1 ...\nStep 2 ...\n(E)", "(E)", "correct", "(E)"),
        ("Answer: Yes, because the statement holds.", "Yes", "correct", "Yes"),
        ("The answer is **valid**.", "valid", "correct", "valid"),
        ("the answer is not obvious", "invalid", "unparseable", None),
        ("So the answer is yes.", "yes", "correct", "Yes"),
        ("So the answer is seven.", "7", "correct", "7"),
        ("The answer is: -12", "-12", "correct", "-12"),
        (
            "The answer is: apple, Banana, cherry.",
            "apple banana cherry",
            "correct",
            "apple, Banana, cherry",
        ),
        ("The answer is `] ) >`.", "] ) >", "correct", "] ) >"),
    ],
)
def test_robust_parser_on_chat_style_outputs(
    output: str, target: str, status: str, answer: str | None
) -> None:
    verdict = bbh(output, target, {})
    assert (verdict.status, verdict.answer) == (status, answer)


def test_strict_scoring_is_the_papers_string_rule() -> None:
    assert (
        bbh("So the answer is (A) or (B).", "(A)", STRICT).detail == "expected (A) got (A) or (B)"
    )
    assert not bbh("So The answer is (A).", "(A)", STRICT).passed  # the paper's cue is lower case
    assert bbh("(A)", "(A)", STRICT).passed  # str.split keeps a cue-less output whole
    assert bbh("I cannot tell.", "(A)", STRICT).status == "unparseable"


# ---- the reference arm -------------------------------------------------------------------------


def ref_request(example: Example) -> Request:
    return Request(example, "ref", example.input)


@pytest.mark.parametrize(
    ("template", "options"), [("So the answer is {target}.", STRICT), ("{target}", {})]
)
def test_reference_answers_score_100_percent_on_every_task(
    template: str, options: dict[str, Any]
) -> None:
    provider = ReferenceProvider(template)
    scored: dict[str, int] = {}
    for task in TASKS:
        examples = bbh_examples(task, BBH)
        for i, rec in enumerate(examples):
            ex = Example(f"bbh/{task}/{i}", rec["input"], rec["target"], task)
            completion = provider.complete(ref_request(ex))
            assert bbh(completion.text, ex.target, options).passed, (ex.id, completion.text)
        scored[task] = len(examples)
    assert all(scored.values()), scored  # an empty task file would pass vacuously


def test_reference_prefers_a_canonical_solution() -> None:
    ex = Example(
        "HumanEval/0", "def f():\n", "check(f)", metadata={"canonical_solution": "    return 1\n"}
    )
    completion = ReferenceProvider("{target}").complete(ref_request(ex))
    assert (completion.text, completion.sub_calls, completion.usage) == ("    return 1\n", 0, None)


def bbh_spec(
    arms: str,
    scorer: str,
    subtasks: str = "[date_understanding, dyck_languages]",
    n: int = 20,
    data: Path = BBH,
) -> str:
    return (
        f"benchmark: bbh\ndataset:\n  loader: bbh\n  path: {data}\n  subtasks: {subtasks}\n  "
        f"n_per_subtask: {n}\n"
        f"scorer: {scorer}\narms:\n{arms}\n"
    )


@pytest.mark.parametrize(
    ("template", "scorer"),
    [("So the answer is {target}.", "{name: bbh, strict: true}"), (None, "bbh")],
)
def test_reference_arm_through_the_plugin(
    pytester: pytest.Pytester, sweep: Sweep, template: str | None, scorer: str
) -> None:
    arm = (
        f"{{provider: reference, template: '{template}'}}" if template else "{provider: reference}"
    )
    tasks, n = ["navigate", "word_sorting", "multistep_arithmetic_two"], 10
    make_spec(pytester, bbh_spec(f"  ref: {arm}", scorer, f"[{', '.join(tasks)}]", n))
    result, _, rows = sweep.run()
    # 30 on the full data, 9 on the fixture
    expected = sum(len(bbh_examples(t, BBH)[:n]) for t in tasks)
    result.assert_outcomes(passed=expected)
    assert len(rows) == expected
    assert all(r["sub_calls"] == 0 for r in rows)


# ---- the replay arm ----------------------------------------------------------------------------


def test_replay_through_the_plugin_matches_direct_scoring(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    tasks, n = ("date_understanding", "dyck_languages"), 20
    recording = paper_recordings() or write_stand_in_recording(
        pytester.path / "recording", tasks, BBH
    )
    make_spec(
        pytester,
        bbh_spec(
            f"  codex: {{provider: replay, path: {recording}}}",
            "{name: bbh, strict: true}",
            f"[{', '.join(tasks)}]",
            n,
        ),
    )
    result, _, rows = sweep.run("-n", "2")
    expected = {}
    for task in tasks:
        for i, rec in enumerate(outputs(task, recording)[:n]):
            expected[f"bbh/{task}/{i}"] = bbh(rec["prediction"], rec["target"], STRICT).status
    # 40 on the full data
    assert len(rows) == len(expected) == sum(len(bbh_examples(t, BBH)[:n]) for t in tasks)
    assert {r["task_id"]: r["status"] for r in rows} == expected
    assert all(
        r["sub_calls"] == 0 and r["extra"].get("replayed") is True and r["usage"] is None
        for r in rows
    )
    passed = sum(s == "correct" for s in expected.values())
    result.assert_outcomes(passed=passed, failed=len(expected) - passed)


def test_replay_from_our_own_results_file(pytester: pytest.Pytester, sweep: Sweep) -> None:
    items = "\n".join(f'    - {{id: q{i}, input: "2+2=? ({i})", target: "4"}}' for i in range(5))
    make_spec(
        pytester,
        f"benchmark: demo\ndataset:\n  loader: inline\n  items:\n{items}\nscorer: exact\narms:\n"
        "  good: {provider: sim, accuracy: 1.0}\n  bad: {provider: sim, accuracy: 0.0}\n",
    )
    _, _, first = sweep.run("demo.yaml")
    make_spec(
        pytester,
        f"benchmark: again\ndataset:\n  loader: inline\n  items:\n{items}\nscorer: exact\narms:\n"
        "  good: {provider: replay, path: results.jsonl}\n"
        "  copy: {provider: replay, path: results.jsonl, arm: bad}\n"
        "  lost: {provider: replay, path: results.jsonl}\n",
        name="again",
    )
    out = pytester.path / "again.jsonl"
    result, _, _ = sweep.run("again.yaml", "--bench-out", str(out))
    rows = read_rows(out)[1]
    recorded = {(r["task_id"], r["arm"]): r["output"] for r in first}
    for row in rows:
        if row["arm"] == "lost":  # two arms in the file and none called "lost"
            assert (
                row["status"] == "error"
                and "no recorded output for" in row["detail"]
                and "'lost'" in row["detail"]
            )
        else:
            source = "bad" if row["arm"] == "copy" else "good"
            assert row["output"] == recorded[(row["task_id"], source)] and row["sub_calls"] == 0
    result.assert_outcomes(passed=5, failed=10)


def write_bbh(root: Path, task: str, targets: list[str], recorded: list[str] | None = None) -> None:
    """A tiny BBH task file and, with ``recorded``, a recording whose targets are ``recorded``."""
    (root / "bbh").mkdir(exist_ok=True)
    examples = [{"input": f"question {i}", "target": t} for i, t in enumerate(targets)]
    (root / "bbh" / f"{task}.json").write_text(json.dumps({"examples": examples}))
    if recorded is not None:
        (root / "rec").mkdir(exist_ok=True)
        outs = [
            {"input": f"question {i}", "prediction": f"So the answer is {t}.", "target": t}
            for i, t in enumerate(recorded)
        ]
        with gzip.open(root / "rec" / f"{task}.json.gz", "wt", encoding="utf-8") as f:
            json.dump({"outputs": outs}, f)


def test_a_misaligned_recording_is_an_error_not_a_score(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    write_bbh(pytester.path, "navigate", ["Yes", "No", "Yes"], recorded=["Yes", "Yes", "No"])
    write_bbh(pytester.path, "web_of_lies", ["No"])  # no recording at all
    make_spec(
        pytester,
        bbh_spec(
            "  rec: {provider: replay, path: rec}",
            "bbh",
            "[navigate, web_of_lies]",
            3,
            data=Path("bbh"),
        ),
    )
    result, _, rows = sweep.run()
    by_id = {r["task_id"]: r for r in rows}
    assert by_id["bbh/navigate/0"]["status"] == "correct"
    for task_id in ("bbh/navigate/1", "bbh/navigate/2"):
        assert by_id[task_id]["status"] == "error"
        assert "the recording does not line up with the dataset" in by_id[task_id]["detail"]
    assert "no recording for BBH task 'web_of_lies'" in by_id["bbh/web_of_lies/0"]["detail"]
    result.assert_outcomes(passed=1, failed=3)


def test_the_papers_output_file_names_are_replayed_as_they_are(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    """The paper's repository names them
    <task>_few_shot_template_0-255000.json: no renaming needed."""
    write_bbh(pytester.path, "navigate", ["Yes", "No"], recorded=["Yes", "No"])
    paper = pytester.path / "rec" / "navigate_few_shot_template_0-255000.json"
    with gzip.open(pytester.path / "rec" / "navigate.json.gz", "rt", encoding="utf-8") as f:
        paper.write_text(f.read())  # plain JSON, as the paper ships it
    (pytester.path / "rec" / "navigate.json.gz").unlink()
    make_spec(
        pytester,
        bbh_spec("  rec: {provider: replay, path: rec}", "bbh", "[navigate]", 2, data=Path("bbh")),
    )
    result, _, rows = sweep.run()
    assert [r["status"] for r in rows] == ["correct", "correct"]
    result.assert_outcomes(passed=2)


def test_a_missing_recording_names_every_file_name_it_looked_for() -> None:
    assert replay.recording_names("navigate") == (
        "navigate.json", "navigate.json.gz",
        "navigate_few_shot_template_0-255000.json", "navigate_few_shot_template_0-255000.json.gz")


@pytest.mark.parametrize(
    ("arm", "expected"),
    [
        (
            "{provider: replay, path: rec, speed: 2}",
            "*[[]arms.rec.speed[]]: unknown replay option 'speed'; known: arm, path*",
        ),
        (
            "{provider: replay, path: nowhere}",
            "*[[]arms.rec.path[]]: replay path not found: *nowhere*",
        ),
        ("{provider: replay}", "*[[]arms.rec[]]: replay needs a 'path'*"),
        (
            "{provider: replay, path: rec, arm: x}",
            "*[[]arms.rec.arm[]]: 'arm' selects a row of a .jsonl results file*",
        ),
        (
            "{provider: reference, templat: x}",
            "*[[]arms.rec.templat[]]: unknown reference option 'templat'*",
        ),
    ],
    ids=["unknown-option", "missing-path", "no-path", "arm-with-directory", "reference-option"],
)
def test_replay_spec_errors_name_the_place(
    pytester: pytest.Pytester, sweep: Sweep, arm: str, expected: str
) -> None:
    write_bbh(pytester.path, "navigate", ["Yes"], recorded=["Yes"])
    make_spec(pytester, bbh_spec(f"  rec: {arm}", "bbh", "[navigate]", 1, data=Path("bbh")))
    result, _, rows = sweep.run()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        ["*echo-bench: invalid benchmark spec: *demo.yaml:*" + expected.lstrip("*")]
    )
    assert rows == []


def test_replay_loads_each_file_once_across_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_bbh(tmp_path, "navigate", ["Yes"] * 50, recorded=["Yes"] * 50)
    monkeypatch.setattr(replay, "_loaded", {})
    reads: list[Path] = []
    real = replay._read_outputs

    def counting(path: Path) -> tuple[Path, list[dict[str, Any]]]:
        reads.append(path)
        return real(path)

    monkeypatch.setattr(replay, "_read_outputs", counting)
    provider = replay.BbhRecording(tmp_path / "rec")
    texts: list[str] = []
    barrier = threading.Barrier(8)

    def work(start: int) -> None:
        barrier.wait()
        for i in range(start, 50, 8):
            ex = Example(f"bbh/navigate/{i}", f"question {i}", "Yes", "navigate")
            texts.append(provider.complete(Request(ex, "rec", ex.input)).text)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(reads) == 1 and texts == ["So the answer is Yes."] * 50
    with pytest.raises(PermanentError, match="holds 50 outputs"):
        provider.complete(Request(Example("bbh/navigate/50", "q", "Yes"), "rec", "q"))
