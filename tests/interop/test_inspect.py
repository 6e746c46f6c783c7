"""Import and export against the real Inspect (``inspect_ai``, pinned in
``inspect/requirements.txt``).

One real eval (a small task, ``match()``, two epochs, two models, one sample that errors) runs once
for the module against our loopback OpenAI-compatible server; its logs are imported and checked
against what Inspect's own reader says of them. A sweep of ours is exported and every log checked
with Inspect's reader: samples, scores, epochs, and accuracy/stderr as
Inspect's metrics compute them.
"""

from __future__ import annotations

import json
import textwrap
import threading
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from inspect_env import (
    ROOT,
    RUN_TIMEOUT_S,
    check,
    hermetic,
    inspect_json,
    inspect_lines,
    inspect_python,
    run,
)
from openai_server import BAD_REQUEST, FakeOpenAI
from shared_server import made_once, session_dir

from conftest import Sweep, make_spec, read_rows, sim_spec
from pytest_echo_bench.cli.main import main

TASK = textwrap.dedent("""
    from inspect_ai import Task, task
    from inspect_ai.dataset import Sample
    from inspect_ai.scorer import match
    from inspect_ai.solver import generate

    @task
    def arith():
        return Task(dataset=[Sample(id="q1", input="What is 40+2?", target="42"),
                             Sample(id="q2", input="What is 2+2?", target="4"),
                             Sample(id=3, input="What is 3+4?", target="7"),
                             Sample(id="boom", input="Say boom", target="x")],
                    solver=generate(), scorer=match(), epochs=2)
""")
ANSWERS = {"40+2": "42", "2+2": "4", "3+4": "7"}
# What Inspect's reader says of each log: its samples' scores or errors, and its own results.
READ_LOGS = textwrap.dedent("""
    import json, sys
    from inspect_ai.log import list_eval_logs, read_eval_log
    from inspect_ai.scorer import SampleScore, accuracy, stderr
    from inspect_ai.scorer._reducer import mean_score

    out = []
    for info in list_eval_logs(sys.argv[1], formats=[sys.argv[2]]):
        log = read_eval_log(info.name)
        name = log.results.scores[0].name
        samples, scored = [], {}
        for s in log.samples:
            value = s.scores[name].value if s.scores and name in s.scores else None
            samples.append({"id": str(s.id), "epoch": s.epoch, "value": value,
                            "error": s.error is not None,
                            "input": s.input, "target": s.target, "output": s.output.completion,
                            "usage": s.output.usage.model_dump() if s.output.usage else None,
                            "cost": [u.total_cost for u in s.model_usage.values()]})
            if s.error is None and value is not None:
                scored.setdefault(s.id, []).append(s.scores[name])
        reduced = [SampleScore(score=mean_score()(v), sample_id=k) for k, v in scored.items()]
        metrics = log.results.scores[0].metrics
        out.append({"file": info.name.rsplit("/", 1)[-1], "task": log.eval.task,
                    "model": log.eval.model,
                    "epochs": log.eval.config.epochs, "samples": samples, "status": log.status,
                    "accuracy": metrics["accuracy"].value, "stderr": metrics["stderr"].value,
                    "scored_samples": log.results.scores[0].scored_samples,
                    "inspect_accuracy": accuracy()(reduced),
                    "inspect_stderr": float(stderr()(reduced))})
    print(json.dumps(out))
""")


# Then Inspect's own writer takes each exported log as it is, into its default .eval format.
AS_EVAL = textwrap.dedent("""
    from inspect_ai.log import convert_eval_logs
    convert_eval_logs(sys.argv[1], "eval", sys.argv[3])
    back = {}
    for info in list_eval_logs(sys.argv[3], formats=["eval"]):
        log = read_eval_log(info.name)
        back[log.eval.model] = [len(log.samples), log.results.scores[0].metrics["accuracy"].value]
    print(json.dumps(back))
""")


