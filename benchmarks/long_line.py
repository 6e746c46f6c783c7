"""One huge row: how long resume's key scan takes on a results file whose one line is N MB.

A model that loops can write a very long output, and a hostile file can hold anything: the scan
must stay linear in the line's length. Writes META + one row with an N MB output + one small row,
then times ``store.read_index`` (the resume read) and ``FileTally.update`` (resume's count). With
``--last`` the huge row is the file's last line and ``store.files.read_end`` (the search for how a
run ended, made by report, merge and a resume) is timed too: it reads the file backwards.

Usage: python benchmarks/long_line.py [--mb 100] [--repeat 1] [--last]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from pytest_echo_bench.store.files import read_end
from pytest_echo_bench.store.reader import read_index
from pytest_echo_bench.store.tally import FileTally


def write_file(path: Path, mb: int, last: bool = False) -> None:
    meta = {"_meta": True, "benchmark": "b", "benchmarks": {}, "schema": 1}
    small = b'{"task_id":"small","arm":"a","benchmark":"b"}\n'
    with open(path, "wb") as f:
        f.write(json.dumps(meta).encode() + b"\n")
        if last:
            f.write(small)
        f.write(b'{"task_id":"big","arm":"a","benchmark":"b","output":"')
        block = b"x" * (1 << 20)
        for _ in range(mb):
            f.write(block)
        f.write(b'"}\n' if last else b'"}\n' + small)


def timed(fn: object, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mb", type=int, default=100)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--last", action="store_true", help="The huge row last; read_end timed too")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "long.jsonl"
        write_file(path, args.mb, args.last)
        index = timed(lambda: read_index(path), args.repeat)
        tally = timed(lambda: FileTally().update(path, strict=True), args.repeat)
        end = timed(lambda: read_end(path), args.repeat) if args.last else None
        keys = len(read_index(path).keys)
    where = "last line" if args.last else "line"
    ending = f", read_end {end:.2f} s" if end is not None else ""
    print(
        f"{args.mb} MB {where}: read_index {index:.2f} s, FileTally.update {tally:.2f} "
        f"s{ending} ({keys} keys)"
    )


if __name__ == "__main__":
    main()
