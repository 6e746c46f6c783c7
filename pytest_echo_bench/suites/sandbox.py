"""A sandboxed Python process for untrusted code: the completion's side of a verdict.

``spawn`` starts the harness (``sandbox_wrapper``) on a completion under these layers, each one
recorded in the row's ``extra.sandbox`` (``describe``), since what the machine allows differs:

- bubblewrap (``sandbox_launch``): new PID, network, IPC, UTS and mount namespaces, a read-only
  root of ``/usr`` and the interpreter's executable and standard library, never an installed
  package (``sandbox_view``), no ``/proc``, and a private ``/tmp`` tmpfs whose size is
  ``file_size_mb`` in total; without it, ``unshare`` namespaces and the same root built after
  ``unshare --mount``, or where no mount namespace can be made, the host's filesystem;
- cgroups (``sandbox_cgroup``): memory and process count of all the run's processes together,
  and a kill of every process the run left behind;
- user: when the parent is root, a fresh unprivileged uid per run;
- ``resource`` limits per process, the environment allow-list and a wall-clock deadline.

Its only channel to us is a pair of pipes carrying the strict codec (``suites/codec.py``); the
tests never enter it (``suites/verdict.py``). ``run_python`` runs a plain program the same way.
What is not defended is listed in docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import secrets
import shutil
import signal
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pytest_echo_bench.suites import codec, sandbox_cgroup, sandbox_launch
from pytest_echo_bench.suites.sandbox_wrapper import WRAPPER

# Where an unprivileged child could still write on the host's filesystem (no private /tmp).
WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
OUTPUT_TAIL = 64 * 1024
# Fresh uids far above any account; the random pick keeps concurrent runs apart.
_UID_BASE, _UID_SPAN = 1_900_000_000, 100_000_000
# bubblewrap's own two processes (outside and as PID 1 inside) count against the pids group.
_BWRAP_PROCESSES = 2


@dataclass(frozen=True)
class Limits:
    """What one sandboxed run may use."""

    timeout_s: float = 10.0  # the whole check: one deadline
    call_timeout_s: float | None = None  # one call of the candidate (None: the whole deadline)
    memory_mb: int = 1024
    file_size_mb: int = 16
    processes: int = 32
    open_files: int = 64
    network: bool = False  # True: skip every namespace (a test seam for machines without them)
    bwrap: bool = True  # False: run as on a machine without bubblewrap
    cgroups: bool = True  # False: run as on a machine where no cgroup can be made

    def rlimits(self) -> dict[str, int]:
        cpu = int(self.timeout_s) + 1  # wall clock decides first; CPU time backs it up
        return {
            "RLIMIT_CPU": cpu,
            "RLIMIT_AS": self.memory_mb << 20,
            "RLIMIT_FSIZE": self.file_size_mb << 20,
            "RLIMIT_NPROC": self.processes,
            "RLIMIT_NOFILE": self.open_files,
            "RLIMIT_CORE": 0,
        }


@dataclass(frozen=True)
class SandboxResult:
    """How the child ended, the tail of what it printed, and how it was isolated."""

    # ok (ran to its end, exit 0) | failed | timeout | error (the sandbox itself could not start)
    status: str
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
        number = (
            -code
            if code is not None and code < 0
            else code - 128
            if code is not None and 128 < code < 160
            else None
        )
        if number is None:
            return None
        with contextlib.suppress(ValueError):
            return signal.Signals(number).name
        return f"signal {number}"


@dataclass
class SandboxRun:
    """One run's decisions: how it is entered, as whom, where, and its groups."""

    limits: Limits
    prefix: list[str]
    bwrap: bool
    uid: int | None
    workdir: str
    groups: sandbox_cgroup.RunGroups
    python: str
    private_root: bool = False  # bubblewrap's root, or the same one built after unshare --mount


@contextlib.contextmanager
def prepared(limits: Limits) -> Iterator[SandboxRun]:
    """A run's plan, and afterwards its groups removed and whatever it left on the host."""
    run = _plan(limits)
    host_dir = None
    try:
        # the private root's mount point, or on the host's filesystem a directory of its own
        if not run.bwrap:
            host_dir = Path(tempfile.mkdtemp(prefix="echo-bench-sandbox-"))
            if run.private_root:
                root = sandbox_launch.chroot_args(
                    run.limits.file_size_mb << 20, str(host_dir), run.prefix[0]
                )
                run.prefix = [*run.prefix, *root]
            else:
                run.workdir = str(host_dir)
                if run.uid is not None:
                    # its own directory; 0700 from mkdtemp keeps others out
                    os.chown(host_dir, run.uid, run.uid)
        yield run
    finally:
        sandbox_cgroup.destroy(run.groups)
        if host_dir is not None:
            shutil.rmtree(host_dir, ignore_errors=True)
            if run.uid is not None and not run.private_root:
                _remove_leftovers(run.uid)


