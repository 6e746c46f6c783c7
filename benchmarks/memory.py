"""Peak memory per process: a 65,000-item sweep against bare pytest with as many tests.

Each pytest process (serial: the one; with ``-n 2``: the controller and each worker) writes its
own peak resident set size (``ru_maxrss``) when it finishes, through a small plugin loaded with
``-p``. The sweep uses the instant offline sim provider and a generated ``loader: jsonl`` file;
the baseline is a file of as many parametrized no-op tests, run by pytest alone.

Usage: python benchmarks/memory.py [--items 65000] [--workers 0,2] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from overhead import machine

TARGET_MB = 200.0

PROBE = '''
import os, resource

def pytest_unconfigure(config):
    who = getattr(config, "workerinput", {}).get("workerid", "controller")
    with open(os.path.join(os.environ["MAXRSS_DIR"], who), "w") as f:
        f.write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))
'''


def peaks(workdir: Path, args: list[str], workers: int) -> dict[str, float]:
    """Peak RSS in MB of each process of one pytest run."""
    out = workdir / "rss"
    out.mkdir(exist_ok=True)
    for old in out.iterdir():
        old.unlink()
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "maxrss_probe",
        *args,
    ]
    cmd += ["-n", str(workers)] if workers else []
    env = {**__import__("os").environ, "MAXRSS_DIR": str(out), "PYTHONPATH": str(workdir)}
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, env=env)
    if proc.returncode not in (0, 1):
        raise SystemExit(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}"
            f"{proc.stderr[-2000:]}"
        )
    return {p.name: int(p.read_text()) / 1024 for p in sorted(out.iterdir())}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=65_000)
    parser.add_argument(
        "--workers", default="0,2", help="xdist worker counts to measure (0: serial)"
    )
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    print(machine())
    print(
        f"{args.items} items, --bench-concurrency {args.concurrency}; target: <= "
        f"{TARGET_MB:.0f} MB per process"
    )
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "maxrss_probe.py").write_text(PROBE)
        with open(workdir / "data.jsonl", "w", encoding="utf-8") as f:
            for i in range(args.items):
                f.write(
                    json.dumps({"id": f"t{i}", "input": f"What is {i} + 1?", "target": str(i + 1)})
                    + "\n"
                )
        (workdir / "perf.yaml").write_text(
            "benchmark: perf\ndataset: {loader: jsonl, path: data.jsonl}\nscorer: exact\n"
            "arms:\n  sim: {provider: sim, accuracy: 0.7}\n"
        )
        (workdir / "test_bare.py").write_text(
            f"import pytest\n\n\n@pytest.mark.parametrize('i', range({args.items}))\n"
            "def test_noop(i):\n    pass\n"
        )
        print(
            f"{'run':12} {'-n':>3} {'process':>10} {'peak MB':>8} {'bare MB':>8} "
            f"{'ratio':>6} {'met':>4}"
        )
        for workers in map(int, args.workers.split(",")):
            bare = peaks(workdir, ["test_bare.py", "-p", "no:echo_bench"], workers)
            sweep = peaks(
                workdir,
                [
                    "perf.yaml",
                    "--bench-out",
                    str(workdir / f"r{workers}.jsonl"),
                    "--bench-concurrency",
                    str(args.concurrency),
                    "--bench-progress-every",
                    "0",
                ],
                workers,
            )
            for who, mb in sweep.items():
                base = bare.get(who, 0.0)
                print(
                    f"{'sweep':12} {workers:3d} {who:>10} {mb:8.1f} {base:8.1f} "
                    f"{mb / base if base else 0:6.2f} "
                    f"{'yes' if mb <= TARGET_MB else 'no':>4}"
                )


if __name__ == "__main__":
    main()
