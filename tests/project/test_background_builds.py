"""``background_builds``: a build started beside the tests is waited for, never
run twice, never used half made.

Stand-in builds in a checkout of their own (``.ci/NAME`` scripts that take their time and write
their stamp last, as ``.ci/litellm`` and ``.ci/inspect`` do), run as real background processes.
"""

from __future__ import annotations

import textwrap
import time
from dataclasses import replace
from pathlib import Path

import background_builds
import first_time
import pytest
from background_builds import STARTED, Background, Build, covers, locked, wanted
from llama_server import build_or_wait
from processes import wait_for

ROOT = background_builds.ROOT

# Like the real scripts: the work first, the stamp last; each run counted, its helper's pid kept.
SCRIPT = textwrap.dedent("""\
    set -eu
    cd "$(dirname "$0")/.."
    echo run >> runs
    sleep 60 & echo $! > helper
    sleep {seconds}
    mkdir -p .venv-x && echo done > .venv-x/.installed
    kill "$(cat helper)"
""")
FAILS = "echo broken >&2\nexit 3\n"
FAILS_COUNTED = 'cd "$(dirname "$0")/.."\necho run >> runs\n' + FAILS


def stand_in(root: Path, seconds: float = 0, script: str = SCRIPT) -> Build:
    (root / ".ci").mkdir(parents=True, exist_ok=True)
    (root / ".ci" / "x").write_text(script.replace("{seconds}", str(seconds)), encoding="utf-8")
    return Build("x", ".venv-x", "ECHO_BENCH_X_FOR_THIS_TEST", ("tests/test_x.py",), root)


def runs(root: Path) -> int:
    path = root / "runs"
    return len(path.read_text(encoding="utf-8").split()) if path.exists() else 0


def alive(pid: int) -> bool:
    try:
        return (
            Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()[0]
            != "Z"
        )
    except FileNotFoundError:
        return False


def test_a_test_that_needs_a_build_in_progress_waits_for_it_and_does_not_build_again(
    tmp_path: Path,
) -> None:
    build = stand_in(tmp_path, seconds=1.0)
    background = Background()
    background.start([build])
    wait_for(lambda: runs(tmp_path) == 1, seconds=30)  # under way, its lock held
    started = time.monotonic()
    assert locked(build) is None  # what a test's install does: wait on the lock, find the stamp
    assert build.stamp.is_file() and time.monotonic() - started > 0.3
    assert runs(tmp_path) == 1
    [line] = background.finish()
    assert line.startswith("background build of .venv-x/: built in "), line


def test_a_build_the_session_did_not_wait_for_is_stopped_whole_and_left_unstamped(
    tmp_path: Path,
) -> None:
    build = stand_in(tmp_path, seconds=60)
    background = Background()
    background.start([build])
    wait_for(
        lambda: (tmp_path / "helper").exists() and bool((tmp_path / "helper").read_text().strip()),
        seconds=30,
    )
    helper = int((tmp_path / "helper").read_text())
    [line] = background.finish()
    assert "the session ended first" in line
    wait_for(lambda: not alive(helper), seconds=10)  # the script's own children went with it
    assert not build.stamp.is_file()
    assert wanted(["tests"], tmp_path, [build]) == [build]  # so the next session builds it again


def test_a_failed_background_build_says_why_and_the_test_builds_it_itself(tmp_path: Path) -> None:
    build = stand_in(tmp_path, script=FAILS)
    background = Background()
    background.start([build])
    wait_for(lambda: all(run.proc.poll() is not None for run in background.running), seconds=30)
    [line] = background.finish()
    assert "bash .ci/x failed with status 3" in line, line
    done = locked(build)  # no stamp: the test's own install runs it, and sees the error itself
    assert done is not None and done.returncode == 3 and "broken" in done.stderr


def test_a_failed_build_keeps_what_it_said_until_it_runs_again(tmp_path: Path) -> None:
    build = stand_in(tmp_path, script=FAILS)
    done = locked(build)
    assert done is not None and done.returncode == 3
    assert "broken" in build.log.read_text(encoding="utf-8")
    stand_in(tmp_path)  # mended
    done = locked(build)
    assert done is not None and done.returncode == 0 and not build.log.exists()


