"""The run's budget as the plugin sees it: the limits, the refusal of arms without a worst case,
the ledger made at the start, and what the end says of it (the stop, the figure to resume with)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_echo_bench.budget import holders, judged
from pytest_echo_bench.budget.ledger import Ledger, LedgerState, lost_in
from pytest_echo_bench.budget.money import usd
from pytest_echo_bench.budget.worst import item_worst, unbounded
from pytest_echo_bench.engine.declared import declared
from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.scoring.registry import takes_judges
from pytest_echo_bench.spec.load import Spec
from pytest_echo_bench.store.files import StopReason
from pytest_echo_bench.store.tally import FileTally


def limits(
    run_usd: float | None, specs: Mapping[str, Spec], shards: int = 1
) -> dict[str, float | None]:
    """The ledger's accounts and their limits: "run", every benchmark and every arm (None: no
    limit of its own; each still counts what is spent, so a crash's charges carry into any
    later limit). Under ``shards`` shards a spec's limit is the whole sweep's, split evenly:
    each shard may spend 1/N of it."""
    found: dict[str, float | None] = {"run": run_usd}
    for name, spec in specs.items():
        found[f"bench:{name}"] = _split(spec.budget_usd, shards)
        for arm, conf in spec.arms.items():
            found[f"arm:{name}/{arm}"] = _split(conf.budget_usd, shards)
    return found


def _split(usd: float | None, shards: int) -> float | None:
    return None if usd is None else usd / shards


def shard_count(shard: str | None) -> int:
    """N of a shard ``K/N`` (1 without one)."""
    total = (shard or "").partition("/")[2]
    return int(total) if total.isdigit() and int(total) > 0 else 1


def split_note(specs: Mapping[str, Spec], shard: str | None) -> list[str]:
    """The line that says a spec's budget is split between the
    shards, and what this one may spend."""
    shards = shard_count(shard)
    where = sources(specs)
    found = limits(None, specs, shards)
    parts = [f"{_account(n)} ${usd(amount * shards)} ({where[n]}): ${usd(amount)} here"
             for n, amount in found.items() if n != "run" and amount is not None]
    if shards == 1 or not parts:
        return []
    return [
        f"echo-bench: budget: shard {shard}: a spec's budget is the whole sweep's, split "
        f"evenly between the {shards} shards "
        f"(--bench-budget-usd is each shard's own): {'; '.join(parts)}"
    ]


def sources(specs: Mapping[str, Spec]) -> dict[str, str]:
    """Each spec limit's account -> the FILE:LINE of its ``budget:`` key, for the
    messages that say to raise it."""
    found: dict[str, str] = {}
    for name, spec in specs.items():
        if spec.budget_usd is not None:
            found[f"bench:{name}"] = f"{spec.path}:{spec.lines.get(('budget',), 0)}"
        for arm, conf in spec.arms.items():
            if conf.budget_usd is not None:
                found[f"arm:{name}/{arm}"] = (
                    f"{spec.path}:{spec.lines.get(('arms', arm, 'budget'), conf.line)}"
                )
    return found


def applies(run_usd: float | None, spec: Spec, arm: str) -> bool:
    return (
        run_usd is not None or spec.budget_usd is not None or spec.arms[arm].budget_usd is not None
    )


def refuse_unpriced(run_usd: float | None, specs: Mapping[str, Spec],
                    judges_asked: bool = True) -> None:
    """Under a budget every arm, and every judge its scorer asks in the sweep, needs a worst case
    before anything is sent: a usage error naming the arm or judge. ``judges_asked`` False: the
    judges are asked later (``--bench-judge later``), by ``echo-bench judge``, which checks them."""
    for spec in specs.values():
        if spec.budget_unpriced:
            continue
        for arm in spec.arms:
            why = unbounded(spec, arm) if applies(run_usd, spec, arm) else None
            if why:
                raise pytest.UsageError(_unpriced(spec, f"arm {arm!r}", why))
        if judges_asked and any(applies(run_usd, spec, arm) for arm in spec.arms):
            _refuse_judges(spec)


def _refuse_judges(spec: Spec) -> None:
    """The judges ``spec``'s scorer asks each need a worst case: their calls draw on the item's
    (``pairwise`` asks none in a sweep: it is judged from a results file)."""
    asked = takes_judges(spec.scorer) and spec.scorer != judged.PAIRWISE
    plan = judged.panel(spec, declared(spec)) if asked else None
    if plan is None:
        return
    for name in plan.calls:
        why = judged.unbounded(spec, name, plan.judges[name])
        if why:
            raise pytest.UsageError(_unpriced(spec, f"judge {name!r}", why))


def _unpriced(spec: Spec, who: str, why: str) -> str:
    return (f"{spec.path}: {who} has no worst case, so a budget cannot hold its calls before they "
            f"are sent: {why}. Give it prices and max_tokens, or set budget_unpriced: allow in "
            "the spec (its calls are then sent without a reservation, and only what they report "
            "is counted)")


def start(results: str, run_usd: float | None, specs: Mapping[str, Spec], counted: FileTally | None,
          shard: str | None = None, longest: Callable[[str], str] | None = None,
          sweep: str = "") -> dict[str, float | None]:
    """Make this run's ledger when any limit is set; its limits ({} when none is). What the
    file already spent counts against them: its rows' charges (``resumed_spend``), and on a
    resume the charges of calls an earlier run of the same ``sweep`` lost in a crash, which
    no row holds (``lost_before``)."""
    found = limits(run_usd, specs, shard_count(shard))
    if all(v is None for v in found.values()):
        return {}
    spent = resumed_spend(counted, specs, longest) if counted is not None else {}
    lost = lost_before(results, sweep) if counted is not None else {}
    for name, amount in lost.items():
        spent[name] = spent.get(name, 0.0) + amount
    try:
        Ledger(results).create(
            found, spent, sources(specs), {n: a for n, a in lost.items() if n in found}, sweep
        )
    except StoreError as exc:
        raise pytest.UsageError(f"--bench-budget-usd: {exc}") from exc
    return found


def resumed_spend(counted: FileTally, specs: Mapping[str, Spec],
                  longest: Callable[[str], str] | None) -> dict[str, float]:
    """Per account, what the file's rows spent: each row's charge (else its cost), and a row
    whose cost is unknown (no usage, and no budget ran to charge it) at its arm's worst case
    for the benchmark's longest prompt: it may have cost that much, never more (an arm
    without a worst case: nothing)."""
    spent: dict[str, float] = {}
    for (bench, arm), tally in counted.arms.items():
        amount = tally.spent
        spec = specs.get(bench)
        if tally.uncosted and spec is not None and arm in spec.arms and longest is not None:
            amount += tally.uncosted * (item_worst(spec, arm, longest(bench)) or 0.0)
        for name in ("run", f"bench:{bench}", f"arm:{bench}/{arm}"):
            spent[name] = spent.get(name, 0.0) + amount
    return spent


def lost_before(results: str | Path, sweep: str = "") -> dict[str, float]:
    """Per account, the charges of calls an earlier run of this sweep lost (``ledger.lost_in``),
    a resume's UsageError when its ledger cannot be read."""
    try:
        return lost_in(results, sweep)
    except StoreError as exc:
        raise pytest.UsageError(f"--bench-resume: {exc}") from exc


