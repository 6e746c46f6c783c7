"""``echo-bench import`` and ``export`` without Inspect installed (as in CI's own venv): the mapping
of score values, the refusals (an existing file, a running sweep's, two logs giving one key, a log
that is not one), and the round trip as a property. The real Inspect's side: ``test_inspect.py``.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import read_rows
from pytest_echo_bench.cli.main import main
from pytest_echo_bench.interop.inspect import bounds as inspect_zip
from pytest_echo_bench.interop.inspect import log as inspect_log
from pytest_echo_bench.store.owner import Ownership
from pytest_echo_bench.store.records import Meta, Row
from pytest_echo_bench.store.writer import write_whole


def sample(sid: str | int, value: Any = "C", epoch: int = 1, **more: Any) -> dict[str, Any]:
    return {
        "id": sid,
        "epoch": epoch,
        "input": f"question {sid}",
        "target": "42",
        "output": {
            "completion": "42",
            "usage": {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4},
        },
        "scores": {"match": {"value": value, "answer": "42"}},
        **more,
    }


def write_log(
    path: Path,
    samples: list[dict[str, Any]],
    task: str = "arith",
    model: str = "openai/a",
    epochs: int = 1,
) -> Path:
    log = {
        "version": 2,
        "status": "success",
        "eval": {
            "task": task,
            "model": model,
            "run_id": "r1",
            "created": "2026-01-02T03:04:05+00:00",
            "config": {"epochs": epochs},
            "packages": {"inspect_ai": "0.3.285"},
        },
        "results": {"scores": [{"name": "match"}]},
        "samples": samples,
    }
    path.write_text(json.dumps(log))
    return path


def imported(tmp_path: Path, *logs: Path, extra: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    out = tmp_path / "run.jsonl"
    assert main(["import", *map(str, logs), "-o", str(out), *extra]) == 0
    return read_rows(out)[1]


@pytest.mark.parametrize(
    ("value", "status", "passed"),
    [
        ("C", "correct", True),
        ("I", "wrong", False),
        ("P", "wrong", False),
        ("N", "unparseable", False),
        (1, "correct", True),
        (1.0, "correct", True),
        (True, "correct", True),
        ("yes", "correct", True),
        ("1", "correct", True),
        (0, "wrong", False),
        (0.75, "wrong", False),
        ("no", "wrong", False),
        ({"a": 1}, "wrong", False),
        ([1], "wrong", False),
        ("maybe", "wrong", False),
    ],
)
def test_a_score_value_is_a_verdict(tmp_path: Path, value: Any, status: str, passed: bool) -> None:
    """Correct when it maps to 1 as Inspect's value_to_float maps it; N (no
    answer) unparseable; else wrong."""
    (row,) = imported(tmp_path, write_log(tmp_path / "a.json", [sample("q1", value)]))
    assert (row["status"], row["passed"]) == (status, passed)
    assert row["extra"]["inspect"]["value"] == value
    if value in ("P", 0.75):
        assert row["detail"].startswith(f"scored {inspect_log.value_to_float(value):g}, not 1")


def test_an_errored_or_unscored_sample_is_an_error_row(tmp_path: Path) -> None:
    errored = sample(
        "q1", error={"message": "RetryError(InternalServerError)\n  at line 3", "traceback": ""}
    )
    unscored = {**sample("q2"), "scores": {}}
    rows = {
        r["task_id"]: r
        for r in imported(tmp_path, write_log(tmp_path / "a.json", [errored, unscored]))
    }
    assert (
        rows["q1"]["status"] == "error"
        and rows["q1"]["detail"] == "error: RetryError(InternalServerError) at line 3"
    )
    assert (
        rows["q2"]["status"] == "error" and "no score from scorer 'match'" in rows["q2"]["detail"]
    )
    assert not rows["q1"]["passed"] and not rows["q2"]["passed"]


def test_fields_of_a_row(tmp_path: Path) -> None:
    log = write_log(tmp_path / "a.json", [sample(7, epoch=1, total_time=1.5, model_usage={
        "openai/a": {"input_tokens": 3, "output_tokens": 1, "total_cost": 0.002},
        "openai/judge": {"input_tokens": 10, "output_tokens": 2}}, metadata={"subtask": "easy"}),
        sample(7, "I", epoch=2)], epochs=2)
    first, second = imported(tmp_path, log)
    assert (first["task_id"], first["arm"], first["benchmark"], first["epoch"]) == (
        "7",
        "openai/a",
        "arith",
        1,
    )
    assert (
        first["usage"] == {"prompt_tokens": 13, "completion_tokens": 3}
        and first["cost_usd"] == 0.002
    )
    assert (
        first["wall_seconds"] == 1.5 and first["subtask"] == "easy" and first["worker"] == "inspect"
    )
    assert second["usage"] == {"prompt_tokens": 3, "completion_tokens": 1} and second["epoch"] == 2


def test_one_epoch_rows_have_no_epoch_field_as_a_sweeps(tmp_path: Path) -> None:
    (row,) = imported(tmp_path, write_log(tmp_path / "a.json", [sample("q1")]))
    assert "epoch" not in row
    assert list(row)[:6] == ["task_id", "arm", "passed", "detail", "wall_seconds", "sub_calls"]


def test_attachments_are_resolved(tmp_path: Path) -> None:
    s = sample("q1", input="attachment://abc", attachments={"abc": "a long question"})
    s["output"]["completion"] = "attachment://def"
    s["attachments"]["def"] = "42"
    (row,) = imported(tmp_path, write_log(tmp_path / "a.json", [s]))
    assert row["extra"]["inspect"]["input"] == "a long question" and row["output"] == "42"


def test_two_logs_of_one_task_and_model_need_an_arm_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = write_log(tmp_path / "a.json", [sample("q1")])
    b = write_log(tmp_path / "b.json", [sample("q1", "I")])
    assert main(["import", str(a), str(b), "-o", str(tmp_path / "x.jsonl")]) == 2
    assert (
        "give each log its own --arm" in capsys.readouterr().err
        and not (tmp_path / "x.jsonl").exists()
    )
    rows = imported(tmp_path, a, b, extra=("--arm", "before", "--arm", "after"))
    assert [(r["arm"], r["status"]) for r in rows] == [("before", "correct"), ("after", "wrong")]
    assert (
        main(
            [
                "import",
                str(a),
                str(b),
                "-o",
                str(tmp_path / "y.jsonl"),
                "--arm",
                "1",
                "--arm",
                "2",
                "--arm",
                "3",
            ]
        )
        == 2
    )
    assert "--arm given 3 times for 2 logs" in capsys.readouterr().err


def test_an_existing_file_is_never_written_over(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write_log(tmp_path / "a.json", [sample("q1")])
    out = tmp_path / "run.jsonl"
    out.write_text("mine\n")
    assert main(["import", str(log), "-o", str(out)]) == 2
    assert "exists" in capsys.readouterr().err and out.read_text() == "mine\n"


def test_a_running_sweeps_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The owner of a sweep creates and locks its file at the start: the import leaves it alone."""
    log = write_log(tmp_path / "a.json", [sample("q1")])
    out = tmp_path / "sweep.jsonl"
    owner = Ownership(out)
    owner.acquire()
    try:
        assert main(["import", str(log), "-o", str(out)]) == 2
        assert "exists" in capsys.readouterr().err and out.read_bytes() == b""
    finally:
        owner.release()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "a JSON object expected"),
        (b'{"eval": {"task": 1}}', "no eval.task"),
        (
            json.dumps({"eval": {"task": "t", "model": "m"}, "samples": [{"id": True}]}).encode(),
            "id is not a string",
        ),
        (
            json.dumps(
                {"eval": {"task": "t", "model": "m"}, "samples": [{"id": "a", "epoch": 0}]}
            ).encode(),
            "epoch 0",
        ),
        (
            json.dumps({"eval": {"task": "t", "model": "m"}, "samples": {"id": "a"}}).encode(),
            "not a list of objects",
        ),
    ],
)
def test_a_file_that_is_not_a_log_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, message: str
) -> None:
    (tmp_path / "bad.json").write_bytes(content)
    assert main(["import", str(tmp_path / "bad.json"), "-o", str(tmp_path / "x.jsonl")]) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "x.jsonl").exists()


