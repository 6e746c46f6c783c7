"""``echo-bench merge`` of 4 shard files beside a polars merge of their raw lines.

Writes the report benchmark's file of realistic rows (``report_scale.write_results``), splits it
into 4 shard files by the run's own partition (``readers_scale.write_shards``), then runs, each in
a fresh interpreter and interleaved per repeat: the polars baseline (``merge_polars.py``: the
newest line of each key, byte for byte), ``echo-bench merge`` (each row's key, verdict and place
read with msgspec, ``results.merge_scan.scan_columns``) and, with ``--reference``, the same merge
parsing every line whole (``merge(fast=False)``, the reference). It prints the machine, the load
average, each run's CPU and wall seconds and peak memory (best CPU of the repeats), each CPU over
the baseline's, and whether the merged rows are the baseline's byte for byte.

polars is a benchmark-only dependency: ``pip install polars``. Without it the baseline's row is
left out, with a message.

Usage: python benchmarks/merge_scale.py [--rows 1000000] [--arms 10] [--repeat 3] [--reference]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from overhead import machine
from readers_scale import write_shards
from report_scale import write_apart

HERE = Path(__file__).parent
RUN = """
import io, resource, sys, time
from contextlib import redirect_stdout
from pathlib import Path
start = time.perf_counter()
kind, out, *paths = sys.argv[1:]
if kind == "polars":
    from merge_polars import merge_lines
    merge_lines([Path(p) for p in paths], Path(out))
    status = 0
elif kind == "reference":
    from pytest_echo_bench.results.merge import merge
    from pytest_echo_bench.store.writer import write_whole
    merged = merge([Path(p) for p in paths], fast=False)
    write_whole(Path(out), merged.meta, merged.lines)
    status = 0
else:
    from pytest_echo_bench.cli.main import main
    with redirect_stdout(io.StringIO()):
        status = main(["merge", *paths, "-o", out])
wall = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_SELF)
# Linux keeps ru_maxrss across exec: VmHWM is this interpreter's own peak
with open("/proc/self/status") as f:
    peak = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
print(wall, usage.ru_utime + usage.ru_stime, peak, status, file=sys.stderr)
"""
LABELS = {"polars": "baseline: polars over raw lines", "columns": "echo-bench merge",
          "reference": "merge(fast=False): every line parsed whole"}


def run(kind: str, out: Path, paths: list[Path]) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak MB) of one merge in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", RUN, kind, str(out), *map(str, paths)],
                          capture_output=True, text=True, check=True, cwd=HERE)
    wall, cpu, peak, status = done.stderr.strip().splitlines()[-1].split()
    if status != "0":
        raise SystemExit(f"{kind}: exit status {status}")
    return float(wall), float(cpu), float(peak)


def rows_written(path: Path) -> bytes:
    """A merged file's rows: its lines after the meta line."""
    return path.read_bytes().split(b"\n", 1)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--arms", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--reference", action="store_true",
                        help="also run the merge that parses every line whole")
    args = parser.parse_args()
    print(machine())
    print("load average at start: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))
    kinds = ["columns"] + ["reference"] * args.reference
    if importlib.util.find_spec("polars") is None:
        print("polars is not installed (pip install polars): the baseline's row is left out")
    else:
        kinds.insert(0, "polars")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write_apart(work / "scale.jsonl", args.rows, args.arms)
        shards = write_shards(work / "scale.jsonl", work, args.arms)
        (work / "scale.jsonl").unlink()
        print(f"{len(shards)} shard files of {args.rows:,} rows, {args.arms} arms, "
              f"{sum(p.stat().st_size for p in shards) / 1e6:.0f} MB")
        best: dict[str, tuple[float, float, float]] = {}
        for _ in range(args.repeat):
            for kind in kinds:
                found = run(kind, work / f"{kind}.jsonl", shards)
                if kind not in best or found[1] < best[kind][1]:
                    best[kind] = found
        loads = os.getloadavg()
        print(f"load average at end: {loads[0]:.1f} {loads[1]:.1f} {loads[2]:.1f}")
        base = best.get("polars", (0.0, 0.0, 0.0))[1]
        print(f"{'run':<45} {'CPU s':>7} {'wall s':>7} {'peak MB':>8} {'CPU / polars':>13}")
        for kind, (wall, cpu, peak) in best.items():
            ratio = f"{cpu / base:.2f}x" if base else "-"
            print(f"{LABELS[kind]:<45} {cpu:7.1f} {wall:7.1f} {peak:8.0f} {ratio:>13}")
        ours = rows_written(work / "columns.jsonl")
        if "reference" in best:
            same = ours == rows_written(work / "reference.jsonl")
            print(f"the same rows as the reference, byte for byte: {'yes' if same else 'NO'}")
        if "polars" in best:
            same = ours == (work / "polars.jsonl").read_bytes()
            print(f"the same rows as polars, byte for byte: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
