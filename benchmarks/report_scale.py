"""Reports at scale: ``echo-bench report`` of a 1,000,000-row results
file in every format, and a gate, beside two baselines.

Writes a results file of realistic rows (as ``records.Row`` writes them: outputs of 10-40 words,
usage, cost, a subtask, ``extra`` on every tenth) for ARMS arms whose verdicts are correlated
through a per-item difficulty, so every pair has thousands of discordant items (the exact McNemar
test's large case). Then runs each report in a fresh interpreter and prints its wall and CPU time
and peak resident memory (``ru_maxrss``), beside two baseline processes: one that only reads the
file with ``store.reader.read_records`` (every line and record held at once), and
``report_duckdb.py``, the report's core figures computed by DuckDB (``pip install duckdb``; without
it that row says so), once as its typed reader casts each value and once ``--checked`` (each value
kept only where the report's reader keeps it), and DuckDB reading every column the report reads,
so checked, computing nothing. Each row's ratios are its CPU over each DuckDB
run's; the machine and its load average (a loaded machine slows the CPU time too: compare rows of
one run) come first.

With ``--judged`` the same rows are also written judged (each graded 1-10 by two judges: a
``score``, two ``judgments`` records and a ``judge_cost_usd``, as ``model_graded`` writes them)
and the reports of that file run beside those of the file without judges.

Usage: python benchmarks/report_scale.py [--rows 1000000] [--arms 15] [--repeat 1] [--judged]
    [--formats table,json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from overhead import machine

from pytest_echo_bench.store.records import Row

WORDS = [
    "the",
    "answer",
    "is",
    "so",
    "therefore",
    "let's",
    "think",
    "step",
    "by",
    '"quoted"',
    "caf\u00e9",
    "\u2192",
    "x",
]
SUBTASKS = [f"sub{i:02d}" for i in range(27)]  # as many as BBH has
RUN = """
import io, resource, sys, time
from contextlib import redirect_stdout
start = time.perf_counter()
if sys.argv[1] == "read_records":
    from pytest_echo_bench.store.reader import read_records
    meta, records = read_records(__import__("pathlib").Path(sys.argv[2]))
    status = 0
elif sys.argv[1] == "duckdb":
    from report_duckdb import figures, report_columns
    if sys.argv[3:] == ["--report-columns"]:
        report_columns(sys.argv[2])
    else:
        figures(sys.argv[2], checked=sys.argv[3:] == ["--checked"])
    status = 0
else:
    from pytest_echo_bench.cli.main import main
    sink = io.StringIO()
    with redirect_stdout(sink):
        status = main(sys.argv[1:])
