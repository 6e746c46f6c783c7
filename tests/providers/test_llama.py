"""The openai arm against a real model: SmolLM2-135M-Instruct served by llama.cpp's
OpenAI-compatible server on 127.0.0.1 (``llama_server``), through the specs the docs ship for
trying the project on a laptop (``docs/laptop.yaml``, ``docs/laptop_judged.yaml``).

What a real model brings that the loopback fakes do not: usage counted by a real tokenizer, real
latencies, and the odd replies a 135M model gives (it is mostly wrong, and a poor judge). These
tests check the pipeline, never the score: every key recorded once, the counts consistent with
the prompts, the report and the judging pass reading whatever the model said.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from llama_server import MODEL, Llama, serving

from conftest import Sweep, bbh_examples, read_rows
from pytest_echo_bench.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "data" / "bbh"  # the same 20 items on every machine
TASKS = ("boolean_expressions", "dyck_languages", "formal_fallacies", "hyperbaton",
         "multistep_arithmetic_two", "navigate", "object_counting", "snarks",
         "sports_understanding", "web_of_lies")
JUDGED_TASKS = ("boolean_expressions", "object_counting", "web_of_lies")  # 6 items
MAX_TOKENS = 16  # docs/laptop.yaml's
SUFFIX = "\nGive the answer alone."  # its prompt template after the item's input
# Every call made (no response cache), two in flight: the server answers one at a time, and a
# deeper queue only brings each call nearer its timeout when the machine is busy.
CALLS = ("--bench-cache", "off", "--bench-concurrency", "2")
VERDICT = re.compile(r"(?i)\A\W*(yes|no)\b")  # docs/laptop_judged.yaml's grade pattern

pytestmark = pytest.mark.usefixtures("no_network_variables")


@pytest.fixture(scope="session")
def llama(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Llama]:
    with serving(pytestconfig, tmp_path_factory) as server:
        yield server


@pytest.fixture
def specs(pytester: pytest.Pytester, llama: Llama, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The shipped specs, pointed at the session's server and the repository's BBH items."""
    for name in ("laptop.yaml", "laptop_judged.yaml"):
        shutil.copy(ROOT / "docs" / name, pytester.path / name)
    monkeypatch.setenv("LLAMA_URL", llama.base_url)
    monkeypatch.setenv("ECHO_BENCH_BBH", str(FIXTURE))
    return pytester.path


def _no_nan(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise AssertionError(f"the report holds {constant}")

    return json.loads(text, parse_constant=refuse)


def report_of(path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["report", str(path), "--format", "json"]) == 0
    report: dict[str, Any] = _no_nan(capsys.readouterr().out)
    return report


def prompt_of(row: dict[str, Any]) -> str:
    task, index = row["task_id"].split("/")[1:]
    return str(bbh_examples(task, FIXTURE)[int(index)]["input"]) + SUFFIX


def by_key(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    ids = [r["task_id"] for r in rows]
    assert len(ids) == len(set(ids)), f"a key was recorded twice: {sorted(ids)}"
    return {r["task_id"]: r for r in rows}


def check_answer(row: dict[str, Any], llama: Llama) -> None:
    """A row of the sweep: graded, what served it, how long, and the model's own token count."""
    assert row["arm"] == "smollm2" and row["status"] in ("correct", "wrong", "unparseable"), row
    assert row["served_model"] == MODEL and row["wall_seconds"] > 0, row
    completion = row["usage"]["completion_tokens"]
    assert 1 <= completion <= MAX_TOKENS, row
    # The output is what the model generated: its tokens are the completion's, give or take the
    # end-of-turn token and the whitespace stripped around it.
    assert abs(llama.tokens(row["output"]) - completion) <= 2, row


def check_judgment(row: dict[str, Any], source: dict[str, Any]) -> None:
    """A row of the judging pass: the stored answer judged by its judge's own verdict, left
    unjudged, or not passed when the reply's only verdict is the answer's; never a verdict the
    reply does not give."""
    assert row["output"] == source["output"]  # judged as stored, never asked again
    [judgment] = row["judgments"]
    assert judgment["judge"] == "smollm2-judge" and judgment["model"] == MODEL, judgment
    assert judgment["usage"]["prompt_tokens"] > 0, judgment
    verdict = VERDICT.match(judgment.get("reply", ""))
    if row["status"] == "unjudged":  # no verdict
        assert "grade" not in judgment and "note" in judgment, judgment
        return
    if judgment.get("passed") is False and "grade" not in judgment:  # only the answer's verdict
        assert row["status"] == "wrong" and "repeat grades the answer wrote" in judgment["note"]
        return
    assert verdict is not None and judgment["label"].lower() == verdict.group(1).lower(), row
    assert row["status"] == ("correct" if verdict.group(1).lower() == "yes" else "wrong"), row


def test_a_bbh_slice_is_swept_with_real_usage_latency_and_served_model(
    specs: Path, sweep: Sweep, llama: Llama, capsys: pytest.CaptureFixture[str]
) -> None:
    result, meta, rows = sweep.run(str(specs / "laptop.yaml"), *CALLS)
    assert result.ret == 0 and meta is not None, result.stdout.str()  # wrong answers are results
    assert set(by_key(rows)) == {f"bbh/{task}/{i}" for task in TASKS for i in range(2)}
    for row in rows:
        check_answer(row, llama)
    # The prompt as the model's tokenizer counts it, plus its chat template's tokens: the same
    # few for every item (a boundary merge may shift one).
    overheads = [r["usage"]["prompt_tokens"] - llama.tokens(prompt_of(r)) for r in rows]
    assert 1 <= min(overheads) and max(overheads) - min(overheads) <= 2 and max(overheads) < 64
    [arm] = report_of(sweep.out, capsys)["arms"].values()
    assert arm["n"] == 20 and 0.0 <= arm["pass_rate"] <= 1.0
    assert math.isclose(arm["pass_rate"], sum(r["status"] == "correct" for r in rows) / 20)
    assert arm["prompt_tokens"] == sum(r["usage"]["prompt_tokens"] for r in rows)


def test_a_judging_pass_by_the_real_model_judges_or_leaves_unjudged_every_answer(
    specs: Path, sweep: Sweep, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chosen = " or ".join(f"subtask_{task}" for task in JUDGED_TASKS)
    result, _, answered = sweep.run(str(specs / "laptop.yaml"), *CALLS, "-m", chosen)
    assert result.ret == 0, result.stdout.str()
    judged = tmp_path / "judged.jsonl"
    capsys.readouterr()
    status = main(["judge", str(sweep.out), "--spec", str(specs / "laptop_judged.yaml"),
                   "-o", str(judged), "--cache", "off", "-j", "2"])
    assert status == 0, capsys.readouterr()
    sources, rows = by_key(answered), by_key(read_rows(judged)[1])
    assert set(rows) == set(sources) and len(rows) == 2 * len(JUDGED_TASKS)
    for key, row in rows.items():
        check_judgment(row, sources[key])
    [arm] = report_of(judged, capsys)["arms"].values()
    unjudged = sum(r["status"] == "unjudged" for r in rows.values())
    assert arm["unjudged"] == unjudged and arm["n"] == len(rows) - unjudged  # counted apart
    assert arm["pass_rate"] is None or 0.0 <= arm["pass_rate"] <= 1.0