def run_python(source: str, limits: Limits | None = None) -> SandboxResult:
    """Run ``source`` as ``__main__`` in the sandbox; never raises for anything the code does.

    "ok" means that the program's last statement returned and the process exited 0. That is no
    verdict (the program may fake it): verdicts are earned outside the
    sandbox, in ``suites/verdict.py``.
    """
    with prepared(limits or Limits()) as run:
        return _run_program(run, source)


def _run_program(run: SandboxRun, source: str) -> SandboxResult:
    request_r, request_w = os.pipe()
    reply_r, reply_w = os.pipe()
    start = time.monotonic()
    try:
        with tempfile.TemporaryFile() as out:
            proc = spawn(run, source, None, (request_r, reply_w), out)
            for fd in (request_r, reply_w):
                os.close(fd)
            returncode = wait(proc, run, start + run.limits.timeout_s) if proc is not None else 127
            seconds = time.monotonic() - start
            full = out.seek(0, os.SEEK_END) >= run.limits.file_size_mb << 20
            text, size = read_output(out)
        messages = read_messages(reply_r)
    finally:
        for fd in (request_w, reply_r):
            os.close(fd)
    started = next(
        (m[1] for m in messages if type(m) is tuple and m[:1] == ("ready",) and len(m) == 2), None
    )
    loaded = ("loaded",) in messages
    status = ("timeout" if returncode is None else "ok" if loaded and returncode == 0
              else "failed" if started is not None else "error")
    isolation = describe(run, started if type(started) is dict else None)
    return SandboxResult(
        status, returncode, text, seconds, isolation, size, full, run.groups.memory_killed()
    )


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


def _plan(limits: Limits) -> SandboxRun:
    bwrap = None if limits.network or not limits.bwrap else sandbox_launch.bwrap_path()
    if bwrap is not None:
        prefix = [bwrap, *sandbox_launch.bwrap_args(limits.file_size_mb << 20), "--"]
    else:
        prefix = (
            []
            if limits.network
            else sandbox_launch.unshare_root_prefix() or sandbox_launch.unshare_prefix()
        )
    private = bwrap is not None or sandbox_launch.private_root(prefix)
    python, droppable = sandbox_launch.python(private), sandbox_launch.interpreter(private)[1]
    as_root = droppable and "--user" not in prefix and "--unshare-user" not in prefix
    uid = _UID_BASE + secrets.randbelow(_UID_SPAN) if as_root else None
    # unshare itself, before it forks the child
    extra = _BWRAP_PROCESSES if bwrap else 1 if prefix else 0
    groups = (
        sandbox_cgroup.create(limits.memory_mb, limits.processes, extra)
        if limits.cgroups
        else sandbox_cgroup.RunGroups()
    )
    # inside the private /tmp; replaced on the host's filesystem
    workdir = f"/tmp/echo-bench-{secrets.token_hex(6)}"
    return SandboxRun(limits, prefix, bwrap is not None, uid, workdir, groups, python, private)


def environment(workdir: str) -> dict[str, str]:
    """The child's whole environment: an allow-list, never a copy of ours minus secrets."""
    return {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": workdir,
        "TMPDIR": workdir,
    }


def settings(run: SandboxRun, source: str, entry_point: str | None) -> bytes:
    """What the harness inside reads first: the completion, the codec, how to set itself up."""
    return json.dumps(
        {
            "solution": source,
            "entry_point": entry_point,
            "codec": codec_source(),
            "uid": run.uid,
            "workdir": run.workdir,
            "make_workdir": run.private_root,
            "limits": run.limits.rlimits(),
        }
    ).encode()


@functools.cache
def codec_source() -> str:
    """``suites/codec.py`` as text: the harness inside executes it (our
    package is not in the sandbox)."""
    return Path(codec.__file__).read_text(encoding="utf-8")


