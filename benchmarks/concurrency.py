"""Concurrency efficiency: N items against a local OpenAI-compatible server answering in 0.2 s.

Prints wall time against the ideal (items x latency / concurrency), the span of the calls
themselves against it (first call started to last row finished, from the rows' timestamps: the
wall time without pytest's start-up, collection and summary), the sweep's CPU seconds and peak
memory, for the openai provider with the official SDK ("openai") and with the lean HTTP client
("http"), and for the offline sim provider with the same latency (the harness alone).

Usage: python benchmarks/concurrency.py [--items 1000] [--levels 8,32,64]
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
from datetime import datetime
from pathlib import Path

from overhead import run

ROOT = Path(__file__).resolve().parents[1]
LATENCY = 0.2

SERVER = f"""
import sys, time
sys.path.insert(0, {str(ROOT / "tests")!r})
from openai_server import FakeOpenAI
server = FakeOpenAI(lambda prompt: (time.sleep({LATENCY}), "4")[1])
# The listen backlog is the test server's own (1024): set here after binding, it would do nothing.
with server:
    print(server.base_url, flush=True)
    sys.stdin.read()
"""


def spec(items: int, arm: str) -> str:
    rows = "\n".join(f'    - {{id: q{i}, input: "2+2=? ({i})", target: "4"}}' for i in range(items))
    return (
        f"benchmark: perf\ndataset:\n  loader: inline\n  items:\n{rows}\nscorer: "
        f"exact\narms:\n{arm}\n"
    )


def call_span(results: Path) -> float:
    """Seconds from the first call's start to the last row's finish."""
    rows = [json.loads(line) for line in results.read_text().splitlines()[1:]]
    start = min(datetime.fromisoformat(r["started_at"]) for r in rows)
    return (max(datetime.fromisoformat(r["finished_at"]) for r in rows) - start).total_seconds()


def run_sweep(workdir: Path, concurrency: int, workers: int) -> tuple[float, float, float, float]:
    """(wall s, calls s, CPU s, peak MB) of one sweep."""
    out = workdir / f"r{time.monotonic_ns()}.jsonl"
    # The cache off: every run makes its calls, none is answered from the previous level's cache.
    wall, cpu = run(
        workdir,
        [
            "perf.yaml",
            "--bench-out",
            str(out),
            "--bench-concurrency",
            str(concurrency),
            "--bench-cache",
            "off",
        ],
        workers,
    )
    return wall, call_span(out), cpu, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--levels", default="8,32,64")
    parser.add_argument("--workers", type=int, default=0, help="xdist workers (0: none)")
    args = parser.parse_args()
    print(
        f"machine: {platform.platform()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}"
    )
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    base_url = server.stdout.readline().strip()  # type: ignore[union-attr]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            workdir = Path(tmp)
            arms = {
                "openai": "  gpt:\n    provider: openai\n    model: m\n    base_url: "
                f"{base_url}\n    api_key_env: null",
                "http": "  gpt:\n    provider: openai\n    client: http\n    model: m\n    "
                f"base_url: {base_url}\n"
                "    api_key_env: null",
                "sim": f"  sim: {{provider: sim, accuracy: 1.0, latency_s: {LATENCY}}}",
            }
            print(
                f"{'provider':8} {'in flight':>9} {'wall s':>8} {'ideal s':>8} {'ratio':>6} "
                f"{'calls s':>8} {'ratio':>6} "
                f"{'cpu s':>7} {'peak MB':>8}"
            )
            for name, arm in arms.items():
                (workdir / "perf.yaml").write_text(spec(args.items, arm))
                for level in map(int, args.levels.split(",")):
                    wall, span, cpu, peak = run_sweep(workdir, level, args.workers)
                    ideal = args.items * LATENCY / level
                    print(
                        f"{name:8} {level:9d} {wall:8.2f} {ideal:8.2f} {wall / ideal:6.2f} "
                        f"{span:8.2f} {span / ideal:6.2f} "
                        f"{cpu:7.2f} {peak:8.1f}"
                    )
    finally:
        server.kill()


if __name__ == "__main__":
    main()
