"""The pytest11 entry point: adds the options and, only when a run has benchmark specs, registers
the controller and worker plugins that hold all state.

Installed plugins load into every pytest run, so this module stays inert for ordinary test
suites: it imports nothing of ours but ``options``, validates no ``ECHO_BENCH_*`` value until it
has found a spec, and finds specs by a cheap sniff of the YAML files under pytest's arguments.
Everything else is imported only once a spec is found.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from pytest_echo_bench.plugin import options

# The run context, as plain JSON, that the controller hands every xdist worker.
HANDOFF = pytest.StashKey[dict[str, Any]]()
_WORKER_KEY = "echo_bench"
_ADDOPTS_KEY = "echo_bench_addopts"


def pytest_addoption(parser: pytest.Parser) -> None:
    options.addoption(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, args: list[str]) -> None:
    """Before any conftest or plugin configures: a path option's value
    must not have moved the rootdir."""
    namespace = early_config.known_args_namespace
    # else nothing of ours loads
    if any(getattr(namespace, dest, None) for dest in options.PATH_OPTIONS):
        from pytest_echo_bench.plugin.rootdir import repin

        repin(early_config, args)


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "bench_arm(name): the arm of a benchmark item")
    config.addinivalue_line("markers", "bench_subtask(name): the subtask of a benchmark item")
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        if _ADDOPTS_KEY in workerinput:  # what the controller's environment said, before the pins
            _restore_addopts(workerinput[_ADDOPTS_KEY])
        if workerinput.get(_WORKER_KEY):  # the controller found specs
            from pytest_echo_bench.plugin.register import worker

            worker(config, options.resolve(config), workerinput[_WORKER_KEY])
        return
    resume = config.getoption("bench_resume")
    specs = (
        []
        if resume
        else find_specs(config.args, config.invocation_params.dir, config.getini("norecursedirs"))
    )
    if not resume and not specs:
        return  # an ordinary test suite: nothing of ours runs, no setting of ours is read
    # Imported by their full names, never as attributes of this package: a process that drops
    # and re-imports modules between sessions (pytester does) must get the current ones.
    from pytest_echo_bench.plugin.context import build_context
    from pytest_echo_bench.plugin.opening import open_resume, selection_of
    from pytest_echo_bench.plugin.register import controller

    opts = options.resolve(config)
    opened = open_resume(config, opts) if resume else None
    # a resume runs with the options its meta line records, unless told otherwise
    if opened is not None:
        from pytest_echo_bench.plugin.recorded import recorded, resumed

        opts, overridden = resumed(config, opts, recorded(opened.meta, resume))
        opened.notes.extend(overridden)
    selection = selection_of(config, opts, opened)
    if opened is not None:
        specs = find_specs(
            selection.args, config.invocation_params.dir, config.getini("norecursedirs")
        )
        if not specs:
            raise pytest.UsageError(
                f"--bench-resume {resume}: no benchmark spec found in {' '.join(selection.args)}; "
                "name the spec files on the command line"
            )
    config.stash[HANDOFF] = controller(
        config, opts, build_context(config, opts, specs, selection, opened)
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    """Close and unregister what ``pytest_configure`` registered (pytester runs many sessions)."""
    for name in (
        "echo-bench-worker",
        "echo-bench-controller",
        "echo-bench-owner",
        "echo-bench-selection",
    ):
        plugin = config.pluginmanager.get_plugin(name)
        if plugin is not None:
            close = getattr(plugin, "close", None)
            if close is not None:
                close()
            config.pluginmanager.unregister(plugin, name)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Controller: hand every xdist worker the run context decided once, here."""
    handoff = node.config.stash.get(HANDOFF, None)
    if handoff is not None:
        node.workerinput[_WORKER_KEY] = handoff
        node.workerinput[_ADDOPTS_KEY] = os.environ.get("PYTEST_ADDOPTS")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_setupnodes(config: pytest.Config, specs: list[Any]) -> None:
    """Controller: local workers start with its rootdir and ini file (``plugin.rootdir``)."""
    if config.stash.get(HANDOFF, None) is None:
        return  # not a sweep: xdist's workers are left exactly as they are
    from pytest_echo_bench.plugin.rootdir import worker_pins

    for spec in specs:
        if spec.popen and not spec.chdir:  # a remote or relocated worker has its own paths
            spec.env["PYTEST_ADDOPTS"] = worker_pins(config, os.environ.get("PYTEST_ADDOPTS"))


