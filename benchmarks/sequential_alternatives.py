"""The alternatives table of docs/statistics.md: items the anytime-valid test needs to decide,
against the exact McNemar test's n for 80% power.

For each row (a difference and a discordant share) it runs SWEEPS sweeps of i.i.d. items through
the plugin's own test (``analysis.sequential.Betting``, a look after every item, as
``--bench-stop-when-decided`` looks), each item +1 (only a right) with probability
(discordant + diff) / 2, -1 (only b right) with (discordant - diff) / 2, else 0; a sweep runs until
it decides or reaches CAP times the McNemar n. It prints, side by side with the documented
figures, the McNemar n (``analysis.power.n_for_power``, Connor 1987), the median items to a decision
and the items by which 80% of sweeps had decided. Seeded: the same arguments print the same table.

Usage: python benchmarks/sequential_alternatives.py [--sweeps 500] [--seed 1] [--cap 4]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pytest_echo_bench.analysis.power import n_for_power  # noqa: E402
from pytest_echo_bench.analysis.sequential import Betting  # noqa: E402

ALPHA = 0.05
# (diff, discordant) -> (McNemar n, median items to a decision, 80% decided by),
# as docs/statistics.md has them.
DOCUMENTED = {
    (0.20, 0.30): (57, 63, 87),
    (0.10, 0.20): (155, 142, 249),
    (0.10, 0.30): (234, 221, 404),
    (0.04, 0.12): (587, 626, 1093),
    (0.02, 0.12): (2353, 2846, 4713),
}


def items_to_decide(rng: random.Random, diff: float, psi: float, cap: int) -> int:
    """Items until the test decides (a look after each), or ``cap``
    + 1 when it never does by then."""
    a_only, b_only = (psi + diff) / 2, (psi - diff) / 2
    test = Betting(0.0)
    for n in range(1, cap + 1):
        u = rng.random()
        test.update(1.0 if u < a_only else -1.0 if u < a_only + b_only else 0.0)
        if test.decided(ALPHA):
            return n
    return cap + 1


def quantile(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--cap", type=float, default=4.0, help="a sweep stops undecided at CAP x the McNemar n"
    )
    args = parser.parse_args()
    print(f"{args.sweeps} sweeps a row, alpha {ALPHA}, seed {args.seed}; measured (documented)")
    print(
        f"{'diff':>5} {'discordant':>10} {'McNemar n 80%':>14} {'median items':>16} "
        f"{'80% decided by':>18} {'s':>6}"
    )
    for (diff, psi), (doc_n, doc_median, doc_80) in DOCUMENTED.items():
        rng = random.Random(f"{args.seed}-{diff}-{psi}")
        n = n_for_power(diff, psi, ALPHA, 0.8) or 0
        started = time.perf_counter()
        found = [items_to_decide(rng, diff, psi, int(args.cap * n)) for _ in range(args.sweeps)]
        median, by80 = int(statistics.median(found)), quantile(found, 0.8)
        print(f"{diff:>5.2f} {psi:>10.2f} {f'{n} ({doc_n})':>14} {f'{median} ({doc_median})':>16} "
              f"{f'{by80:,} ({doc_80:,})':>18} {time.perf_counter() - started:>6.1f}")


if __name__ == "__main__":
    main()
