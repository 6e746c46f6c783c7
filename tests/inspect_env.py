"""The real Inspect, in a virtual environment of its own (``.ci/inspect``; pins in
``inspect/requirements.txt``), built the first time a test needs it, as the LiteLLM
proxy's is; and running code there.

Its ~85 dependencies (its own openai SDK and pydantic among them) must not move the project's test
environment, and the project's environment must stay without ``inspect_ai``: that is the import's
path CI tests in process (the plain ``.json`` and zipfile readers). In this venv, with our package
on ``PYTHONPATH``, the same command reads logs through Inspect's own reader.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from first_time import built

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
VENV = ROOT / ".venv-inspect"
RUN_TIMEOUT_S = 240.0  # an eval here takes about 10 s; with both cores busy, several times that
NOT_INSTALLED = ("Inspect is not installed: run `bash .ci/inspect` (it makes .venv-inspect), "
                 "or point ECHO_BENCH_INSPECT_PYTHON at a python that has inspect_ai")


def inspect_python() -> Path:
    """The venv's python (built now if missing), or
    ``$ECHO_BENCH_INSPECT_PYTHON``; skip (fail on CI) without."""
    return built("inspect", VENV / "bin" / "python", NOT_INSTALLED)


def hermetic(tmp: Path, **extra: str) -> dict[str, str]:
    """The environment of a process of Inspect's: its data and config
    under ``tmp``, nothing of ours."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("INSPECT_", "OPENAI_", "PYTHON"))
    }
    env.update(
        {
            "HOME": str(tmp),
            "XDG_DATA_HOME": str(tmp / "data"),
            "XDG_CACHE_HOME": str(tmp / "cache"),
            "XDG_CONFIG_HOME": str(tmp / "config"),
            "NO_COLOR": "1",
            **extra,
        }
    )
    return env


def run(
    python: Path, args: list[str], env: dict[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(python), *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=RUN_TIMEOUT_S)
    return done


def check(done: subprocess.CompletedProcess[str], what: str) -> str:
    if done.returncode != 0:
        pytest.fail(
            f"{what} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}",
            pytrace=False,
        )
    return done.stdout


def inspect_json(python: Path, code: str, tmp: Path, *args: str) -> Any:
    """What ``code`` (run in Inspect's venv with ``args`` as sys.argv[1:])
    prints as its last line, as JSON."""
    return inspect_lines(python, code, tmp, *args)[-1]


def inspect_lines(python: Path, code: str, tmp: Path, *args: str) -> list[Any]:
    """Every line ``code`` prints that is JSON (one start of inspect_ai,
    seconds here, for several answers)."""
    done = run(python, ["-c", code, *args], hermetic(tmp), tmp)
    answers = []
    for line in check(done, "python in .venv-inspect").strip().splitlines():
        # a line of Inspect's own (a warning) is not an answer
        with contextlib.suppress(ValueError):
            answers.append(json.loads(line))
    return answers
