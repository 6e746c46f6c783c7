"""A model CLI in its own PID namespace, with a /proc of its own: it
cannot read what it was not given.

A CLI's environment is cut down to an allow-list (``command``), but the host's ``/proc`` still
shows every process: ``/proc/<its parent>/environ`` held every key of the run, and a CLI read
keys it was never passed from there. In a new PID namespace with a fresh ``/proc`` mounted, only
the CLI's own processes exist; the filesystem and the network stay as they are (the CLI needs its
install, its scratch directory and the API). When the namespace's first process ends, the kernel
kills everything left in it, so no helper outlives the call either.

bubblewrap where it can build one here, else util-linux's ``unshare``; else the CLI runs on the
host's ``/proc`` and the run says so on its first lines (``summary_line``). Probed once per process.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_echo_bench.spec.load import Spec

SEARCH_PATH = "/usr/bin:/bin:/usr/local/bin"
# Counts the processes its /proc shows, with shell builtins only: in a fresh PID namespace that is
# the shell and (under bubblewrap) its init; on the host's /proc, every process of the machine.
_PROBE = 'n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; [ "$n" -le 3 ]'
HINT = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) where user namespaces "
    "are allowed, "
    "or pass a model CLI no variable it must not read"
)


@functools.cache
def prefix() -> tuple[str, ...]:
    """What a CLI's argv is run under for a PID namespace of its own
    here; () when none can be made."""
    if not sys.platform.startswith("linux"):
        return ()
    for candidate in candidates():
        if works(candidate):
            return tuple(candidate)
    return ()


def candidates() -> list[list[str]]:
    """The launchers to try, best first: bubblewrap, then unshare (as
    root, then in a user namespace)."""
    found: list[list[str]] = []
    bwrap = shutil.which("bwrap") or shutil.which("bwrap", path=SEARCH_PATH)
    if bwrap is not None:
        # The whole filesystem as it is (devices too), a new PID namespace and its own /proc; no
        # --new-session: the CLI stays in the process group the caller kills when a call ends.
        as_user = ["--unshare-user"] if os.geteuid() != 0 else []
        found.append([bwrap, *as_user, "--dev-bind", "/", "/", "--unshare-pid", "--proc", "/proc",
                      "--die-with-parent", "--"])
    unshare = shutil.which("unshare") or shutil.which("unshare", path=SEARCH_PATH)
    if unshare is not None:
        base = [unshare, "--pid", "--fork", "--mount-proc", "--kill-child"]
        if os.geteuid() == 0:
            found.append([*base, "--"])
        found += [
            [*base, "--user", "--map-current-user", "--"],
            [*base, "--user", "--map-root-user", "--"],
        ]
    return found


def works(candidate: list[str]) -> bool:
    """Whether ``candidate`` starts a program here whose /proc shows only its own namespace."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        probe = subprocess.run([*candidate, "/bin/sh", "-c", _PROBE], env={"PATH": SEARCH_PATH},
                               stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
        return probe.returncode == 0
    return False


def start_line(specs: Iterable[Spec]) -> str | None:
    """``summary_line`` for a run whose specs have a model-CLI arm
    (``provider: command``); else None."""
    runs_clis = any(arm.provider == "command" for spec in specs for arm in spec.arms.values())
    return summary_line() if runs_clis else None


def summary_line(found: tuple[str, ...] | None = None) -> str:
    """One line for the start of a run with model CLIs: whether they
    get a PID namespace of their own."""
    found = prefix() if found is None else found
    if found:
        how = "bubblewrap" if os.path.basename(found[0]) == "bwrap" else "unshare"
        return (
            f"echo-bench: model CLIs run in their own PID namespace ({how}): they see no other "
            "process's environment"
        )
    return (
        "echo-bench: WARNING: model CLIs run without a PID namespace of their own here: a "
        "CLI can read the "
        f"environment of other processes in /proc, this run's keys included; {HINT}"
    )
