"""Batches at scale: 10,000 items through the sim's batch API, end to end in this process.

A sweep of ITEMS inline items on one ``sim`` arm with ``batch: {size, poll_s: 0.05, open}`` runs
with ``pytest.main``. It measures the wall and CPU time of the whole run, the time from the last
batch's results being read (the first ``results`` call of the last batch) to the last row
appended (its ``finished_at``), and the process's peak resident memory, against the same sweep
with the arm live.

Usage: python benchmarks/batch_scale.py [--items 10000] [--size 1000] [--open 4]
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from datetime import datetime
from pathlib import Path

import pytest

from pytest_echo_bench.providers import sim_batch


def write_spec(where: Path, items: int, batch: str) -> Path:
    lines = "\n".join(f'    - {{id: q{i}, input: "2+2=? ({i})", target: "4"}}'
                      for i in range(items))
    spec = where / "scale.yaml"
    spec.write_text(f"benchmark: scale\ndataset:\n  loader: inline\n  items:\n{lines}\n"
                    f"scorer: exact\narms:\n  a: {{provider: sim, accuracy: 1.0{batch}}}\n")
    return spec


def run(where: Path, batch: str, items: int) -> dict[str, float]:
    """One sweep; its figures."""
    spec = write_spec(where, items, batch)
    out = where / f"r{len(batch)}.jsonl"
    reads: list[float] = []
    original = sim_batch.SimBatchAPI.results

    def timed(self: sim_batch.SimBatchAPI, batch_id: str):  # type: ignore[no-untyped-def]
        reads.append(time.time())
        return original(self, batch_id)

    sim_batch.SimBatchAPI.results = timed  # type: ignore[method-assign]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    try:
        status = pytest.main([str(spec), "-q", "-p", "no:cacheprovider", "--bench-out",
                              str(out), "--bench-progress-every", "0", "--rootdir", str(where)])
    finally:
        sim_batch.SimBatchAPI.results = original  # type: ignore[method-assign]
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    rows = [json.loads(line) for line in out.read_text().splitlines()[1:]]
    assert status == 0 and len(rows) == items, (status, len(rows))
    last_row = max(datetime.fromisoformat(r["finished_at"].replace("Z", "+00:00")).timestamp()
                   for r in rows)
    figures = {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
               "cpu_ms_per_item": round(1000 * cpu / items, 3)}
    if reads:
        figures["last_result_to_last_row_s"] = round(last_row - max(reads), 3)
        figures["batches"] = len({r["batch_id"] for r in rows})
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--open", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        batched = run(where, f", batch: {{size: {args.size}, poll_s: 0.05, open: {args.open}}}",
                      args.items)
        live = run(where, "", args.items)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"items": args.items, "batched": batched, "live": live,
                      "peak_rss_mb": round(peak_mb, 1)}, indent=2))


if __name__ == "__main__":
    main()
