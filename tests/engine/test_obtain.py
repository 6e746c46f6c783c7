"""Running an item is two steps: obtain its completion (``engine.obtain``), then grade and record it
(``engine.grading``). A completion obtained another way than the item's own call (a provider
batch, say) is graded and recorded by the same code, and a way that ends the item without one
records nothing."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.datasets.prompts import Prompter
from pytest_echo_bench.engine.obtain import ItemCall, Obtained
from pytest_echo_bench.engine.outcome import INCOMPLETE, ROW, Job, Outcome, utcnow
from pytest_echo_bench.engine.runner import Runner
from pytest_echo_bench.engine.stop import StopSignal
from pytest_echo_bench.providers import Completion
from pytest_echo_bench.spec.load import Spec, load_spec
from pytest_echo_bench.store.writer import ResultsWriter


@dataclass
class Item:
    spec: Spec
    example: Example
    arm: str
    epoch: int = 1
    prompters: Mapping[str, Prompter] = field(default_factory=dict)

    @property
    def nodeid(self) -> str:
        return f"demo.yaml::{self.example.id}[{self.arm}]"


class Given:
    """An ``Obtain`` that hands over completions it already holds, by task id."""

    def __init__(self, completions: dict[str, Completion | Outcome]) -> None:
        self.completions = completions
        self.asked: list[str] = []

    def obtain(self, item: Job) -> Obtained | Outcome:
        self.asked.append(item.example.id)
        got = self.completions[item.example.id]
        if isinstance(got, Outcome):
            return got
        return Obtained(got, utcnow(), time.perf_counter(), attempts=1, retries=0)


def test_a_completion_obtained_another_way_is_graded_and_recorded(tmp_path: Path) -> None:
    (tmp_path / "demo.yaml").write_text(
        "benchmark: demo\ndataset: {loader: inline, items: [{id: q0, input: '2+2', target: '4'}]}\n"
        "scorer: exact\narms:\n  a: {provider: sim}\n")
    spec = load_spec(tmp_path / "demo.yaml")
    out = tmp_path / "out.jsonl"
    writer = ResultsWriter(out)
    runner = Runner(writer, StopSignal(out), "r1", "main", on_stop=lambda message: None)
    assert isinstance(runner.obtainer, ItemCall)  # today's way: the item's own call
    given = Given({"q0": Completion("4", {"prompt_tokens": 3, "completion_tokens": 1}),
                   "q1": Completion("5"),
                   "q2": Outcome(INCOMPLETE, message="the batch expired")})
    runner.obtainer = given
    items = [Item(spec, Example(task, "2+2", "4"), "a") for task in ("q0", "q1", "q2")]
    outcomes = [runner.run(item) for item in items]
    writer.close()
    assert given.asked == ["q0", "q1", "q2"]
    assert [o.kind for o in outcomes] == [ROW, ROW, INCOMPLETE]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["task_id"], r["status"], r["output"], r["run_id"]) for r in rows] == [
        ("q0", "correct", "4", "r1"), ("q1", "wrong", "5", "r1")]
    assert rows[0]["usage"] == {"prompt_tokens": 3, "completion_tokens": 1}
    assert rows[0]["attempts"] == 1
