"""A sandboxed Python subprocess for untrusted code, and a verdict it has to earn.

``run_python(source, Limits(...))`` runs ``source`` as ``main.py`` under these layers (each one
recorded in ``SandboxResult.isolation``, since what the machine allows differs):

- the verdict: the child is "ok" only if the harness inside it (``sandbox_wrapper``) wrote this
  run's random token after the program's last statement returned; its exit status proves
  nothing, so ``sys.exit(0)``, ``os._exit(0)`` or any exception is a failure;
- bubblewrap (``sandbox_launch``): new PID, network, IPC, UTS and mount namespaces, a read-only
  root of ``/usr`` and the interpreter, no ``/proc``, and a private ``/tmp`` tmpfs whose size is
  ``file_size_mb`` in total; without it, ``unshare`` namespaces on the host's filesystem;
- cgroups (``sandbox_cgroup``): memory and process count of all the run's processes together,
  and a kill of every process the run left behind;
- user: when the parent is root, a fresh unprivileged uid per run;
- ``resource`` limits per process, the environment allow-list and a wall-clock timeout.

What is not defended is listed in docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pytest_echo_bench.suites import sandbox_cgroup, sandbox_launch
from pytest_echo_bench.suites.sandbox_wrapper import WRAPPER

# Where an unprivileged child could still write on the host's filesystem (no private /tmp).
WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
OUTPUT_TAIL = 64 * 1024
EXCEPTION_STATUS = 1  # the harness's exit status after printing the program's exception
VERDICT_MAX = 4096
# Fresh uids far above any account; the random pick keeps concurrent runs apart.
_UID_BASE, _UID_SPAN = 1_900_000_000, 100_000_000
# bubblewrap's own two processes (outside and as PID 1 inside) count against the pids group.
_BWRAP_PROCESSES = 2


@dataclass(frozen=True)
class Limits:
    """What one sandboxed run may use."""

    timeout_s: float = 10.0
    memory_mb: int = 1024
    file_size_mb: int = 16
    processes: int = 32
    open_files: int = 64
    network: bool = False  # True: skip every namespace (a test seam for machines without them)
    bwrap: bool = True  # False: run as on a machine without bubblewrap
    cgroups: bool = True  # False: run as on a machine where no cgroup can be made

    def rlimits(self) -> dict[str, int]:
        cpu = int(self.timeout_s) + 1  # wall clock decides first; CPU time backs it up
        return {"RLIMIT_CPU": cpu, "RLIMIT_AS": self.memory_mb << 20, "RLIMIT_FSIZE": self.file_size_mb << 20,
                "RLIMIT_NPROC": self.processes, "RLIMIT_NOFILE": self.open_files, "RLIMIT_CORE": 0}


@dataclass(frozen=True)
class SandboxResult:
    """How the child ended, the tail of what it printed, and how it was isolated."""

    status: str  # ok (the token came back) | failed | timeout | error (the sandbox itself could not start)
    returncode: int | None
    output: str
    seconds: float
    isolation: dict[str, Any] = field(default_factory=dict)
    output_bytes: int = 0
    output_full: bool = False  # the output reached the file-size limit (and was cut there)
    memory_killed: bool = False  # the memory cgroup's limit killed one of the run's processes

    @property
    def signal(self) -> str | None:
        """The signal that ended the child (``unshare`` and bubblewrap report it as 128 + n)."""
        code = self.returncode
        number = -code if code is not None and code < 0 else code - 128 if code is not None and 128 < code < 160 else None
        if number is None:
            return None
        with contextlib.suppress(ValueError):
            return signal.Signals(number).name
        return f"signal {number}"


@dataclass(frozen=True)
class Tests:
    """Code that defines ``check(candidate)``, and the name of the program's function it is given."""

    source: str
    entry_point: str


@dataclass
class _Run:
    """One run's decisions: how it is entered, as whom, where, and its groups."""

    limits: Limits
    prefix: list[str]
    bwrap: bool
    uid: int | None
    workdir: str
    groups: sandbox_cgroup.RunGroups
    python: str
    token: str = field(default_factory=lambda: secrets.token_hex(16))


