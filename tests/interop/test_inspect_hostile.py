"""Hostile Inspect logs: a score no float holds, JSON nested too deep, epochs of the wrong type and
zip bombs. Each is refused with status 2 and a line naming the log (and the sample or entry), or
imported faithfully; never status 3, and a bomb never costs the memory it inflates to. Both readers:
the plain one in process, Inspect's own in its venv (``inspect_env``)."""

from __future__ import annotations

import contextlib
import io
import json
import struct
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from inspect_env import ROOT, hermetic, inspect_python

from conftest import read_rows
from pytest_echo_bench.cli.main import main

RSS_BOUND_KB = 300 << 10  # a refusing process stays far below what the bombs inflate to (1 GiB)


def sample(sid: str = "q1", **more: Any) -> dict[str, Any]:
    return {"id": sid, "epoch": 1, "input": "q", "target": "42", "output": {"completion": "42"},
            "scores": {"match": {"value": "C", "answer": "42"}}, **more}


def header() -> dict[str, Any]:
    # eval.dataset and results.scores[].scorer make it a log Inspect's own reader validates
    return {"version": 2, "status": "success",
            "eval": {"task": "arith", "model": "openai/a", "run_id": "r1", "dataset": {},
                     "created": "2026-01-02T03:04:05+00:00", "config": {"epochs": 1}},
            "results": {"scores": [{"name": "match", "scorer": "match"}]}}


def json_log(path: Path, samples: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({**header(), "samples": samples}))
    return path


