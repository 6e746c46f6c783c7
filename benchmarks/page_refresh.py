"""One refresh of the live progress page on a large results file, against the old full re-read.

Writes a results file of ROWS realistic rows (as ``records.Row`` writes them, after a meta line:
outputs of 10-40 words with escaped quotes and unicode, usage, 30% wrong answers, ``extra`` on
every tenth), about 140 MB by default. Then, each in a new process so one's memory does not
hide the other's:

- the page as a run keeps it now: a ``PageFeed`` kept between refreshes, ``write_progress``
  (read, state, render, atomic write) once on the whole file, then again after 100 more rows
  are appended (it reads only those);
- the old page's read, which it did on every refresh: ``store.reader.read_records(path,
  strict=False)`` (``json.loads`` per line) of the whole file, then again after the 100 rows.
  The old page also built its state and rendered from those rows: this read is a lower bound.

For each: seconds, and the peak resident set size above what the process held before (Linux:
the peak is reset through ``/proc/self/clear_refs`` before each measure); with ``--trace``, in
one more process each, the peak of Python allocations by ``tracemalloc`` (slower; not timed).
Each time is the best of ``--repeat`` processes; memory is from the first.

Usage: python benchmarks/page_refresh.py [--rows 232000] [--arms 15]
       [--append 100] [--repeat 3] [--trace]
"""

from __future__ import annotations

import argparse
import calendar
import gc
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from overhead import machine

from pytest_echo_bench.store.files import encode_line
from pytest_echo_bench.store.records import Meta, Row

BENCHMARK = "scale"
# a fixed start time; rows finish after it
BASE_TIME = float(calendar.timegm((2026, 12, 1, 0, 0, 0)))
# the pace of the generated run, for the timestamps (the page's chart and rate)
ROWS_PER_SECOND = 20
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
MB = 1024 * 1024


# -- the results file ------------------------------------------------------------------------
def stamp(seconds: float) -> str:
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        + f".{int(seconds * 1000) % 1000:03d}Z"
    )


def make_row(n: int, arms: int, rng: random.Random) -> bytes:
    """Row ``n`` of the generated sweep: task ``n // arms`` on arm ``n % arms``."""
    passed = rng.random() < 0.7
    finished = BASE_TIME + n / ROWS_PER_SECOND
    return Row(
        task_id=f"t{n // arms}",
        arm=f"a{n % arms}",
        passed=passed,
        detail="passed" if passed else "expected 4 got 5",
        wall_seconds=round(rng.random(), 4),
        sub_calls=1,
        benchmark=BENCHMARK,
        status="correct" if passed else "wrong",
        output=" ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 40))),
        answer="4" if passed else "5",
        target="4",
        attempts=1,
        started_at=stamp(finished - 0.5),
        finished_at=stamp(finished),
        worker=f"gw{n % 2}",
        run_id="0123456789ab",
        usage={"prompt_tokens": 40, "completion_tokens": 12},
        cost_usd=0.0001,
        extra={"escalated": True, "cheap_answers": ["4", None]} if n % 10 == 0 else {},
    ).to_line()


def items_per_arm(rows: int, arms: int) -> int:
    return (rows + 10_000) // arms  # more than will be written: the page shows a run in progress


def write_results(path: Path, rows: int, arms: int) -> None:
    names = [f"a{j}" for j in range(arms)]
    meta = Meta(
        benchmark=BENCHMARK,
        benchmarks={
            BENCHMARK: {
                "spec": "scale.yaml",
                "fingerprint": "0" * 16,
                "items": items_per_arm(rows, arms) * arms,
            }
        },
        spec_files=["scale.yaml"],
        fingerprint="0" * 16,
        arms={BENCHMARK: names},
        selection={"args": ["scale.yaml"]},
        run_id="0123456789ab",
        plugin_version="0.1.0",
        created_at=stamp(BASE_TIME),
    )
    rng = random.Random(0)
    with open(path, "wb") as f:
        f.write(encode_line(meta.to_json()))
        for n in range(rows):
            f.write(make_row(n, arms, rng))


def append_rows(path: Path, first: int, count: int, arms: int) -> None:
    rng = random.Random(first)
    with open(path, "ab") as f:
        f.write(b"".join(make_row(n, arms, rng) for n in range(first, first + count)))


