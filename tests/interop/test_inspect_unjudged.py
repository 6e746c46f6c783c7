"""Unjudged rows through Inspect: exported as Inspect's unscored score (``Score.unscored``, value
NaN, reason ``grader_failed``: what its ``model_graded_qa`` records when it finds no grade), left
out of the log's accuracy and counted in ``unscored_samples``; read back, an unjudged row again."""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path
from typing import Any

import pytest
from inspect_env import inspect_json, inspect_python
from results_files import meta, row, write

from conftest import read_rows
from pytest_echo_bench.cli.main import main

DETAIL = "unjudged: judge grader: no grade in its reply"
# What Inspect's own reader and metrics make of the exported log.
READ = textwrap.dedent("""
    import json, math, sys
    from inspect_ai.log import list_eval_logs, read_eval_log
    from inspect_ai.scorer import SampleScore, accuracy
    from inspect_ai.scorer._reducer import mean_score

    (info,) = list_eval_logs(sys.argv[1], formats=["json"])
    log = read_eval_log(info.name)
    scores = {}
    for s in log.samples:
        scores.setdefault(str(s.id), []).append(s.scores["echo_bench"])
    reduced = [SampleScore(score=mean_score()(v), sample_id=k) for k, v in scores.items()]
    unscored = {k: [sc.reason for sc in v] for k, v in scores.items()
                if all(isinstance(sc.value, float) and math.isnan(sc.value) for sc in v)}
    scored = [r for r in reduced if not (isinstance(r.score.value, float)
                                         and math.isnan(r.score.value))]
    result = log.results.scores[0]
    print(json.dumps({"unscored": unscored, "accuracy": result.metrics["accuracy"].value,
                      "inspect_accuracy": accuracy()(scored), "scored": result.scored_samples,
                      "unscored_samples": result.unscored_samples}))
""")


def results(path: Path) -> Path:
    """Arm a, two epochs: t1 right then unjudged, t2 unjudged twice, t3 wrong then right."""
    def unjudged(task_id: str, epoch: int) -> dict[str, Any]:
        return row(task_id, "a", False, status="unjudged", detail=DETAIL, output="It is B.",
                   epoch=epoch)
    return write(path, [meta(arms=("a",), epochs=2),
                        row("t1", "a", True, epoch=1), unjudged("t1", 2),
                        unjudged("t2", 1), unjudged("t2", 2),
                        row("t3", "a", False, epoch=1), row("t3", "a", True, epoch=2)])


def exported(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    logs = tmp_path / "logs"
    assert main(["export", str(results(tmp_path / "run.jsonl")), "-o", str(logs)]) == 0
    (log,) = logs.iterdir()
    return logs, json.loads(log.read_text())


def test_an_unjudged_row_is_an_unscored_sample(tmp_path: Path) -> None:
    _, log = exported(tmp_path)
    by_key = {(s["id"], s["epoch"]): s for s in log["samples"]}
    score = by_key["t1", 2]["scores"]["echo_bench"]
    assert math.isnan(score["value"]) and score["reason"] == "grader_failed"
    assert score["explanation"] == DETAIL and "error" not in by_key["t1", 2]
    assert by_key["t1", 2]["output"]["completion"] == "It is B."  # the output stands
    result = log["results"]["scores"][0]
    # t1: 1 (its unjudged epoch skipped), t3: 0.5; t2 has no scored epoch
    assert result["metrics"]["accuracy"]["value"] == 0.75
    assert (result["scored_samples"], result["unscored_samples"]) == (2, 1)
    reduced = {r["sample_id"]: r["value"] for r in log["reductions"][0]["samples"]}
    assert reduced["t1"] == 1.0 and reduced["t3"] == 0.5 and math.isnan(reduced["t2"])


def test_an_unscored_sample_imports_as_an_unjudged_row(tmp_path: Path) -> None:
    logs, _ = exported(tmp_path)
    out = tmp_path / "back.jsonl"
    assert main(["import", *map(str, logs.iterdir()), "-o", str(out)]) == 0
    _, rows = read_rows(out)
    status = {(r["task_id"], r["epoch"]): (r["status"], r["passed"]) for r in rows}
    assert status == {("t1", 1): ("correct", True), ("t1", 2): ("unjudged", False),
                      ("t2", 1): ("unjudged", False), ("t2", 2): ("unjudged", False),
                      ("t3", 1): ("wrong", False), ("t3", 2): ("correct", True)}
    unjudged = next(r for r in rows if r["status"] == "unjudged")
    assert unjudged["detail"] == "unjudged: grader_failed: judge grader: no grade in its reply"
    assert unjudged["output"] == "It is B."


def test_inspects_own_reader_and_metrics_agree(tmp_path: Path) -> None:
    python = inspect_python()
    logs, _ = exported(tmp_path)
    read = inspect_json(python, READ, tmp_path, str(logs))
    assert read["unscored"] == {"t2": ["grader_failed", "grader_failed"]}
    assert read["accuracy"] == read["inspect_accuracy"] == pytest.approx(0.75)
    assert (read["scored"], read["unscored_samples"]) == (2, 1)
