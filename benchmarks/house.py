"""How easy the code is to change, in the measures the project compares with its models.

Usage: python benchmarks/house.py [PACKAGE_DIR] (default: pytest_echo_bench beside this folder)

Every figure is read from the .py files under the folder; "lines" are physical lines, blank ones
and comments included, over all files (so wrapping long lines lowers the per-line figures: compare
codebases at the same line length):

- string-key reads per 1,000 lines: subscripts ``x["k"]`` read (not assigned or deleted) and
  ``.get("k", ...)`` calls, the key a string literal;
- ``dict[str, Any]`` per 1,000 lines: the spelling in the source (annotations, aliases, casts);
- cyclomatic complexity per 10 function lines: the sum of every function's and method's
  complexity over the sum of their lines (``def`` to last line), times 10. A function's
  complexity is radon's (``radon.complexity.cc_visit``: 1, plus one per ``if``/``elif``, loop,
  ``except``, boolean operator, comprehension and its ``if``, match case, ``assert``; a closure's
  folded into the function that holds it) when radon is installed, else the same count made here
  from ``ast`` (nested functions folded in likewise);
- lines over 100 characters, as a share of all lines;
- the biggest room: the subfolder (or top-level module) with the most lines, its share, its files;
- functions above complexity 15, and classes whose ``__init__`` sets more than 12 attributes.
"""

from __future__ import annotations

import argparse
import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

LONG = 100
CC_LIMIT = 15
INIT_LIMIT = 12
DICT_STR_ANY = re.compile(r"\b[Dd]ict\[\s*str\s*,\s*(?:typing\.)?Any\s*\]")
DECISIONS = (ast.If, ast.IfExp, ast.Assert)
LOOPS = (ast.For, ast.AsyncFor, ast.While)
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass
class House:
    lines: int = 0
    long_lines: int = 0
    key_reads: int = 0
    dict_str_any: int = 0
    cc_sum: int = 0
    function_lines: int = 0
    room_lines: dict[str, int] = field(default_factory=dict)
    room_files: dict[str, int] = field(default_factory=dict)
    complex_functions: list[tuple[int, str]] = field(default_factory=list)
    wide_inits: list[tuple[int, str]] = field(default_factory=list)


def key_reads(tree: ast.AST) -> int:
    """``x["k"]`` in a load and ``.get("k")``: the key a string literal."""
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            count += _is_text(node.slice)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            count += node.func.attr == "get" and bool(node.args) and _is_text(node.args[0])
    return count


def _is_text(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def ast_complexity(func: ast.AST) -> int:
    """radon's count from ``ast``: 1 plus the decision points in the body, closures included."""
    cc = 1
    for node in ast.walk(func):
        if isinstance(node, DECISIONS):
            cc += 1
        elif isinstance(node, LOOPS):
            cc += 1 + bool(node.orelse)
        elif isinstance(node, ast.Try):
            cc += len(node.handlers) + bool(node.orelse)
        elif isinstance(node, ast.BoolOp):
            cc += len(node.values) - 1
        elif isinstance(node, ast.comprehension):
            cc += 1 + len(node.ifs)
        elif isinstance(node, ast.Match):
            wildcard = any(getattr(c.pattern, "pattern", False) is None for c in node.cases)
            cc += max(0, len(node.cases) - wildcard)
    return cc


def functions(
    tree: ast.AST, prefix: str = ""
) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Module-level functions and methods (nested classes' too); closures belong to their holder."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, FUNCTIONS):
            yield prefix + node.name, node
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, f"{prefix}{node.name}.")


def complexities(source: str, tree: ast.AST) -> list[tuple[str, int, int]]:
    """(name, complexity, lines) per function and method."""
    try:
        from radon.complexity import cc_visit
    except ImportError:
        return [
            (name, ast_complexity(node), (node.end_lineno or node.lineno) - node.lineno + 1)
            for name, node in functions(tree)
        ]
    return [
        (b.fullname, b.complexity, b.endline - b.lineno + 1)
        for b in cc_visit(source)
        if not hasattr(b, "methods")  # a class's figure is its methods'; they are listed too
    ]


def init_attributes(cls: ast.ClassDef) -> int:
    """The distinct ``self.<name>`` an ``__init__`` assigns."""
    for node in cls.body:
        if isinstance(node, FUNCTIONS) and node.name == "__init__":
            names = {
                target.attr
                for sub in ast.walk(node)
                if isinstance(sub, ast.Assign | ast.AnnAssign | ast.AugAssign)
                for target in _targets(sub)
                if isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            }
            return len(names)
    return 0


def _targets(node: ast.Assign | ast.AnnAssign | ast.AugAssign) -> Iterator[ast.AST]:
    for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
        yield from ast.walk(target)  # tuple targets: ``self.a, self.b = ...``


def measure(package: Path) -> House:
    house = House()
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        tree = ast.parse(source)
        room = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        house.room_lines[room] = house.room_lines.get(room, 0) + len(lines)
        house.room_files[room] = house.room_files.get(room, 0) + 1
        house.lines += len(lines)
        house.long_lines += sum(len(line) > LONG for line in lines)
        house.key_reads += key_reads(tree)
        house.dict_str_any += len(DICT_STR_ANY.findall(source))
        for name, cc, span in complexities(source, tree):
            house.cc_sum += cc
            house.function_lines += span
            if cc > CC_LIMIT:
                house.complex_functions.append((cc, f"{rel}:{name}"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and init_attributes(node) > INIT_LIMIT:
                house.wide_inits.append((init_attributes(node), f"{rel}:{node.name}"))
    return house


def report(house: House, package: Path) -> list[str]:
    per_k = 1000 / max(house.lines, 1)
    room = max(house.room_lines, key=house.room_lines.__getitem__)
    share = house.room_lines[room] / max(house.lines, 1)
    out = [
        f"{package}: {house.lines:,} lines in {sum(house.room_files.values())} files",
        f"string-key reads per 1,000 lines: {house.key_reads * per_k:.1f} ({house.key_reads})",
        f"dict[str, Any] per 1,000 lines: {house.dict_str_any * per_k:.1f} ({house.dict_str_any})",
        "cyclomatic complexity per 10 function lines: "
        f"{10 * house.cc_sum / max(house.function_lines, 1):.1f}",
        f"lines over {LONG} characters: {100 * house.long_lines / max(house.lines, 1):.1f}%"
        f" ({house.long_lines})",
        f"the biggest room: {room}/: {share:.0%}, {house.room_files[room]} files",
        f"functions above CC {CC_LIMIT}: {len(house.complex_functions)}",
        *(f"  {cc:3d} {name}" for cc, name in sorted(house.complex_functions, reverse=True)),
        f"classes whose __init__ sets more than {INIT_LIMIT} attributes: {len(house.wide_inits)}",
        *(f"  {n:3d} {name}" for n, name in sorted(house.wide_inits, reverse=True)),
    ]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = Path(__file__).resolve().parent.parent / "pytest_echo_bench"
    parser.add_argument("package", nargs="?", type=Path, default=default)
    args = parser.parse_args(argv)
    print("\n".join(report(measure(args.package), args.package)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