@dataclass(frozen=True)
class Spend:
    """What the ledger says at a moment: spent, the run's limit,
    calls refused and what they need."""

    spent: float
    limit: float | None
    refused: int
    needed: float
    # spec limits a call did not fit: (account, spent, limit, where)
    binding: tuple[tuple[str, float, float, str], ...] = ()
    # the run's own limit refused a call (or none did): a larger --bench-budget-usd helps
    run_binds: bool = True
    over: int = 0  # replies that reported more than their request allows: charged as reported
    # what they reported beyond their holds: how far the spend may pass the limit
    over_usd: float = 0.0
    # (spent, held) of the binding limit when new items were refused
    closed_at: tuple[float, ...] = ()

    @classmethod
    def of(cls, state: LedgerState) -> Spend:
        run = state.accounts["run"]
        binding = tuple(
            (n, a.spent, a.limit, state.where.get(n, ""))
            for n in state.short
            if n != "run" and (a := state.accounts.get(n)) is not None and a.limit is not None
        )
        return cls(
            run.spent,
            run.limit,
            state.refused,
            state.needed,
            binding,
            "run" in state.short or not binding,
            state.over,
            state.over_usd,
            tuple(state.closed_at),
        )

    def text(self) -> str:
        run = f" of ${usd(self.limit)}" if self.limit is not None else " (no run budget)"
        spec = "".join(
            f"; {_account(n)} spent ${usd(s)} of ${usd(lim)}" for n, s, lim, _ in self.binding
        )
        over = (
            f"; {self.over} {'reply' if self.over == 1 else 'replies'} over their bound, charged "
            f"${usd(self.over_usd)} beyond their holds"
            if self.over
            else ""
        )
        closed = (
            f"; new items stopped with ${usd(self.closed_at[0])} spent and "
            f"${usd(self.closed_at[1])} held for "
            "calls in flight and started items"
            if self.closed_at
            else ""
        )
        return f"spent ${usd(self.spent)}{run}{spec}{over}{closed}"

    def advice(self) -> str:
        """What lets the rest run: a larger run budget (the resume command
        carries it), or the spec's own."""
        if self.run_binds:
            return ""
        where = ", ".join(w or _account(n) for n, _, _, w in self.binding)
        return (
            f"; raise budget: usd in the spec ({where}): a larger --bench-budget-usd does not help"
        )

    def suggested(self) -> float:
        """A budget to resume with: what is spent and what the refused
        calls may need, up to the cent."""
        # Less a hair: 0.032 + 0.048 is 8.000000000000002 cents; the ledger
        # allows far more (EPSILON_USD).
        return math.ceil((self.spent + self.needed) * 100 - 1e-7) / 100


