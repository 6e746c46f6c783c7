"""pytest-echo-bench: LLM benchmark sweeps where every benchmark item is a pytest test.

The public names are imported on first use: the pytest11 entry point loads this package into
every pytest run, and an ordinary test suite must not pay for the spec loader, the store or the
providers (see ``plugin/__init__.py``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_PUBLIC = {
    "ArmContext": "pytest_echo_bench.providers.python_arm",
    "arm": "pytest_echo_bench.providers.python_arm",
    "Example": "pytest_echo_bench.datasets.example",
    "Completion": "pytest_echo_bench.providers.base",
    "Verdict": "pytest_echo_bench.scoring.verdict",
    "judge": "pytest_echo_bench.scoring.verdict",
    "scorer": "pytest_echo_bench.scoring.registry",
}

if TYPE_CHECKING:
    from pytest_echo_bench.datasets.example import Example
    from pytest_echo_bench.providers.base import Completion
    from pytest_echo_bench.providers.python_arm import ArmContext, arm
    from pytest_echo_bench.scoring.registry import scorer
    from pytest_echo_bench.scoring.verdict import Verdict, judge


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_echo_bench' has no attribute {name!r}")
    # Not cached here: the module in sys.modules is the one every lookup must see (a process that
    # drops and re-imports modules between sessions, as pytester does, would otherwise register
    # a user's scorer or arm in a registry nobody reads).
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])


__all__ = [
    "ArmContext",
    "Completion",
    "Example",
    "Verdict",
    "__version__",
    "arm",
    "judge",
    "scorer",
]
