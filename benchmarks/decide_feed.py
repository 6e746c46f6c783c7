"""What the controller pays per graded row of a watched pair: the monitor fed the report's row
directly (as it was), against the monitor reading the row from the results file
(``analysis.decide.feed``, as it is now, so that the controller, the report and
the page see rows in one order).

Writes a results file with a meta line and ROWS rows of realistic size (outputs of 10-40 words),
then appends ITEMS more items, two rows each (both arms of the pair), and times:

- ``direct``: ``Monitor.add`` for each row (the report payload's fields);
- ``file``: the two rows appended to the file (as the workers do), then ``FileFeed.update``
  after each (as the controller does on each row's report); the append is not timed.

and, at the end, the interval computation the live summary and page pay when they redraw.

Usage: python benchmarks/decide_feed.py [--rows 20000] [--items 2000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

from pytest_echo_bench.analysis.decide.feed import FileFeed
from pytest_echo_bench.analysis.decide.monitor import Monitor, Plan

PLAN = Plan((("demo", "strong", "weak"),))
WORDS = "the answer is four because two plus two makes four — “quoted” café".split()


def _row(rng: random.Random, task: str, arm: str, passed: bool) -> bytes:
    output = " ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 40)))
    row = {
        "task_id": task,
        "arm": arm,
        "passed": passed,
        "detail": "",
        "wall_seconds": 0.41,
        "sub_calls": 1,
        "benchmark": "demo",
        "status": "correct" if passed else "wrong",
        "output": output,
        "answer": "4",
        "target": "4",
        "attempts": 1,
        "started_at": "2026-12-01T00:00:00Z",
        "finished_at": "2026-12-01T00:00:01Z",
        "usage": {"prompt_tokens": 40, "completion_tokens": 20},
    }
    return json.dumps(row, ensure_ascii=True).encode() + b"\n"


def _items(rng: random.Random, start: int, count: int) -> list[tuple[str, bool, bool]]:
    return [(f"q{i}", rng.random() < 0.8, rng.random() < 0.6) for i in range(start, start + count)]


def measure(rows: int, items: int, seed: int) -> tuple[float, float, float]:
    rng = random.Random(seed)
    prior = _items(rng, 0, rows // 2)
    new = _items(rng, rows // 2, items)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "r.jsonl"
        meta = {
            "_meta": True,
            "benchmark": "demo",
            "benchmarks": {"demo": {}},
            "arms": {"demo": ["strong", "weak"]},
        }
        with path.open("wb") as f:
            f.write(json.dumps(meta).encode() + b"\n")
            f.writelines(
                _row(rng, t, arm, ok)
                for t, a, b in prior
                for arm, ok in (("strong", a), ("weak", b))
            )
        direct = Monitor(PLAN)
        for t, a, b in prior:
            direct.add("demo", t, "strong", 1, float(a))
            direct.add("demo", t, "weak", 1, float(b))
        began = time.perf_counter()
        for t, a, b in new:
            direct.add("demo", t, "strong", 1, float(a))
            direct.add("demo", t, "weak", 1, float(b))
        direct_s = time.perf_counter() - began
        fed = Monitor(PLAN)
        feed = FileFeed(path, fed)
        feed.update()  # what the file held at the start (a resume's rows)
        file_s = 0.0
        with path.open("ab", buffering=0) as f:
            for t, a, b in new:
                for arm, ok in (("strong", a), ("weak", b)):
                    f.write(_row(rng, t, arm, ok))
                    began = time.perf_counter()
                    feed.update()
                    file_s += time.perf_counter() - began
        assert fed.pairs[0].test.zs == direct.pairs[0].test.zs  # the same items, in the same order
        began = time.perf_counter()
        fed.figures()
        figures_s = time.perf_counter() - began
    return direct_s / (2 * items), file_s / (2 * items), figures_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    best = [
        min(x)
        for x in zip(
            *(measure(args.rows, args.items, seed) for seed in range(args.repeat)), strict=True
        )
    ]
    print(
        f"per graded row, {args.rows} rows in the file before: monitor fed the report "
        f"{best[0] * 1e6:.1f} us, "
        f"monitor reading the file {best[1] * 1e6:.1f} us; figures at "
        f"{args.rows // 2 + args.items} items "
        f"{best[2]:.2f} s (best of {args.repeat})"
    )


if __name__ == "__main__":
    main()
