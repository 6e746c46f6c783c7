"""pytest's rootdir kept where it would be without our options' values, in every process of a run.

pytest picks the rootdir and the ini file before any plugin adds its options, from every argument
that names an existing path: in ``--bench-resume /scratch/x.jsonl`` (the space form) the value is
taken for a test path, and a results file outside the project moves the rootdir to a common
parent (``/tmp``, or ``/scratch`` itself). Node ids gain a prefix, the default ``bench_results/``
and the cache land there, and under xdist the workers, started once the controller has created
the file, disagree with the controller about every node id. Two rules keep it in place:

- every process recomputes the setup once our options are known (``repin``) and puts the rootdir
  and ini file back; an ini file pytest missed whose settings it acts on at once (``addopts``,
  ``pythonpath``...) cannot be taken up late: the run stops with a usage error naming the ``=``
  form, which pytest never reads as a path;
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
        if value and any(a == flag and b == value for a, b in zip(args, args[1:], strict=False)):
            found[flag] = value
    return found


# What pytest has already acted on by the time a plugin can look: an ini file that sets one of these
# cannot be taken up after the fact (plugins loaded, sys.path set, versions checked).
READ_EARLY = ("addopts", "pythonpath", "required_plugins", "minversion")


def repin(config: pytest.Config, args: list[str]) -> None:
    """Put the rootdir (and the ini file) back where pytest puts
    them without our options' values."""
    ns = config.known_args_namespace
    spaced = spaced_values(ns, args)
    if not spaced:
        return  # the ``=`` form: pytest never took it for a path
    root, ini, cfg = _setup(ns, config.invocation_params.dir)
    if (root, ini) == (config.rootpath, config.inipath):
        return
    ini_moved = ini != config.inipath
    # Keys of the ini file pytest should have read, or of the one it read instead, already acted on.
    inicfg = config._inicfg  # noqa: SLF001
    early = sorted({k for k in READ_EARLY if k in cfg or k in inicfg}) if ini_moved else []
    if early:
        flag, value = next(iter(spaced.items()))
        raise pytest.UsageError(
            f"pytest took the value of {flag} {value} for a test path, so it read its "
            "configuration from "
            f"{config.inipath or 'no ini file'} instead of {ini or 'none'}, and acted on "
            f"their {', '.join(early)} "
            f"before echo-bench could say otherwise: write {flag}={value} (pytest never "
            "reads that form as a path)"
        )
    # pytest has no setter for these: Config.rootpath / inipath / getini read them (pytest 7 to 9).
    moved = config.rootpath
    config._rootpath, config._inipath = root, ini  # noqa: SLF001
    # usage errors show them
    config._parser.extra_info.update(rootdir=str(root), inifile=str(ini))  # noqa: SLF001
    if ini_moved:  # the settings read so far are none of the keys refused above
        config._inicfg = cfg  # noqa: SLF001
        config._inicache.clear()  # noqa: SLF001
    if ns.confcutdir == str(moved):  # pytest's default, derived from the moved rootdir
        ns.confcutdir = str(ini.parent if ini else root)


def _setup(ns: Any, invocation_dir: Path) -> tuple[Path, Path | None, dict[str, Any]]:
    """The rootdir, ini file and its settings pytest derives from the positional args alone."""
    from _pytest.config.findpaths import determine_setup

    given = {
        "inifile": ns.inifilename,
        "override_ini": getattr(ns, "override_ini", None),
        "args": ns.file_or_dir,
        "rootdir_cmd_arg": ns.rootdir or None,
        "invocation_dir": invocation_dir,
    }
    accepted = inspect.signature(determine_setup).parameters  # override_ini is new in pytest 8.x
    root, ini, cfg, *_ = determine_setup(**{k: v for k, v in given.items() if k in accepted})
    return Path(root), Path(ini) if ini else None, cfg


def worker_pins(config: pytest.Config, before: str | None) -> str:
    """``PYTEST_ADDOPTS`` for local xdist workers: the caller's own, then the controller's rootdir,
    ini file and conftest boundary.

    The user's own ``--rootdir``/``-c`` on the command line come after it and win, as they did here.
    """
    # With no ini file, /dev/null says "none"; pytest would then derive the conftest boundary from
    # /dev, so it is pinned too: a worker never imports a conftest.py the controller would not.
    confcutdir = config.known_args_namespace.confcutdir or str(config.rootpath)
    pins = shlex.join(
        [
            "--rootdir",
            str(config.rootpath),
            "--config-file",
            str(config.inipath or os.devnull),
            "--confcutdir",
            confcutdir,
        ]
    )
    return f"{before} {pins}" if before else pins
