"""``benchmarks/house.py`` counts what its docstring says, on a package small enough to count by
hand: string-key reads, ``dict[str, Any]``, long lines, complexity, rooms and wide ``__init__``."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]

ROOMY = '''from typing import Any


def read(row: dict[str, Any]) -> Any:
    if row["a"] and row.get("b"):
        return row.get("c", 1)
    row["d"] = 1
    return [x for x in row if x]
'''
WIDE = "class Wide:\n    def __init__(self) -> None:\n" + "".join(
    f"        self.a{n} = {n}\n" for n in range(13)
)
LONG = f'TEXT = "{"x" * 100}"\n'


@pytest.fixture(scope="module")
def house() -> ModuleType:
    spec = importlib.util.spec_from_file_location("house", ROOT / "benchmarks" / "house.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["house"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_figures_of_a_small_package(tmp_path: Path, house: ModuleType) -> None:
    (tmp_path / "room").mkdir()
    (tmp_path / "room" / "rows.py").write_text(ROOMY)
    (tmp_path / "room" / "wide.py").write_text(WIDE)
    (tmp_path / "top.py").write_text(LONG)
    measured = house.measure(tmp_path)
    assert measured.lines == 8 + 15 + 1
    assert measured.key_reads == 3  # row["a"], .get("b"), .get("c", 1); not the assignment
    assert measured.dict_str_any == 1
    assert measured.long_lines == 1
    assert measured.room_files == {"room": 2, "top": 1}
    assert measured.wide_inits == [(13, "room/wide.py:Wide")]
    # read: 1 + if + and + comprehension + its if = 5 over 5 lines; __init__: 1 over 15 lines
    assert (measured.cc_sum, measured.function_lines) == (6, 5 + 14)
    assert measured.complex_functions == []
    shown = "\n".join(house.report(measured, tmp_path))
    assert "string-key reads per 1,000 lines: 125.0 (3)" in shown
    assert "the biggest room: room/: 96%, 2 files" in shown


def test_the_complexity_without_radon_is_radons(house: ModuleType) -> None:
    source = (
        "def f(x):\n    for y in x:\n        if y or x:\n            pass\n"
        "    try:\n        pass\n    except ValueError:\n        pass\n"
        "    return 1 if x else 2\n"
    )
    own = house.ast_complexity(ast.parse(source).body[0])
    assert own == 6  # 1, the loop, the if, the or, the handler, the conditional expression
    radon = pytest.importorskip("radon.complexity")
    assert radon.cc_visit(source)[0].complexity == own


def test_the_package_has_no_dense_function_and_no_wide_init(house: ModuleType) -> None:
    """The bars the code keeps: no function above complexity 15 (radon's count, installed by the
    test extra), no ``__init__`` setting more than about 12 attributes."""
    pytest.importorskip("radon.complexity")
    measured = house.measure(ROOT / "pytest_echo_bench")
    assert measured.complex_functions == []
    assert [(n, where) for n, where in measured.wide_inits if n > 13] == []