# -- measuring, in the child process ---------------------------------------------------------
def _status_kb(key: str) -> int:
    found = re.search(rf"^{key}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M)
    return int(found.group(1)) if found else 0


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
        return True
    except OSError:
        return False


def measure(fn: Callable[[], object], trace: bool) -> dict[str, float]:
    """Seconds of ``fn()`` and its peak memory above the process's memory before it, in MB."""
    gc.collect()
    before = 0
    if trace:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
    reset = _reset_peak()
    rss = _status_kb("VmRSS")
    start = time.perf_counter()
    fn()
    seconds = time.perf_counter() - start
    result = {
        "s": seconds,
        "peak_mb": (_status_kb("VmHWM") - rss) / 1024 if reset else float("nan"),
    }
    if trace:
        result["traced_mb"] = (tracemalloc.get_traced_memory()[1] - before) / MB
    return result


def child(mode: str, path: Path, rows: int, arms: int, append: int, trace: bool) -> dict[str, Any]:
    """Measure one approach: a refresh on the whole file, then one after ``append`` more rows."""
    from pytest_echo_bench.report.page.html import write_progress
    from pytest_echo_bench.report.page.state import LiveCounters, PageFeed
    from pytest_echo_bench.store.reader import read_records

    if trace:
        tracemalloc.start()
    expected = {f"a{j}": items_per_arm(rows, arms) for j in range(arms)}
    live = LiveCounters(expected=expected, started_at=BASE_TIME)
    feed = PageFeed(path, BASE_TIME)
    page = path.with_suffix(".html")
    counted: list[int] = []

    def refresh() -> None:
        if mode == "feed":
            write_progress(path, page, live, feed=feed)
            counted.append(feed.state(live).done)
        else:
            # the rows are dropped: each refresh reads anew
            counted.append(len(read_records(path, strict=False)[1]))

    rss_before = _status_kb("VmRSS")
    first = measure(refresh, trace)
    gc.collect()
    kept_mb = (_status_kb("VmRSS") - rss_before) / 1024  # what stays between refreshes
    append_rows(path, rows, append, arms)
    again = measure(refresh, trace)
    if counted != [rows, rows + append]:
        raise SystemExit(
            f"{mode}: the refreshes counted {counted} rows, expected {[rows, rows + append]}"
        )
    return {"first": first, "refresh": again, "kept_mb": kept_mb,
            "page_bytes": page.stat().st_size if mode == "feed" else 0}


# -- the parent ------------------------------------------------------------------------------
def run_child(mode: str, path: Path, args: argparse.Namespace, trace: bool) -> dict[str, Any]:
    size = path.stat().st_size
    cmd = [sys.executable, __file__, "--child", mode, "--path", str(path), "--rows", str(args.rows),
           "--arms", str(args.arms), "--append", str(args.append), *(["--trace"] if trace else [])]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    finally:
        os.truncate(path, size)  # the appended rows: every process starts from the same file
    if proc.returncode != 0:
        raise SystemExit(f"{mode} ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def measure_mode(mode: str, path: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The first process's figures, with the best time of ``repeat``
    processes; traced peaks if asked."""
    runs = [run_child(mode, path, args, trace=False) for _ in range(args.repeat)]
    result = runs[0]
    for step in ("first", "refresh"):
        result[step]["s"] = min(r[step]["s"] for r in runs)
    if args.trace:
        traced = run_child(mode, path, args, trace=True)
        for step in ("first", "refresh"):
            result[step]["traced_mb"] = traced[step]["traced_mb"]
    return result


def report(new: dict[str, Any], old: dict[str, Any], append: int, trace: bool) -> None:
    head = f"{'measure':58} {'seconds':>8} {'x old':>7} {'peak RSS MB':>11}" + (
        f" {'traced MB':>9}" if trace else ""
    )
    print(head)
    lines = [
        ("old page: read_records of the whole file", old["first"], old["first"]),
        (
            f"old page: the same after {append} more rows (every refresh)",
            old["refresh"],
            old["refresh"],
        ),
        ("page now: first refresh (whole file: read, state, render)", new["first"], old["first"]),
        (f"page now: refresh after {append} more rows", new["refresh"], old["refresh"]),
    ]
    for label, figures, baseline in lines:
        traced = f" {figures['traced_mb']:9.1f}" if trace else ""
        print(
            f"{label:58} {figures['s']:8.3f} {figures['s'] / baseline['s']:7.4f} "
            f"{figures['peak_mb']:11.1f}{traced}"
        )
    print(
        f"memory the page's feed keeps between refreshes: {new['kept_mb']:.1f} MB; page: "
        f"{new['page_bytes'] / 1000:.1f} kB"
    )
    print(
        "(a second refresh's peak RSS is above what the process held after the first, whose "
        "freed memory the "
        "allocator reuses; tracemalloc's peak counts every allocation of the step)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--rows", type=int, default=232_000, help="rows of the results file (about 604 bytes each)"
    )
    parser.add_argument("--arms", type=int, default=15)
    parser.add_argument(
        "--append", type=int, default=100, help="rows appended before the second refresh"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--trace",
        action="store_true",
        help="also measure tracemalloc peaks (one more slow process each)",
    )
    parser.add_argument("--child", choices=("feed", "old"), help=argparse.SUPPRESS)
    parser.add_argument("--path", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(
            json.dumps(child(args.child, args.path, args.rows, args.arms, args.append, args.trace))
        )
        return
    print(machine())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.jsonl"
        write_results(path, args.rows, args.arms)
        size = path.stat().st_size
        print(
            f"results file: meta line + {args.rows} rows over {args.arms} arms, "
            f"{size / 1e6:.1f} MB "
            f"({size / args.rows:.0f} bytes a row); times: best of {args.repeat} processes"
        )
        new, old = measure_mode("feed", path, args), measure_mode("old", path, args)
    report(new, old, args.append, args.trace)


if __name__ == "__main__":
    main()
