"""Comparing runs at scale: ``echo-bench compare`` of two 1,000,000-row results files (last
night's and tonight's), beside ``echo-bench report`` of one of them.

Writes BASE as ``report_scale`` writes a sweep (ARMS arms, realistic rows), with each row's
``item_sha256`` and ``served_model``; CAND is the same sweep run again: every verdict redrawn with
probability FLIP (so each arm has thousands of flips), one arm's served model changed, a few
items' digests changed and a few items missing. Then runs each command in a fresh interpreter
and prints its wall and CPU time and peak resident memory (``report_scale.run``), after the cost
of reading the two files alone (``load_results``, the report's reader, as compare calls it: no
spend counted): what a compare costs beyond that is its own (pairing, figures, rendering).

Usage: python benchmarks/compare_scale.py [--rows 1000000] [--arms 15] [--formats text,json]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from overhead import machine
from report_scale import SUBTASKS, WORDS, run

from pytest_echo_bench.store.files import encode_line
from pytest_echo_bench.store.records import Row

FLIP = 0.08  # the share of verdicts redrawn in CAND
CHANGED_EVERY, MISSING_EVERY = 5000, 7000  # an item's digest changed / its rows left out of CAND


def write_pair(base: Path, cand: Path, rows: int, arms: int) -> None:
    """BASE and CAND, ``rows`` rows each (fewer in CAND: the missing items)."""
    rng = random.Random(0)
    skills = [0.55 + 0.3 * k / max(arms - 1, 1) for k in range(arms)]
    meta = {"_meta": True, "benchmark": "scale", "benchmarks": {},
            "arms": {"scale": [f"a{k}" for k in range(arms)]}, "schema": 1}
    with open(base, "wb") as fb, open(cand, "wb") as fc:
        fb.write(encode_line({**meta, "run_id": "night1"}))
        fc.write(encode_line({**meta, "run_id": "night2"}))
        difficulty = 0.0
        for n in range(rows):
            task, k = n // arms, n % arms
            if k == 0:
                difficulty = rng.random()
            chance = min(1.0, max(0.0, skills[k] + (0.5 - difficulty) * 0.6))
            passed = rng.random() < chance
            again = rng.random() < chance if rng.random() < FLIP else passed
            output = " ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 40)))
            digest = f"{task:064x}"
            fb.write(_row(task, k, passed, output, digest, "model-2026-01").to_line())
            if task % MISSING_EVERY == MISSING_EVERY - 1:
                continue
            changed = f"{task + 1:064x}" if task % CHANGED_EVERY == 0 else digest
            served = "model-2026-02" if k == arms - 1 else "model-2026-01"
            fc.write(_row(task, k, again, output, changed, served).to_line())


def _row(task: int, k: int, passed: bool, output: str, digest: str, served: str) -> Row:
    return Row(task_id=f"t{task}", arm=f"a{k}", passed=passed,
               detail="passed" if passed else "expected 4 got 5", wall_seconds=0.5,
               sub_calls=1, benchmark="scale", status="correct" if passed else "wrong",
               output=output, answer="4" if passed else "5", target="4", attempts=1,
               started_at="2026-11-30T00:00:00.000Z", finished_at="2026-11-30T00:00:01.000Z",
               worker="gw0", run_id="0123456789ab", subtask=SUBTASKS[task % len(SUBTASKS)],
               usage={"prompt_tokens": 40, "completion_tokens": 12}, cost_usd=0.0001 * (k + 1),
               served_model=served, item_sha256=digest)


def write_apart(base: Path, cand: Path, rows: int, arms: int) -> None:
    """``write_pair`` in a child process, so the commands' peak memory is their own (as
    ``report_scale.write_apart``)."""
    code = (f"from compare_scale import write_pair; from pathlib import Path; "
            f"write_pair(Path({str(base)!r}), Path({str(cand)!r}), {rows}, {arms})")
    subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parent, check=True)


LOAD = """
import resource, sys, time
from pathlib import Path
start = time.perf_counter()
from pytest_echo_bench.results.read import load_results
base = load_results([Path(sys.argv[1])], spend=False)
cand = load_results([Path(sys.argv[2])], spend=False)
del base, cand
wall = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_SELF)
print(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, 0, file=sys.stderr)
"""


def load_only(base: Path, cand: Path) -> tuple[float, float, float, int]:
    """(wall seconds, CPU seconds, peak MB, 0) of reading both files, in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", LOAD, str(base), str(cand)], capture_output=True,
                          text=True, check=True, cwd=Path(__file__).parent)
    wall, cpu, peak, status = done.stderr.strip().splitlines()[-1].split()
    return float(wall), float(cpu), float(peak), int(status)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--arms", type=int, default=15)
    parser.add_argument("--formats", default="text,json,html")
    args = parser.parse_args()
    print(machine())
    print("load average: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))
    with tempfile.TemporaryDirectory() as tmp:
        base, cand = Path(tmp) / "base.jsonl", Path(tmp) / "cand.jsonl"
        write_apart(base, cand, args.rows, args.arms)
        print(f"{args.rows:,} rows a run, {args.arms} arms, "
              f"{base.stat().st_size / 1e6:.0f} + {cand.stat().st_size / 1e6:.0f} MB")
        out = str(Path(tmp) / "out")
        cases = [("report BASE (one run)", ["report", str(base)])]
        cases += [(f"compare --format {fmt}",
                   ["compare", str(base), str(cand), "--format", fmt, "-o", out])
                  for fmt in args.formats.split(",")]
        cases.append(("compare --gate no-regression@95",
                      ["compare", str(base), str(cand), "-o", out, "--gate", "no-regression@95"]))
        cases.append(("compare --gate 'a0 >= base - 0.02 @95 anytime'",
                      ["compare", str(base), str(cand), "-o", out,
                       "--gate", "a0 >= base - 0.02 @95 anytime"]))
        print(f"| {'run':50} | wall s | CPU s | peak MB | status | CPU s beyond reading |\n"
              "|---|---|---|---|---|---|")
        wall, read_cpu, peak, status = load_only(base, cand)
        print(f"| {'load_results of BASE and CAND':50} | {wall:6.1f} | {read_cpu:5.1f} | "
              f"{peak:7.0f} | {status} |  |", flush=True)
        for name, argv in cases:
            wall, cpu, peak, status = run(argv)
            own = f"{cpu - read_cpu:5.1f}" if name.startswith("compare") else ""
            print(f"| {name:50} | {wall:6.1f} | {cpu:5.1f} | {peak:7.0f} | {status} | {own} |",
                  flush=True)


if __name__ == "__main__":
    main()
