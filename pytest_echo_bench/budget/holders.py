"""Who holds a share of the budget: a process named by host, pid and
start time, and whether it is gone.

The ledger tags each process's holds with this name so that any other process of the run can
release the holds of one that was killed (an xdist worker lost to SIGKILL or the OOM killer never
settles what it held). The start time is what makes a pid safe to judge: a pid the kernel handed
to a new process since is not the owner, so the owner is gone. A name from another host (or boot)
is never judged gone here: its pid means nothing on this machine.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

PROC = Path("/proc")
# no /proc (not Linux): only the pid can be checked, so a reused pid reads as alive
UNKNOWN_START = "?"


def _boot() -> str:
    try:
        return (PROC / "sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        return ""


_host_name: str | None = None


def _host() -> str:
    global _host_name
    if _host_name is None:
        # The boot id too: a pid of before a reboot is no process now, on a host of the same name.
        _host_name = f"{socket.gethostname()}~{_boot()}".replace("/", "_")
    return _host_name


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22); None when
    it has exited or is a zombie (killed, not reaped yet: it holds nothing any more), UNKNOWN_START
    when its entry cannot be read (hidden by ``hidepid``, say: it may well be running)."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    except (OSError, ValueError):
        return UNKNOWN_START
    # the command name, in parentheses, may hold spaces and ")"
    fields = stat.rsplit(")", 1)[-1].split()
    if fields and fields[0] in ("Z", "X"):
        return None
    return fields[19] if len(fields) >= 20 else UNKNOWN_START


_me: tuple[int, str] | None = None


def me() -> str:
    """This process's name: ``host/pid/start`` (cached per pid: a
    forked child names itself anew)."""
    global _me
    pid = os.getpid()
    if _me is None or _me[0] != pid:
        start = start_time(pid) if PROC.joinpath("self/stat").exists() else None
        # without /proc: judged by the pid alone
        _me = (pid, f"{_host()}/{pid}/{start or UNKNOWN_START}")
    return _me[1]


def gone(name: str) -> bool:
    """Whether the process ``name`` (from ``me``) has exited: on this host, its pid is not running,
    or runs a process that started at another time. Anything unreadable is taken as alive: a hold
    kept too long waits (bounded), a hold released under a live owner could overspend."""
    host, _, rest = name.partition("/")
    pid_text, _, start = rest.partition("/")
    if host != _host() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if start != UNKNOWN_START:
        now = start_time(pid)
        return now is None or now not in (start, UNKNOWN_START)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # EPERM: a process runs under that pid
        return False
    return False
