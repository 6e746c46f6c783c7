"""The layout holds: no import cycles, rooms import only the rooms below them, the pure rooms never
reach pytest, and no module outgrows one concern. Read from the source by grimp (the import graph
that import-linter uses), with imports inside functions counted and
``if TYPE_CHECKING:`` ones not."""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest

PACKAGE = "pytest_echo_bench"
# Each room may import the rooms listed after it (and the error tree), never one before it.
LAYERS = (
    "plugin", "cli", "interop", "report", "analysis", "results", "shards", "engine", "budget",
    "providers", "suites", "scoring", "datasets", "spec", "store",
)
PURE = LAYERS[1:]  # all but plugin/
# 400 lines when lines could be 150 characters; at 100 the same code takes about a quarter more
# (wrapping made the package 23% longer), so 500.
MAX_LINES = 500


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(
        PACKAGE, exclude_type_checking_imports=True, include_external_packages=True
    )


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == PACKAGE else parts[0]


def _cycles(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root) & modules)))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    work.append(
                        (
                            child,
                            iter(sorted(graph.find_modules_directly_imported_by(child) & modules)),
                        )
                    )
                elif child in stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def ours(graph: grimp.ImportGraph) -> set[str]:
    return {m for m in graph.modules if m == PACKAGE or m.startswith(PACKAGE + ".")}


def test_no_import_cycles(graph: grimp.ImportGraph) -> None:
    assert _cycles(graph, ours(graph)) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The check above can fail: a two-module package that imports itself in a circle."""
    cyclic = grimp.ImportGraph()
    for module in ("p", "p.a", "p.b", "p.c"):
        cyclic.add_module(module)
    cyclic.add_import(importer="p.a", imported="p.b")
    cyclic.add_import(importer="p.b", imported="p.a")
    cyclic.add_import(importer="p.c", imported="p.a")
    assert _cycles(cyclic, set(cyclic.modules)) == [["p.a", "p.b"]]


def test_rooms_import_only_the_rooms_below_them(graph: grimp.ImportGraph) -> None:
    upward = []
    for module in sorted(ours(graph)):
        room = _room(module)
        if room not in LAYERS:
            continue
        for imported in graph.find_modules_directly_imported_by(module):
            target = _room(imported)
            if target in LAYERS and LAYERS.index(target) < LAYERS.index(room):
                upward.append(f"{module} -> {imported}")
    assert upward == []


@pytest.mark.parametrize("room", PURE)
def test_pure_rooms_never_reach_pytest(graph: grimp.ImportGraph, room: str) -> None:
    reaching = [
        m
        for m in sorted(graph.find_descendants(f"{PACKAGE}.{room}") | {f"{PACKAGE}.{room}"})
        if any(
            graph.chain_exists(importer=m, imported=p)
            for p in ("pytest", "_pytest")
            if p in graph.modules
        )
    ]
    assert reaching == []


def test_no_module_over_max_lines() -> None:
    root = Path(__file__).resolve().parents[2] / PACKAGE
    sizes = {str(p.relative_to(root)): len(p.read_text().splitlines()) for p in root.rglob("*.py")}
    long = {rel: n for rel, n in sizes.items() if n > MAX_LINES}
    assert long == {}
