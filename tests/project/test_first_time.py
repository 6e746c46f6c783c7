"""The one-time builds are announced: in the header before the run, and on the terminal while
one runs, past pytest's output capture (a fresh clone otherwise sat at a few dots for minutes)."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import first_time
import pytest

HERE = Path(__file__).resolve().parents[1]


def test_a_build_says_so_on_the_terminal_while_it_runs(pytester: pytest.Pytester) -> None:
    """A real pytest process whose test builds something: its lines
    reach the terminal uncaptured."""
    pytester.makeconftest(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(HERE)!r})
        import first_time

        def pytest_configure(config):
            first_time.remember(config)
    """))
    pytester.makepyfile(test_build=textwrap.dedent("""
        import time
        import first_time

        def test_needs_a_build():
            with first_time.building("litellm"):
                print("captured, not shown")
                time.sleep(0.05)
    """))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "building once: `bash .ci/litellm` builds .venv-litellm/ (about 100 s, 760 MB)*",
            "built litellm in 0 s",
        ]
    )
    assert "captured, not shown" not in result.stdout.str()


def test_the_header_names_the_builds_a_checkout_lacks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(first_time, "NODE_MODULES", tmp_path / "node_modules")
    monkeypatch.setattr(first_time, "LITELLM_VENV", tmp_path / ".venv-litellm")
    monkeypatch.setattr(first_time, "INSPECT_VENV", tmp_path / ".venv-inspect")
    monkeypatch.setattr(first_time, "LLAMA_VENV", tmp_path / ".venv-llama")
    monkeypatch.delenv("ECHO_BENCH_LITELLM", raising=False)
    monkeypatch.delenv("ECHO_BENCH_INSPECT_PYTHON", raising=False)
    monkeypatch.delenv("ECHO_BENCH_LLAMA_VENV", raising=False)
    monkeypatch.setattr(first_time.shutil, "which", lambda name: "/usr/bin/npm")
    assert [line.split(" builds ")[0] for line in first_time.header()] == [
        "first run: `npm ci`", "first run: `bash .ci/litellm`", "first run: `bash .ci/inspect`",
        "first run: `bash .ci/llama`"]
    (tmp_path / "node_modules").mkdir()
    (tmp_path / ".venv-litellm" / "bin").mkdir(parents=True)
    (tmp_path / ".venv-litellm" / "bin" / "litellm").write_text("")
    assert len(first_time.header()) == 3  # a venv without its stamp (written last) is not built yet
    (tmp_path / ".venv-litellm" / ".installed").write_text("")
    (tmp_path / ".venv-inspect").mkdir()
    (tmp_path / ".venv-inspect" / ".installed").write_text("")
    (tmp_path / ".venv-llama").mkdir()
    (tmp_path / ".venv-llama" / ".installed").write_text("")
    assert first_time.header() == []


def test_the_builds_land_where_git_ignores_them() -> None:
    paths = ["node_modules/x", ".venv-litellm/bin/litellm", ".npm-ci.lock", ".venv-litellm.lock",
             ".venv-inspect/bin/python", ".venv-inspect.lock", ".venv-llama/bin/python",
             ".venv-llama.lock", ".venv-llama.log"]
    done = subprocess.run(
        ["git", "check-ignore", *paths], cwd=first_time.ROOT, capture_output=True, text=True
    )
    if done.returncode == 128:
        pytest.skip("not a git checkout")
    assert done.stdout.split() == paths