def _restore_addopts(before: str | None) -> None:
    """A worker's own subprocesses (model CLIs, sandboxes) see the environment the user gave."""
    if before is None:
        os.environ.pop("PYTEST_ADDOPTS", None)
    else:
        os.environ["PYTEST_ADDOPTS"] = before


# -- finding spec files ----------------------------------------------------------------------
# Under xdist the controller collects nothing, yet it must name the results file, write the
# fingerprint and check a resume before workers start; so it looks for specs itself, pruning
# the directories pytest would not enter.

# "bench_results" is store.files.RESULTS_DIR, spelled out: the entry point imports nothing of
# ours for a suite without specs (tests/plugin/test_inert.py);
# tests/plugin/test_results_dir.py checks they agree.
_ALWAYS_SKIP = {"bench_results", "node_modules", "__pycache__"}
_SNIFFED = ((b"benchmark", re.compile(rb"benchmark\s*:")), (b"arms", re.compile(rb"arms\s*:")))
_SNIFF_CHUNK = 1 << 20


def find_specs(args: Iterable[str], invocation_dir: Path, norecurse: list[str]) -> list[Path]:
    """Spec files named by, or found under, pytest's positional ``args``; sorted, unique."""
    found: dict[Path, None] = {}
    for arg in args:
        path = (invocation_dir / arg.split("::", 1)[0]).resolve()
        if path.is_file():
            if looks_like_spec(path):
                found[path] = None
        elif path.is_dir():
            for spec in _walk(path, norecurse):
                found[spec] = None
    return sorted(found)


def looks_like_spec(path: Path) -> bool:
    """Cheap sniff: a YAML file with top-level ``benchmark:`` and ``arms:`` keys.

    Read up to both keys, however far down (an inline dataset of thousands of items can put
    ``arms:`` megabytes into the file), a megabyte of whole lines at a time, each searched by one
    regular expression: a Python loop over the lines of a large YAML file costs more than
    importing the whole plugin.
    """
    if path.suffix not in (".yaml", ".yml") or not path.is_file():
        # a FIFO named x.yaml would block the open below: every pytest run under it hung
        return False
    found: set[bytes] = set()
    try:
        with open(path, "rb") as f:
            rest = b""
            while True:
                chunk = f.read(_SNIFF_CHUNK)
                block = rest + chunk
                cut = len(block) if not chunk else block.rfind(b"\n") + 1  # whole lines only
                block, rest = block[:cut], block[cut:]
                found.update(
                    name
                    for name, key in _SNIFFED
                    if name not in found and _top_level(block, name, key)
                )
                if len(found) == len(_SNIFFED):
                    return True
                if not chunk:
                    return False
    except OSError:
        return False


def _top_level(block: bytes, name: bytes, key: re.Pattern[bytes]) -> bool:
    """Whether a line of ``block`` starts with the key ``name`` (found
    by bytes.find, fast as memchr)."""
    if block.startswith(name) and key.match(block):
        return True
    at = block.find(b"\n" + name)
    while at != -1:
        if key.match(block, at + 1):
            return True
        at = block.find(b"\n" + name, at + 1)
    return False


def _walk(root: Path, norecurse: list[str]) -> Iterable[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not _skip_dir(Path(dirpath) / d, norecurse))
        for name in sorted(filenames):
            if name.endswith((".yaml", ".yml")) and looks_like_spec(Path(dirpath) / name):
                yield Path(dirpath) / name


def _skip_dir(path: Path, norecurse: list[str]) -> bool:
    name = path.name
    if name.startswith(".") or name in _ALWAYS_SKIP or (path / "pyvenv.cfg").exists():
        return True
    return any(fnmatch.fnmatch(name, pattern) for pattern in norecurse)