def test_a_eval_zip_is_checked_before_it_is_inflated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "bad.eval"
    bad.write_bytes(b"PK not a zip")
    empty = tmp_path / "empty.eval"
    with zipfile.ZipFile(empty, "w") as z:
        z.writestr("samples/a_epoch_1.json", "{}")
    bomb = tmp_path / "bomb.eval"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("header.json", json.dumps({"eval": {"task": "t", "model": "m"}}))
        z.writestr("samples/a_epoch_1.json", b" " * 100_000)
    monkeypatch.setattr(inspect_zip, "ENTRY_LIMIT", 50_000)
    for path, message in (
        (bad, "not a zip file"),
        (empty, "without header.json"),
        (bomb, "over 50,000"),
    ):
        assert main(["import", str(path), "-o", str(tmp_path / "x.jsonl")]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists()


def test_a_fifo_or_other_suffix_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    os.mkfifo(tmp_path / "pipe.json")
    (tmp_path / "log.txt").write_text("{}")
    for name, message in (("pipe.json", "FIFO"), ("log.txt", "want a .eval or .json")):
        assert main(["import", str(tmp_path / name), "-o", str(tmp_path / "x.jsonl")]) == 2
        assert message in capsys.readouterr().err


def row(
    task_id: str,
    arm: str,
    status: str,
    epoch: int | None = None,
    usage: dict[str, int] | None = None,
    cost: float | None = None,
) -> Row:
    return Row(
        task_id=task_id,
        arm=arm,
        passed=status == "correct",
        detail=status,
        wall_seconds=0.5,
        sub_calls=1,
        benchmark="demo",
        status=status,
        output="4" if status == "correct" else "5",
        answer=None if status in ("error", "unparseable") else "4" if status == "correct" else "5",
        target="4",
        attempts=1,
        started_at="2026-01-01T00:00:00Z",
        finished_at="2026-01-01T00:00:01Z",
        worker="gw0",
        run_id="r",
        usage=usage,
        epoch=epoch,
        cost_usd=cost,
    )


def results(path: Path, rows: list[Row], epochs: int = 1) -> Path:
    meta = {"_meta": True, "benchmark": "demo", "run_id": "r", "created_at": "2026-01-01T00:00:00Z",
            "benchmarks": {"demo": {"epochs": epochs}}}
    write_whole(path, Meta.from_json(meta), [r.to_line() for r in rows])
    return path


def test_export_refuses_an_existing_log_and_writes_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = results(tmp_path / "run.jsonl", [row("q1", "a", "correct"), row("q1", "b/c_d", "wrong")])
    out = tmp_path / "logs"
    out.mkdir()
    taken = out / "2026-01-01T00-00-00-00-00_demo_b-c-d.json"
    taken.write_text("theirs")
    assert main(["export", str(run), "-o", str(out)]) == 2
    assert "exists" in capsys.readouterr().err and sorted(p.name for p in out.iterdir()) == [
        taken.name
    ]
    assert taken.read_text() == "theirs"


def test_export_scores_and_errors(tmp_path: Path) -> None:
    run = results(tmp_path / "run.jsonl", [row("q1", "a", "correct"), row("q2", "a", "unparseable"),
                                           row("q3", "a", "error"), row("q1", "a", "wrong")])
    assert main(["export", str(run), "-o", str(tmp_path / "logs")]) == 0
    (path,) = (tmp_path / "logs").iterdir()
    log = json.loads(path.read_text())
    samples = {s["id"]: s for s in log["samples"]}
    assert samples["q1"]["scores"]["echo_bench"]["value"] == "I"  # the newest row of a key counts
    assert samples["q2"]["scores"]["echo_bench"]["value"] == "N"
    assert samples["q3"]["scores"] == {} and samples["q3"]["error"]["message"] == "error"
    metrics = log["results"]["scores"][0]["metrics"]
    assert (
        metrics["accuracy"]["value"] == 0.0 and log["results"]["scores"][0]["scored_samples"] == 2
    )


STATUS = st.sampled_from(["correct", "wrong", "unparseable", "error", "unjudged"])
USAGE = st.none() | st.fixed_dictionaries(
    {"prompt_tokens": st.integers(0, 10**6), "completion_tokens": st.integers(0, 10**6)},
    optional={
        name: st.integers(1, 10**6)
        for name in ("cache_read_tokens", "cache_write_tokens", "reasoning_tokens")
    },
).map(lambda u: u and {  # the cache's tokens are parts of prompt_tokens (docs/results.md)
    **u, "prompt_tokens": u["prompt_tokens"] + sum(
        u.get(k, 0) for k in ("cache_read_tokens", "cache_write_tokens"))})
COST = st.none() | st.floats(0, 100, allow_nan=False)
IDS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)