def completion(body: dict[str, Any], text: str) -> bytes:
    prompt = body["messages"][-1]["content"]
    return json.dumps(
        {
            "id": "chatcmpl-local",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": text},
                }
            ],
            "usage": {
                "prompt_tokens": len(prompt.split()),
                "completion_tokens": len(text.split()),
                "total_tokens": len(prompt.split()) + len(text.split()),
            },
        }
    ).encode()


class Models:
    """Two models behind one server: ``strong`` always right; ``weak`` right on 2+2 once of its two
    epochs, wrong on 3+4; "boom" a 500 for both (an errored sample)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: dict[tuple[str, str], int] = {}

    def __call__(self, body: dict[str, Any]) -> tuple[str, Any]:
        prompt = str(body["messages"][-1]["content"])
        if "boom" in prompt:
            return ("error", (500, {"message": "boom", "type": "server_error", "code": None}, {}))
        right = next((answer for question, answer in ANSWERS.items() if question in prompt), "?")
        with self.lock:
            n = self.calls[body["model"], prompt] = self.calls.get((body["model"], prompt), 0) + 1
        weak_text = {"2+2": "4" if n == 1 else "5", "3+4": "8"}
        text = right
        if body["model"] == "weak":
            text = next((t for q, t in weak_text.items() if q in prompt), right)
        return ("raw", (200, "application/json", completion(body, text), {}))


@dataclass
class Logs:
    python: Path
    eval_dir: Path  # Inspect's own .eval logs (zstd)
    json_dir: Path  # the same logs converted by Inspect to its .json format
    read: list[dict[str, Any]]  # what Inspect's reader says of them


def make_logs(python: Path, tmp: Path) -> None:
    """Inspect's logs of one eval of two models, in .eval and .json, and what Inspect's
    reader says of them (read.json)."""
    (tmp / "task.py").write_text(TASK)
    with FakeOpenAI() as server:
        server.fault_for = Models()
        env = hermetic(tmp, OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="test")
        done = run(
            python,
            [
                "-m",
                "inspect_ai",
                "eval",
                "task.py",
                "--model",
                "openai/strong,openai/weak",
                "-M",
                "responses_api=false",
                "--log-dir",
                str(tmp / "eval"),
                "--display",
                "none",
                "--max-retries",
                "0",
                "--no-fail-on-error",
            ],
            env,
            tmp,
        )
        check(done, "inspect eval")
    logs = sorted((tmp / "eval").glob("*.eval"))
    assert len(logs) == 2, done.stdout
    # Inspect's own converter writes the .json logs (what `inspect log convert --to json` does), and
    # the same process reads them: one start of inspect_ai (seconds here) for both.
    convert = (
        "import sys\nfrom inspect_ai.log import "
        "convert_eval_logs\nconvert_eval_logs(sys.argv[3], 'json', sys.argv[1])\n"
    )
    read = inspect_json(
        python, convert + READ_LOGS, tmp, str(tmp / "json"), "json", str(tmp / "eval")
    )
    (tmp / "read.json").write_text(json.dumps(read), encoding="utf-8")


@pytest.fixture(scope="session")
def logs(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Logs:
    """Made once per session, whichever xdist worker asks first (an eval of Inspect's takes
    10-20 s): the tests only read them."""
    python = inspect_python()
    tmp = made_once(
        session_dir(pytestconfig, tmp_path_factory),
        "inspect-logs",
        lambda path: make_logs(python, path),
        RUN_TIMEOUT_S * 3,
    )
    read = json.loads((tmp / "read.json").read_text(encoding="utf-8"))
    return Logs(python, tmp / "eval", tmp / "json", sorted(read, key=lambda log: log["model"]))


def imported(
    paths: list[Path], out: Path, *args: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    assert main(["import", *map(str, paths), "-o", str(out), *args]) == 0
    meta, rows = read_rows(out)
    assert meta is not None
    return meta, rows


def shape(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What a row says of its item: key, verdict, usage, output and target."""
    return sorted((r["benchmark"], r["task_id"], r["arm"], r.get("epoch"), r["status"], r["passed"],
                   json.dumps(r["usage"]), r["output"], r["target"]) for r in rows)


