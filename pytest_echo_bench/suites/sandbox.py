"""A sandboxed Python subprocess for untrusted code: bare environment, temp dir, limits, no network.

``run_python(source, Limits(...))`` writes ``source`` to an empty temporary directory and runs it
with ``python -I`` in a new process group, under these layers (each recorded in
``SandboxResult.isolation``, since what the OS allows differs between machines):

- environment: a small allow-list (PATH, LANG, HOME, TMPDIR); nothing else is inherited, so API
  keys and tokens in the parent's environment never reach the child;
- namespaces (``unshare``, util-linux): a new network namespace (no interface but a loopback that
  is down, so no connection anywhere, not even 127.0.0.1), a new PID namespace (when its first
  process exits, the kernel kills every process it left behind) and a private mount namespace
  with fresh tmpfs over the world-writable directories (/tmp, /var/tmp, /dev/shm, /run/lock);
  as root directly, otherwise inside an unprivileged user namespace if the kernel allows one;
- user: when the parent is root, the child drops to a fresh unprivileged uid (one per run, so the
  process limit counts this run alone): it cannot write to the project or read another process's
  environment;
- ``resource`` limits: CPU seconds, address space, file size (which also caps the captured
  output), process count, open files, no core dumps; plus a wall-clock timeout after which the
  whole process group is killed.

Not defended: reading world-readable files (the project's source, /etc), CPU and memory used
by the kernel on the child's behalf, and, where no namespace is available, the network and
stray processes that leave the process group. See docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

# World-writable places an unprivileged child could still write to; each gets a private tmpfs.
WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
OUTPUT_TAIL = 64 * 1024
_STATUS_MARK = b"\0echo-bench-sandbox "
# Fresh uids far above any account; the random pick keeps concurrent runs apart.
_UID_BASE, _UID_SPAN = 1_900_000_000, 100_000_000

# Runs as the child's first process (root inside the namespaces, when there are any): private tmp
# mounts, then the uid drop, then the limits, then exec of the program. It reports what it did
# on the first line of the output, before the untrusted code can write anything.
_BOOTSTRAP = r"""
import ctypes, json, os, resource, sys
cfg = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
private = []
for path in cfg["private_tmp"]:
    if os.path.isdir(path) and libc.mount(b"tmpfs", path.encode(), b"tmpfs", 2 | 4 | 8, b"mode=1777,size=64m") == 0:
        private.append(path)
if cfg["uid"] is not None:
    os.setgroups([])
    os.setgid(cfg["uid"])
    os.setuid(cfg["uid"])
    libc.prctl(1, 9)  # PR_SET_PDEATHSIG=SIGKILL again: changing uid cleared it
for name, value in cfg["limits"].items():
    resource.setrlimit(getattr(resource, name), (value, value))
sys.stdout.buffer.write(b"\0echo-bench-sandbox " + json.dumps({"private_tmp": private}).encode() + b"\n")
sys.stdout.flush()
os.execv(cfg["python"], [cfg["python"], "-I", "-c", cfg["main"]])
"""
# Run by path, Python would reopen main.py by its absolute name, which the private /tmp now hides;
# the working directory itself is still the real one.
_MAIN = "__file__ = 'main.py'; exec(compile(open(__file__, 'rb').read(), __file__, 'exec'))"


@dataclass(frozen=True)
class Limits:
    """What one sandboxed run may use."""

    timeout_s: float = 10.0
    memory_mb: int = 1024
    file_size_mb: int = 16
    processes: int = 32
    open_files: int = 64
    network: bool = False  # True: skip the namespaces (a test seam for machines without them)

    def rlimits(self) -> dict[str, int]:
        cpu = int(self.timeout_s) + 1  # wall clock decides first; CPU time backs it up
        return {"RLIMIT_CPU": cpu, "RLIMIT_AS": self.memory_mb << 20, "RLIMIT_FSIZE": self.file_size_mb << 20,
                "RLIMIT_NPROC": self.processes, "RLIMIT_NOFILE": self.open_files, "RLIMIT_CORE": 0}


@dataclass(frozen=True)
class SandboxResult:
    """How the child ended, the tail of what it printed, and how it was isolated."""

    status: str  # ok | failed | timeout | error (the sandbox itself could not start)
    returncode: int | None
    output: str
    seconds: float
    isolation: dict[str, Any] = field(default_factory=dict)
    output_bytes: int = 0
    output_full: bool = False  # the output reached the file-size limit (and was cut there)

    @property
    def signal(self) -> str | None:
        """The signal that ended the child (``unshare`` reports it as 128 + n)."""
        code = self.returncode
        number = -code if code is not None and code < 0 else code - 128 if code is not None and 128 < code < 160 else None
        if number is None:
            return None
        with contextlib.suppress(ValueError):
            return signal.Signals(number).name
        return f"signal {number}"


def run_python(source: str, limits: Limits | None = None) -> SandboxResult:
    """Run ``source`` as ``main.py`` in the sandbox; never raises for anything the code does."""
    limits = limits or Limits()
    prefix = [] if limits.network else namespace_prefix()
    python, uid = child_python(), _fresh_uid(prefix)
    workdir = Path(tempfile.mkdtemp(prefix="echo-bench-sandbox-"))
    try:
        _prepare(workdir, source, uid if python else None)
        config = {"private_tmp": list(WORLD_WRITABLE) if prefix else [], "uid": uid if python else None,
                  "limits": limits.rlimits(), "python": python or sys.executable, "main": _MAIN}
        argv = [*prefix, sys.executable, "-I", "-S", "-c", _BOOTSTRAP, json.dumps(config)]
        result = _execute(argv, workdir, limits)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return _with_isolation(result, prefix, config, limits)


def _prepare(workdir: Path, source: str, uid: int | None) -> None:
    (workdir / "main.py").write_text(source, encoding="utf-8")
    if uid is not None:
        os.chown(workdir, uid, uid)  # the child's own directory; 0700 from mkdtemp keeps others out
        os.chmod(workdir / "main.py", 0o644)


def _fresh_uid(prefix: list[str]) -> int | None:
    # Inside an unprivileged user namespace only root is mapped, so there is no one to drop to.
    if os.geteuid() != 0 or "--user" in prefix:
        return None
    return _UID_BASE + secrets.randbelow(_UID_SPAN)


def _environment(workdir: Path) -> dict[str, str]:
    """The child's whole environment: an allow-list, never a copy of ours minus secrets."""
    return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": str(workdir), "TMPDIR": str(workdir)}


