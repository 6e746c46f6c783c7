"""Which isolation holds for scored code on this machine, said once, and required where asked.

The sandbox runs with what the machine has rather than refusing (each row's ``extra.sandbox``
says what held), so a weaker machine must never be silent: ``summary_line`` is printed at the
start of a run that scores code and again at its end when a layer is missing, and
``isolation: required`` on the scorer (or ``--bench-require-isolation`` for the whole run) turns
a missing layer into an arm-level stop that names it.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_echo_bench.errors import UnavailableError
from pytest_echo_bench.suites import sandbox_cgroup, sandbox_launch
from pytest_echo_bench.suites.sandbox import Limits

CODE_SCORERS = frozenset({"humaneval"})  # scorers that run model-written code in the sandbox
LEVELS = ("best-effort", "required")
HINTS = {
    "bubblewrap": "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) where user "
    "namespaces are allowed",
    "cgroups": "run as root where the cgroup v1 memory and pids controllers (or a delegated "
    "cgroup) can be written",
    "uid drop": "run as root, with a Python that other users may execute (not under a 0700 home)",
    "private filesystem": (
        "the code can read every file you can, installed datasets' tests and canonical solutions "
        "among them: install bubblewrap, or allow mount namespaces (unshare --mount)"
    ),
}
_REQUIRED = [False]  # the run's --bench-require-isolation, set once per process by the plugin


@dataclass(frozen=True)
class Machine:
    """The layers this machine can give a sandboxed run."""

    bubblewrap: bool
    cgroups: bool
    uid_drop: bool
    unshare_root: bool = True  # without bubblewrap, unshare --mount builds the same private root

    def held(self, limits: Limits | None = None) -> dict[str, bool]:
        """Each layer, and whether a run with ``limits`` has it (a test seam can turn some off)."""
        limits = limits or Limits()
        bwrap = self.bubblewrap and limits.bwrap and not limits.network
        return {
            "bubblewrap": bwrap,
            "cgroups": self.cgroups and limits.cgroups,
            "uid drop": self.uid_drop,
            "private filesystem": bwrap or (self.unshare_root and not limits.network),
        }

    def missing(self, limits: Limits | None = None) -> list[str]:
        """The layers a run with ``limits`` goes without."""
        return [name for name, ok in self.held(limits).items() if not ok]


@functools.cache
def machine() -> Machine:
    """What this machine allows (probed once per process: a real bubblewrap start, a real group)."""
    bwrap = sandbox_launch.bwrap_path() is not None
    groups = sandbox_cgroup.create(64, 4, 0)
    cgroups = groups.memory is not None and groups.pids is not None
    sandbox_cgroup.destroy(groups)
    # Without root nothing can be dropped to; bubblewrap then maps the caller's own uid.
    unshare_root = bool(sandbox_launch.unshare_root_prefix())
    uid_drop = os.geteuid() == 0 and sandbox_launch.interpreter(bwrap or unshare_root)[1]
    return Machine(bwrap, cgroups, uid_drop, unshare_root)


def summary_line(found: Machine | None = None) -> str:
    """One line: which layers hold for scored code here, and what to install for the rest."""
    found = found or machine()
    held = found.held()
    if held["private filesystem"]:
        # named only where it is missing: files cannot be hidden from the code
        del held["private filesystem"]
    layers = ", ".join(f"{name} {'yes' if ok else 'NO'}" for name, ok in held.items())
    missing = found.missing()
    if not missing:
        return f"echo-bench: isolation for scored code: {layers} (full)"
    todo = "; ".join(f"for {name}: {HINTS[name]}" for name in missing)
    return f"echo-bench: isolation for scored code: {layers} (weaker than full: {todo})"


def require(flag: bool) -> None:
    """The run's ``--bench-require-isolation``, for every scorer in this process."""
    _REQUIRED[0] = flag


def level(options: Mapping[str, Any]) -> str:
    """The scorer's ``isolation:`` option, or "required" for the whole run."""
    value = str(options.get("isolation", "best-effort"))
    if value not in LEVELS:
        raise ValueError(
            f"scorer option isolation must be one of {', '.join(LEVELS)}, got {value!r}"
        )
    return "required" if _REQUIRED[0] else value


def enforce(options: Mapping[str, Any], limits: Limits) -> None:
    """Raise the arm-level stop when isolation is required and a layer is missing."""
    if level(options) != "required":
        return
    missing = machine().missing(limits)
    if missing:
        hints = "; ".join(f"{name}: {HINTS[name]}" for name in missing)
        raise UnavailableError(
            f"isolation is required but {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} "
            f"missing on this machine ({hints})",
            misconfigured=True,
        )