def test_the_tests_of_a_session_whose_background_build_failed_fail_at_once_with_its_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build of many minutes that failed is not run again by each test that needs it."""
    build = stand_in(tmp_path, script=FAILS_COUNTED)
    background = Background()
    background.start([build])
    monkeypatch.setenv(STARTED, build.name)  # as the session's controller says
    wait_for(lambda: all(run.proc.poll() is not None for run in background.running), seconds=30)
    for _ in range(2):
        with pytest.raises(pytest.fail.Exception, match="failed; its output ends:\nbroken"):
            build_or_wait(build)
    assert runs(tmp_path) == 1
    background.finish()


def test_a_test_waits_for_the_background_build_no_longer_than_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build = stand_in(tmp_path, seconds=60)
    background = Background()
    background.start([build])
    monkeypatch.setenv(STARTED, build.name)
    wait_for(lambda: runs(tmp_path) == 1, seconds=30)  # under way, its lock held
    with pytest.raises(pytest.fail.Exception, match="bash .ci/x was still running after 1 s"):
        build_or_wait(replace(build, timeout_s=1.0))
    [line] = background.finish()
    assert "the session ended first" in line


@pytest.mark.parametrize("ci", [None, "true"])
@pytest.mark.parametrize("failed_in_background", [False, True])
def test_without_a_compiler_the_tests_say_what_to_install_and_build_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ci: str | None, failed_in_background: bool
) -> None:
    """A skip on a laptop without one, a failure on CI (whose .ci/run installs them); so too
    when the session's background build already failed for want of one."""
    build = stand_in(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    monkeypatch.delenv(STARTED, raising=False)
    if failed_in_background:
        monkeypatch.setenv(STARTED, build.name)
        build.log.write_text("CMake Error: CMAKE_C_COMPILER not set\n", encoding="utf-8")
    monkeypatch.setattr(first_time, "_config", [])  # said on no terminal here
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    outcome = pytest.skip.Exception if ci is None else pytest.fail.Exception
    with pytest.raises(outcome, match=r"no cc or c\+\+\. Install them .*build-essential cmake"):
        build_or_wait(build)
    assert runs(tmp_path) == 0 and not build.stamp.exists()


@pytest.mark.parametrize(("args", "reached"), [
    (["tests"], True), (["."], True), (["tests/ops"], False), (["tests/test_x.py"], True),
    (["tests/test_x.py::test_one[a]"], True), (["tests/store", "tests/test_x.py"], True),
    (["tests/store"], False), (["tests/test_x_other.py"], False), (["tests/test_x.py/.."], True),
])
def test_a_session_builds_only_for_the_tests_its_paths_reach(
    tmp_path: Path, args: list[str], reached: bool
) -> None:
    build = Build("x", ".venv-x", "ECHO_BENCH_X_FOR_THIS_TEST", ("tests/test_x.py",), tmp_path)
    assert covers(args, tmp_path, tmp_path / "tests" / "test_x.py") == reached
    assert wanted(args, tmp_path, [build]) == ([build] if reached else [])


def test_nothing_is_built_that_is_built_already_or_given_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build = Build("x", ".venv-x", "ECHO_BENCH_X_FOR_THIS_TEST", ("tests/test_x.py",), tmp_path)
    assert wanted([str(tmp_path)], ROOT, [build]) == [build]  # an absolute path, from anywhere
    monkeypatch.setenv("ECHO_BENCH_X_FOR_THIS_TEST", "/elsewhere/bin/x")
    assert wanted(["tests"], tmp_path, [build]) == []
    monkeypatch.delenv("ECHO_BENCH_X_FOR_THIS_TEST")
    (tmp_path / ".venv-x").mkdir()
    # a directory without its stamp is not a build
    assert wanted(["tests"], tmp_path, [build]) == [build]
    (tmp_path / ".venv-x" / ".installed").write_text("")
    assert wanted(["tests"], tmp_path, [build]) == []


def test_the_real_builds_are_found_where_the_tests_look() -> None:
    for build in background_builds.BUILDS.values():
        assert build.script.is_file() and all((ROOT / test).is_file() for test in build.tests)
        # the stamp the tests trust
        assert 'stamp="$venv/.installed"' in build.script.read_text(encoding="utf-8")
