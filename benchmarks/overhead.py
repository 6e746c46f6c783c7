"""Per-item overhead: a sweep of N items with the instant offline sim provider against bare pytest.

The baseline is a file of N parametrized no-op tests run by pytest alone (our plugin disabled
with ``-p no:echo_bench``), serial and with ``-n 2``. The sweep reads its items from a generated
``loader: jsonl`` file, with ``--bench-concurrency 1`` (no threads) and the default 8. Prints wall
and CPU seconds (user + system of the pytest processes: steadier than wall time on a shared
machine), the ratio of each to the baseline of the same mode measured in this run, the CPU cost
per item above it, and the load average. Each figure is the best of ``--repeat`` runs. The target
is read on the CPU ratio: a shared machine's wall time says more about its other work than about
the run.

Usage: python benchmarks/overhead.py [--items 10000] [--workers 0,2]
       [--concurrency 1,8] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET = 1.25


def machine() -> str:
    cpu = (
        next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            platform.processor(),
        )
        if Path("/proc/cpuinfo").exists()
        else platform.processor()
    )
    import pytest
    import xdist

    return (
        f"machine: {platform.platform()}, {os.cpu_count()} cores ({cpu}), Python "
        f"{platform.python_version()}, "
        f"pytest {pytest.__version__}, pytest-xdist {xdist.__version__}"
    )


def write_inputs(workdir: Path, items: int, accuracy: float) -> None:
    with open(workdir / "data.jsonl", "w", encoding="utf-8") as f:
        for i in range(items):
            f.write(
                json.dumps({"id": f"t{i}", "input": f"What is {i} + 1?", "target": str(i + 1)})
                + "\n"
            )
    (workdir / "perf.yaml").write_text(
        "benchmark: perf\ndataset: {loader: jsonl, path: data.jsonl}\nscorer: exact\n"
        f"arms:\n  sim: {{provider: sim, accuracy: {accuracy}}}\n"
    )
    (workdir / "test_bare.py").write_text(
        f"import pytest\n\n\n@pytest.mark.parametrize('i', range({items}))\n"
        "def test_noop(i):\n    pass\n"
    )


def run(
    workdir: Path, args: list[str], workers: int, env: dict[str, str] | None = None
) -> tuple[float, float]:
    """(wall s, CPU s) of one pytest run in a subprocess (its xdist workers included)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    cmd += ["-n", str(workers)] if workers else []
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        raise SystemExit(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}"
            f"{proc.stderr[-2000:]}"
        )
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def best(workdir: Path, args: list[str], workers: int, repeat: int) -> tuple[float, float]:
    results = [run(workdir, args, workers) for _ in range(repeat)]
    return min(w for w, _ in results), min(c for _, c in results)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument(
        "--workers", default="0,2", help="xdist worker counts to measure (0: serial)"
    )
    parser.add_argument(
        "--concurrency", default="1,8", help="--bench-concurrency values to measure"
    )
    parser.add_argument(
        "--accuracy", type=float, default=0.7, help="the sim arm's accuracy (wrong answers fail)"
    )
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(machine())
    print(
        f"{args.items} items, sim accuracy {args.accuracy}, best of {args.repeat}; target: "
        f"CPU ratio <= {TARGET}; load average {os.getloadavg()[0]:.1f} at start"
    )
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        write_inputs(workdir, args.items, args.accuracy)
        print(
            f"{'run':22} {'-n':>3} {'wall s':>7} {'cpu s':>7} {'wall x':>7} {'cpu x':>7} "
            f"{'us/item':>8} {'met':>4} {'load':>5}"
        )
        for workers in map(int, args.workers.split(",")):
            base_wall, base_cpu = best(
                workdir, ["test_bare.py", "-p", "no:echo_bench"], workers, args.repeat
            )
            print(
                f"{'bare pytest':22} {workers:3d} {base_wall:7.2f} {base_cpu:7.2f} {1:7.2f} "
                f"{1:7.2f} {0:8.0f} {'':>4} {os.getloadavg()[0]:5.1f}"
            )
            for level in map(int, args.concurrency.split(",")):
                # A file per repeat: a results file that holds a sweep is resumed, not run again.
                outs = [workdir / f"r{workers}_{level}_{i}.jsonl" for i in range(args.repeat)]
                results = [
                    run(
                        workdir,
                        [
                            "perf.yaml",
                            "--bench-out",
                            str(out),
                            "--bench-concurrency",
                            str(level),
                            "--bench-progress-every",
                            "0",
                        ],
                        workers,
                    )
                    for out in outs
                ]
                wall, cpu = min(w for w, _ in results), min(c for _, c in results)
                for out in outs:
                    rows = sum(1 for _ in open(out, "rb")) - 1 if out.exists() else 0
                    if rows != args.items:
                        raise SystemExit(
                            f"sweep recorded {rows} rows in {out.name}, expected {args.items}"
                        )
                ratio = cpu / base_cpu
                per_item = (cpu - base_cpu) / args.items * 1e6
                print(
                    f"{f'sweep, concurrency {level}':22} {workers:3d} {wall:7.2f} {cpu:7.2f} "
                    f"{wall / base_wall:7.2f} "
                    f"{ratio:7.2f} {per_item:8.0f} {'yes' if ratio <= TARGET else 'no':>4} "
                    f"{os.getloadavg()[0]:5.1f}"
                )


if __name__ == "__main__":
    main()
