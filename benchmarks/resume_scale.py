"""Resume at scale: reading the keys of a 1,000,000-row results file, and collecting 100,000 items.

Writes a results file of realistic rows (as ``records.Row`` writes them: outputs of varying
length, escaped quotes and unicode, usage, some ``extra``), then times in this process:
``store.read_index`` (what resume runs on the controller and on every worker) against the full
parser it replaced (``read_records``, ``json.loads`` per line) and the deselection predicate over
every collected item. Then, in subprocesses: ``--collect-only -q`` of a sweep of ITEMS x ARMS
items against bare pytest collecting as many parametrized tests, and the same collection
resuming from the big file (half of the sweep recorded there), end to end.

Usage: python benchmarks/resume_scale.py [--rows 1000000] [--items 6667] [--arms 15] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from overhead import machine

from pytest_echo_bench.plugin.worker import is_recorded
from pytest_echo_bench.store.reader import read_index, read_records
from pytest_echo_bench.store.records import Row, row_key

TARGET_S = 2.0
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


def write_results(path: Path, rows: int, arms: int) -> None:
    rng = random.Random(0)
    meta = {"_meta": True, "benchmark": "scale", "benchmarks": {}, "schema": 1}
    with open(path, "wb") as f:
        f.write(json.dumps(meta).encode() + b"\n")
        for n in range(rows):
            task, arm = f"t{n // arms}", f"a{n % arms}"
            output = " ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 40)))
            passed = rng.random() < 0.7
            f.write(
                Row(
                    task_id=task,
                    arm=arm,
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
                    usage={"prompt_tokens": 40, "completion_tokens": 12},
                    extra={"escalated": True, "cheap_answers": ["4", None]} if n % 10 == 0 else {},
                ).to_line()
            )


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def full_parse(path: Path) -> set[tuple[str, str, str]]:
    meta, records = read_records(path)
    default = str((meta or {}).get("benchmark", ""))
    return {row_key(r.data, default) for r in records}


FRESH_READ = """
import sys, time
from pathlib import Path
from pytest_echo_bench.store.reader import read_index
from pytest_echo_bench.store.tally import FileTally
path, what = Path(sys.argv[1]), sys.argv[2]
start = time.perf_counter()
result = read_index(path) if what == "keys" else FileTally().update(path, strict=True)
print(time.perf_counter() - start)  # before ``result`` is freed: a resuming process keeps it
"""


def fresh_read(path: Path, what: str) -> float:
    """Seconds to read the file's keys (or keys and counts) in a new interpreter."""
    proc = subprocess.run(
        [sys.executable, "-c", FRESH_READ, str(path), what],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(proc.stdout)


def pytest_run(workdir: Path, *args: str) -> float:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=workdir,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(
            f"pytest {' '.join(args)} failed "
            f"({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    return time.perf_counter() - start


def run_once(workdir: Path, args: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *args], cwd=workdir, capture_output=True, text=True
    )
    # A wrong answer is a failed test (exit 1); anything else than one
    # item run is a broken benchmark.
    if proc.returncode not in (0, 1) or not (
        "1 passed" in proc.stdout or "1 failed" in proc.stdout
    ):
        raise SystemExit(
            f"pytest {' '.join(args)} ({proc.returncode}):\n{proc.stdout[-2000:]}"
            f"{proc.stderr[-2000:]}"
        )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument(
        "--items", type=int, default=6667, help="dataset items of the collected sweep"
    )
    parser.add_argument("--arms", type=int, default=15)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(machine())
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        results = workdir / "big.jsonl"
        write_results(results, args.rows, args.arms)
        size = results.stat().st_size
        print(
            f"results file: {args.rows} rows, {size / 1e6:.0f} MB ({size / args.rows:.0f} "
            f"bytes a row); best of {args.repeat}"
        )
        print(f"{'measure':44} {'seconds':>8} {'vs baseline':>11} {'target':>8} {'met':>4}")
        slow, expected = timed(lambda: full_parse(results), args.repeat)
        index = read_index(results)
        assert index.keys == expected, "read_index and the full parser disagree"
        del expected
        # Timed in a fresh process each, as a resuming pytest process runs them (this one now
        # holds a million parsed keys, which slows every allocation after it).
        fast = min(fresh_read(results, "keys") for _ in range(args.repeat))
        counts = min(fresh_read(results, "counts") for _ in range(args.repeat))
        print(f"{'keys, full parser (json.loads per line)':44} {slow:8.2f} {1:11.2f}")
        print(
            f"{'keys, store.read_index (workers)':44} {fast:8.2f} {fast / slow:11.2f} "
            f"{TARGET_S:8.1f} {'yes' if fast <= TARGET_S else 'no':>4}"
        )
        print(f"{'keys and per-arm counts (controller)':44} {counts:8.2f} {counts / slow:11.2f}")
        # half of the sweep is recorded in the file
        first = args.rows // args.arms - args.items // 2
        keys = [
            ("scale", f"t{i}", f"a{j}", 1)
            for i in range(first, first + args.items)
            for j in range(args.arms)
        ]
        check, _ = timed(lambda: sum(is_recorded(index.keys, k) for k in keys), args.repeat)
        print(f"{f'deselect predicate, {len(keys)} items':44} {check:8.2f}")

        with open(workdir / "data.jsonl", "w", encoding="utf-8") as f:
            for i in range(first, first + args.items):
                f.write(
                    json.dumps({"id": f"t{i}", "input": f"What is {i} + 1?", "target": str(i + 1)})
                    + "\n"
                )
        arms = "".join(f"  a{j}: {{provider: sim, accuracy: 0.7}}\n" for j in range(args.arms))
        (workdir / "scale.yaml").write_text(
            "benchmark: scale\ndataset: {loader: jsonl, path: data.jsonl}\nscorer: "
            f"exact\narms:\n{arms}"
        )
        (workdir / "test_bare.py").write_text(
            f"import pytest\n\n\n@pytest.mark.parametrize('i', range({len(keys)}))\n"
            "def test_noop(i):\n    pass\n"
        )
        bare = min(
            pytest_run(workdir, "test_bare.py", "-p", "no:echo_bench") for _ in range(args.repeat)
        )
        sweep = min(
            pytest_run(workdir, "scale.yaml", "--bench-out", str(workdir / "new.jsonl"))
            for _ in range(args.repeat)
        )
        resume = min(
            pytest_run(workdir, "scale.yaml", "--bench-resume", str(results))
            for _ in range(args.repeat)
        )
        print(f"{f'--collect-only, bare pytest, {len(keys)} tests':44} {bare:8.2f} {1:11.2f}")
        print(
            f"{f'--collect-only, sweep of {len(keys)} items':44} {sweep:8.2f} {sweep / bare:11.2f}"
        )
        print(
            f"{'--collect-only, the same resuming (big file)':44} {resume:8.2f} "
            f"{resume / bare:11.2f}"
        )

        # A whole resumed run that has one item left to do: key read on the controller, the
        # progress count at start, the row append and the end-of-run table over the big file.
        last = f"t{first + args.items - 1}"
        one = ["scale.yaml", "-q", "-p", "no:cacheprovider", "-k", f"{last} and a0"]
        fresh = min(
            run_once(workdir, [*one, "--bench-out", str(workdir / f"fresh{n}.jsonl")])
            for n in range(args.repeat)
        )
        resumed = []
        for _ in range(args.repeat):
            shutil.copyfile(results, workdir / "copy.jsonl")
            resumed.append(run_once(workdir, [*one, "--bench-resume", str(workdir / "copy.jsonl")]))
        print(f"{'run of 1 item, new results file':44} {fresh:8.2f} {1:11.2f}")
        print(
            f"{f'run of 1 item resuming {args.rows} rows':44} {min(resumed):8.2f} "
            f"{min(resumed) / fresh:11.2f}"
        )


if __name__ == "__main__":
    main()
