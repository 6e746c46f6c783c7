"""How the sandbox is entered on this machine: bubblewrap, else ``unshare``, else nothing.

Both namespaced ways give the same fresh root, whose contents ``sandbox_view`` decides: a
read-only ``/usr`` (with the merged-usr links), a minimal ``/dev``, no ``/proc``, a private
``/tmp`` tmpfs of a fixed size and, over it, the interpreter's executable and standard library
read-only (a virtualenv or pyenv may live under ``/tmp``), never an installed package.
``bwrap_args`` builds it with bubblewrap, in new PID, network, IPC, UTS and cgroup namespaces
whose first process dies with the parent. Without bubblewrap, ``unshare_root_prefix`` gives what
util-linux can (network, IPC and, where allowed, mount namespaces) and ``chroot_args`` builds
the same root with ``mount`` inside the new mount namespace, enters it with ``chroot`` and makes
the PID namespace there; where no mount namespace can be made, ``unshare_prefix`` runs the code
in PID, network and IPC namespaces on the host's files (``private_root`` says which). Each probe
runs once per process.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from pytest_echo_bench.suites import sandbox_view

SEARCH_PATH = "/usr/bin:/bin:/usr/local/bin"
_ROOT_LINKS = ("bin", "sbin", "lib", "lib64", "lib32", "libx32")
_DEVICES = ("null", "zero", "random", "urandom")
_PID_NAMESPACE = ("--pid", "--fork", "--kill-child")
# What the harness inside imports, with ``site`` as it runs: a root that
# lacks part of it is no sandbox.
_PROBE = "import json, os, resource, sys"


@functools.cache
def bwrap_path() -> str | None:
    """bubblewrap, if it is installed and can build the sandbox here."""
    found = shutil.which("bwrap") or shutil.which("bwrap", path=SEARCH_PATH)
    if found is None or not sys.platform.startswith("linux") or root_view() is None:
        return None
    argv = [found, *bwrap_args(1 << 20), python(True), "-I", "-c", _PROBE]
    return found if _probe(argv) else None


def python(private_root: bool) -> str:
    """The interpreter the sandbox runs: in a private root, its executable
    itself (no virtualenv is there)."""
    chosen = interpreter(private_root)[0]
    found = sandbox_view.layout(chosen) if private_root else None
    return found.executable if found is not None else chosen


def root_view() -> sandbox_view.View | None:
    """What a private root holds besides /usr, /dev and /tmp (None:
    the interpreter could not say)."""
    return sandbox_view.view(interpreter(True)[0])


def bwrap_args(tmp_bytes: int) -> list[str]:
    """The bubblewrap options (without the program): namespaces, the read-only root, /tmp."""
    args = [
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
    ]
    if os.geteuid() != 0:
        # bubblewrap needs a user namespace when it is not run by root; none may be nested in it.
        args += ["--unshare-user", "--disable-userns"]
    args += ["--ro-bind", "/usr", "/usr"]
    for kind, source, path in _root_links():
        args += ["--symlink", source, path] if kind == "link" else ["--ro-bind", source, path]
    # No --proc: the host's is not there, and neither is /proc/self/mem. The private /tmp comes
    # before the interpreter's parts: a virtualenv or pyenv under /tmp
    # (tox, CI runners) stays visible.
    args += ["--dev", "/dev", "--perms", "1777", "--size", str(tmp_bytes), "--tmpfs", "/tmp"]
    view = root_view()
    if view is None:
        raise RuntimeError("the sandbox's interpreter did not say where its standard library is")
    for parent in view.parents():
        # bubblewrap would create the directories above a bind 0700, out of the dropped uid's reach.
        args += ["--perms", "0755", "--dir", parent]
    for bind in view.binds:
        args += ["--ro-bind", bind, bind]
    for hidden in view.hidden_dirs:
        args += ["--perms", "0555", "--tmpfs", hidden, "--remount-ro", hidden]
    for hidden in view.hidden_files:
        args += ["--ro-bind", "/dev/null", hidden]
    return [*args, "--chdir", "/tmp"]


def chroot_args(tmp_bytes: int, mount_point: str, unshare: str) -> list[str]:
    """After ``unshare --mount``: the same root as bubblewrap's, built on ``mount_point`` (a
    directory of ours), entered.

    The PID namespace is made last, inside the root (``unshare`` is under /usr): the mounts'
    helpers run before it, so they never count beside the code against the run's pids group.
    """
    view = root_view()
    if view is None:
        raise RuntimeError("the sandbox's interpreter did not say where its standard library is")
    mount = shutil.which("mount", path=SEARCH_PATH) or "mount"
    chroot = shutil.which("chroot", path="/usr/sbin:/sbin:" + SEARCH_PATH) or "chroot"
    pid = " ".join(_PID_NAMESPACE)
    lines = [*_skeleton(view, mount), *_mounts(view, mount, tmp_bytes),
             f'{mount} -o remount,ro "$r"', f'exec {chroot} "$r" {shlex.quote(unshare)} {pid} "$@"']
    return ["/bin/sh", "-c", "\n".join(lines), "sh", mount_point]


def _at(path: str) -> str:
    """``path`` under the new root, in the script (``$r``: the mount point)."""
    return '"$r"' + shlex.quote(path)


def _skeleton(view: sandbox_view.View, mount: str) -> list[str]:
    """The script's start: the root's tmpfs, its mount points, /usr and the links into it."""
    devices = [f"/dev/{name}" for name in _DEVICES]
    # Mount points made as empty files, and as directories.
    files = [*devices, *(b for b in view.binds if os.path.isfile(b))]
    dirs = ["/usr", "/tmp", "/dev", *view.parents(),
            *(b for b in view.binds if not os.path.isfile(b))]
    # The new mount namespace is private (unshare's default): nothing below reaches the host.
    lines = ["set -eu", "umask 022", "r=$1; shift",
             f'{mount} -t tmpfs -o mode=0755,size=1m echo-bench-root "$r"',
             "mkdir -p " + " ".join(_at(d) for d in dirs), *(f": > {_at(f)}" for f in files),
             f"{mount} -o bind,ro /usr {_at('/usr')}"]
    for kind, source, path in _root_links():
        bind = f"mkdir {_at(path)} && {mount} -o bind,ro {shlex.quote(source)} {_at(path)}"
        lines.append(f"ln -s {shlex.quote(source)} {_at(path)}" if kind == "link" else bind)
    return lines


def _mounts(view: sandbox_view.View, mount: str, tmp_bytes: int) -> list[str]:
    """The mounts over the skeleton: /tmp, the devices, the interpreter's parts, what is hidden."""
    devices = [f"/dev/{name}" for name in _DEVICES]
    return [f"{mount} -t tmpfs -o mode=1777,size={tmp_bytes} echo-bench-tmp {_at('/tmp')}",
            *(f"{mount} -o bind {d} {_at(d)}" for d in devices),
            *(f"{mount} -o bind,ro {shlex.quote(b)} {_at(b)}" for b in view.binds),
            *(f"{mount} -t tmpfs -o ro,mode=0555,size=4k echo-bench-hidden {_at(h)}"
              for h in view.hidden_dirs),
            *(f"{mount} -o bind,ro /dev/null {_at(h)}" for h in view.hidden_files)]