def test_import_matches_inspects_own_reading(logs: Logs, tmp_path: Path) -> None:
    """The plain reader (this venv has no inspect_ai, as CI's): a row per sample and
    epoch, its verdict the one Inspect scored, an errored sample an error row, the two
    models two arms of one benchmark."""
    meta, rows = imported(sorted(logs.json_dir.glob("*.json")), tmp_path / "run.jsonl")
    assert list(meta["arms"]) == ["arith"] and sorted(meta["arms"]["arith"]) == [
        "openai/strong",
        "openai/weak",
    ]
    assert (
        meta["benchmarks"]["arith"]["epochs"] == 2
        and [s["reader"] for s in meta["imported_from"]] == ["json"] * 2
    )
    for log in logs.read:
        mine = {(r["task_id"], r["epoch"]): r for r in rows if r["arm"] == log["model"]}
        assert len(mine) == len(log["samples"]) == 8
        for sample in log["samples"]:
            row = mine[sample["id"], sample["epoch"]]
            want = "error" if sample["error"] else {"C": "correct", "I": "wrong"}[sample["value"]]
            assert (row["status"], row["passed"]) == (want, want == "correct")
            assert row["target"] == sample["target"] and row["output"] == sample["output"]
            assert row["extra"]["inspect"]["input"] == sample["input"]
            usage = sample["usage"]
            assert row["usage"] == (usage and {"prompt_tokens": usage["input_tokens"],
                                               "completion_tokens": usage["output_tokens"]})
        scored = {}
        for r in mine.values():
            if r["status"] != "error":
                scored.setdefault(r["task_id"], []).append(r["passed"])
        ours = sum(sum(v) / len(v) for v in scored.values()) / len(scored)
        assert ours == pytest.approx(log["accuracy"]) and len(scored) == log["scored_samples"] == 3
    weak = {(r["task_id"], r["epoch"]): r["status"] for r in rows if r["arm"] == "openai/weak"}
    assert (
        sorted(weak.values()).count("correct") == 3
        and weak["boom", 1] == weak["boom", 2] == "error"
    )


