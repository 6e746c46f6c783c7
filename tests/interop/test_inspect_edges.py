"""The edges of ``echo-bench import`` and ``export`` a user meets: prompts only from the dataset the
file answered, cost and cache tokens kept through a round trip, figures that are not figures
unknown, and nothing to import or export said so (all without Inspect: plain ``.json`` logs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import Sweep, make_spec, read_rows, sim_spec
from pytest_echo_bench.cli.main import main

PRICED = "pricing:\n  good: {input: 1.0, output: 2.0}\n  bad: {input: 1.0, output: 2.0}\n"


@pytest.fixture
def swept(pytester: pytest.Pytester, sweep: Sweep) -> Path:
    """A sweep of three items and two priced arms; returns its spec."""
    spec = make_spec(pytester, sim_spec(3, extra=PRICED))
    result, _, rows = sweep.run()
    assert result.ret == 0 and len(rows) == 6
    return spec


def export(
    run: Path, out: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, str]:
    capsys.readouterr()
    status = main(["export", str(run), "-o", str(out), *extra])
    return status, capsys.readouterr().err


def samples(out: Path) -> list[dict[str, Any]]:
    return [s for path in sorted(out.iterdir()) for s in json.loads(path.read_text())["samples"]]


def test_export_refuses_a_spec_whose_dataset_changed(
    pytester: pytest.Pytester, sweep: Sweep, swept: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The stored outputs answered "2+2=? (0)": a log pairing them with
    # another prompt would be false.
    changed = pytester.path / "changed.yaml"
    changed.write_text(swept.read_text().replace("2+2=? (0)", "9+9=? (0)"))
    status, err = export(sweep.out, pytester.path / "logs", capsys, "--spec", str(changed))
    assert status == 2 and "the dataset of" in err and "differs from the file's" in err
    assert not (pytester.path / "logs").exists() or not list((pytester.path / "logs").iterdir())
    assert export(sweep.out, pytester.path / "ok", capsys, "--spec", str(swept))[0] == 0
    assert sorted({s["input"] for s in samples(pytester.path / "ok")}) == [
        f"2+2=? ({i})" for i in range(3)
    ]


def test_export_takes_the_inputs_from_the_specs_the_meta_line_names(
    pytester: pytest.Pytester, sweep: Sweep, swept: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert export(sweep.out, pytester.path / "logs", capsys)[0] == 0
    assert {s["input"] for s in samples(pytester.path / "logs")} == {
        f"2+2=? ({i})" for i in range(3)
    }
    # Edited since: refused by default too, never attached silently.
    swept.write_text(swept.read_text().replace("2+2=? (1)", "3+3=? (1)"))
    status, err = export(sweep.out, pytester.path / "edited", capsys)
    assert status == 2 and "differs from the file's" in err
    # a spec that no longer loads: said, and the inputs left empty
    swept.write_text("benchmark: demo\n")
    status, err = export(sweep.out, pytester.path / "broken", capsys)
    assert (
        status == 0
        and "cannot be loaded" in err
        and {s["input"] for s in samples(pytester.path / "broken")} == {""}
    )
    swept.rename(pytester.path / "moved.yaml")
    status, err = export(sweep.out, pytester.path / "gone", capsys)
    assert (
        status == 0
        and "spec demo.yaml (from the meta line of" in err
        and "inputs are left empty" in err
    )
    assert {s["input"] for s in samples(pytester.path / "gone")} == {""}


def test_an_older_file_without_parts_is_checked_by_its_targets(
    pytester: pytest.Pytester, sweep: Sweep, swept: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = sweep.out.read_text().splitlines(keepends=True)
    meta = json.loads(lines[0])
    del meta["benchmarks"]["demo"]["parts"]
    sweep.out.write_text(json.dumps(meta) + "\n" + "".join(lines[1:]))
    swept.write_text(swept.read_text().replace('target: "4"', 'target: "5"', 1))
    status, err = export(sweep.out, pytester.path / "logs", capsys)
    assert status == 2 and "task 'q0'" in err and "was answered for target '4'" in err


def test_cost_survives_a_round_trip(pytester: pytest.Pytester, sweep: Sweep, swept: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    _, rows = read_rows(sweep.out)
    assert all(isinstance(r["cost_usd"], float) and r["cost_usd"] > 0 for r in rows)
    assert export(sweep.out, pytester.path / "logs", capsys)[0] == 0
    logs = sorted((pytester.path / "logs").iterdir())
    for path in logs:
        log = json.loads(path.read_text())
        arm = log["eval"]["model"]
        mine = {r["task_id"]: r for r in rows if r["arm"] == arm}
        for sample in log["samples"]:
            assert sample["model_usage"][arm]["total_cost"] == mine[sample["id"]]["cost_usd"]
        assert log["stats"]["model_usage"][arm]["total_cost"] == pytest.approx(
            sum(r["cost_usd"] for r in mine.values())
        )
    back = pytester.path / "back.jsonl"
    assert main(["import", *map(str, logs), "-o", str(back)]) == 0
    costs = {(r["task_id"], r["arm"]): r["cost_usd"] for r in read_rows(back)[1]}
    assert costs == {(r["task_id"], r["arm"]): r["cost_usd"] for r in rows}


def write_log(path: Path, samples: list[dict[str, Any]], model: str = "openai/a") -> Path:
    log = {
        "version": 2,
        "status": "success",
        "eval": {
            "task": "arith",
            "model": model,
            "run_id": "r1",
            "created": "2026-01-02T03:04:05+00:00",
            "config": {"epochs": 1},
        },
        "results": {"scores": [{"name": "match"}]},
        "samples": samples,
    }
    path.write_text(json.dumps(log))
    return path


def sample(sid: str, usage: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {
        "id": sid,
        "epoch": 1,
        "input": "q",
        "target": "42",
        "output": {"completion": "42"},
        "model_usage": {"openai/a": usage},
        "scores": {"match": {"value": "C", "answer": "42"}},
        **more,
    }


def imported(tmp_path: Path, *logs: Path) -> dict[str, dict[str, Any]]:
    out = tmp_path / "run.jsonl"
    assert main(["import", *map(str, logs), "-o", str(out)]) == 0
    return {r["task_id"]: r for r in read_rows(out)[1]}


def test_cache_and_reasoning_tokens_are_mapped_both_ways(tmp_path: Path) -> None:
    # Inspect's input_tokens exclude the cache's reads and writes
    # (ModelUsage): kept apart, as claude's rows.
    usage = {
        "input_tokens": 10,
        "output_tokens": 5,
        "total_tokens": 65,
        "input_tokens_cache_read": 40,
        "input_tokens_cache_write": 10,
        "reasoning_tokens": 3,
        "total_cost": 0.25,
    }
    rows = imported(tmp_path, write_log(tmp_path / "a.json", [sample("1", usage)]))
    assert rows["1"]["usage"] == {
        "prompt_tokens": 60,
        "completion_tokens": 5,
        "cache_read_tokens": 40,
        "cache_write_tokens": 10,
        "reasoning_tokens": 3,
    }
    assert rows["1"]["cost_usd"] == 0.25
    assert main(["export", str(tmp_path / "run.jsonl"), "-o", str(tmp_path / "logs")]) == 0
    (path,) = (tmp_path / "logs").iterdir()
    assert json.loads(path.read_text())["samples"][0]["model_usage"]["openai/a"] == usage


@pytest.mark.parametrize(
    "bad",
    [
        {"input_tokens": -3},
        {"input_tokens": "12"},
        {"output_tokens": 1.5},
        {"input_tokens_cache_read": -1},
    ],
)
def test_a_token_figure_that_is_not_a_count_makes_the_usage_unknown(
    tmp_path: Path, bad: dict[str, Any]
) -> None:
    usage = {"input_tokens": 10, "output_tokens": 5, **bad}
    rows = imported(tmp_path, write_log(tmp_path / "a.json", [sample("1", usage)]))
    # never 0: a sum missing a figure would be too low without saying so
    assert rows["1"]["usage"] is None


@pytest.mark.parametrize(("time", "cost"), [(-1.0, -0.5), ("3", "0.1"), (None, None)])
def test_a_time_or_cost_that_is_not_a_figure_is_unknown(
    tmp_path: Path, time: Any, cost: Any
) -> None:
    usage = {"input_tokens": 1, "output_tokens": 1, "total_cost": cost}
    rows = imported(tmp_path, write_log(tmp_path / "a.json", [sample("1", usage, total_time=time)]))
    assert rows["1"]["wall_seconds"] is None and rows["1"]["cost_usd"] is None


def test_export_writes_no_usage_from_a_bad_figure(tmp_path: Path) -> None:
    run = tmp_path / "run.jsonl"
    row = {
        "task_id": "q1",
        "arm": "a",
        "passed": True,
        "detail": "passed",
        "wall_seconds": 0.5,
        "sub_calls": 1,
        "benchmark": "demo",
        "status": "correct",
        "output": "4",
        "answer": "4",
        "target": "4",
        "usage": {"prompt_tokens": 3, "completion_tokens": -2},
    }
    run.write_text(
        json.dumps({"_meta": True, "benchmark": "demo", "benchmarks": {"demo": {}}})
        + "\n"
        + json.dumps(row)
        + "\n"
    )
    assert main(["export", str(run), "-o", str(tmp_path / "logs")]) == 0
    (path,) = (tmp_path / "logs").iterdir()
    log = json.loads(path.read_text())
    assert log["samples"][0]["model_usage"] == {} and "usage" not in log["samples"][0]["output"]


def test_a_log_without_samples_is_named_and_nothing_at_all_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = write_log(tmp_path / "header-only.json", [])
    assert main(["import", str(empty), "-o", str(tmp_path / "none.jsonl")]) == 2
    assert "no samples in" in capsys.readouterr().err and not (tmp_path / "none.jsonl").exists()
    full = write_log(
        tmp_path / "full.json",
        [sample("1", {"input_tokens": 1, "output_tokens": 1})],
        model="openai/b",
    )
    assert main(["import", str(empty), str(full), "-o", str(tmp_path / "one.jsonl")]) == 0
    assert f"{empty} has no samples" in capsys.readouterr().err


@pytest.mark.parametrize("arm", ["", "a b", "x\n", "../up", "é"])
def test_an_arm_name_a_spec_would_refuse_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arm: str
) -> None:
    log = write_log(tmp_path / "a.json", [sample("1", {"input_tokens": 1, "output_tokens": 1})])
    assert main(["import", str(log), "--arm", arm, "-o", str(tmp_path / "run.jsonl")]) == 2
    assert "must be letters, digits" in capsys.readouterr().err
    assert not (tmp_path / "run.jsonl").exists()


@pytest.mark.parametrize(
    "content", ["", '{"_meta": true, "benchmark": "demo", "benchmarks": {}}\n']
)
def test_exporting_a_file_without_rows_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str
) -> None:
    (tmp_path / "run.jsonl").write_text(content)
    assert main(["export", str(tmp_path / "run.jsonl"), "-o", str(tmp_path / "logs")]) == 2
    assert "has no rows to export" in capsys.readouterr().err