def settle_lost(
    results: str | Path, limits: Mapping[str, float | None] | None = None
) -> tuple[int, str]:
    """At the end: settle the holds of processes that are gone (a worker killed mid-call that no
    call waited on since), so the spend the end reports counts them. How many there were, and what
    is wrong with the ledger when it cannot be read ("": nothing), for the end to say."""
    ledger = Ledger(results, limits)
    try:
        return ledger.change(lambda state: state.release_gone(holders.gone)), ""
    except StoreError as exc:
        return 0, str(exc)
    finally:
        ledger.close()


def _account(name: str) -> str:
    kind, _, rest = name.partition(":")
    return f"arm {rest}" if kind == "arm" else f"benchmark {rest}"


def over_notes(results: str | Path, seen: int) -> list[str]:
    """The replies over their bound the ledger names after the first ``seen``
    (said on the terminal at once)."""
    ledger = Ledger(results)
    try:
        state = ledger.read()
    finally:
        ledger.close()
    return state.notes[seen:] if state is not None else []


def read(results: str | Path, limits: Mapping[str, float | None] | None = None) -> Spend | None:
    """The spend as the ledger says now (None: no ledger, or one that cannot be read); ``limits``:
    the run's own, in place of the file's (which only caches them)."""
    ledger = Ledger(results, limits)
    try:
        state = ledger.read()
    finally:
        ledger.close()
    return Spend.of(state) if state is not None and "run" in state.accounts else None


def complete_items(counted: FileTally, arms: Mapping[str, list[str]],
                   selected: Iterable[tuple[str, str, int]] = ()) -> tuple[int, int, int]:
    """(items every arm of their benchmark answered, items any arm answered, items of the sweep:
    those answered and those ``selected`` to run), per (task, epoch)."""
    whole = seen = 0
    every = set(selected)
    for bench, names in arms.items():
        by_arm: dict[str, set[tuple[str, int]]] = {a: set() for a in names}
        for (b, arm, epoch), codes in counted.codes.items():
            if b == bench and arm in by_arm:
                by_arm[arm].update((task, epoch) for task in codes)
        sets = list(by_arm.values())
        if sets:
            whole += len(set.intersection(*sets))
            answered = set.union(*sets)
            seen += len(answered)
            every.update((bench, task, epoch) for task, epoch in answered)
    return whole, seen, len(every)


def items_text(complete: tuple[int, int, int]) -> str:
    """How many items every arm answered, of the sweep's, and how many any arm answered."""
    whole, seen, total = complete
    return f"{whole} of {total} items complete for all arms ({seen} started)"


@dataclass(frozen=True)
class BudgetEnd:
    """What the end says of the budget: the summary's line, the budget's stop with the marker's
    figures when it refused a call, and the budget the resume command suggests (None: the same)."""

    line: str = ""
    stop: StopReason | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    next_usd: float | None = None


def settle_end(results: str, limits: Mapping[str, float | None], arms: Mapping[str, list[str]],
               counted: FileTally, selected: Iterable[tuple[str, str, int]]) -> BudgetEnd:
    """At the end, once every worker has exited (a hold left is a lost one's): settle the holds of
    processes that are gone, then read the spend, ``counted`` read on from where it was (the end
    table reads on from there)."""
    damaged = settle_lost(results, limits)[1]
    if damaged:
        return BudgetEnd(f"echo-bench: {damaged}")
    spend = read(results, limits)
    if spend is None:
        return BudgetEnd()
    counted.update(Path(results))
    complete = complete_items(counted, arms, selected)
    line = f"echo-bench: budget: {spend.text()}; {items_text(complete)}"
    if not spend.refused:
        return BudgetEnd(line)
    stop, details = stop_of(spend, complete)
    # A spec's own limit refused it: raise it there, a larger run budget would not help.
    return BudgetEnd(line, stop, details, spend.suggested() if spend.run_binds else None)


def stop_of(spend: Spend, complete: tuple[int, int, int]) -> tuple[StopReason, dict[str, Any]]:
    """The budget's stop: why, and the marker's figures
    (``suggested_usd``: the resume command's budget)."""
    message = (f"{spend.text()}; {spend.refused} calls not sent, which need up to "
               f"${usd(spend.needed)} more; {items_text(complete)}{spend.advice()}")
    details = {
        "spent_usd": round(spend.spent, 6),
        "budget_usd": spend.limit,
        "needed_usd": round(spend.needed, 6),
        "suggested_usd": spend.suggested() if spend.run_binds else None,
        "refused_calls": spend.refused,
        "items_complete": complete[0],
        "items_started": complete[1],
        "items": complete[2],
        **(
            {
                "closed_spent_usd": round(spend.closed_at[0], 6),
                "closed_held_usd": round(spend.closed_at[1], 6),
            }
            if spend.closed_at
            else {}
        ),
        **(
            {"over_bound_replies": spend.over, "over_bound_usd": round(spend.over_usd, 6)}
            if spend.over
            else {}
        ),
        **(
            {
                "binding": [
                    {"account": n, "spent_usd": round(s, 6), "budget_usd": lim, "where": w}
                    for n, s, lim, w in spend.binding
                ]
            }
            if spend.binding
            else {}
        ),
    }
    return StopReason("budget", message), details
