"""What each arm's calls spent per billed token class (input, the cache's reads and writes,
output, reasoning: ``spec.pricing.CLASS_NAMES``), for the arms whose rows keep a class apart.

The tokens come from the rows (every sample row, a cached one too, as ``cost_usd`` counts them);
the cost of each class from the prices of the spec the results file names, as that spec is now
(found under the current directory, as ``report.judge_checks`` finds it): a results file records
each row's cost, not its prices. Without that spec the tokens are shown and the costs are unknown.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter, is_

from pytest_echo_bench.results.read import Item, Results
from pytest_echo_bench.results.specs import recorded_specs
from pytest_echo_bench.spec.pricing import CLASS_NAMES, Price, billed


@dataclass(frozen=True)
class ClassSpend:
    """One arm's tokens per class and, when its prices are known, their cost in USD."""

    benchmark: str
    arm: str
    tokens: dict[str, int]  # class name -> tokens, in ``CLASS_NAMES`` order
    cost_usd: dict[str, float] | None  # class name -> USD at the spec's prices; None: unpriced
    rows: int  # rows whose usage is known (the tokens are theirs)


def class_spend(results: Results, order: dict[str, list[str]],
                grouped: dict[tuple[str, str], list[Item]]) -> list[ClassSpend]:
    """Per arm (in the report's order), its spend per class: only arms with a row that keeps a
    class apart (so a report of rows without classes is what it was before them). ``grouped``:
    the rows by (benchmark, arm) (``results.read.by_arm``)."""
    out: list[ClassSpend] = []
    for bench, arms in order.items():
        classed = [a for a in arms if not all(map(is_, map(_CLASSES, grouped.get((bench, a), ())),
                                                      repeat(None)))]
        prices = _prices(results, bench) if classed else {}
        out += [_spend(bench, a, grouped[(bench, a)], prices.get(a)) for a in classed]
    return out


_CLASSES = attrgetter("classes")


def _spend(bench: str, arm: str, rows: list[Item], price: Price | None) -> ClassSpend:
    tokens = dict.fromkeys(CLASS_NAMES, 0)
    known = 0
    for row in rows:
        split = _billed(row)
        if split is None:
            continue
        known += 1
        for name, count in split.items():
            tokens[name] += count
    cost = None if price is None else {n: t * price.rate(n) / 1e6 for n, t in tokens.items()}
    return ClassSpend(bench, arm, tokens, cost, known)


def _billed(row: Item) -> dict[str, int] | None:
    if row.usage is None:
        return None
    read, write, reasoning = row.classes or (0, 0, 0)
    return billed({"prompt_tokens": row.usage[0], "completion_tokens": row.usage[1],
                   "cache_read_tokens": read, "cache_write_tokens": write,
                   "reasoning_tokens": reasoning})


def _prices(results: Results, bench: str) -> dict[str, Price]:
    """The prices of benchmark ``bench``'s spec as its meta lines name it, under the current
    directory ({}: not found, or not loadable)."""
    return next((spec.pricing for spec in recorded_specs(results, bench)), {})
