"""The one-time virtual environments, built beside the tests from the start
of the session that needs them.

Built when a test first needed it, ``.venv-inspect`` (1-3 minutes), ``.venv-litellm`` (about
100 s) or ``.venv-llama`` (llama.cpp compiled: 7 CPU-minutes) held an xdist worker, mid-run,
until it was done. Here the controller (or a serial run)
starts each missing one as the session begins, when the session's paths hold a test that needs it,
and the tests run meanwhile; a test that needs it takes the same file lock (``locked``) and waits
only for what is left. Both builds write their ``.installed`` stamp last, and a test trusts the
stamp, never a half-made directory: a build stopped at the end of a session that ended first is
redone from scratch the next time.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from filelock import FileLock

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TIMEOUT_S = 900.0  # a build from PyPI here: 100 s (LiteLLM) and 1-3 minutes (Inspect)
# llama.cpp compiled from source: 7 CPU-minutes, 11-14 minutes when the cores are shared (load 4-8);
# .ci/llama bounds its compile at 50 minutes
LLAMA_TIMEOUT_S = 3600.0
# The builds this session started in the background, set by the controller before its workers
# start (they inherit it): a build that failed there is not run again by each test that needs it.
STARTED = "ECHO_BENCH_BACKGROUND_BUILDS"


@dataclass(frozen=True)
class Build:
    name: str  # a first_time.BUILDS key
    venv: str  # the directory it makes in the checkout, with its ``.installed`` stamp
    variable: str  # set, the tests use another installation: nothing is built
    tests: tuple[str, ...]  # the test files that need it
    root: Path = ROOT  # the checkout: its .ci/NAME script builds ROOT/VENV
    timeout_s: float = TIMEOUT_S  # how long its script may run, and a test wait for it

    @property
    def stamp(self) -> Path:
        return self.root / self.venv / ".installed"

    @property
    def lock(self) -> Path:
        return self.root / f"{self.venv}.lock"

    @property
    def log(self) -> Path:
        """What its script said the last time it failed (removed when it runs again)."""
        return self.root / f"{self.venv}.log"

    @property
    def script(self) -> Path:
        return self.root / ".ci" / self.name


BUILDS = {
    "litellm": Build(
        "litellm", ".venv-litellm", "ECHO_BENCH_LITELLM", ("tests/providers/test_litellm_proxy.py",)
    ),
    "inspect": Build(
        "inspect", ".venv-inspect", "ECHO_BENCH_INSPECT_PYTHON", ("tests/interop/test_inspect.py",)
    ),
    "llama": Build(
        "llama", ".venv-llama", "ECHO_BENCH_LLAMA_VENV", ("tests/providers/test_llama.py",),
        timeout_s=LLAMA_TIMEOUT_S,
    ),
}


def locked(build: Build) -> subprocess.CompletedProcess[str] | None:
    """Run the build's script under its lock unless its stamp is there (then None):
    every builder goes through here. A failure's output is kept in ``build.log``."""
    with FileLock(str(build.lock), timeout=build.timeout_s):
        if build.stamp.is_file():
            return None
        build.log.unlink(missing_ok=True)
        done = subprocess.run(
            ["bash", str(build.script)], capture_output=True, text=True, timeout=build.timeout_s
        )
        if done.returncode != 0:
            build.log.write_text(done.stdout + done.stderr, encoding="utf-8")
        return done


def covers(args: list[str], base: Path, test: Path) -> bool:
    """Whether pytest's ``args`` (paths or node ids, relative to
    ``base``) reach the file ``test``."""
    for arg in args:
        path = (base / arg.split("::", 1)[0]).resolve()
        if path == test or path in test.parents:
            return True
    return False


def wanted(args: list[str], base: Path, builds: Iterable[Build] = BUILDS.values()) -> list[Build]:
    """The builds a session of ``args`` needs that are missing, and not given by their variable."""
    return [b for b in builds
            if b.variable not in os.environ and not b.stamp.is_file()
            and any(covers(args, base, b.root / test) for test in b.tests)]


@dataclass
class Running:
    build: Build
    proc: subprocess.Popen[bytes]
    output: IO[bytes]
    started: float


class Background:
    """The builds one session started (controller only): started in ``start``,
    reported or stopped in ``finish``."""

    def __init__(self) -> None:
        self.running: list[Running] = []

    def start(self, builds: list[Build]) -> list[str]:
        lines = []
        for build in builds:
            output = tempfile.TemporaryFile()
            code = (f"import sys; sys.path.insert(0, {str(HERE)!r}); import background_builds; "
                    f"background_builds.main({build.name!r}, {build.venv!r}, {str(build.root)!r}, "
                    f"{build.timeout_s!r})")
            # A session of its own: stopping it stops the script and its pip with it.
            proc = subprocess.Popen(
                [sys.executable, "-c", code],
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            self.running.append(Running(build, proc, output, time.monotonic()))
            lines.append(
                f"building in the background, beside the tests: `bash .ci/{build.name}` "
                f"({build.venv}/)"
            )
        return lines

    def finish(self) -> list[str]:
        """What became of each build; one still running is stopped (its stamp
        unwritten, it is redone next time)."""
        lines = []
        for run in self.running:
            # built: what is left of it (its last line) takes a moment
            if run.build.stamp.is_file():
                with contextlib.suppress(subprocess.TimeoutExpired):
                    run.proc.wait(timeout=10)
            if run.proc.poll() is None:
                os.killpg(run.proc.pid, signal.SIGKILL)
                run.proc.wait(timeout=30)
                lines.append(
                    f"stopped the background build of {run.build.venv}/: the session ended first; "
                    "the next run builds it again"
                )
            else:
                run.output.seek(0)
                said = run.output.read().decode(errors="replace").strip().splitlines()
                lines.append(
                    f"background build of {run.build.venv}/: {said[-1] if said else 'no output'}"
                )
            run.output.close()
        self.running.clear()
        return lines


def main(name: str, venv: str, root: str, timeout_s: float = TIMEOUT_S) -> None:
    """In the background process: build ``name`` under its lock, and
    say how it went on the last line."""
    start = time.monotonic()
    done = locked(Build(name, venv, "", (), Path(root), timeout_s))
    if done is None:
        print("already built (by a test, or another session)")
    elif done.returncode != 0:
        print(done.stderr[-3000:])
        print(
            f"bash .ci/{name} failed with status {done.returncode} after "
            f"{time.monotonic() - start:.0f} s"
        )
        sys.exit(1)
    else:
        print(f"built in {time.monotonic() - start:.0f} s")