def run_python(source: str, limits: Limits | None = None, tests: Tests | None = None) -> SandboxResult:
    """Run ``source`` as ``main.py`` in the sandbox, then ``tests``; never raises for anything the code does.

    The status is "ok" only if ``source`` ran to its end and, given ``tests``, their own ``check``
    returned on ``source``'s ``tests.entry_point``.
    """
    run = _plan(limits or Limits())
    host_dir = None
    try:
        if not run.bwrap:  # no private /tmp: a directory of its own on the host
            host_dir = Path(tempfile.mkdtemp(prefix="echo-bench-sandbox-"))
            run.workdir = str(host_dir)
            if run.uid is not None:
                os.chown(host_dir, run.uid, run.uid)  # its own directory; 0700 from mkdtemp keeps others out
        result = _execute(run, _settings(run, source, tests))
    finally:
        sandbox_cgroup.destroy(run.groups)
        if host_dir is not None:
            shutil.rmtree(host_dir, ignore_errors=True)
            if run.uid is not None:
                _remove_leftovers(run.uid)
    return result


def _remove_leftovers(uid: int) -> None:
    """Without a private /tmp, what the run's uid left in the world-writable directories."""
    for directory in WORLD_WRITABLE:
        with contextlib.suppress(OSError), os.scandir(directory) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if entry.stat(follow_symlinks=False).st_uid != uid:
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        shutil.rmtree(entry.path, ignore_errors=True)
                    else:
                        os.unlink(entry.path)


def _plan(limits: Limits) -> _Run:
    bwrap = None if limits.network or not limits.bwrap else sandbox_launch.bwrap_path()
    if bwrap is not None:
        prefix = [bwrap, *sandbox_launch.bwrap_args(limits.file_size_mb << 20), "--"]
    else:
        prefix = [] if limits.network else sandbox_launch.unshare_prefix()
    python, droppable = sandbox_launch.interpreter(bwrap is not None)
    as_root = droppable and "--user" not in prefix and "--unshare-user" not in prefix
    uid = _UID_BASE + secrets.randbelow(_UID_SPAN) if as_root else None
    extra = _BWRAP_PROCESSES if bwrap else 1 if prefix else 0  # unshare itself, before it forks the child
    groups = sandbox_cgroup.create(limits.memory_mb, limits.processes, extra) if limits.cgroups else sandbox_cgroup.RunGroups()
    workdir = f"/tmp/echo-bench-{secrets.token_hex(6)}"  # inside the private /tmp; replaced without bubblewrap
    return _Run(limits, prefix, bwrap is not None, uid, workdir, groups, python)


def _environment(workdir: str) -> dict[str, str]:
    """The child's whole environment: an allow-list, never a copy of ours minus secrets."""
    return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": workdir, "TMPDIR": workdir}


def _settings(run: _Run, source: str, tests: Tests | None) -> bytes:
    """What the harness inside reads first: the token, the code, and how to set itself up."""
    source = source if source.endswith("\n") or not source else source + "\n"
    program, tests_cfg = source, None
    if tests is not None:  # main.py reads like the whole program, for tracebacks
        program = f"{source}{tests.source}\ncheck({tests.entry_point})\n"
        tests_cfg = {"source": tests.source, "entry_point": tests.entry_point, "line": source.count("\n")}
    return json.dumps({"token": run.token, "solution": source, "tests": tests_cfg, "program": program, "uid": run.uid,
                       "workdir": run.workdir, "make_workdir": run.bwrap, "limits": run.limits.rlimits()}).encode()


def _input_fd(data: bytes) -> int:
    """A file holding ``data``, in memory where the OS allows, readable only through this fd."""
    fd = os.memfd_create("echo-bench-input", os.MFD_CLOEXEC) if hasattr(os, "memfd_create") else _unlinked_file()
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _unlinked_file() -> int:
    fd, path = tempfile.mkstemp()
    os.unlink(path)
    return fd


