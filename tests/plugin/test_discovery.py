"""The spec sniff the entry point runs on every YAML file under pytest's arguments."""

from __future__ import annotations

from pathlib import Path

import pytest

import pytest_echo_bench.plugin as entry

CASES = {
    "plain.yaml": ("benchmark: b\narms:\n  a: {provider: sim}\n", True),
    "late_arms.yaml": (
        "benchmark: b\n"
        + "".join(f"  - {{id: q{i}}}\n" for i in range(3000))
        + "arms :\n  a: {}\n",
        True,
    ),
    "indented.yaml": ("x:\n  benchmark: b\n  arms: {}\n", False),
    "prefix.yaml": ("benchmarks: b\narmsx: {}\n", False),
    "no_colon.yaml": ("benchmark: b\narms", False),
    "arms_first.yml": ("arms: {}\nbenchmark: b\n", True),
    "other.txt": ("benchmark: b\narms: {}\n", False),
}


@pytest.mark.parametrize("chunk", [7, 64, 1 << 20])
def test_sniff_finds_top_level_keys_across_chunk_boundaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(entry, "_SNIFF_CHUNK", chunk)
    for name, (text, expected) in CASES.items():
        path = tmp_path / name
        path.write_text(text)
        assert entry.looks_like_spec(path) is expected, name


def test_find_specs_prunes_what_pytest_would_not_enter(tmp_path: Path) -> None:
    spec = "benchmark: b\narms: {}\n"
    for where in (
        "a/s.yaml",
        ".hidden/s.yaml",
        "node_modules/s.yaml",
        "venv/s.yaml",
        "skipme/s.yaml",
        "b/c/s.yml",
    ):
        (tmp_path / where).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / where).write_text(spec)
    (tmp_path / "venv" / "pyvenv.cfg").write_text("")
    found = entry.find_specs(["."], tmp_path, ["skip*"])
    assert [p.relative_to(tmp_path).as_posix() for p in found] == ["a/s.yaml", "b/c/s.yml"]