def _execute(argv: list[str], workdir: Path, limits: Limits) -> SandboxResult:
    start = time.monotonic()
    with tempfile.TemporaryFile() as out:  # a file, not a pipe: RLIMIT_FSIZE bounds it
        proc = subprocess.Popen(argv, cwd=workdir, env=_environment(workdir), stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            returncode: int | None = proc.wait(timeout=limits.timeout_s)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            _kill_group(proc)
        seconds = time.monotonic() - start
        full = out.seek(0, os.SEEK_END) >= limits.file_size_mb << 20
        started, text, size = _read_output(out)
    if not started:
        return SandboxResult("error", returncode, text, seconds, output_bytes=size, output_full=full)
    status = "timeout" if returncode is None else "ok" if returncode == 0 else "failed"
    return SandboxResult(status, returncode, text, seconds, started, size, full)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the process group (the child and anything it forked that stayed in it) and reap."""
    # Also after a normal exit: forked children that outlived the child are still in its group.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _read_output(out: Any) -> tuple[dict[str, Any], str, int]:
    """(the bootstrap's report, the tail of the program's output, bytes the program wrote)."""
    size = out.seek(0, os.SEEK_END)
    out.seek(0)
    head = out.readline(4096)
    status: dict[str, Any] = {}
    if head.startswith(_STATUS_MARK):
        with contextlib.suppress(ValueError):
            status = json.loads(head[len(_STATUS_MARK):])
    else:
        out.seek(0)  # the bootstrap failed before its status line: show everything
    body_start = out.tell()
    out.seek(max(body_start, size - OUTPUT_TAIL))
    text = out.read().decode("utf-8", "replace")
    return status, text, size - body_start


def _with_isolation(result: SandboxResult, prefix: list[str], config: dict[str, Any], limits: Limits) -> SandboxResult:
    """Replace the bootstrap's own report (what it mounted) with the full record of the run."""
    uid = config["uid"]
    isolation = {
        "network": "isolated" if prefix else "unavailable",
        "pid_namespace": bool(prefix),
        "user_namespace": "--user" in prefix,
        "uid": uid if uid is not None else "unchanged",
        "private_tmp": result.isolation.get("private_tmp", []),
        "limits": {k: v for k, v in asdict(limits).items() if k != "network"},
    }
    return replace(result, isolation=isolation)


@functools.cache
def namespace_prefix() -> list[str]:
    """The ``unshare`` command line this machine allows (probed once per process); [] if none."""
    unshare = shutil.which("unshare") or shutil.which("unshare", path="/usr/bin:/bin")
    if unshare is None or not sys.platform.startswith("linux"):
        return []
    base = [unshare, "--net", "--pid", "--mount", "--fork", "--kill-child"]
    candidates = [base, [*base, "--user", "--map-root-user"]] if os.geteuid() == 0 else [[*base, "--user", "--map-root-user"]]
    for prefix in candidates:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            probe = subprocess.run([*prefix, sys.executable, "-I", "-S", "-c", ""], env={"PATH": "/usr/bin:/bin"},
                                   stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
            if probe.returncode == 0:
                return prefix
    return []


@functools.cache
def child_python() -> str | None:
    """An interpreter the unprivileged uid can run; None when the parent is not root (no drop)."""
    if os.geteuid() != 0:
        return None
    # A venv or pyenv under /root (mode 0700) is out of reach once the uid is dropped.
    for candidate in (sys.executable, shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")):
        if candidate and _runnable_by_others(Path(candidate)):
            return candidate
    return None


def _runnable_by_others(path: Path) -> bool:
    real = path.resolve()
    if not real.is_file() or not real.stat().st_mode & stat.S_IXOTH:
        return False
    prefix = real.parents[1]  # <prefix>/bin/python: the standard library lives under <prefix>/lib
    dirs = [*real.parents, *(p for p in (prefix / "lib").glob("python3*") if p.is_dir())]
    return all(d.stat().st_mode & stat.S_IXOTH for d in dirs)
