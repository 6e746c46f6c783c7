"""pytest's rootdir kept where it would be without our options' values, in every process of a run.

pytest picks the rootdir and the ini file before any plugin adds its options, from every argument
that names an existing path: in ``--bench-resume /scratch/x.jsonl`` (the space form) the value is
taken for a test path, and a results file outside the project moves the rootdir to a common
parent (``/tmp``, or ``/scratch`` itself). Node ids gain a prefix, the default ``bench_results/``
and the cache land there, and under xdist the workers, started once the controller has created
the file, disagree with the controller about every node id. Two rules keep it in place:

- every process recomputes the setup once our options are known (``repin``); when only the
  rootdir moved, it is put back; when the value also hid the project's ini file, the run stops
  with a usage error naming the ``=`` form, which pytest never reads as a path;
- xdist workers start with the controller's rootdir and ini file pinned (``worker_pins``), so a
  file the controller created meanwhile cannot move theirs.
"""

from __future__ import annotations

import inspect
import os
import shlex
from pathlib import Path
from typing import Any

import pytest

from pytest_echo_bench.plugin.options import PATH_OPTIONS


def spaced_values(namespace: Any, args: list[str]) -> dict[str, str]:
    """Our path options given in the space form (``--bench-out X``), as option name -> value."""
    found: dict[str, str] = {}
    for dest, flag in PATH_OPTIONS.items():
        value = getattr(namespace, dest, None)
        if value and any(a == flag and b == value for a, b in zip(args, args[1:])):
            found[flag] = value
    return found


def repin(config: pytest.Config, args: list[str]) -> None:
    """Put the rootdir back where pytest puts it without our options' values (see the module docstring)."""
    ns = config.known_args_namespace
    spaced = spaced_values(ns, args)
    if not spaced:
        return  # the ``=`` form: pytest never took it for a path
    root, ini = _setup(ns, config.invocation_params.dir)
    if (root, ini) == (config.rootpath, config.inipath):
        return
    if ini != config.inipath:
        flag, value = next(iter(spaced.items()))
        found = f"from {config.inipath}" if config.inipath else "from no ini file"
        raise pytest.UsageError(
            f"pytest took the value of {flag} {value} for a test path, so it read its configuration {found} "
            f"instead of {ini or 'none'}, before echo-bench could say otherwise: write {flag}={value} "
            "(pytest never reads that form as a path), or pass -c and --rootdir")
    moved = config.rootpath
    # pytest has no setter for the rootdir; Config.rootpath reads this attribute (pytest 6.1 to 9).
    config._rootpath = root  # noqa: SLF001
    config._parser.extra_info["rootdir"] = str(root)  # noqa: SLF001 (shown by usage errors)
    if ini is None and ns.confcutdir == str(moved):  # pytest's default, derived from the moved rootdir
        ns.confcutdir = str(root)


def _setup(ns: Any, invocation_dir: Path) -> tuple[Path, Path | None]:
    """The rootdir and ini file pytest derives from the positional args alone (our values excluded)."""
    from _pytest.config.findpaths import determine_setup

    given = {"inifile": ns.inifilename, "override_ini": getattr(ns, "override_ini", None), "args": ns.file_or_dir,
             "rootdir_cmd_arg": ns.rootdir or None, "invocation_dir": invocation_dir}
    accepted = inspect.signature(determine_setup).parameters  # override_ini is new in pytest 8.x
    root, ini, *_ = determine_setup(**{k: v for k, v in given.items() if k in accepted})
    return Path(root), Path(ini) if ini else None


def worker_pins(config: pytest.Config, before: str | None) -> str:
    """``PYTEST_ADDOPTS`` for local xdist workers: the caller's own, then the controller's rootdir and ini.

    The user's own ``--rootdir``/``-c`` on the command line come after it and win, as they did here.
    """
    pins = shlex.join(["--rootdir", str(config.rootpath), "--config-file", str(config.inipath or os.devnull)])
    return f"{before} {pins}" if before else pins
