"""The run's budget as the plugin sees it: the limits, the refusal of arms without a worst case,
the ledger made at the start, and what the end says of it (the stop, the figure to resume with)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_echo_bench.engine.worst import unbounded
from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.ops.money import usd
from pytest_echo_bench.spec.load import Spec
from pytest_echo_bench.store import holders
from pytest_echo_bench.store.files import StopReason
from pytest_echo_bench.store.ledger import Ledger, LedgerState
from pytest_echo_bench.store.tally import FileTally


def limits(run_usd: float | None, specs: Mapping[str, Spec]) -> dict[str, float | None]:
    """The ledger's accounts: "run" always (it counts what is spent), the others where a limit is set."""
    found: dict[str, float | None] = {"run": run_usd}
    for name, spec in specs.items():
        if spec.budget_usd is not None:
            found[f"bench:{name}"] = spec.budget_usd
        for arm, conf in spec.arms.items():
            if conf.budget_usd is not None:
                found[f"arm:{name}/{arm}"] = conf.budget_usd
    return found


def sources(specs: Mapping[str, Spec]) -> dict[str, str]:
    """Each spec limit's account -> the FILE:LINE of its ``budget:`` key, for the messages that say to raise it."""
    found: dict[str, str] = {}
    for name, spec in specs.items():
        if spec.budget_usd is not None:
            found[f"bench:{name}"] = f"{spec.path}:{spec.lines.get(('budget',), 0)}"
        for arm, conf in spec.arms.items():
            if conf.budget_usd is not None:
                found[f"arm:{name}/{arm}"] = f"{spec.path}:{spec.lines.get(('arms', arm, 'budget'), conf.line)}"
    return found


def applies(run_usd: float | None, spec: Spec, arm: str) -> bool:
    return run_usd is not None or spec.budget_usd is not None or spec.arms[arm].budget_usd is not None


def refuse_unpriced(run_usd: float | None, specs: Mapping[str, Spec]) -> None:
    """Under a budget every arm needs a worst case, before anything is sent: a usage error naming the arm."""
    for spec in specs.values():
        if spec.budget_unpriced:
            continue
        for arm in spec.arms:
            why = unbounded(spec, arm) if applies(run_usd, spec, arm) else None
            if why:
                raise pytest.UsageError(
                    f"{spec.path}: arm {arm!r} has no worst case, so a budget cannot hold its calls before they are "
                    f"sent: {why}. Give it prices and max_tokens, or set budget_unpriced: allow in the spec "
                    "(its calls are then sent without a reservation, and only what they report is counted)")


def start(results: str, run_usd: float | None, specs: Mapping[str, Spec], counted: FileTally | None) -> bool:
    """Make this run's ledger when any limit is set; what the file already spent counts against it."""
    found = limits(run_usd, specs)
    if all(v is None for v in found.values()):
        return False
    spent: dict[str, float] = {}
    for (bench, arm), tally in (counted.arms.items() if counted else ()):
        for name in ("run", f"bench:{bench}", f"arm:{bench}/{arm}"):
            spent[name] = spent.get(name, 0.0) + tally.spent
    try:
        Ledger(results).create(found, spent, sources(specs))
    except StoreError as exc:
        raise pytest.UsageError(f"--bench-budget-usd: {exc}") from exc
    return True


@dataclass(frozen=True)
class Spend:
    """What the ledger says at a moment: spent, the run's limit, calls refused and what they need."""

    spent: float
    limit: float | None
    refused: int
    needed: float
    binding: tuple[tuple[str, float, float, str], ...] = ()  # spec limits a call did not fit: (account, spent, limit, where)
    run_binds: bool = True  # the run's own limit refused a call (or none did): a larger --bench-budget-usd helps

    @classmethod
    def of(cls, state: LedgerState) -> Spend:
        run = state.accounts["run"]
        binding = tuple((n, a.spent, a.limit, state.where.get(n, "")) for n in state.short if n != "run"
                        and (a := state.accounts.get(n)) is not None and a.limit is not None)
        return cls(run.spent, run.limit, state.refused, state.needed, binding, "run" in state.short or not binding)

    def text(self) -> str:
        run = f" of ${usd(self.limit)}" if self.limit is not None else " (no run budget)"
        spec = "".join(f"; {_account(n)} spent ${usd(s)} of ${usd(lim)}" for n, s, lim, _ in self.binding)
        return f"spent ${usd(self.spent)}{run}{spec}"

    def advice(self) -> str:
        """What lets the rest run: a larger run budget (the resume command carries it), or the spec's own."""
        if self.run_binds:
            return ""
        where = ", ".join(w or _account(n) for n, _, _, w in self.binding)
        return f"; raise budget: usd in the spec ({where}): a larger --bench-budget-usd does not help"

    def suggested(self) -> float:
        """A budget to resume with: what is spent and what the refused calls may need, up to the cent."""
        # Less a hair: 0.032 + 0.048 is 8.000000000000002 cents; the ledger allows far more (EPSILON_USD).
        return math.ceil((self.spent + self.needed) * 100 - 1e-7) / 100


def settle_lost(results: str | Path) -> int:
    """At the end: settle the holds of processes that are gone (a worker killed mid-call that no
    call waited on since), so the spend the end reports counts them; how many there were."""
    ledger = Ledger(results)
    try:
        return ledger.change(lambda state: state.release_gone(holders.gone))
    except StoreError:
        return 0  # shown as it stands: the stop and its figures come from ``read``, which says None
    finally:
        ledger.close()


def _account(name: str) -> str:
    kind, _, rest = name.partition(":")
    return f"arm {rest}" if kind == "arm" else f"benchmark {rest}"


def read(results: str | Path) -> Spend | None:
    ledger = Ledger(results)
    try:
        state = ledger.read()
    finally:
        ledger.close()
    return Spend.of(state) if state is not None and "run" in state.accounts else None


def complete_items(counted: FileTally, arms: Mapping[str, list[str]]) -> tuple[int, int]:
    """(items every arm of their benchmark answered, items any arm answered), per (task, epoch)."""
    whole = seen = 0
    for bench, names in arms.items():
        by_arm: dict[str, set[tuple[str, int]]] = {a: set() for a in names}
        for (b, arm, epoch), codes in counted.codes.items():
            if b == bench and arm in by_arm:
                by_arm[arm].update((task, epoch) for task in codes)
        sets = list(by_arm.values())
        if sets:
            whole += len(set.intersection(*sets))
            seen += len(set.union(*sets))
    return whole, seen


def stop_of(spend: Spend, complete: tuple[int, int]) -> tuple[StopReason, dict[str, Any]]:
    """The budget's stop: why, and the marker's figures (``suggested_usd``: the resume command's budget)."""
    message = (f"{spend.text()}; {spend.refused} calls not sent, which need up to "
               f"${usd(spend.needed)} more; {complete[0]} of {complete[1]} items complete for all arms{spend.advice()}")
    details = {"spent_usd": round(spend.spent, 6), "budget_usd": spend.limit, "needed_usd": round(spend.needed, 6),
               "suggested_usd": spend.suggested() if spend.run_binds else None, "refused_calls": spend.refused,
               "items_complete": complete[0], "items_started": complete[1],
               **({"binding": [{"account": n, "spent_usd": round(s, 6), "budget_usd": lim, "where": w}
                               for n, s, lim, w in spend.binding]} if spend.binding else {})}
    return StopReason("budget", message), details