@settings(max_examples=30, deadline=None, derandomize=True, database=None)
@given(st.dictionaries(st.tuples(IDS, st.sampled_from(["a", "b/c", "d_e"]), st.integers(1, 3)),
                       st.tuples(STATUS, USAGE, COST), min_size=1, max_size=12))
def test_export_then_import_keeps_ids_verdicts_and_usage(
    tmp_path_factory: pytest.TempPathFactory,
    cells: dict[tuple[str, str, int], tuple[str, Any, Any]],
) -> None:
    tmp = tmp_path_factory.mktemp("trip")
    epochs = max(e for _, _, e in cells) > 1
    # A cost rides on the usage (Inspect's ModelUsage.total_cost): a row without usage exports none.
    rows = [row(t, a, s, epoch=e if epochs else None, usage=u, cost=c if u else None)
            for (t, a, e), (s, u, c) in cells.items()]
    if not epochs:  # one row per key: without epochs the epoch is not part of the key
        rows = list({(r.task_id, r.arm): r for r in rows}.values())
    run = results(tmp / "run.jsonl", rows, epochs=3 if epochs else 1)
    assert main(["export", str(run), "-o", str(tmp / "logs")]) == 0
    back = read_rows(_import_all(tmp))[1]

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return (r["benchmark"], r["task_id"], r["arm"], r.get("epoch"), r["status"], r["passed"],
                json.dumps(r["usage"], sort_keys=True),
                r["answer"], r.get("cost_usd"))

    want = [json.loads(r.to_line()) for r in rows]
    assert sorted(map(key, back)) == sorted(map(key, want))


