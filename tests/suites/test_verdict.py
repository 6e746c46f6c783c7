"""The verdict across the process boundary: what crosses, the deadlines, and a sandbox that lies."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.suites.humaneval import score

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the sandbox is tested on Linux"
)

PROJECT = Path(__file__).resolve().parents[2]
CHECK_ONE = "def check(candidate):\n    assert candidate() == 1\n"


def _task(test: str = CHECK_ONE, prompt: str = 'def f():\n    """Return 1."""\n') -> Example:
    return Example(
        "t/0",
        prompt,
        "    return 1\n",
        None,
        {
            "prompt": prompt,
            "canonical_solution": "    return 1\n",
            "test": test,
            "entry_point": "f",
        },
    )


def _timed(answer: str, task: Example | None = None, **options: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    verdict = score(answer, task or _task(), {"timeout_s": 5, **options})
    return verdict, time.perf_counter() - t0


# ---- a sandbox that sends anything back -----------------------------------------------------

def _write_everywhere(payload: str) -> str:
    """A body that writes ``payload`` (a bytes expression) on every descriptor it holds, then waits.

    The sandbox keeps the parent's descriptor numbers, which in a long test session are well above
    64, and it has no ``/proc`` to list them: so every number up to 65,535 is tried."""
    return (
        f"    import os, struct, time\n    data = {payload}\n    for fd in range(3, 1 << "
        "16):\n        try:\n"
        "            os.write(fd, data)\n        except OSError:\n            pass\n    "
        "time.sleep(30)\n"
    )


HOSTILE_REPLIES = {
    "a frame of 4 GB announced": "b'\\xff\\xff\\xff\\xff'",
    "nesting 100,000 deep": "struct.pack('>I', 500001) + b'l\\x00\\x00\\x00\\x01' * 100000 + b'N'",
    "an unknown tag": "struct.pack('>I', 1) + b'X'",
    "a reply that is no answer": "struct.pack('>I', 1) + b'N'",
    "a set holding a list": "struct.pack('>I', 10) + b'S\\x00\\x00\\x00\\x01l\\x00\\x00\\x00\\x00'",
}


@pytest.mark.parametrize("payload", HOSTILE_REPLIES.values(), ids=HOSTILE_REPLIES.keys())
def test_malformed_replies_are_wrong_at_once(payload: str) -> None:
    verdict, elapsed = _timed(_write_everywhere(payload), timeout_s=60)
    assert verdict.status == "wrong" and "the sandbox sent" in verdict.detail, verdict.detail
    assert elapsed < 20  # decided on the bytes, not at the 60 s deadline nor the body's 30 s sleep


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("    return (i for i in range(1))\n", "not plain data: generator"),
        ("    x = []\n    x.append(x)\n    return x\n", "nested deeper than 64"),
        ("    return 'x' * (20 << 20)\n", "over the limit"),
        (
            "    class One(int):\n        def __eq__(self, other):\n            return "
            "True\n    return One(1)\n",
            "not plain data",
        ),
    ],
)
def test_a_value_that_is_not_plain_data_is_wrong_with_the_reason(body: str, reason: str) -> None:
    verdict, _ = _timed(body)
    assert verdict.status == "wrong" and reason in verdict.detail, verdict.detail


def test_nan_and_big_ints_cross_as_values() -> None:
    test = (
        "def check(candidate):\n    assert candidate(2 ** 5000)[0] == 2 ** 5001\n    assert "
        "candidate(0)[1] != candidate(0)[1]\n"
    )
    verdict, _ = _timed(
        "    return (x * 2, float('nan'))\n",
        _task(test, 'def f(x):\n    """Twice x, and NaN."""\n'),
    )
    assert verdict.passed, verdict.detail


# ---- deadlines -------------------------------------------------------------------------------

def test_a_slow_call_hits_the_per_call_timeout() -> None:
    verdict, elapsed = _timed(
        "    import time\n    time.sleep(30)\n", timeout_s=60, call_timeout_s=1
    )
    assert verdict.status == "wrong" and verdict.detail.startswith("a call timed out after 1s"), (
        verdict.detail
    )
    # the call's 1 s, not the 60 s deadline: the slack is a loaded machine's sandbox start
    assert elapsed < 20


def test_a_check_that_hangs_is_killed_at_the_one_deadline() -> None:
    test = "def check(candidate):\n    candidate()\n    while True:\n        pass\n"
    verdict, elapsed = _timed("    return 1\n", _task(test), timeout_s=2)
    assert verdict.status == "wrong" and verdict.detail == "timed out after 2s"
    assert elapsed < 15  # the check never ends by itself


def test_many_calls_share_one_deadline() -> None:
    test = "def check(candidate):\n    for _ in range(20):\n        candidate()\n"
    verdict, elapsed = _timed(
        "    import time\n    time.sleep(0.2)\n    return 1\n", _task(test), timeout_s=2
    )
    # 20 calls of 0.2 s would pass one by one
    assert verdict.detail == "timed out after 2s" and elapsed < 15


# ---- what the check sees ---------------------------------------------------------------------

def test_a_check_that_swallows_every_exception_still_cannot_pass_a_dead_sandbox() -> None:
    test = (
        "def check(candidate):\n    try:\n        candidate()\n    except "
        "BaseException:\n        pass\n"
    )
    assert _timed("    return 1\n", _task(test))[0].passed  # the check passes on an answer
    verdict, _ = _timed("    import os\n    os._exit(0)\n", _task(test))
    assert verdict.status == "wrong" and "ended" in verdict.detail, verdict.detail


def test_the_completions_exception_reaches_the_check_as_the_builtin_of_that_name() -> None:
    test = (
        "def check(candidate):\n    try:\n        candidate()\n    except ValueError as "
        "e:\n        assert str(e) == 'no'\n"
    )
    verdict, _ = _timed("    raise ValueError('no')\n", _task(test))
    assert verdict.passed, verdict.detail
    verdict, _ = _timed("    raise KeyError('no')\n", _task(test))
    assert verdict.status == "wrong" and verdict.detail.startswith("KeyError"), verdict.detail


def test_the_helpers_come_from_the_dataset_prompt_never_from_the_completion() -> None:
    prompt = 'def secret():\n    return 5\n\n\ndef f():\n    """Return secret()."""\n'
    task = _task("def check(candidate):\n    assert candidate() == secret()\n", prompt)
    assert _timed("    return secret()\n", task)[0].passed
    forged = "```python\ndef secret():\n    return 7\n\ndef f():\n    return 7\n```\n"
    verdict, _ = _timed(forged, task)
    assert verdict.status == "wrong", verdict.detail


def test_tests_that_pass_what_cannot_cross_are_an_error_not_a_wrong_answer() -> None:
    test = "def check(candidate):\n    assert candidate(object()) == 1\n"
    verdict, _ = _timed("    return 1\n", _task(test, 'def f(x):\n    """Return 1."""\n'))
    assert verdict.status == "error" and "cannot cross: not plain data: object" in verdict.detail, (
        verdict.detail
    )


def test_a_completion_that_defines_no_entry_point_is_wrong() -> None:
    verdict, _ = _timed("```python\ndef f():\n    return 1\n\ndel f\n```\n")
    assert verdict.status == "wrong" and "defines no function f()" in verdict.detail, verdict.detail


# ---- a virtualenv under /tmp keeps bubblewrap ------------------------------------------------

def test_a_virtualenv_under_tmp_still_gets_bubblewrap(tmp_path: Path) -> None:
    from pytest_echo_bench.suites.sandbox_launch import bwrap_path

    if bwrap_path() is None:
        pytest.skip("bubblewrap is not installed")
    assert str(tmp_path).startswith("/tmp/")
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60
    )
    tmp_path.chmod(0o755)
    script = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from pytest_echo_bench.suites.sandbox import Limits\n"
        "from pytest_echo_bench.suites.verdict import Task, run_check\n"
        "r = run_check('def f():\\n    return 1\\n', Task('', 'def check(c):\\n    assert "
        "c() == 1\\n', 'f'), Limits())\n"
        "print(r.status, r.isolation['bwrap'], r.isolation['filesystem'])\n"
    )
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", script, str(PROJECT)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.split() == ["passed", "True", "minimal", "read-only", "root"], done.stderr
