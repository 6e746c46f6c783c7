"""Per-run cgroups (v1 ``memory`` and ``pids``): limits on all of a run's
processes together, and their kill.

A group is made under the parent's own group of each controller, its limits written, and the
sandbox's first process joins it (``join_prefix``) before it forks anything, so every process the
run ever starts is inside. Afterwards ``destroy`` kills whatever the group still holds, whatever
those processes did to their session or signals, and removes it. Where no group can be made (not
root, cgroup v2 without delegated controllers, not Linux) ``create`` returns a ``RunGroups`` with
no paths, and the sandbox records that these limits were per process only.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
# Joins each group named on the command line (cgroup.procs of the shell itself), then becomes the
# sandbox: the exec keeps the pid, so nothing runs outside the groups.
_JOIN = (
    'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1/cgroup.procs" || exit 125; shift; '
    'n=$((n-1)); done; exec "$@"'
)


@dataclass
class RunGroups:
    """The groups of one run (either may be missing)."""

    memory: Path | None = None
    pids: Path | None = None
    paths: list[Path] = field(default_factory=list)

    def join_prefix(self) -> list[str]:
        """A command prefix that puts the command into every group; [] when there is none."""
        if not self.paths:
            return []
        return ["/bin/sh", "-c", _JOIN, "sh", str(len(self.paths)), *map(str, self.paths)]

    def memory_killed(self) -> bool:
        """Whether the kernel killed a process of this run for the memory limit."""
        if self.memory is None:
            return False
        text = _read(self.memory / "memory.oom_control")
        return any(
            line.split()[:1] == ["oom_kill"] and line.split()[1] != "0"
            for line in text.splitlines()
        )

    def peak_mb(self) -> float | None:
        if self.memory is None:
            return None
        raw = _read(self.memory / "memory.max_usage_in_bytes").strip()
        return round(int(raw) / 2**20, 1) if raw.isdigit() else None


def create(memory_mb: int, processes: int, extra_processes: int) -> RunGroups:
    """Groups bounding the run's memory (all processes together) and process count."""
    groups = RunGroups()
    memory = _make("memory")
    if memory is not None and _limit_memory(memory, memory_mb << 20):
        groups.memory = memory
    elif memory is not None:
        _remove(memory)
    pids = _make("pids")
    if pids is not None and _write(pids / "pids.max", str(processes + extra_processes)):
        groups.pids = pids
    elif pids is not None:
        _remove(pids)
    groups.paths = [p for p in (groups.memory, groups.pids) if p is not None]
    return groups


def kill(groups: RunGroups, timeout_s: float = 5.0) -> bool:
    """SIGKILL every process left in the groups and wait until they are empty."""
    deadline = time.monotonic() + timeout_s
    for path in groups.paths:
        while (left := _pids(path)) and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)
    return not any(_pids(path) for path in groups.paths)


def destroy(groups: RunGroups, timeout_s: float = 5.0) -> None:
    """Kill what the groups hold, then remove them."""
    deadline = time.monotonic() + timeout_s
    kill(groups, timeout_s)
    for path in groups.paths:
        while path.exists() and not _remove(path) and time.monotonic() < deadline:
            time.sleep(0.005)  # EBUSY until the last killed process is fully gone


def _make(controller: str) -> Path | None:
    base = _own_group(controller)
    if base is None or not os.access(base, os.W_OK):
        return None
    path = base / f"echo-bench-{secrets.token_hex(6)}"
    try:
        path.mkdir()
    except OSError:
        return None
    return path


def _own_group(controller: str) -> Path | None:
    """This process's group of a v1 controller (from /proc/self/cgroup), if it is mounted."""
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        _, controllers, relative = line.split(":", 2)
        if controller in controllers.split(","):
            path = CGROUP_ROOT / controller / relative.lstrip("/")
            return path if path.is_dir() else None
    return None


def _limit_memory(path: Path, limit: int) -> bool:
    if not _write(path / "memory.limit_in_bytes", str(limit)):
        return False
    # Without this the run could spill into swap past the limit (where swap accounting is on).
    if (path / "memory.memsw.limit_in_bytes").exists():
        _write(path / "memory.memsw.limit_in_bytes", str(limit))
    return True


def _pids(path: Path) -> list[int]:
    return [int(p) for p in _read(path / "cgroup.procs").split()]


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
    except OSError:
        return False
    return True


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _remove(path: Path) -> bool:
    try:
        path.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True