wall = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_SELF)
print(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, status, file=sys.stderr)
"""


def judged(rng: random.Random, passed: bool) -> dict[str, object]:
    """A row's judging as ``model_graded`` records it: two judges' grades on 1-10, their mean."""
    grades = [min(10, max(1, (8 if passed else 4) + rng.randint(-2, 2))) for _ in range(2)]
    judgments = [{"judge": f"g{j}", "model": "gpt-4o" if j else "claude-3-5-sonnet",
                  "prompt_sha256": f"{rng.getrandbits(256):064x}",
                  "reply": f"The answer is sound enough. Rating: [[{g}]]", "reply_chars": 40,
                  "grade": float(g), "passed": g >= 7,
                  "usage": {"prompt_tokens": 300, "completion_tokens": 20}, "cost_usd": 0.0009}
                 for j, g in enumerate(grades)]
    return {"score": sum(grades) / 2, "judgments": judgments, "judge_cost_usd": 0.0018}


def write_results(path: Path, rows: int, arms: int, with_judges: bool = False) -> None:
    rng = random.Random(0)
    skills = [0.55 + 0.3 * k / max(arms - 1, 1) for k in range(arms)]
    meta = {
        "_meta": True,
        "benchmark": "scale",
        "benchmarks": {},
        "arms": {"scale": [f"a{k}" for k in range(arms)]},
        "schema": 1,
    }
    with open(path, "wb") as f:
        f.write(json.dumps(meta).encode() + b"\n")
        difficulty = 0.0
        for n in range(rows):
            task, k = n // arms, n % arms
            if k == 0:
                difficulty = rng.random()
            passed = rng.random() < min(1.0, max(0.0, skills[k] + (0.5 - difficulty) * 0.6))
            judging = judged(rng, passed) if with_judges else {}
            output = " ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 40)))
            f.write(
                Row(
                    task_id=f"t{task}",
                    arm=f"a{k}",
                    passed=passed,
                    detail="passed" if passed else "expected 4 got 5",
                    wall_seconds=round(rng.random(), 4),
                    sub_calls=1,
                    benchmark="scale",
                    status="correct" if passed else "wrong",
                    output=output,
                    answer="4" if passed else "5",
                    target="4",
                    attempts=1,
                    started_at="2026-11-30T00:00:00.000Z",
                    finished_at="2026-11-30T00:00:01.000Z",
                    worker=f"gw{n % 2}",
                    run_id="0123456789ab",
                    subtask=SUBTASKS[task % len(SUBTASKS)],
                    usage={"prompt_tokens": 40, "completion_tokens": 12},
                    cost_usd=0.0001 * (k + 1),
                    cost_units=float(k + 1),
                    extra={"escalated": True} if n % 10 == 0 else {},
                    **judging,  # type: ignore[arg-type]
                ).to_line()
            )


def write_apart(path: Path, rows: int, arms: int, with_judges: bool = False) -> None:
    """``write_results`` in a child process: a child started later inherits this process's peak
    resident memory as its own ``ru_maxrss`` floor (Linux keeps it across fork and exec), so the
    writing must not raise it."""
    code = (f"from report_scale import write_results; from pathlib import Path; "
            f"write_results(Path({str(path)!r}), {rows}, {arms}, {with_judges})")
    subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parent, check=True)


def run(args: list[str]) -> tuple[float, float, float, int]:
    """(wall seconds, CPU seconds, peak MB, exit status) of one report in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", RUN, *args], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).parent)
    wall, cpu, peak, status = done.stderr.strip().splitlines()[-1].split()
    return float(wall), float(cpu), float(peak), int(status)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--arms", type=int, default=15)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--judged", action="store_true",
                        help="Also report a judged copy of the file (two judges a row)")
    parser.add_argument("--formats", default="table,markdown,json,csv,html")
    args = parser.parse_args()
    formats = args.formats.split(",")
    print(machine())
    print("load average: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scale.jsonl"
        write_apart(path, args.rows, args.arms)
        print(f"{args.rows:,} rows, {args.arms} arms, {path.stat().st_size / 1e6:.0f} MB")
        cases = [("baseline: read_records only", ["read_records", str(path)])]
        if importlib.util.find_spec("duckdb") is None:
            print("baseline: DuckDB script: duckdb is not installed (pip install duckdb): left out")
        else:
            cases[:0] = [("baseline: DuckDB script (report_duckdb.py)", ["duckdb", str(path)]),
                         ("baseline: the same, each value checked (--checked)",
                          ["duckdb", str(path), "--checked"]),
                         ("DuckDB reading every column the report reads, checked",
                          ["duckdb", str(path), "--report-columns"])]
        cases += [(f"report --format {fmt}", ["report", str(path), "--format", fmt])
                  for fmt in formats]
        if args.judged:
            judged_path = Path(tmp) / "judged.jsonl"
            write_apart(judged_path, args.rows, args.arms, with_judges=True)
            print(f"judged: {judged_path.stat().st_size / 1e6:.0f} MB")
            cases += [(f"judged: report --format {fmt}",
                       ["report", str(judged_path), "--format", fmt]) for fmt in formats]
        interval = f"a{args.arms - 1} >= a{args.arms - 2} - 0.02 @95"
        cases.append(
            (
                f"report --format json --gate '{interval}' --gate a1>=a0",
                ["report", str(path), "--format", "json", "--gate", interval, "--gate", "a1>=a0"],
            )
        )
        print(f"| {'run':58} | wall s | CPU s | peak MB | status | CPU / DuckDB's | "
              "CPU / checked DuckDB's |\n|---|---|---|---|---|---|---|")
        bases: dict[str, float] = {}
        for name, argv in cases:
            results = [run(argv) for _ in range(args.repeat)]
            wall, cpu = min(r[0] for r in results), min(r[1] for r in results)
            peak = max(r[2] for r in results)
            if argv[0] == "duckdb" and argv[2:] != ["--report-columns"]:
                bases["checked" if argv[2:] else "typed"] = cpu
            ratios = " | ".join(f"{cpu / bases[k]:.1f}x" if k in bases else "-"
                                for k in ("typed", "checked"))
            print(f"| {name:58} | {wall:6.1f} | {cpu:5.1f} | {peak:7.0f} | {results[0][3]} | "
                  f"{ratios} |", flush=True)

if __name__ == "__main__":
    main()
