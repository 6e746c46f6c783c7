"""Fixtures that drive the plugin the way pytest drives itself: through ``pytester``."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai_server import FakeOpenAI

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def read_rows(path: Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """(meta, rows) of a results file; fails the test on any line that is not JSON."""
    lines = path.read_bytes().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    meta = records[0] if records and records[0].get("_meta") else None
    return meta, [r for r in records if not r.get("_meta")]


def make_spec(pytester: pytest.Pytester, body: str, name: str = "demo") -> Path:
    pytester.makefile(".yaml", **{name: textwrap.dedent(body)})
    return pytester.path / f"{name}.yaml"


def inline_items(n: int, target: str = "4") -> str:
    return "\n".join(f'    - {{id: q{i}, input: "2+2=? ({i})", target: "{target}"}}' for i in range(n))


def sim_spec(n: int = 6, arms: str = "  good: {provider: sim, accuracy: 1.0}\n  bad: {provider: sim, accuracy: 0.0}",
             extra: str = "", benchmark: str = "demo") -> str:
    return (f"benchmark: {benchmark}\ndataset:\n  loader: inline\n  items:\n{inline_items(n)}\n"
            f"scorer: exact\narms:\n{arms}\n{extra}")


class Sweep:
    """Runs a sweep in a pytester dir and returns (result, meta, rows)."""

    def __init__(self, pytester: pytest.Pytester) -> None:
        self.pytester = pytester
        self.out = pytester.path / "results.jsonl"

    def run(self, *args: str, subprocess: bool = False) -> tuple[pytest.RunResult, dict[str, Any] | None, list[dict[str, Any]]]:
        argv = ["-p", "no:cacheprovider", "-W", "ignore::pytest.PytestAssertRewriteWarning", *args]
        if not any(a.startswith("--bench-out") or a.startswith("--bench-resume") for a in args):
            argv += ["--bench-out", str(self.out)]
        runner = self.pytester.runpytest_subprocess if subprocess else self.pytester.runpytest
        result = runner(*argv)
        meta, rows = read_rows(self.out) if self.out.exists() else (None, [])
        return result, meta, rows


@pytest.fixture
def sweep(pytester: pytest.Pytester) -> Sweep:
    return Sweep(pytester)


@pytest.fixture
def openai_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server
