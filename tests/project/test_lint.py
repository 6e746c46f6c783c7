"""The code passes ruff with the project's own settings (pyproject.toml: lines at most 100
characters, and the rule set it selects): the package, the tests, the benchmarks and conftest.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ("pytest_echo_bench", "tests", "benchmarks", "conftest.py")


def _ruff() -> str:
    """The ruff binary the test extra installs (its Python package finds it), else one on PATH."""
    try:
        from ruff.__main__ import find_ruff_bin
    except ImportError:
        found = shutil.which("ruff")
        if found is None:
            pytest.skip("ruff is not installed (pip install -e '.[test]' installs it)")
        return found
    return str(find_ruff_bin())


def test_ruff_finds_nothing() -> None:
    proc = subprocess.run(
        [_ruff(), "check", "--no-cache", "--output-format", "concise", *CHECKED],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, f"ruff check found:\n{proc.stdout}{proc.stderr}"
