"""`echo-bench run` names the results file it adds after the specs'
benchmarks, as a plain run does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_echo_bench.cli.supervise import results_path


@pytest.fixture
def specs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / "one.yaml").write_text("benchmark: arith\narms: {}\n")
    # the run says what is wrong; the name is the stem
    (folder / "two.yml").write_text("benchmark: [not a name]\n")
    (folder / "notes.txt").write_text("benchmark: no\n")
    return folder


@pytest.mark.parametrize(("args", "name"), [
    (["specs/one.yaml", "-n", "2"], "arith"),
    (["specs/one.yaml::q1[a]"], "arith"),
    (["specs"], "arith+two"),
    # no spec named: pytest finds them, the file says it was supervised
    (["-k", "a"], "supervised"),
])
def test_the_added_results_file_is_named_after_the_benchmarks(
    specs: Path, args: list[str], name: str
) -> None:
    argv, path = results_path(["pytest", *args])
    assert argv[-2:] == ["--bench-out", str(path)]
    assert re.fullmatch(rf"\d{{8}}T\d{{6}}Z_{re.escape(name)}\.jsonl", path.name), path.name
    assert path.parent == Path("bench_results")
