"""Newest row per key wins, at scale: what it costs every reader of a 1,000,000-row results file.

Writes the resume benchmark's file of realistic rows (``resume_scale.write_results``: one row per
key), then a copy with 1% of its keys recorded again at the end (half of them errors, as a run
whose error rows were retried with ``--bench-retry-errors`` and failed again, half corrected).
Each reader runs in a fresh interpreter, which prints its wall time and peak resident memory
(``ru_maxrss``): resume's key read on a worker (plain, and with ``retry_errors``), the
controller's one-pass keys and counts (``FileTally``; beside it the first-row-wins tally it
replaced, loaded from ``git show HEAD:`` when the checkout still has it), the report's reading
(``results.read.load_results``) and the progress page's (``report.page.state``).

Usage: python benchmarks/newest_scale.py [--rows 1000000] [--arms 15] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from overhead import machine
from resume_scale import write_results

from pytest_echo_bench.store.records import Row

RUN = """
import resource, sys, time
from pathlib import Path
what, path = sys.argv[1], Path(sys.argv[2])
if what == "old-tally":  # the first-row-wins FileTally, as the last commit has it
    import types
    # dataclasses look their module up
    module = sys.modules["old_tally"] = types.ModuleType("old_tally")
    exec(compile(Path(sys.argv[3]).read_text(), "old_tally.py", "exec"), module.__dict__)
start = time.perf_counter()
if what == "keys":
    from pytest_echo_bench.store.reader import read_index
    result = len(read_index(path).keys)
elif what == "keys-retry":
    from pytest_echo_bench.store.reader import read_index
    result = len(read_index(path, retry_errors=True).keys)
elif what == "tally":
    from pytest_echo_bench.store.tally import FileTally
    tally = FileTally()
    tally.update(path, strict=True)
    result = len(tally.recorded(retry_errors=True))
elif what == "old-tally":
    tally = module.FileTally()
    tally.update(path, strict=True)
    result = len(tally.seen)
elif what == "report":
    from pytest_echo_bench.results.read import load_results
    result = len(load_results([path]).rows)
elif what == "page":
    from pytest_echo_bench.report.page.state import progress_state
    result = progress_state(path).done
wall = time.perf_counter() - start
print(wall, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, result)
"""


def append_repeats(path: Path, rows: int, arms: int) -> int:
    """Record 1% of the keys again: every hundredth row's key,
    alternately an error and a correct row."""
    added = 0
    with open(path, "ab") as f:
        for n in range(0, rows, 100):
            error = (n // 100) % 2 == 0
            f.write(
                Row(
                    task_id=f"t{n // arms}",
                    arm=f"a{n % arms}",
                    passed=not error,
                    detail="error: HTTP 500" if error else "passed",
                    wall_seconds=0.5,
                    sub_calls=1,
                    benchmark="scale",
                    status="error" if error else "correct",
                    output="",
                    answer=None if error else "4",
                    target="4",
                    attempts=1,
                    started_at="2026-12-01T00:00:00.000Z",
                    finished_at="2026-12-01T00:00:01.000Z",
                    worker="gw0",
                    run_id="retry0000000",
                ).to_line()
            )
            added += 1
    return added


def old_tally_source(workdir: Path) -> Path | None:
    proc = subprocess.run(
        ["git", "show", "HEAD:pytest_echo_bench/store/tally.py"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent,
    )
    if proc.returncode != 0 or "self.seen" not in proc.stdout:
        return None
    path = workdir / "old_tally.py"
    path.write_text(proc.stdout)
    return path


def run(*args: str) -> tuple[float, float, str]:
    done = subprocess.run(
        [sys.executable, "-c", RUN, *args], capture_output=True, text=True, check=True
    )
    wall, peak, result = done.stdout.split()
    return float(wall), float(peak), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--arms", type=int, default=15)
    parser.add_argument(
        "--repeat",
        type=int,
        default=2,
        help="runs of each reader: the best wall time, the largest peak",
    )
    args = parser.parse_args()
    print(machine())
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        once, twice = workdir / "once.jsonl", workdir / "repeated.jsonl"
        write_results(once, args.rows, args.arms)
        shutil.copyfile(once, twice)
        added = append_repeats(twice, args.rows, args.arms)
        print(
            f"{once.name}: {args.rows:,} rows, one per key ({once.stat().st_size / 1e6:.0f} "
            f"MB); {twice.name}: "
            f"the same and {added:,} repeated keys ({added // 2:,} of them errors at the end)"
        )
        old = old_tally_source(workdir)
        cases = [
            ("resume keys, a worker (read_index)", "keys"),
            ("resume keys with retry_errors", "keys-retry"),
            ("controller keys + counts (FileTally, newest wins)", "tally"),
        ]
        cases += [("  the same, first row wins (HEAD's FileTally)", "old-tally")] if old else []
        cases += [
            ("report's reading (load_results)", "report"),
            ("progress page (progress_state)", "page"),
        ]
        print(f"| {'reader':50} | file | wall s | peak MB | result |\n|---|---|---|---|---|")
        for name, what in cases:
            for path in (once, twice):
                extra = [str(old)] if what == "old-tally" and old else []
                runs = [run(what, str(path), *extra) for _ in range(args.repeat)]
                wall, peak, result = min(r[0] for r in runs), max(r[1] for r in runs), runs[0][2]
                print(
                    f"| {name:50} | {path.stem:8} | {wall:6.2f} | {peak:7.0f} | {result} |",
                    flush=True,
                )
        print(json.dumps({"rows": args.rows, "repeated": added}))


if __name__ == "__main__":
    main()