def _root_links() -> list[tuple[str, str, str]]:
    """/bin, /lib, ... as on the host: ("link", target, path) into /usr (merged
    /usr), else ("bind", path, path)."""
    found: list[tuple[str, str, str]] = []
    for name in _ROOT_LINKS:
        path = Path("/", name)
        if path.is_symlink():
            found.append(("link", os.readlink(path), str(path)))
        elif path.is_dir():
            found.append(("bind", str(path), str(path)))
    return found


@functools.cache
def interpreter(private_root: bool) -> tuple[str, bool]:
    """(the Python the sandbox runs, whether a dropped uid can run it):
    ours if it can, else the system's."""
    if os.geteuid() != 0:
        return sys.executable, False  # nothing to drop to
    system = shutil.which("python3", path=SEARCH_PATH)
    for candidate in (sys.executable, system):
        if candidate and _runnable_by_others(Path(candidate), private_root):
            return candidate, True
    return sys.executable, False


def _runnable_by_others(path: Path, private_root: bool) -> bool:
    """Whether another uid may run ``path`` (a venv or pyenv under
    /root, mode 0700, is out of reach)."""
    real = path.resolve()
    if not real.is_file() or not real.stat().st_mode & stat.S_IXOTH:
        return False
    prefix = real.parents[1]  # <prefix>/bin/python: the standard library lives under <prefix>/lib
    # In a private root only the directories inside the prefix matter: the ones above are made 0755.
    above = [real.parent, prefix] if private_root else list(real.parents)
    dirs = [*above, *(p for p in (prefix / "lib").glob("python3*") if p.is_dir())]
    return all(d.stat().st_mode & stat.S_IXOTH for d in dirs)


@functools.cache
def unshare_prefix() -> list[str]:
    """The ``unshare`` command line this machine allows on the host's filesystem
    (PID, network, IPC); [] if none."""
    for candidate in _unshare_candidates():
        # unshare --net --ipc --pid --fork --kill-child ...
        prefix = [*candidate[:3], *_PID_NAMESPACE, *candidate[3:]]
        if _probe([*prefix, sys.executable, "-I", "-S", "-c", ""]):
            return prefix
    return []


@functools.cache
def unshare_root_prefix() -> list[str]:
    """``unshare --mount`` and more, where the private root can be built after it
    (``chroot_args`` follows); [] if not."""
    if root_view() is None:
        return []
    for prefix in _unshare_candidates():
        with tempfile.TemporaryDirectory(prefix="echo-bench-probe-") as mount_point:
            argv = [
                *prefix,
                "--mount",
                *chroot_args(1 << 20, mount_point, prefix[0]),
                python(True),
                "-I",
                "-c",
                _PROBE,
            ]
            if _probe(argv):
                return [*prefix, "--mount"]
    return []


def _unshare_candidates() -> list[list[str]]:
    """``unshare`` with the network and IPC namespaces: as root, plain
    first, then in a user namespace."""
    unshare = shutil.which("unshare") or shutil.which("unshare", path=SEARCH_PATH)
    if unshare is None or not sys.platform.startswith("linux"):
        return []
    base = [unshare, "--net", "--ipc"]
    as_user = [*base, "--user", "--map-root-user"]
    return [base, as_user] if os.geteuid() == 0 else [as_user]


def private_root(prefix: list[str]) -> bool:
    """Whether a prefix builds the private root (``unshare_root_prefix``; else
    the code sees the host's files)."""
    return "--mount" in prefix


def _probe(argv: list[str]) -> bool:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        probe = subprocess.run(argv, env={"PATH": "/usr/bin:/bin"}, stdin=subprocess.DEVNULL,
                               capture_output=True, timeout=10)
        return probe.returncode == 0
    return False
