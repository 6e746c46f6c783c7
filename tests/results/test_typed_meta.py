"""merge and regrade read the meta line typed (``Meta.from_json``), as report, page and resume do:
fields read as attributes, the fields this version does not name carried
through, refusals named by file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from results_files import row, write

from conftest import sim_spec
from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.results.merge import merge
from pytest_echo_bench.results.regrade import regrade
from pytest_echo_bench.store.meta import BenchmarkEntry
from pytest_echo_bench.store.records import Meta
from pytest_echo_bench.store.writer import write_whole

META = {
    "_meta": True,
    "benchmark": "demo",
    "benchmarks": {"demo": {"spec": "demo.yaml", "fingerprint": "f1", "items": 1}},
    "spec_files": ["demo.yaml"],
    "fingerprint": "f",
    "arms": {"demo": ["good"]},
    "selection": {"args": [], "shard": "1/2"},
    "run_id": "r1",
    "plugin_version": "0.1.0",
    "created_at": "2026-01-01T00:00:00Z",
    "from_a_newer_writer": {"kept": True},
}


def test_merge_gives_a_meta_that_keeps_what_it_does_not_name(tmp_path: Path) -> None:
    first = write(tmp_path / "a.jsonl", [row("q0", "good", True)], meta=META)
    second = write(tmp_path / "b.jsonl", [row("q1", "good", False)], meta={**META, "run_id": "r2"})
    merged = merge([first, second])
    assert isinstance(merged.meta, Meta)
    assert merged.meta.run_id == "r1" and merged.meta.selection.shard == ""
    assert merged.meta.extra["merged_from"] == [str(first), str(second)]
    out = tmp_path / "m.jsonl"
    write_whole(out, merged.meta, merged.lines)
    line = json.loads(out.read_text().splitlines()[0])
    assert line["from_a_newer_writer"] == {"kept": True} and line["merged_from"] == [
        str(first),
        str(second),
    ]
    assert "extra" not in line
    assert Meta.from_json(line).to_json()["benchmarks"] == META["benchmarks"]


def test_merge_of_a_file_without_a_meta_line_types_the_assumed_one(tmp_path: Path) -> None:
    bare = write(tmp_path / "bare.jsonl", [row("q0", "good", True)])
    merged = merge([bare], {"demo": "f9"})
    assert merged.meta is not None
    assert merged.meta.benchmarks == {"demo": BenchmarkEntry(fingerprint="f9")}
    assert (
        merged.meta.extra["assumed_fingerprints"] == {"demo": "f9"}
        and merged.meta.benchmark == "demo"
    )


def test_merge_refuses_a_mistyped_meta_line_naming_the_file(tmp_path: Path) -> None:
    bad = write(
        tmp_path / "bad.jsonl", [row("q0", "good", True)], meta={**META, "spec_files": "demo.yaml"}
    )
    with pytest.raises(StoreError, match=r"bad\.jsonl:1"):
        merge([bad])


def test_regrade_gives_a_meta_with_its_provenance_and_what_it_does_not_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "demo.yaml"
    spec.write_text(sim_spec(1, arms="  good: {provider: sim, accuracy: 1.0}"))
    source = write(
        tmp_path / "r.jsonl", [row("q0", "good", False, output="4", target="4")], meta=META
    )
    done = regrade(source, [spec])
    assert isinstance(done.meta, Meta) and done.meta.extra["regraded_from"] == str(source)
    assert done.meta.extra["from_a_newer_writer"] == {"kept": True} and done.meta.run_id == "r1"
    assert done.meta.fingerprint != META["fingerprint"] and "regraded_at" in done.meta.extra