def _execute(run: _Run, settings: bytes) -> SandboxResult:
    in_fd = _input_fd(settings)
    verdict_r, verdict_w = os.pipe()
    argv = [*run.groups.join_prefix(), *run.prefix, run.python, "-I", "-c", WRAPPER, str(in_fd), str(verdict_w)]
    start = time.monotonic()
    try:
        with tempfile.TemporaryFile() as out:  # a file, not a pipe: RLIMIT_FSIZE bounds it
            returncode = _wait(argv, run, out, (in_fd, verdict_w))
            os.close(verdict_w)
            verdict_w = -1
            seconds = time.monotonic() - start
            full = out.seek(0, os.SEEK_END) >= run.limits.file_size_mb << 20
            text, size = _read_output(out)
        started, finished = _read_verdict(verdict_r, run.token)
    finally:
        for fd in (verdict_r, verdict_w):
            if fd >= 0:
                os.close(fd)
    status = "timeout" if returncode is None else "ok" if finished else "failed" if started is not None else "error"
    killed = run.groups.memory_killed()
    return SandboxResult(status, returncode, text, seconds, _isolation(run, started), size, full, killed)


def _wait(argv: list[str], run: _Run, out: Any, fds: tuple[int, int]) -> int | None:
    try:
        proc = subprocess.Popen(argv, cwd="/", env=_environment(run.workdir), stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True, pass_fds=fds)
    except OSError as exc:
        out.write(f"sandbox: {exc}\n".encode())
        return 127
    finally:
        os.close(fds[0])  # the child has its own copy
    try:
        return proc.wait(timeout=run.limits.timeout_s)
    except subprocess.TimeoutExpired:
        return None
    finally:
        _kill(proc, run)


def _kill(proc: subprocess.Popen[bytes], run: _Run) -> None:
    """Kill the process group and every process in the run's cgroups, then reap."""
    # Also after a normal exit: without a PID namespace, forked children outlive the child.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    sandbox_cgroup.kill(run.groups)
    if run.uid is not None:
        _kill_uid(run.uid)


def _kill_uid(uid: int) -> None:
    """Kill every process of the run's own uid: the last resort where no namespace or group holds them."""
    kill = shutil.which("kill", path="/usr/bin:/bin")
    if kill is None:
        return
    # kill(-1) as that uid reaches exactly its processes; the uid is this run's alone.
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run([kill, "-9", "-1"], user=uid, group=uid, extra_groups=[], env={},
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=5)


def _read_verdict(fd: int, token: str) -> tuple[dict[str, Any] | None, bool]:
    """(the harness's ``started`` report, whether the token and nothing else followed it)."""
    os.set_blocking(fd, False)  # every writer is dead; a stray one must not hang the grader
    data = b""
    with contextlib.suppress(BlockingIOError):
        while len(data) <= VERDICT_MAX and (chunk := os.read(fd, VERDICT_MAX)):
            data += chunk
    head, _, rest = data.partition(b"\n")
    if not head.startswith(b"started "):
        return None, False
    try:
        report = json.loads(head[len(b"started "):])
    except ValueError:
        return None, False
    return report, secrets.compare_digest(rest, token.encode() + b"\n")


def _read_output(out: Any) -> tuple[str, int]:
    """(the tail of the program's output, bytes it wrote)."""
    size = out.seek(0, os.SEEK_END)
    out.seek(max(0, size - OUTPUT_TAIL))
    return out.read().decode("utf-8", "replace"), size


def _isolation(run: _Run, started: dict[str, Any] | None) -> dict[str, Any]:
    """What held for this run, as recorded in the row; never more than the run had."""
    namespaces = bool(run.prefix)
    return {
        "bwrap": run.bwrap,
        "network": "isolated" if namespaces else "unavailable",
        "pid_namespace": namespaces,
        "ipc_namespace": namespaces,
        "user_namespace": any(flag in run.prefix for flag in ("--user", "--unshare-user")),
        "filesystem": "minimal read-only root" if run.bwrap else "host",
        "uid": run.uid if run.uid is not None and started is not None else "unchanged",
        "private_tmp": ["/tmp"] if run.bwrap else [],
        "bounded": {
            "memory": "all processes" if run.groups.memory else "per process",
            "processes": "all processes" if run.groups.pids else "per uid" if run.uid is not None else "per user",
            "disk": "private /tmp in total" if run.bwrap else "per file",
        },
        "memory_peak_mb": run.groups.peak_mb(),
        "limits": {k: v for k, v in asdict(run.limits).items() if k not in ("network", "bwrap", "cgroups")},
    }
