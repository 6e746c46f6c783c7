"""A merge knows what is missing: a shard stopped by its quota, killed before its first row
or killed part way is unfinished, so the merge is incomplete and a gate on it fails; how
each shard file ended is shown in every format; shard counts no array could mean are
refused before a file is made."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from processes import finish, rows_in, start, wait_for

from conftest import Sweep, make_spec, read_rows, sim_spec
from pytest_echo_bench.cli.main import main

ARMS = "  a: {provider: sim, accuracy: 0.7}\n  b: {provider: sim, accuracy: 0.4}"
QUOTA = (
    "  a: {provider: sim, accuracy: 0.7, faults: {exhaustion_after: 1}}\n  b: {provider: sim, "
    "accuracy: 0.4}"
)
SLOW = (
    "  a: {provider: sim, accuracy: 0.7, latency_s: LAT}\n  b: {provider: sim, accuracy: 0.4, "
    "latency_s: LAT}"
)


pytestmark = pytest.mark.usefixtures("no_scheduler")


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def shard(
    sweep: Sweep, pytester: pytest.Pytester, k: int, n: int = 2
) -> tuple[Path, pytest.RunResult]:
    out = pytester.path / f"shard{k}.jsonl"
    result, _, _ = sweep.run("--bench-out", str(out), "--bench-shard", f"{k}/{n}")
    return out, result


def every_format(capsys: pytest.CaptureFixture[str], path: Path) -> dict[str, str]:
    shown = {}
    for fmt in ("table", "markdown", "json", "csv", "html"):
        status, out, _ = cli(capsys, "report", str(path), "--format", fmt)
        assert status == 0
        shown[fmt] = out
    return shown


def test_a_merge_of_a_shard_stopped_by_its_quota_is_incomplete_and_says_how_each_ended(
        pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]) -> None:
    spec = make_spec(pytester, sim_spec(16, arms=ARMS))
    first, result = shard(sweep, pytester, 1)
    assert result.ret == 0
    spec.write_text(spec.read_text().replace(ARMS, QUOTA))  # faults are not part of the fingerprint
    second, result = shard(sweep, pytester, 2)
    assert result.ret == 2  # stopped by the quota after one item of arm a
    meta = read_rows(second)[0]
    expected = meta["shard_items"] if meta else None
    held = len(read_rows(second)[1])
    assert isinstance(expected, int) and 0 < held < expected
    merged = pytester.path / "merged.jsonl"
    status, out, _ = cli(capsys, "merge", str(first), str(second), "-o", str(merged))
    assert status == 0
    assert f"shard 2/2 ({second}): stopped: exhausted; {held} of {expected} items" in out
    assert (
        "shard 1/2" in out
        and "ran to the end" in out
        and "unfinished 2/2" in out
        and "marked incomplete" in out
    )
    recorded = read_rows(merged)[0]
    assert (
        recorded is not None
        and recorded["complete"] is False
        and recorded["unfinished_shards"] == ["2/2"]
    )
    status, _, err = cli(capsys, "report", str(merged), "--gate", "a>=0")
    assert status == 1 and "FAILED: the sweep is incomplete" in err and "unfinished 2/2" in err
    # The shard files given to the report directly say the same.
    assert cli(capsys, "report", str(first), str(second), "--gate", "a>=0")[0] == 1
    shown = every_format(capsys, merged)
    data = json.loads(shown["json"])
    assert (
        data["complete"] is False
        and data["unfinished_shards"] == ["2/2"]
        and data["shards"] == ["1/2", "2/2"]
    )
    assert [(p["shard"], p["ended"], p["reason"], p["held"], p["expected"]) for p in data["parts"]][
        1
    ] == ("2/2", "stopped", "exhausted", held, expected)
    for fmt in ("table", "markdown", "html"):
        assert "stopped: exhausted" in shown[fmt] and "ran to the end" in shown[fmt], fmt
    parts = [line for line in csv.DictReader(io.StringIO(shown["csv"])) if line["kind"] == "part"]
    assert [(p["part_shard"], p["part_ended"], p["part_items"], p["part_expected"]) for p in parts][
        1
    ] == ("shard 2/2", "stopped: exhausted", str(held), str(expected))


def test_a_shard_killed_before_its_first_row_or_part_way_leaves_the_merge_incomplete(
        pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]) -> None:
    """Real kills: SIGKILL to the run's process group once its meta line
    (or its first rows) are written."""
    spec = make_spec(pytester, sim_spec(16, arms=ARMS))
    first, _ = shard(sweep, pytester, 1)
    for lat, rows, words in (("30", 0, "empty: no row"), ("0.2", 2, "killed (or still running)")):
        spec.write_text(sim_spec(16, arms=SLOW.replace("LAT", lat)))
        second = pytester.path / f"killed{rows}.jsonl"
        # selected as shard 1 was
        proc = start(pytester.path, ".", "--bench-out", str(second), "--bench-shard", "2/2")
        wait_for(
            lambda: second.exists() and second.stat().st_size > 0  # noqa: B023
            and rows_in(second) >= rows  # noqa: B023
        )
        os.killpg(proc.pid, signal.SIGKILL)
        finish(proc)
        held = len(read_rows(second)[1])
        assert held >= rows and (held > 0) == bool(rows)
        merged = pytester.path / f"merged{rows}.jsonl"
        status, out, err = cli(capsys, "merge", str(first), str(second), "-o", str(merged))
        assert status == 0 and words in out and "unfinished 2/2" in out, err
        assert read_rows(merged)[0]["complete"] is False  # type: ignore[index]
        status, _, err = cli(capsys, "report", str(merged), "--gate", "a>=0")
        assert status == 1 and "the sweep is incomplete" in err


def test_a_complete_merge_lists_the_shards_it_holds_and_how_each_ended(
        pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]) -> None:
    make_spec(pytester, sim_spec(12, arms=ARMS))
    files = [shard(sweep, pytester, k, 3)[0] for k in (1, 2, 3)]
    merged = pytester.path / "merged.jsonl"
    status, out, _ = cli(capsys, "merge", *map(str, files), "-o", str(merged))
    assert (
        status == 0
        and "shards 1/3, 2/3, 3/3: all of them" in out
        and out.count("ran to the end") == 3
    )
    data: dict[str, Any] = json.loads(every_format(capsys, merged)["json"])
    assert (
        data["complete"] is True
        and data["shards"] == ["1/3", "2/3", "3/3"]
        and data["unfinished_shards"] == []
    )
    assert [p["ended"] for p in data["parts"]] == ["ran-to-end"] * 3
    assert sum(p["held"] for p in data["parts"]) == sum(p["expected"] for p in data["parts"]) == 24
    assert cli(capsys, "report", str(merged), "--gate", "a>=0")[0] == 0


def test_a_stopped_shard_resumed_to_its_end_makes_the_merge_whole(
        pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]) -> None:
    spec = make_spec(pytester, sim_spec(16, arms=QUOTA))
    files = [shard(sweep, pytester, k)[0] for k in (1, 2)]
    merged = pytester.path / "merged.jsonl"
    status, out, _ = cli(capsys, "merge", *map(str, files), "-o", str(merged))
    assert "unfinished 1/2, 2/2" in out
    spec.write_text(sim_spec(16, arms=ARMS))  # the quota reset
    for path in files:
        assert sweep.run("--bench-resume", str(path))[0].ret == 0
    status, out, _ = cli(capsys, "merge", *map(str, files), "-o", str(merged))
    assert status == 0 and "all of them" in out and "unfinished" not in out, out
    assert cli(capsys, "report", str(merged), "--gate", "a>=0")[0] == 0


@pytest.mark.parametrize(
    ("env", "words"),
    [
        (
            {"SLURM_ARRAY_TASK_COUNT": str(10**9)},
            "SLURM_ARRAY_TASK_COUNT=1000000000 is beyond the 1,000,000 shards",
        ),
        (
            {"SLURM_ARRAY_TASK_COUNT": "5000000"},
            "SLURM_ARRAY_TASK_COUNT=5000000 is beyond the 1,000,000 shards",
        ),
        (
            {"SLURM_ARRAY_TASK_COUNT": "50"},
            "--bench-shard 1/50: 50 shards, but the specs have 6 item(s)",
        ),
    ],
)
def test_an_absurd_shard_count_is_refused_before_any_file_and_the_corrected_run_starts_anew(
    pytester: pytest.Pytester,
    sweep: Sweep,
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    words: str,
) -> None:
    make_spec(pytester, sim_spec(6, arms=ARMS))
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "0")
    monkeypatch.setenv("SLURM_ARRAY_TASK_MIN", "0")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result, _, _ = sweep.run("--bench-shard", "auto")
    assert result.ret == 4 and words in result.stderr.str(), result.stderr.str()
    assert not sweep.out.exists() and not list(pytester.path.glob("results.jsonl*"))
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "2")  # the same command, corrected
    result, meta, rows = sweep.run("--bench-shard", "auto")
    assert result.ret in (0, 1) and meta is not None and meta["selection"]["shard"] == "1/2"
    assert len(rows) == meta["shard_items"]


def test_explicit_k_of_n_beyond_the_items_is_refused_too(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, sim_spec(3, arms=ARMS))
    result, _, _ = sweep.run("--bench-shard", "2/4")
    assert result.ret == 4 and not sweep.out.exists()
    result.stderr.fnmatch_lines(
        ["*--bench-shard 2/4: 4 shards, but the specs have 3 item(s)*at most 3 shards*"]
    )


def test_the_items_a_shard_selects_follow_k(pytester: pytest.Pytester, sweep: Sweep) -> None:
    """``shard_items`` counts what the run selects: with -k, the items it keeps."""
    make_spec(pytester, sim_spec(12, arms=ARMS, extra="epochs: 2\n"))
    for args in ((), ("-k", "a")):
        out = pytester.path / f"s{len(args)}.jsonl"
        result, _, _ = sweep.run("--bench-out", str(out), "--bench-shard", "2/3", *args)
        meta, rows = read_rows(out)
        assert meta is not None and meta["shard_items"] == len(rows) > 0, (
            args,
            result.stdout.str()[-800:],
        )


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("shard_items", -1, "'shard_items' must be a whole number of 0 or more"),
        ("shard_items", True, "'shard_items' must be a whole number of 0 or more"),
        ("shard_parts", {"shard": "1/2"}, "'shard_parts' must be a list of at most"),
        (
            "shard_parts",
            [{"shard": "1/2", "file": "f", "ended": "done", "held": 1, "expected": 2}],
            "ended (ran-to-end",
        ),
        (
            "shard_parts",
            [{"shard": "one", "file": "f", "ended": "stopped", "held": 1, "expected": 2}],
            "'shard_parts' must",
        ),
    ],
)
def test_broken_shard_counts_are_refused_naming_the_file(
    pytester: pytest.Pytester,
    sweep: Sweep,
    capsys: pytest.CaptureFixture[str],
    field: str,
    value: Any,
    why: str,
) -> None:
    make_spec(pytester, sim_spec(4, arms=ARMS))
    path, _ = shard(sweep, pytester, 1)
    lines = path.read_text().splitlines()
    broken = pytester.path / "broken.jsonl"
    broken.write_text(
        "\n".join([json.dumps({**json.loads(lines[0]), field: value}), *lines[1:]]) + "\n"
    )
    for argv in (
        ("report", str(broken)),
        ("merge", str(broken), "-o", str(pytester.path / "m.jsonl")),
    ):
        status, _, err = cli(capsys, *argv)
        assert status == 2 and f"{broken}:1" in err and why in err, err