def eval_log(path: Path, samples: list[dict[str, Any]]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("header.json", json.dumps(header()))
        for s in samples:
            z.writestr(
                f"samples/{s['id']}_epoch_{s['epoch'] if isinstance(s['epoch'], int) else 1}.json",
                json.dumps(s),
            )
    return path


def nested(depth: int) -> Any:
    return json.loads("[" * depth + "]" * depth)


def run_import(log: Path, out: Path) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = main(["import", str(log), "-o", str(out)])
    return status, err.getvalue()


# The hostile logs: what each must say, whichever reader reads it.
HOSTILE = {
    "deep.json": (
        lambda p: json_log(p, [sample(scores={"match": {"value": nested(600)}})]),
        ['sample "q1" (epoch 1) is nested deeper than 200 levels', "at scores.match.value[0]"],
    ),
    "deep.eval": (
        lambda p: eval_log(p, [sample(input=nested(600))]),
        ['sample "q1" (epoch 1) is nested deeper', "at input[0][0]"],
    ),
    "epoch.json": (lambda p: json_log(p, [sample(epoch=[1])]), ['sample "q1" has epoch [1]']),
    "epoch.eval": (
        lambda p: eval_log(p, [sample(), sample("q2", epoch=[1])]),
        ['sample "q2" has epoch [1]'],
    ),
    "huge-epoch.json": (
        lambda p: json_log(p, [sample(epoch=10**400)]),
        ['sample "q1" has epoch a huge number'],
    ),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_log_is_refused_naming_it(tmp_path: Path, name: str) -> None:
    make, said = HOSTILE[name]
    log = make(tmp_path / name)
    status, err = run_import(log, tmp_path / "run.jsonl")
    assert status == 2 and str(log) in err and all(s in err for s in said), err
    assert "internal error" not in err and not (tmp_path / "run.jsonl").exists()


def test_a_score_no_float_holds_is_a_wrong_row_keeping_its_digits(tmp_path: Path) -> None:
    log = json_log(
        tmp_path / "a.json", [sample(scores={"match": {"value": 10**400, "answer": "42"}})]
    )
    status, err = run_import(log, tmp_path / "run.jsonl")
    assert status == 0, err
    (row,) = read_rows(tmp_path / "run.jsonl")[1]
    assert row["status"] == "wrong" and row["detail"].startswith("scored inf, not 1")
    assert (
        row["extra"]["inspect"]["value"] == str(10**400)
        and row["extra"]["inspect"]["value_float"] is None
    )
    assert main(["report", str(tmp_path / "run.jsonl"), "--format", "json"]) == 0


# -- zip bombs: a few MB on disk, 1 GiB inflated ---------------------------------------------------

ZEROS = b"0" * (1 << 20)


def bomb(path: Path, entries: int, mib: int) -> Path:
    """A .eval whose ``entries`` samples each inflate to ``mib`` MiB of zeros,
    streamed (the test never holds it)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        z.writestr("header.json", json.dumps(header()))
        for i in range(entries):
            with z.open(f"samples/q{i}_epoch_1.json", "w") as f:
                for _ in range(mib):
                    f.write(ZEROS)
    return path


def lying(honest: Path, path: Path, size: int) -> Path:
    """``honest`` with every entry of ``size`` bytes declaring
    1,000 in both of the zip's headers."""
    data = bytearray(honest.read_bytes())
    for signature, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        at = data.find(signature)
        while at >= 0:
            if data[at + offset:at + offset + 4] == struct.pack("<I", size):
                data[at + offset:at + offset + 4] = struct.pack("<I", 1000)
            at = data.find(signature, at + 4)
    path.write_bytes(bytes(data))
    return path


BOMBS = ("one-entry", "many-entries", "lying-sizes")


@pytest.fixture(scope="module")
def bombs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("bombs")
    one = bomb(tmp / "one-entry.eval", 1, 1024)
    return {"one-entry": one, "many-entries": bomb(tmp / "many-entries.eval", 17, 63),
            "lying-sizes": lying(one, tmp / "lying-sizes.eval", 1 << 30)}


# The peak is this process's own (VmHWM): ``ru_maxrss`` keeps, across exec, the high-water mark of
# the memory it was forked from, so a child of a large test worker would report the worker's.
MEASURE = """
import contextlib, io, json, sys
from pytest_echo_bench.cli.main import main
err = io.StringIO()
with contextlib.redirect_stderr(err):
    status = main(["import", sys.argv[1], "-o", sys.argv[2]])
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"status": status, "err": err.getvalue(),
                  "rss_kb": peak}))
"""


def measured(python: Path | str, log: Path, tmp: Path) -> dict[str, Any]:
    done = subprocess.run(
        [str(python), "-c", MEASURE, str(log), str(tmp / "run.jsonl")],
        capture_output=True,
        text=True,
        timeout=300,
        env=hermetic(tmp, PYTHONPATH=str(ROOT)),
        cwd=tmp,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("name", BOMBS)
def test_a_zip_bomb_is_refused_before_it_is_inflated(
    bombs: dict[str, Path], tmp_path: Path, name: str
) -> None:
    assert bombs[name].stat().st_size < 8 << 20
    result = measured(sys.executable, bombs[name], tmp_path)
    assert result["status"] == 2 and str(bombs[name]) in result["err"], result
    assert result["rss_kb"] < RSS_BOUND_KB, result  # before the cap: 1 GB for the many entries
    assert not (tmp_path / "run.jsonl").exists()


@pytest.mark.parametrize("name", BOMBS)
def test_a_zip_bomb_never_reaches_inspects_reader(
    bombs: dict[str, Path], tmp_path: Path, name: str
) -> None:
    result = measured(inspect_python(), bombs[name], tmp_path)
    assert result["status"] == 2 and str(bombs[name]) in result["err"], result
    assert result["rss_kb"] < RSS_BOUND_KB, result


def test_hostile_logs_through_inspects_reader(tmp_path: Path) -> None:
    """The same refusals with ``inspect_ai`` installed: Inspect's errors are its own, so the plain
    reader is asked where it went wrong (the sample, the entry); the huge score imports as above."""
    logs = {name: make(tmp_path / name) for name, (make, _) in HOSTILE.items()}
    logs["score.json"] = json_log(
        tmp_path / "score.json", [sample(scores={"match": {"value": 10**400}})]
    )
    code = ("import contextlib, io, json, sys\nfrom pytest_echo_bench.cli.main import main\n"
            "for log in sys.argv[1:]:\n    err = io.StringIO()\n"
            "    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):\n"
            "        status = main(['import', log, '-o', log + '.jsonl'])\n"
            "    print(json.dumps([log, status, err.getvalue()]))\n")
    done = subprocess.run(
        [str(inspect_python()), "-c", code, *map(str, logs.values())],
        capture_output=True,
        text=True,
        timeout=300,
        env=hermetic(tmp_path, PYTHONPATH=str(ROOT)),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    answers = {
        Path(log).name: (status, err)
        for log, status, err in map(json.loads, done.stdout.splitlines())
    }
    for name, (_, said) in HOSTILE.items():
        status, err = answers[name]
        assert status == 2 and str(logs[name]) in err and all(s in err for s in said), (name, err)
    assert answers["score.json"][0] == 0, answers["score.json"]
    (row,) = read_rows(Path(f"{logs['score.json']}.jsonl"))[1]
    assert row["status"] == "wrong" and row["extra"]["inspect"]["value"] == str(10**400)


# -- any JSON where a score, an epoch or a nesting goes -------------------------------------------

LEAF = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**300, max_value=10**1000)
    | st.floats()
    | st.text(max_size=6)
)
VALUE = st.recursive(
    LEAF,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(VALUE, st.one_of(st.integers(-3, 2000), VALUE), st.integers(0, 700), st.booleans())
def test_any_score_epoch_or_nesting_gives_rows_or_a_line_naming_the_log(
    tmp_path_factory: pytest.TempPathFactory, score: Any, epoch: Any, depth: int, zipped: bool
) -> None:
    tmp = tmp_path_factory.mktemp("hostile")
    value = score
    for _ in range(depth):
        value = [value]
    s = sample(epoch=epoch, scores={"match": {"value": value, "answer": "42"}})
    log = eval_log(tmp / "a.eval", [s]) if zipped else json_log(tmp / "a.json", [s])
    status, err = run_import(log, tmp / "run.jsonl")
    assert status in (0, 2) and "internal error" not in err, err
    if status == 2:
        assert str(log) in err and err.count("\n") == 1, err
    else:
        (row,) = read_rows(tmp / "run.jsonl")[1]
        assert row["status"] in ("correct", "wrong", "unparseable")
        assert main(["report", str(tmp / "run.jsonl"), "--format", "json"]) == 0


def test_an_entry_is_inflated_a_chunk_at_a_time_and_stopped_at_the_cap(tmp_path: Path) -> None:
    """Declared sizes can lie (zipfile trusts them): the inflating read
    counts what it gets and stops."""
    from pytest_echo_bench.errors import StoreError
    from pytest_echo_bench.interop.inspect.bounds import inflate

    log = eval_log(tmp_path / "a.eval", [sample(input="x" * 5000)])
    with zipfile.ZipFile(log) as archive:
        info = archive.getinfo("samples/q1_epoch_1.json")
        assert len(inflate(archive, info, log, 10_000)[0]) == info.file_size
        with pytest.raises(
            StoreError,
            match=r"entry samples/q1_epoch_1.json inflates beyond .* in all, the most a log may "
            r"hold \(its declared",
        ):
            inflate(archive, info, log, 1000)


CASE = st.tuples(VALUE, st.one_of(st.integers(-3, 2000), VALUE), st.integers(0, 300), st.booleans())


@settings(max_examples=2, deadline=None, derandomize=True, database=None)
@given(st.lists(CASE, min_size=20, max_size=20))
def test_generated_logs_through_inspects_reader(tmp_path_factory: pytest.TempPathFactory,
                                                cases: list[tuple[Any, Any, int, bool]]) -> None:
    """The same property with ``inspect_ai`` installed: 20 generated
    logs per start of Inspect's venv."""
    tmp = tmp_path_factory.mktemp("inspect-hostile")
    logs = []
    for n, (score, epoch, depth, zipped) in enumerate(cases):
        value = score
        for _ in range(depth):
            value = [value]
        s = sample(epoch=epoch, scores={"match": {"value": value, "answer": "42"}})
        logs.append(
            eval_log(tmp / f"{n}.eval", [s]) if zipped else json_log(tmp / f"{n}.json", [s])
        )
    code = ("import contextlib, io, json, sys\nfrom pytest_echo_bench.cli.main import main\n"
            "for log in sys.argv[1:]:\n    err = io.StringIO()\n"
            "    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):\n"
            "        status = main(['import', log, '-o', log + '.jsonl'])\n"
            "    print(json.dumps([log, status, err.getvalue()]))\n")
    done = subprocess.run(
        [str(inspect_python()), "-c", code, *map(str, logs)],
        capture_output=True,
        text=True,
        timeout=300,
        env=hermetic(tmp, PYTHONPATH=str(ROOT)),
        cwd=tmp,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for log, status, err in map(json.loads, done.stdout.splitlines()):
        assert status in (0, 2) and "internal error" not in err, err
        if status == 2:
            assert log in err and err.count("\n") == 1, err
        else:
            (row,) = read_rows(Path(f"{log}.jsonl"))[1]
            assert row["status"] in ("correct", "wrong", "unparseable")
