"""A full disk and a read-only results directory: a clear error, exit 2, nothing lost, resumable.

Each test mounts a small tmpfs (root only; skipped with the reason elsewhere) and unmounts it
however the test ends.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import Sweep, make_spec, read_rows, sim_spec, tmpfs

PAD = "x" * 3000  # ~3 KB rows: a 64 KiB disk holds about fifteen of them


def mount(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mount", *args], capture_output=True, text=True)


def remount(disk: Path, options: str) -> None:
    done = mount("-o", f"remount,{options}", str(disk))
    assert done.returncode == 0, (
        f"remount {options}: {done.stderr}\n"
        + subprocess.run(
            ["sh", "-c", f"ls -l /proc/*/fd 2>/dev/null | grep {disk}"],
            capture_output=True,
            text=True,
        ).stdout
    )


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs, unmounted at the end whatever happened."""
    with tmpfs(tmp_path / "disk", "size=64k,mode=0755") as disk:
        yield disk


def padded_spec(n: int) -> str:
    arms = f"  a: {{provider: sim, accuracy: 0.7, template: 'So the answer is {{answer}}. {PAD}'}}"
    return sim_spec(n, arms=arms).replace(
        "scorer: exact", "scorer: {name: regex, pattern: 'answer is (\\w+)'}"
    )


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_disk_full_stops_cleanly_keeps_every_row_and_resumes(
    pytester: pytest.Pytester, sweep: Sweep, small_disk: Path, workers: list[str]
) -> None:
    make_spec(pytester, padded_spec(40))
    out = small_disk / "r.jsonl"
    result, _, _ = sweep.run("--bench-out", str(out), *workers)
    text = result.stdout.str()
    assert result.ret == 2, text[-3000:]
    result.stdout.fnmatch_lines(
        [f"*cannot append to {out}: No space left on device; rows written so far are intact*"]
    )
    assert "Traceback" not in text and "INTERNALERROR" not in text and "crashed" not in text
    assert text.count("resume with:") == 1
    data = out.read_bytes()
    assert data.endswith(b"\n")  # no half row
    meta, rows = read_rows(out)  # every line parses
    assert meta is not None and 5 <= len(rows) < 40
    assert not Path(f"{out}.torn").exists()

    remount(small_disk, "size=1m")  # space freed
    result, _, _ = sweep.run("--bench-resume", str(out), *workers)
    assert result.ret == 0, result.stdout.str()[-3000:] + result.stderr.str()
    _, after = read_rows(out)
    assert out.read_bytes().startswith(data)  # what was written before stays as it was
    keys = Counter(r["task_id"] for r in after)
    assert sorted(keys) == sorted(f"q{i}" for i in range(40)) and set(keys.values()) == {1}


def test_read_only_directory_for_a_new_sweep(
    pytester: pytest.Pytester, sweep: Sweep, small_disk: Path
) -> None:
    remount(small_disk, "ro")
    make_spec(pytester, sim_spec(4))
    out = small_disk / "r.jsonl"
    result, _, _ = sweep.run("--bench-out", str(out))
    assert result.ret == 2
    result.stdout.fnmatch_lines(
        [
            f"echo-bench: stopped early (store-error: cannot open results file {out}: "
            "Read-only file system); fix that, then resume with:"
        ]
    )
    assert "Traceback" not in result.stdout.str() and not out.exists()


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_resume_into_a_directory_that_became_read_only(
    pytester: pytest.Pytester, sweep: Sweep, small_disk: Path, workers: list[str]
) -> None:
    make_spec(pytester, sim_spec(6))
    out = small_disk / "r.jsonl"
    # Each run in its own process, as in real use: the remount needs no file open on the disk.
    result, _, _ = sweep.run("--bench-out", str(out), "-k", "q0 or q1", subprocess=True)
    assert result.ret == 0
    before = out.read_bytes()
    remount(small_disk, "ro")
    result, _, _ = sweep.run("--bench-resume", str(out), "demo.yaml", *workers, subprocess=True)
    # Refused before anything runs, like any other resume that cannot go ahead: a usage error.
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"*--bench-resume: cannot open {out}.lock for appending: Read-only file system*"]
    )
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert out.read_bytes() == before  # nothing lost, nothing half-written

    remount(small_disk, "rw")
    result, _, _ = sweep.run("--bench-resume", str(out), "demo.yaml", *workers, subprocess=True)
    assert result.ret == 0
    _, rows = read_rows(out)
    assert len(rows) == 12 and len({(r["task_id"], r["arm"]) for r in rows}) == 12