def input_fd(data: bytes) -> int:
    """A file holding ``data``, in memory where the OS allows, readable only through this fd."""
    fd = (
        os.memfd_create("echo-bench-input", os.MFD_CLOEXEC)
        if hasattr(os, "memfd_create")
        else _unlinked_file()
    )
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _unlinked_file() -> int:
    fd, path = tempfile.mkstemp()
    os.unlink(path)
    return fd


def spawn(
    run: SandboxRun, source: str, entry_point: str | None, fds: tuple[int, int], out: Any
) -> subprocess.Popen[bytes] | None:
    """Start the sandboxed harness on ``source`` with the (request, reply) pipe
    ends; None if it cannot start."""
    in_fd = input_fd(settings(run, source, entry_point))
    argv = [
        *run.groups.join_prefix(),
        *run.prefix,
        run.python,
        "-I",
        "-c",
        WRAPPER,
        str(in_fd),
        *map(str, fds),
    ]
    try:
        return subprocess.Popen(
            argv,
            cwd="/",
            env=environment(run.workdir),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            pass_fds=(in_fd, *fds),
        )
    except OSError as exc:
        out.write(f"sandbox: {exc}\n".encode())
        return None
    finally:
        os.close(in_fd)  # the child has its own copy


def wait(proc: subprocess.Popen[bytes], run: SandboxRun, deadline: float) -> int | None:
    """The sandbox's exit status by ``deadline`` (None: it was still running); then
    every process of the run is killed."""
    try:
        return proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return None
    finally:
        kill(proc, run)


def kill(proc: subprocess.Popen[bytes], run: SandboxRun) -> None:
    """Kill the process group and every process in the run's cgroups, then reap."""
    # Also after a normal exit: without a PID namespace, forked children outlive the child.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    sandbox_cgroup.kill(run.groups)
    if run.uid is not None:
        _kill_uid(run.uid)


def _kill_uid(uid: int) -> None:
    """Kill every process of the run's own uid: the last resort where no
    namespace or group holds them."""
    command = shutil.which("kill", path="/usr/bin:/bin")
    if command is None:
        return
    # kill(-1) as that uid reaches exactly its processes; the uid is this run's alone.
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(
            [command, "-9", "-1"],
            user=uid,
            group=uid,
            extra_groups=[],
            env={},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=5,
        )


def read_messages(fd: int, limit: int = 64 * 1024) -> list[Any]:
    """The frames a finished sandbox left on its reply pipe
    (bounded; malformed ones end the list)."""
    os.set_blocking(fd, False)  # every writer is dead; a stray one must not hang us
    data = b""
    with contextlib.suppress(BlockingIOError):
        while len(data) <= limit and (chunk := os.read(fd, limit)):
            data += chunk
    messages: list[Any] = []
    with contextlib.suppress(codec.CodecError, struct.error):
        while len(data) >= 4:
            size = codec.frame_length(data[:4])
            if len(data) < 4 + size:
                break
            messages.append(codec.decode(data[4:4 + size]))
            data = data[4 + size:]
    return messages


def read_output(out: Any) -> tuple[str, int]:
    """(the tail of the program's output, bytes it wrote)."""
    size = out.seek(0, os.SEEK_END)
    out.seek(max(0, size - OUTPUT_TAIL))
    return out.read().decode("utf-8", "replace"), size


def describe(run: SandboxRun, started: dict[str, Any] | None) -> dict[str, Any]:
    """What held for this run, as recorded in the row; never more than the run had."""
    namespaces = bool(run.prefix)
    return {
        "bwrap": run.bwrap,
        "network": "isolated" if namespaces else "unavailable",
        "pid_namespace": namespaces,
        "ipc_namespace": namespaces,
        "user_namespace": any(flag in run.prefix for flag in ("--user", "--unshare-user")),
        "filesystem": "minimal read-only root" if run.private_root else "host",
        "uid": run.uid if run.uid is not None and started is not None else "unchanged",
        "private_tmp": ["/tmp"] if run.private_root else [],
        "bounded": {
            "memory": "all processes" if run.groups.memory else "per process",
            "processes": "all processes"
            if run.groups.pids
            else "per uid"
            if run.uid is not None
            else "per user",
            "disk": "private /tmp in total" if run.private_root else "per file",
        },
        "memory_peak_mb": run.groups.peak_mb(),
        "limits": {
            k: v
            for k, v in asdict(run.limits).items()
            if k not in ("network", "bwrap", "cgroups") and v is not None
        },
    }
