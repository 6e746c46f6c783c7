"""Completions that attack the grader: forged verdicts, survivors,
run-wide limits, the filesystem view."""

from __future__ import annotations

import secrets
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.suites import humaneval, sandbox
from pytest_echo_bench.suites.humaneval import score
from pytest_echo_bench.suites.sandbox_launch import bwrap_path

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the sandbox is tested on Linux"
)

PROJECT = Path(__file__).resolve().parents[2]
HAS_BWRAP = bwrap_path() is not None
# The same attacks with bubblewrap, and as on machines without it (and without cgroups).
MODES = [
    pytest.param(
        {},
        id="bwrap",
        marks=pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap is not installed"),
    ),
    pytest.param({"bwrap": False}, id="no-bwrap"),
    pytest.param({"bwrap": False, "cgroups": False}, id="no-bwrap-no-cgroups"),
]


def _task() -> Example:
    prompt = 'def f():\n    """Return 1."""\n'
    return Example(
        "t/0",
        prompt,
        "    return 1\n",
        None,
        {
            "prompt": prompt,
            "canonical_solution": "    return 1\n",
            "test": "def check(candidate):\n    assert candidate() == 1\n",
            "entry_point": "f",
        },
    )


def _score(answer: str, bwrap: bool = True, cgroups: bool = True, **options: Any) -> Any:
    """The scorer's verdict; ``bwrap``/``cgroups`` False run it as on a machine without them."""
    limits_from = humaneval.limits_from
    with mock.patch.object(
        humaneval, "limits_from", lambda o: replace(limits_from(o), bwrap=bwrap, cgroups=cgroups)
    ):
        return score(answer, _task(), {"timeout_s": 5, **options})


def _fenced(code: str) -> str:
    return f"```python\n{code}```\n"


def _live(uid: int | None = None, marker: str | None = None) -> list[int]:
    """Processes (zombies aside) of ``uid``, or whose command line contains ``marker``."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "\nState:\tZ" in status:
            continue  # already dead, waiting for init to reap it
        if (uid is not None and f"\nUid:\t{uid}\t" in status) or (
            marker is not None and marker in cmdline
        ):
            found.append(int(entry.name))
    return found


# ---- forged verdicts: ending the process early is never "passed" -----------------------------

FORGERIES = {
    "SystemExit(0) in the function": _fenced("def f(*a, **k):\n    raise SystemExit(0)\n"),
    "exit() at module level": _fenced("exit()\n\ndef f():\n    return 0\n"),
    "sys.exit(0) at module level": _fenced("import sys\nsys.exit(0)\n\ndef f():\n    return 0\n"),
    "a syntax error": _fenced("def f(:\n    return 1\n"),
    "os._exit(0) in the body": "    import os\n    os._exit(0)\n",
    "KeyboardInterrupt": "    raise KeyboardInterrupt\n",
    "SIGKILL to itself": "    import os, signal\n    os.kill(os.getpid(), signal.SIGKILL)\n",
    "os._exit(0) from a thread": (
        "    import os, threading, time\n"
        "    threading.Thread(target=os._exit, args=(0,)).start()\n    time.sleep(2)\n"
    ),
    "atexit after an error": _fenced(
        "import atexit, os\natexit.register(os._exit, 0)\n\ndef f():\n    raise ValueError\n"
    ),
    # The tests' own `def check` drops this object, whose __del__ would swap in a check that passes.
    "check replaced from __del__": _fenced(
        "class Swap:\n    def __del__(self):\n        globals()['check'] = lambda c: None\n\n"
        "check = Swap()\n\ndef f():\n    return 0\n"
    ),
    "fake verdicts on every fd": (
        "    import os\n    for fd in range(1 << 16):\n        try:\n            "
        "os.write(fd, b'started {}\\npassed\\n')\n"
        "        except OSError:\n            pass\n    os._exit(0)\n"
    ),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("answer", FORGERIES.values(), ids=FORGERIES.keys())
def test_ending_early_is_wrong_never_correct_nor_a_sandbox_error(
    answer: str, mode: dict[str, Any]
) -> None:
    verdict = _score(answer, **mode)
    assert verdict.status == "wrong", (verdict.status, verdict.detail)
    # the detail comes from the harness, not from what the code printed
    assert verdict.detail != "passed"


# ---- nothing outlives the item ----------------------------------------------------------------

SURVIVOR = """\
    import os, time
    try:
        import ctypes
        ctypes.CDLL(None).prctl(1, 0)  # PR_SET_PDEATHSIG 0
    except BaseException:
        pass
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv('/bin/sleep', ['sleep', '{marker}'])
        os._exit(0)
    time.sleep(0.3)
    return 1
