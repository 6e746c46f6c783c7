"""The spec a results file was recorded with, found again for what the rows do not hold.

A row keeps its answer, not the settings it was made under: the report reads prices and the
judges' and arms' declared models from the spec the meta line names, when that spec is still
under the current directory and still loads.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_echo_bench.errors import EchoBenchError

if TYPE_CHECKING:
    from pytest_echo_bench.results.read import Results
    from pytest_echo_bench.spec.load import Spec


def recorded_specs(results: Results, bench: str) -> Iterator[Spec]:
    """Each spec of benchmark ``bench`` that the files' meta lines name, in their order, loaded
    from under the current directory (a path outside it, missing, or that no longer loads is
    passed over: the report says what it could not find, it does not stop)."""
    from pytest_echo_bench.spec.load import load_spec

    root = Path.cwd().resolve()
    for meta in results.metas:
        entry = meta.benchmarks.get(bench)
        for name in ([entry.spec] if entry is not None and entry.spec else []) + meta.spec_files:
            path = (root / name).resolve()
            if not path.is_relative_to(root) or not path.is_file():
                continue
            try:
                spec = load_spec(path, calls=False)
            except (EchoBenchError, OSError, ValueError):
                continue
            if spec.benchmark == bench:
                yield spec
