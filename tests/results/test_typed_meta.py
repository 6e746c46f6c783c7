"""merge and regrade read the meta line typed (``Meta.from_json``), as report, page and resume do:
fields read as attributes, the fields this version does not name carried
through, refusals named by file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import sim_spec
from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.results.merge import merge
from pytest_echo_bench.results.regrade import regrade
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


def row(task: str, passed: bool, output: str = "4") -> dict[str, object]:
    return {
        "task_id": task,
        "arm": "good",
        "passed": passed,
        "detail": "",
        "wall_seconds": 0.1,
        "sub_calls": 1,
        "benchmark": "demo",
        "status": "correct" if passed else "wrong",
        "output": output,
        "answer": output,
        "target": "4",
        "attempts": 1,
        "started_at": "2026-01-01T00:00:00Z",
        "finished_at": "2026-01-01T00:00:01Z",
        "worker": "main",
        "run_id": "r1",
    }


def results(path: Path, meta: dict[str, object] | None, *rows: dict[str, object]) -> Path:
    lines = ([meta] if meta is not None else []) + list(rows)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_merge_gives_a_meta_that_keeps_what_it_does_not_name(tmp_path: Path) -> None:
    first = results(tmp_path / "a.jsonl", META, row("q0", True))
    second = results(tmp_path / "b.jsonl", {**META, "run_id": "r2"}, row("q1", False))
    merged = merge([first, second])
    assert isinstance(merged.meta, Meta)
    assert merged.meta.run_id == "r1" and merged.meta.selection["shard"] == ""
    assert merged.meta.extra["merged_from"] == [str(first), str(second)]
    out = tmp_path / "m.jsonl"
    write_whole(out, merged.meta, merged.lines)
    line = json.loads(out.read_text().splitlines()[0])
    assert line["from_a_newer_writer"] == {"kept": True} and line["merged_from"] == [
        str(first),
        str(second),
    ]
    assert "extra" not in line and Meta.from_json(line).benchmarks == META["benchmarks"]


def test_merge_of_a_file_without_a_meta_line_types_the_assumed_one(tmp_path: Path) -> None:
    bare = results(tmp_path / "bare.jsonl", None, row("q0", True))
    merged = merge([bare], {"demo": "f9"})
    assert merged.meta is not None and merged.meta.benchmarks == {"demo": {"fingerprint": "f9"}}
    assert (
        merged.meta.extra["assumed_fingerprints"] == {"demo": "f9"}
        and merged.meta.benchmark == "demo"
    )


def test_merge_refuses_a_mistyped_meta_line_naming_the_file(tmp_path: Path) -> None:
    bad = results(tmp_path / "bad.jsonl", {**META, "spec_files": "demo.yaml"}, row("q0", True))
    with pytest.raises(StoreError, match=r"bad\.jsonl:1"):
        merge([bad])


def test_regrade_gives_a_meta_with_its_provenance_and_what_it_does_not_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "demo.yaml"
    spec.write_text(sim_spec(1, arms="  good: {provider: sim, accuracy: 1.0}"))
    source = results(tmp_path / "r.jsonl", META, row("q0", False, output="4"))
    done = regrade(source, [spec])
    assert isinstance(done.meta, Meta) and done.meta.extra["regraded_from"] == str(source)
    assert done.meta.extra["from_a_newer_writer"] == {"kept": True} and done.meta.run_id == "r1"
    assert done.meta.fingerprint != META["fingerprint"] and "regraded_at" in done.meta.extra