"""


@pytest.mark.parametrize("mode", MODES)
def test_a_process_that_detaches_is_gone_when_the_item_is_graded(mode: dict[str, Any]) -> None:
    # sleep's argument, unique to this test
    marker = f"{secrets.randbelow(10**6) + 100}.{secrets.randbelow(10**6)}"
    verdict = _score(SURVIVOR.format(marker=marker), **mode)
    assert verdict.passed, verdict.detail  # it did run: the sleeper was started
    uid = verdict.extra["sandbox"]["uid"]
    assert _live(marker=marker) == []
    if uid != "unchanged":
        assert _live(uid=uid) == []


# ---- limits for the whole run -----------------------------------------------------------------

MEMORY_HOG = """\
    import os, select
    r, w = os.pipe()
    for _ in range(7):
        if os.fork() == 0:
            block = b'x' * (60 << 20)
            os.write(w, b'1')
            select.select([], [], [], 5)
            os._exit(0)
    block = b'x' * (60 << 20)
    got = b''
    while len(got) < 7 and select.select([r], [], [], 3)[0]:
        got += os.read(r, 8)
    return 1 if len(got) == 7 else 0
"""


def test_memory_of_all_processes_together_is_bounded() -> None:
    verdict = _score(MEMORY_HOG, memory_mb=100, processes=8, timeout_s=10)
    sandbox_row = verdict.extra["sandbox"]
    if sandbox_row["bounded"]["memory"] != "all processes":
        pytest.skip("no memory cgroup here: memory is bounded per process only, as the row says")
    assert verdict.status == "wrong" and verdict.detail.startswith(
        "memory limit (100 MB, all processes together)"
    ), verdict.detail
    assert sandbox_row["memory_peak_mb"] <= 100


@pytest.mark.parametrize("mode", MODES[:2])
def test_the_process_limit_counts_the_code_alone(mode: dict[str, Any]) -> None:
    # Building the root without bubblewrap runs mount helpers: never
    # beside the code in the pids group.
    body = (
        "    import subprocess\n    return 1 if subprocess.run(['/bin/true']).returncode == 0 "
        "else 0\n"
    )
    alone = _score(body, processes=1, **mode)
    assert alone.status == "wrong" and "Resource temporarily unavailable" in alone.detail, (
        alone.detail
    )
    one_child = _score(body, processes=2, **mode)
    assert one_child.passed, one_child.detail


def test_disk_written_in_total_is_bounded() -> None:
    # 60 files just under the 1 MB file-size limit each: 60 MB if only each file were bounded.
    body = (
        "    for i in range(60):\n        with open(f'f{i}' if i % 2 else f'/tmp/f{i}', "
        "'wb') as fh:\n"
        "            fh.write(b'x' * ((1 << 20) - 1))\n    return 1\n"
    )
    verdict = _score(body, file_size_mb=1)
    if verdict.extra["sandbox"]["bounded"]["disk"] != "private /tmp in total":
        pytest.skip("without bubblewrap the files land on the host, bounded per file only")
    assert verdict.status == "wrong" and "No space left on device" in verdict.detail, verdict.detail


@pytest.mark.parametrize("mode", MODES)
def test_files_left_in_world_writable_directories_are_gone_afterwards(mode: dict[str, Any]) -> None:
    name = f"echo-bench-leftover-{secrets.token_hex(4)}"
    body = (
        "    for d in ('/tmp', '/var/tmp', '/dev/shm'):\n        try:\n            open(d + "
        f"'/{name}', 'w').write('x')\n"
    )
    body += "        except OSError:\n            pass\n    return 1\n"
    verdict = _score(body, **mode)
    assert verdict.passed, verdict.detail
    if (
        verdict.extra["sandbox"]["uid"] == "unchanged"
        and not verdict.extra["sandbox"]["private_tmp"]
    ):
        pytest.skip("without bubblewrap or a uid of its own, files it leaves are the user's")
    assert [d for d in ("/tmp", "/var/tmp", "/dev/shm") if Path(d, name).exists()] == []


@pytest.mark.parametrize("mode", MODES[:2])
def test_system_v_shared_memory_does_not_outlive_the_run(mode: dict[str, Any]) -> None:
    body = (
        "    import subprocess\n    made = subprocess.run(['ipcmk', '-M', '1048576'], "
        "capture_output=True, text=True)\n"
        "    assert made.returncode == 0, made.stderr\n    return 1\n"
    )
    before = _host_segments()
    verdict = _score(body, **mode)
    assert verdict.passed, verdict.detail  # the segment was made, in the run's own IPC namespace
    assert verdict.extra["sandbox"]["ipc_namespace"] is True
    assert _host_segments() <= before


def _host_segments() -> set[str]:
    return {
        line.split()[1]
        for line in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
        if line.strip()
    }


# ---- a fresh filesystem view ------------------------------------------------------------------

@pytest.fixture
def host_socket() -> Iterator[Path]:
    path = Path(f"/tmp/echo-bench-host-{secrets.token_hex(4)}.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(1)
    yield path
    server.close()
    path.unlink(missing_ok=True)


@pytest.mark.parametrize("mode", [MODES[0], pytest.param({"bwrap": False}, id="unshare")])
def test_host_sockets_proc_home_and_project_are_out_of_sight(
    host_socket: Path, mode: dict[str, Any]
) -> None:
    if not mode and not HAS_BWRAP or mode and not sandbox.sandbox_launch.unshare_root_prefix():
        pytest.skip("the fresh filesystem view needs bubblewrap or a mount namespace")
    body = (
        f"    import os, socket\n    seen = []\n    s = socket.socket(socket.AF_UNIX)\n"
        f"    try:\n        s.connect({str(host_socket)!r})\n        "
        "seen.append('socket')\n    except OSError:\n        pass\n"
        "    for path in ['/proc/1', '/proc/self', '/etc/passwd', '/run', '/var', '/home', "
        f"{str(PROJECT / 'pyproject.toml')!r}]:\n"
        "        if os.path.exists(path):\n            seen.append(path)\n"
        "    seen += [p for p in os.listdir('/root') if p != '.pyenv'] if "
        "os.path.isdir('/root') else []\n"
        "    for path in ['/usr/x', '/x', '/root/x']:\n        try:\n            open(path, "
        "'w')\n            seen.append(path)\n"
        "        except OSError:\n            pass\n"
        "    assert not seen, seen\n    return 1\n"
    )
    verdict = _score(body, **mode)
    assert verdict.passed, verdict.detail
    assert verdict.extra["sandbox"]["filesystem"] == "minimal read-only root"


def test_without_bwrap_or_cgroups_the_row_records_what_held() -> None:
    verdict = _score("    return 1\n", bwrap=False, cgroups=False)
    row = verdict.extra["sandbox"]
    assert verdict.passed, verdict.detail
    private = bool(sandbox.sandbox_launch.unshare_root_prefix())  # unshare --mount
    assert row["bwrap"] is False and row["filesystem"] == (
        "minimal read-only root" if private else "host"
    )
    assert row["private_tmp"] == (["/tmp"] if private else [])
    disk = "private /tmp in total" if private else "per file"
    assert row["bounded"] == {
        "memory": "per process",
        "processes": row["bounded"]["processes"],
        "disk": disk,
    }
    assert row["bounded"]["processes"] in ("per uid", "per user")


def test_on_the_hosts_filesystem_the_row_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    # As where no mount namespace can be made: unshare without --mount.
    monkeypatch.setattr(sandbox.sandbox_launch, "unshare_root_prefix", lambda: [])
    row = _score("    return 1\n", bwrap=False).extra["sandbox"]
    assert (
        row["filesystem"] == "host"
        and row["private_tmp"] == []
        and row["bounded"]["disk"] == "per file"
    )


def test_a_sandbox_that_cannot_start_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    if not HAS_BWRAP:
        pytest.skip("needs bubblewrap to break")
    monkeypatch.setattr(
        sandbox.sandbox_launch,
        "bwrap_args",
        lambda size: ["--ro-bind", "/nonexistent-echo-bench", "/x"],
    )
    verdict = _score("    return 1\n")
    assert verdict.status == "error" and verdict.detail.startswith("error: sandbox did not start")


def test_a_genuine_pass_is_fast() -> None:
    t0 = time.perf_counter()
    verdict = _score("    return 1\n", timeout_s=60)
    # not the deadline: the slack is a loaded machine's start
    assert verdict.passed and time.perf_counter() - t0 < 20
