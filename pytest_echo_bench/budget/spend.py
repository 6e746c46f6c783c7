"""What a sweep spent, for the report: per arm the sum of its rows' costs (unknown ones counted
apart), and a budgeted run's budget and spend as its stop marker or summary recorded them (with the
replies over their bound its ledger counted).

Spend is money, so it follows the budget's rule (``store.tally.ArmTally.add_spend``), not the
report's one-row-per-key rule: every row counts, a replaced one too (a retried error's call was
paid for), and a row every call of which the response cache answered cost nothing. A row whose
cost is not known (null, or a figure ``store.checks`` refuses) is counted as unknown, never as 0.

What the judges spent is kept apart (``judge_usd``): the judged rows' ``judge_cost_usd`` (a
judgment the response cache answered counts 0 there, as a cached arm call); a row whose judgments
say no cost is counted in ``judge_unknown``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pytest_echo_bench.budget import money
from pytest_echo_bench.budget.ledger import LedgerState
from pytest_echo_bench.store.checks import figure
from pytest_echo_bench.store.files import budget_path, stop_path, summary_path
from pytest_echo_bench.store.paths import read_regular
from pytest_echo_bench.store.rows import ReadRow

SIDE_FILE_MAX = 1 << 20  # a stop marker, summary or ledger is a few kB; a larger one is not ours


@dataclass
class ArmSpend:
    """One arm's spend: ``usd`` of the rows whose cost is known, and how many rows' cost is not."""

    usd: float = 0.0
    known: int = 0  # rows whose cost is known (cached rows: 0 USD)
    unknown: int = 0
    judge_usd: float = 0.0  # what its judges spent (rows with judgments only)
    judged: int = 0  # rows whose judges' cost is known
    judge_unknown: int = 0

    def add(self, row: ReadRow, call: bool = True, judging: bool = True) -> None:
        """Count one row read from a results file: its arm's call (``call``: one not counted yet)
        and its judging (``judging``: likewise; a row judged again has a judging of its own)."""
        if judging and row.judgments:
            self.add_judging(row.judge_cost_usd)
        if not call:
            return
        # ``add_call``'s rule, inline: a million rows each come here
        if row.cached():
            self.known += 1
            return
        cost = row.cost_usd
        if cost is None:
            self.unknown += 1
        else:
            self.usd += cost
            self.known += 1

    def add_call(self, cached: bool, cost: float | None) -> None:
        """Count one arm call: ``cached`` when the response cache answered it (nothing sent,
        nothing spent), else what it cost (None: not known)."""
        if cached:
            self.known += 1
        elif cost is None:
            self.unknown += 1
        else:
            self.usd += cost
            self.known += 1

    def add_judging(self, cost: float | None) -> None:
        """Count one judging: what was sent (a judgment the cache answered counts 0), or None."""
        if cost is None:
            self.judge_unknown += 1
        else:
            self.judge_usd += cost
            self.judged += 1

    def merge(self, other: ArmSpend) -> None:
        """Add ``other``'s counts to these."""
        self.usd += other.usd
        self.known += other.known
        self.unknown += other.unknown
        self.judge_usd += other.judge_usd
        self.judged += other.judged
        self.judge_unknown += other.judge_unknown


def spend_text(usd: float | None, unknown: int | None) -> str:
    """``0.0123``, ``0.0123 + 2 unknown``, ``2 unknown``, or ``-`` (no
    row; ``usd`` None: no known cost)."""
    if usd is None:
        return f"{unknown} unknown" if unknown else "-"
    return money.usd(usd) + (f" + {unknown} unknown" if unknown else "")


@dataclass(frozen=True)
class RunBudget:
    """A budgeted run's figures as recorded beside its results:
    ``source`` says which file said so."""

    results: str
    source: str  # "stop marker" (the budget stopped the run) or "summary" (the last run's end)
    budget_usd: float | None  # None: only benchmarks or arms had a budget
    spent_usd: float
    # what the calls not sent need at their worst (budget stop only)
    needed_usd: float | None = None
    suggested_usd: float | None = None
    # replies that reported more than their request allows (the ledger counts them)
    over_bound_replies: int = 0
    # what they were charged beyond their holds: how far the spend may pass the budget
    over_bound_usd: float = 0.0

    def text(self) -> str:
        line = f"{self.results}: spent ${money.usd(self.spent_usd)}"
        line += (
            f" of a ${money.usd(self.budget_usd)} budget"
            if self.budget_usd is not None
            else " (budgets per benchmark or arm)"
        )
        if self.needed_usd:
            line += f"; the calls not sent need up to ${money.usd(self.needed_usd)} more"
        if self.suggested_usd is not None:
            line += f"; resume with --bench-budget-usd {self.suggested_usd:g}"
        if self.over_bound_replies:
            line += (
                f"; {self.over_bound_replies} replies reported more than their request "
                "allows, charged "
                f"${money.usd(self.over_bound_usd)} beyond their holds"
            )
        return line + f" (from its {self.source})"


def run_budget(results: Path) -> RunBudget | None:
    """The budget figures recorded for ``results``: the stop marker's when the budget
    stopped the run, else the summary's (the last run's end); None when neither records a
    budget, or what they hold is not a budget's figures (numbers that are not finite and >=
    0 are refused, as a row's are)."""
    marker = _json(stop_path(results))
    if (
        marker.get("reason") == "budget"
        and (found := _figures(str(results), "stop marker", marker)) is not None
    ):
        return _over(found, results)
    summary = _json(summary_path(results)).get("budget")
    found = _figures(str(results), "summary", summary) if isinstance(summary, dict) else None
    return _over(found, results) if found is not None else None


def _over(found: RunBudget, results: Path) -> RunBudget:
    """The replies over their bound, as the run's ledger counted them
    (none when it cannot be read)."""
    # a small regular file, read once without a lock: the run that wrote it has
    # ended, or it is shown as it stands
    try:
        state = LedgerState.from_json(
            json.loads(read_regular(budget_path(results), SIDE_FILE_MAX, ValueError))
        )
    except (OSError, ValueError, RecursionError):
        return found
    if not state.over:
        return found
    return replace(found, over_bound_replies=state.over, over_bound_usd=state.over_usd)


def _figures(results: str, source: str, data: dict[str, Any]) -> RunBudget | None:
    spent = figure(data.get("spent_usd"))
    limit = data.get("budget_usd")
    if spent is None or (limit is not None and figure(limit) is None):
        return None
    needed, suggested = figure(data.get("needed_usd")), figure(data.get("suggested_usd"))
    return RunBudget(results, source, figure(limit), spent, needed, suggested)


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(read_regular(path, SIDE_FILE_MAX, ValueError))
    # missing, not a file, too large, damaged: not recorded
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}