def _import_all(tmp: Path) -> Path:
    logs = sorted((tmp / "logs").iterdir())
    arms = [json.loads(p.read_text())["eval"]["model"] for p in logs]
    out = tmp / "back.jsonl"
    assert main(["import", *map(str, logs), "-o", str(out)]) == 0
    assert read_rows(out)[0]["arms"] == {"demo": list(dict.fromkeys(arms))}
    return out


def test_names_from_a_log_cannot_draw_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by hand: the summary printed the task's CR LF raw (say() keeps CSV's line ends)."""
    log = write_log(
        tmp_path / "a.json", [sample("q1")], task="x\r\n===== 2 passed =====", model="m\x1b[2J"
    )
    capsys.readouterr()
    imported(tmp_path, log)
    out = capsys.readouterr().out
    assert (
        "\r" not in out
        and "\x1b" not in out
        and out.count("\n") == 1
        and "x\\x0d\\x0a===== 2 passed" in out
    )


def test_export_names_stay_short_and_plain(tmp_path: Path) -> None:
    run = results(tmp_path / "run.jsonl", [row("q1", "a/" * 200 + "\u202e", "correct")])
    assert main(["export", str(run), "-o", str(tmp_path / "logs")]) == 0
    (path,) = (tmp_path / "logs").iterdir()
    assert len(path.name) <= 200 and path.name.isascii() and "/" not in path.name


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
FIELDS = (
    "input",
    "target",
    "output",
    "scores",
    "error",
    "model_usage",
    "metadata",
    "total_time",
    "turn_count",
    "error_retries",
    "started_at",
    "attachments",
    "uuid",
)


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(
    st.lists(st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=6), min_size=1, max_size=4),
    st.dictionaries(
        st.sampled_from(["config", "created", "run_id", "task_version", "eval_id", "packages"]),
        JSON,
    ),
    JSON,
)
def test_any_json_in_a_log_gives_rows_or_one_line(
    tmp_path_factory: pytest.TempPathFactory,
    fields: list[dict[str, Any]],
    spec: dict[str, Any],
    results_field: Any,
) -> None:
    """Whatever the fields of a log hold (NaN and Infinity too, as Inspect writes them), the import
    gives rows every reader of ours takes, or status 2 and one line: never a crash of ours."""
    tmp = tmp_path_factory.mktemp("any")
    samples = [{"id": f"s{i}", "epoch": 1, **f} for i, f in enumerate(fields)]
    log = {
        "eval": {"task": "t", "model": "m", **spec},
        "results": results_field,
        "samples": samples,
    }
    (tmp / "a.json").write_text(json.dumps(log))
    status = main(["import", str(tmp / "a.json"), "-o", str(tmp / "run.jsonl")])
    assert status in (0, 2)
    if status == 0:
        assert main(["report", str(tmp / "run.jsonl"), "--format", "json"]) == 0
        assert main(["export", str(tmp / "run.jsonl"), "-o", str(tmp / "logs")]) == 0


def test_logs_imported_apart_merge_into_two_arms(tmp_path: Path) -> None:
    """One file per model, imported one at a time: the task's
    fingerprint is the same, so they merge."""
    for name in ("a", "b"):
        log = write_log(
            tmp_path / f"{name}.json", [sample("q1"), sample("q2", "I")], model=f"openai/{name}"
        )
        assert main(["import", str(log), "-o", str(tmp_path / f"{name}.jsonl")]) == 0
    assert (
        main(
            [
                "merge",
                str(tmp_path / "a.jsonl"),
                str(tmp_path / "b.jsonl"),
                "-o",
                str(tmp_path / "all.jsonl"),
            ]
        )
        == 0
    )
    rows = read_rows(tmp_path / "all.jsonl")[1]
    assert sorted((r["arm"], r["task_id"]) for r in rows) == [
        ("openai/a", "q1"),
        ("openai/a", "q2"),
        ("openai/b", "q1"),
        ("openai/b", "q2"),
    ]
    # another dataset
    changed = write_log(tmp_path / "c.json", [sample("q1"), sample("q3")], model="openai/c")
    assert main(["import", str(changed), "-o", str(tmp_path / "c.jsonl")]) == 0
    assert (
        main(
            [
                "merge",
                str(tmp_path / "a.jsonl"),
                str(tmp_path / "c.jsonl"),
                "-o",
                str(tmp_path / "x.jsonl"),
            ]
        )
        == 2
    )


def test_scorer_picks_the_verdict_and_a_missing_one_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    two = sample("q1", "C")
    two["scores"]["judge"] = {"value": "I", "answer": "41"}
    log = write_log(tmp_path / "a.json", [two])
    (row,) = imported(tmp_path, log, extra=("--scorer", "judge"))
    assert (row["status"], row["answer"], row["extra"]["inspect"]["scorer"]) == (
        "wrong",
        "41",
        "judge",
    )
    assert main(["import", str(log), "-o", str(tmp_path / "x.jsonl"), "--scorer", "typo"]) == 2
    assert (
        "no sample has a score from scorer 'typo' (its scorers: 'judge', 'match')"
        in capsys.readouterr().err
    )


def test_an_older_rows_cache_names_export_as_inspects(tmp_path: Path) -> None:
    """A claude CLI row of an older version counts the cache apart from prompt_tokens, in names
    of its own: exported as Inspect counts them (input_tokens full-rate, the cache's beside)."""
    old = {"prompt_tokens": 11, "completion_tokens": 2, "cache_read_input_tokens": 5000,
           "cache_creation_input_tokens": 30}
    run = results(tmp_path / "run.jsonl", [row("q1", "a", "correct", usage=old)])
    assert main(["export", str(run), "-o", str(tmp_path / "logs")]) == 0
    (log,) = (tmp_path / "logs").iterdir()
    usage = json.loads(log.read_text())["samples"][0]["model_usage"]["a"]
    assert usage == {"input_tokens": 11, "output_tokens": 2, "input_tokens_cache_read": 5000,
                     "input_tokens_cache_write": 30, "total_tokens": 5043}
