"""How the sandbox is entered on this machine: bubblewrap, else ``unshare``, else nothing.

``bwrap_args`` gives a fresh filesystem view: a read-only ``/usr`` (with the merged-usr links),
a minimal ``/dev``, no ``/proc``, a private ``/tmp`` tmpfs of a fixed size and, over it, the
interpreter's prefixes read-only (a virtualenv may live under ``/tmp``), in new PID, network,
IPC, UTS and cgroup namespaces whose first process dies with the parent. Without bubblewrap, ``unshare_prefix`` gives what util-linux can (network,
PID and IPC namespaces) on the host's filesystem. Each probe runs once per process.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

SEARCH_PATH = "/usr/bin:/bin:/usr/local/bin"
_ROOT_LINKS = ("bin", "sbin", "lib", "lib64", "lib32", "libx32")


@functools.cache
def bwrap_path() -> str | None:
    """bubblewrap, if it is installed and can build the sandbox here."""
    found = shutil.which("bwrap") or shutil.which("bwrap", path=SEARCH_PATH)
    if found is None or not sys.platform.startswith("linux"):
        return None
    argv = [found, *bwrap_args(1 << 20), interpreter(True)[0], "-I", "-S", "-c", ""]
    return found if _probe(argv) else None


def bwrap_args(tmp_bytes: int) -> list[str]:
    """The bubblewrap options (without the program): namespaces, the read-only root, /tmp."""
    args = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session"]
    if os.geteuid() != 0:
        # bubblewrap needs a user namespace when it is not run by root; none may be nested in it.
        args += ["--unshare-user", "--disable-userns"]
    args += ["--ro-bind", "/usr", "/usr", *_root_links()]
    # No --proc: the host's is not there, and neither is /proc/self/mem. The private /tmp comes
    # before the interpreter's prefixes: a virtualenv under /tmp (tox, CI runners) stays visible.
    args += ["--dev", "/dev", "--perms", "1777", "--size", str(tmp_bytes), "--tmpfs", "/tmp"]
    made: set[Path] = {Path("/tmp")}
    for prefix in _prefixes():
        # bubblewrap would create the directories above a bind 0700, out of the dropped uid's reach.
        for parent in reversed(Path(prefix).parents[:-1]):
            if parent not in made:
                made.add(parent)
                args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", prefix, prefix]
    return [*args, "--chdir", "/tmp"]


def _root_links() -> list[str]:
    """/bin, /lib, ... as on the host: a symlink into /usr (merged /usr), else a read-only bind."""
    args: list[str] = []
    for name in _ROOT_LINKS:
        path = Path("/", name)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    return args


def _prefixes() -> list[str]:
    """The interpreter's installation and virtualenv (both may live outside /usr)."""
    real = Path(interpreter(True)[0]).resolve()
    found: list[str] = []
    for prefix in (sys.base_prefix, sys.prefix, str(real.parent)):
        inside = any(prefix == p or prefix.startswith(p + "/") for p in ["/usr", *found])
        if not inside and Path(prefix).is_dir():
            found.append(prefix)
    return found


@functools.cache
def interpreter(in_bwrap: bool) -> tuple[str, bool]:
    """(the Python the sandbox runs, whether a dropped uid can run it): ours if it can, else the system's."""
    if os.geteuid() != 0:
        return sys.executable, False  # nothing to drop to
    system = shutil.which("python3", path=SEARCH_PATH)
    for candidate in (sys.executable, system):
        if candidate and _runnable_by_others(Path(candidate), in_bwrap):
            return candidate, True
    return sys.executable, False


def _runnable_by_others(path: Path, in_bwrap: bool) -> bool:
    """Whether another uid may run ``path`` (a venv or pyenv under /root, mode 0700, is out of reach)."""
    real = path.resolve()
    if not real.is_file() or not real.stat().st_mode & stat.S_IXOTH:
        return False
    prefix = real.parents[1]  # <prefix>/bin/python: the standard library lives under <prefix>/lib
    # In bubblewrap only the directories inside the prefix matter: the ones above are made 0755.
    above = [real.parent, prefix] if in_bwrap else list(real.parents)
    dirs = [*above, *(p for p in (prefix / "lib").glob("python3*") if p.is_dir())]
    return all(d.stat().st_mode & stat.S_IXOTH for d in dirs)


@functools.cache
def unshare_prefix() -> list[str]:
    """The ``unshare`` command line this machine allows, for runs without bubblewrap; [] if none."""
    unshare = shutil.which("unshare") or shutil.which("unshare", path=SEARCH_PATH)
    if unshare is None or not sys.platform.startswith("linux"):
        return []
    base = [unshare, "--net", "--pid", "--ipc", "--fork", "--kill-child"]
    as_user = [*base, "--user", "--map-root-user"]
    for prefix in ([base, as_user] if os.geteuid() == 0 else [as_user]):
        if _probe([*prefix, sys.executable, "-I", "-S", "-c", ""]):
            return prefix
    return []


def _probe(argv: list[str]) -> bool:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        probe = subprocess.run(argv, env={"PATH": "/usr/bin:/bin"}, stdin=subprocess.DEVNULL,
                               capture_output=True, timeout=10)
        return probe.returncode == 0
    return False
