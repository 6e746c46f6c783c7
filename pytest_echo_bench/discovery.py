"""Finding the spec files of a run on the controller, before (and without) collection.

Under xdist the controller collects nothing, yet it must name the results file, write the
fingerprint and check a resume before workers start; so it looks for specs itself, pruning
the directories pytest would not enter.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable
from pathlib import Path

from .spec import looks_like_spec

_ALWAYS_SKIP = {"bench_results", "node_modules", "__pycache__"}


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
