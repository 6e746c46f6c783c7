"""BBH replay: the paper's recorded Codex outputs scored strictly and robustly,
beside the published accuracy.

For every task of bbh-codex-cot/: items, the published accuracy, the strict scorer's accuracy
(the paper's rule), their difference, and the robust parser's accuracy. No model calls.

Usage: python benchmarks/bbh_replay.py [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# after the path: runs from a checkout
from pytest_echo_bench.suites.bbh import score as bbh  # noqa: E402

Row = tuple[str, int, float, int, int]  # task, items, published %, strict correct, robust correct


def score_task(recordings: Path, task: str) -> Row:
    with gzip.open(recordings / f"{task}.json.gz", "rt", encoding="utf-8") as f:
        outputs = json.load(f)["outputs"]
    published = float(
        json.loads((recordings / f"{task}_eval_metrics.jsonl").read_text().splitlines()[0])[
            "accuracy"
        ]
    )
    strict = sum(bbh(o["prediction"], o["target"], {"strict": True}).passed for o in outputs)
    robust = sum(bbh(o["prediction"], o["target"], {}).passed for o in outputs)
    return task, len(outputs), published, strict, robust


def table(rows: list[Row]) -> list[str]:
    lines = [f"{'task':<42} {'items':>5} {'published':>9} {'strict':>7} {'diff':>6} {'robust':>7}"]
    for task, n, published, strict, robust in rows:
        lines.append(_line(task, n, published, 100 * strict / n, 100 * robust / n))
    n = sum(row[1] for row in rows)
    # Overall is per item (micro), so the published figure is weighted by each task's items too.
    published = sum(row[1] * row[2] for row in rows) / n
    lines.append(
        _line(
            "overall",
            n,
            published,
            100 * sum(row[3] for row in rows) / n,
            100 * sum(row[4] for row in rows) / n,
        )
    )
    return lines


def _line(task: str, n: int, published: float, strict: float, robust: float) -> str:
    diff = round(strict - published, 2) + 0.0  # + 0.0 turns float noise's -0.0 into 0.0
    return f"{task:<42} {n:>5} {published:>9.2f} {strict:>7.2f} {diff:>+6.2f} {robust:>7.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data",
                        help="Folder holding bbh-codex-cot/")
    args = parser.parse_args(argv)
    recordings = args.data / "bbh-codex-cot"
    tasks = sorted(p.name[: -len(".json.gz")] for p in recordings.glob("*.json.gz"))
    if not tasks:
        print(f"no recordings in {recordings}", file=sys.stderr)
        return 1
    print("\n".join(table([score_task(recordings, t) for t in tasks])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