def test_the_report_pairs_the_two_models(
    logs: Logs, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run.jsonl"
    imported(sorted(logs.json_dir.glob("*.json")), out)
    capsys.readouterr()
    assert main(["report", str(out), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    # Our report counts an item whose samples all errored against the arm (Inspect leaves it out):
    # strong q1, q2, 3 right and boom errored, 3/4; weak q1 1, q2 1/2, 3 0, boom 0: 1.5/4.
    strong, weak = report["arms"]["openai/strong"], report["arms"]["openai/weak"]
    assert (strong["pass_rate"], strong["n"], strong["errors"], strong["samples"]) == (
        0.75,
        4,
        2,
        8,
    )
    assert weak["pass_rate"] == pytest.approx(1.5 / 4) and weak["errors"] == 2
    assert len(report["pairs"]) == 1 and {report["pairs"][0]["a"], report["pairs"][0]["b"]} == {
        "openai/strong", "openai/weak"} and report["pairs"][0]["n"] == 4


def test_eval_logs_through_inspects_own_reader(logs: Logs, tmp_path: Path) -> None:
    """With inspect_ai installed (its venv, our package on the path), ``.eval`` logs
    (zstd) import to the same rows."""
    out = tmp_path / "eval.jsonl"
    args = [
        "-m",
        "pytest_echo_bench.cli.main",
        "import",
        *map(str, sorted(logs.eval_dir.glob("*.eval"))),
        "-o",
        str(out),
    ]
    check(
        run(logs.python, args, hermetic(tmp_path, PYTHONPATH=str(ROOT)), tmp_path),
        "echo-bench import in .venv-inspect",
    )
    meta, rows = read_rows(out)
    assert (
        meta is not None
        and [s["reader"] for s in meta["imported_from"]] == ["inspect_ai 0.3.285"] * 2
    )
    _, plain = imported(sorted(logs.json_dir.glob("*.json")), tmp_path / "json.jsonl")
    assert shape(rows) == shape(plain) and len(rows) == 16


def test_zstd_eval_without_inspect_ai_is_refused_and_says_how(
    logs: Logs, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run.jsonl"
    assert main(["import", *map(str, logs.eval_dir.glob("*.eval")), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert (
        "zstd-compressed" in err
        and "pytest-echo-bench[inspect]" in err
        and "inspect log convert" in err
    )
    assert not out.exists()


def test_a_deflated_eval_log_is_read_with_zipfile(logs: Logs, tmp_path: Path) -> None:
    """The ``.eval`` layout with deflated entries (what Inspect wrote
    before zstd): the stdlib reads it."""
    python_code = (
        "import sys, zipfile, zipfile_zstd\nsrc, dst = sys.argv[1:3]\n"
        "with zipfile.ZipFile(src) as a, zipfile.ZipFile(dst, 'w', zipfile.ZIP_DEFLATED) as b:\n"
        "    [b.writestr(i.filename, a.read(i)) for i in a.infolist()]\nprint('[]')"
    )
    deflated = []
    for log in sorted(logs.eval_dir.glob("*.eval")):
        deflated.append(tmp_path / log.name)
        inspect_json(logs.python, python_code, tmp_path, str(log), str(deflated[-1]))
    with zipfile.ZipFile(deflated[0]) as z:
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_DEFLATED}
    meta, rows = imported(deflated, tmp_path / "zip.jsonl")
    _, plain = imported(sorted(logs.json_dir.glob("*.json")), tmp_path / "json.jsonl")
    assert (
        shape(rows) == shape(plain)
        and [s["reader"] for s in meta["imported_from"]] == ["zipfile"] * 2
    )


ARMS = "\n".join(
    f"  {name}:\n    provider: openai\n    model: {name}\n    base_url: {{url}}\n"
    "    api_key_env: TEST_OPENAI_KEY\n    client: http"
    for name in ("strong", "weak")
)


@pytest.fixture
def our_sweep(
    pytester: pytest.Pytester, sweep: Sweep, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """A sweep of ours: two arms, epochs 2, five items (one the server refuses: an error row)."""
    monkeypatch.setenv("TEST_OPENAI_KEY", "test")

    calls: dict[tuple[str, str], int] = {}
    lock = threading.Lock()

    def answer(body: dict[str, Any]) -> tuple[str, Any]:
        """weak: q1 wrong both epochs, q2 wrong on its second call;
        q4 refused (400) for both arms."""
        prompt = str(body["messages"][-1]["content"])
        if "(4)" in prompt:
            return ("error", (400, BAD_REQUEST, {}))
        with lock:
            n = calls[body["model"], prompt] = calls.get((body["model"], prompt), 0) + 1
        wrong = body["model"] == "weak" and ("(1)" in prompt or ("(2)" in prompt and n == 2))
        return ("raw", (200, "application/json", completion(body, "5" if wrong else "4"), {}))

    with FakeOpenAI() as server:
        server.fault_for = answer
        make_spec(pytester, sim_spec(5, arms=ARMS.replace("{url}", server.base_url),
                                     extra="epochs: 2\nretries: {attempts: 1}\n"
                                           "pricing:\n  strong: {input: 1.0, output: 2.0}\n"))
        result, _, rows = sweep.run()
    assert len(rows) == 20 and sum(r["status"] == "error" for r in rows) == 4, result.stdout.str()
    assert all(r["cost_usd"] > 0 for r in rows if r["arm"] == "strong" and r["status"] != "error")
    yield sweep.out


def test_export_is_read_by_inspect(
    our_sweep: Path, tmp_path: Path, pytester: pytest.Pytester
) -> None:
    python = inspect_python()
    out = tmp_path / "logs"
    assert main(["export", str(our_sweep), "--format", "inspect", "-o", str(out),
                 "--spec", str(pytester.path / "demo.yaml")]) == 0
    _, rows = read_rows(our_sweep)
    read, back = inspect_lines(
        python, READ_LOGS + AS_EVAL, tmp_path, str(out), "json", str(tmp_path / "eval")
    )
    # Listed as inspect view lists logs: by the arm's model, as
    # Inspect names one ("provider/model").
    assert sorted(log["model"] for log in read) == ["openai/strong", "openai/weak"]
    assert back == {log["model"]: [10, log["accuracy"]] for log in read}
    for log in read:
        mine = {(r["task_id"], r["epoch"]): r for r in rows if f"openai/{r['arm']}" == log["model"]}
        assert log["task"] == "demo" and log["epochs"] == 2 and log["status"] == "success"
        assert len(log["samples"]) == len(mine) == 10
        for sample in log["samples"]:
            row = mine[sample["id"], sample["epoch"]]
            assert sample["error"] == (row["status"] == "error")
            assert sample["value"] == {"correct": "C", "wrong": "I", "error": None}[row["status"]]
            assert sample["input"].startswith("2+2=? (") and sample["target"] == row["target"]
            assert sample["output"] == row["output"]
            if row["usage"]:
                assert sample["usage"]["input_tokens"] == row["usage"]["prompt_tokens"]
            # The cost, where the row knows it, as Inspect's ModelUsage.total_cost.
            assert sample["cost"] == (
                [row["cost_usd"]]
                if row.get("cost_usd") is not None
                else [None]
                if row["usage"]
                else []
            )
        assert log["accuracy"] == pytest.approx(log["inspect_accuracy"])
        assert log["stderr"] == pytest.approx(log["inspect_stderr"])
        assert log["scored_samples"] == 4
    weak = next(log for log in read if log["model"] == "openai/weak")
    assert weak["accuracy"] == pytest.approx((1 + 0 + 0.5 + 1) / 4)


def test_export_then_import_gives_the_same_rows(our_sweep: Path, tmp_path: Path) -> None:
    out = tmp_path / "logs"
    assert main(["export", str(our_sweep), "-o", str(out)]) == 0
    _, rows = read_rows(our_sweep)
    logs = sorted(out.glob("*.json"))
    heads = [json.loads(log.read_text())["eval"] for log in logs]
    # The eval's model is the arm's model (was the arm's name); the arm rides in its metadata, so
    # the import names the arms as the sweep did.
    assert [(h["model"], h["metadata"]["echo_bench"]["arm"]) for h in heads] == [
        ("openai/strong", "strong"),
        ("openai/weak", "weak"),
    ]
    meta, back = imported(logs, tmp_path / "back.jsonl")
    assert meta["arms"] == {"demo": ["strong", "weak"]}

    def same(r: dict[str, Any]) -> tuple[Any, ...]:
        return (
            r["benchmark"],
            r["task_id"],
            r["arm"],
            r.get("epoch"),
            r["status"],
            r["passed"],
            r["usage"] and json.dumps(r["usage"], sort_keys=True),
            r["output"],
            r["target"],
            r["answer"],
            r.get("cost_usd"),
        )

    assert sorted(map(same, back)) == sorted(map(same, rows))


VALUES: list[Any] = [
    "C",
    "I",
    "P",
    "N",
    "c",
    "i",
    "yes",
    "YES",
    "No",
    "true",
    "False",
    "1",
    "0",
    "0.25",
    "-3",
    "1e3",
    " 2 ",
    "1_000",
    "nan",
    "inf",
    "-inf",
    "",
    "maybe",
    "0x10",
    True,
    False,
    0,
    1,
    0.5,
    -2,
    3.75,
    None,
    [1, "C"],
    {"a": 1},
    [],
    {},
]


def test_value_to_float_is_inspects(tmp_path: Path) -> None:
    """Every kind of score value, mapped by Inspect's own ``value_to_float()`` and by ours."""
    from pytest_echo_bench.interop.inspect.log import value_to_float

    code = ("import json, sys, logging\nlogging.disable(logging.WARNING)\n"
            "from inspect_ai.scorer import value_to_float\nf = value_to_float()\n"
            "print(json.dumps([repr(f(v)) for v in json.loads(sys.argv[1])]))")
    theirs = inspect_json(inspect_python(), code, tmp_path, json.dumps(VALUES))
    assert [repr(value_to_float(v)) for v in VALUES] == theirs
