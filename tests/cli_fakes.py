"""Helpers for the command provider's tests: executables that stand in
for a CLI or wrap the real one."""

from __future__ import annotations

import json
import os
import stat
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.providers.base import Request
from pytest_echo_bench.providers.command import MAX_OUTPUT_BYTES, PRESETS, CommandProvider

REAL_CLAUDE = Path(__file__).resolve().parents[1] / "node_modules" / ".bin" / "claude"
NOT_INSTALLED = "the real claude CLI is not installed here: run `npm ci` in the project (CI does)"

# Prints what the prompt (a JSON object) tells it to: {"stdout": ..., "stderr": ..., "rc": ...}.
SCRIPTED = '''\
#!__PYTHON__
import json, sys
said = json.loads(sys.stdin.read())
sys.stdout.write(said.get("stdout", ""))
sys.stderr.write(said.get("stderr", ""))
sys.exit(said.get("rc", 0))
'''.replace("__PYTHON__", sys.executable)  # not a pyenv shim: it adds PYENV_* to the environment


# Says, in hex, the bytes it was given: its argument (prompt: arg) or its stdin.
ECHOES_HEX = (
    "import os, sys\nsys.stdout.write((os.fsencode(sys.argv[1]) if len(sys.argv) > 1 else "
    "sys.stdin.buffer.read()).hex())\n"
)


def write_executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def python_cli(path: Path, body: str) -> Path:
    """An executable Python script at ``path`` (run by this interpreter) whose code is ``body``."""
    return write_executable(path, f"#!{sys.executable}\n{body}")


def plain_provider(
    binary: Path, *, prompt: str = "stdin", max_output_bytes: int = MAX_OUTPUT_BYTES
) -> CommandProvider:
    """A plain ``argv: [binary]`` arm's provider, as ``build`` makes it (``prompt: arg``
    passes the prompt as argv[1])."""
    argv = (str(binary), "{prompt}") if prompt == "arg" else (str(binary),)
    return CommandProvider(binary.name, argv, prompt, (), False, max_output_bytes=max_output_bytes)


def dead(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")  # a zombie is dead; reaping it is its new parent's business


def running(marker: str) -> list[int]:
    """The host's processes whose command line holds ``marker``: a CLI in a PID namespace of its
    own knows only its pids there, so a test finds what it started by its command line."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes() and not dead(
                    int(entry.name)
                ):
                    found.append(int(entry.name))
            except OSError:
                continue  # gone meanwhile
    return found


def all_dead(pids: list[int], within_s: float = 5.0) -> bool:
    """Whether every pid is dead, waiting at most ``within_s`` for a killed one to go."""
    deadline = time.monotonic() + within_s
    while not all(dead(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    return all(dead(p) for p in pids)


def wrapper(bin_dir: Path, log_dir: Path, real: Path = REAL_CLAUDE) -> Path:
    """A ``claude`` that notes each launch (its argv, cwd and environment) in
    ``log_dir``, then execs ``real``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    return write_executable(bin_dir / "claude", f'''#!/bin/sh
echo "$$" >> "{log_dir}/launches"
pwd > "{log_dir}/cwd.$$"
ls -A > "{log_dir}/listing.$$"
env > "{log_dir}/env.$$"
printf '%s\\n' "$@" > "{log_dir}/argv.$$"
exec "{real}" "$@"
''')


def launches(log_dir: Path) -> list[str]:
    path = log_dir / "launches"
    return path.read_text().split() if path.exists() else []


def seen(log_dir: Path, what: str) -> str:
    """What the only launch recorded as ``what`` (cwd, listing, env, argv)."""
    (pid,) = launches(log_dir)
    return (log_dir / f"{what}.{pid}").read_text()


def claude_provider(binary: Path, *, keep_home: bool = False, env: tuple[str, ...] | None = None,
                    model: str = "sonnet") -> CommandProvider:
    """The claude preset's provider, as ``build`` makes it, running ``binary``."""
    preset = PRESETS["claude"]
    argv = (str(binary), *(a.replace("{model}", model) for a in preset.argv[1:]))
    return CommandProvider(
        binary.name,
        argv,
        "stdin",
        preset.env if env is None else env,
        keep_home,
        preset.fixed_env,
        preset.reader,
    )


def request(prompt: str) -> Request:
    return Request(Example("q0", prompt, "4"), "claude", prompt, timeout_s=60)


def scripted(stdout: str = "", rc: int = 0, stderr: str = "") -> str:
    """The prompt that makes ``SCRIPTED`` print ``stdout`` and exit with ``rc``."""
    return json.dumps({"stdout": stdout, "stderr": stderr, "rc": rc})


def result(
    text: str | None,
    *,
    is_error: bool = False,
    subtype: str = "success",
    status: int | None = None,
    usage: dict[str, Any] | None = None,
) -> str:
    """The CLI's ``--output-format json`` result object (2.1.332's fields
    that we read, and some we do not)."""
    data: dict[str, Any] = {
        "type": "result",
        "subtype": subtype,
        "is_error": is_error,
        "api_error_status": status,
        "duration_ms": 411,
        "num_turns": 1,
        "session_id": "e5560a60",
        "total_cost_usd": 0.000048,
        "usage": usage or {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0},
    }
    if text is not None:
        data["result"] = text
    return json.dumps(data) + "\n"


class LocalAPI:
    """An Anthropic Messages endpoint on 127.0.0.1 that answers every call with one fixed reply.

    The real CLI pointed at it (ANTHROPIC_BASE_URL, with a made-up key it never sends anywhere
    else) prints its own texts for the API's errors: what a logged-in CLI would say.
    """

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status, self.body, self.calls = status, body, 0
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> LocalAPI:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - the stdlib's naming
                self.rfile.read(int(self.headers.get("content-length") or 0))
                api.calls += 1
                data = json.dumps(api.body).encode()
                self.send_response(api.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def api_error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def api_message(text: str) -> dict[str, Any]:
    return {
        "id": "msg_local",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 11, "output_tokens": 1},
    }
