"""Which calls a row's spend is for, and what a merge keeps of the rows it drops.

A row records the arm's call (its run id and times, which a regraded or merged copy keeps) and,
when judged, a judging: the one made with the call, or a later one by ``echo-bench judge``, which
writes when it judged (``judged_at``). The report counts each call's cost once and each judging's
once (``results.read``): a copy of a row counts nothing again, a key judged again counts its new
judging. A merge keeps each key's newest row only: what the rows it drops spent is recorded in the
merged meta line (``FIELD``), each with its call and judging, so that a report of the merged file
counts what its parts spent, and counts it once when read beside one of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pytest_echo_bench.budget.spend import ArmSpend
from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.store.checks import figure
from pytest_echo_bench.store.records import Key, Meta

FIELD = "replaced_spend"  # the merged meta line's record: {"rows": [...], "unlisted": [...]}
# The dropped rows a meta line lists at most (each about 250 bytes: the line stays under 2 MB);
# beyond them, each arm's sum, counted as it comes (a file read beside the merge may repeat it).
LISTED = 5000
ARM_SUMS = ("usd", "known", "unknown", "judge_usd", "judged", "judge_unknown")


class Named(Protocol):
    """A row as the report holds it (``results.read.Item``): the calls it names (``call_of``) and
    what its judges said."""

    @property
    def call(self) -> str | None: ...

    @property
    def judged(self) -> tuple[Any, ...]: ...


def call_of(run: str | None, started: str | None, finished: str | None,
            judged_at: str | None) -> str | None:
    """What names a row's calls, one string a row (a report holds a million): its run and times
    (None: a row without them, counted as it comes), and when a judging pass judged it. Each part
    before the last is led by its length: a text may hold any character, so no separator could
    tell ("r\\0x", "s") from ("r", "x\\0s"). A judged copy starts with ``@`` and leads its finish
    time with its length too (``arm_call`` reads the arm's call back)."""
    if run is None or started is None or finished is None:
        return None
    if judged_at is None:
        return f"{len(run)}:{run}{len(started)}:{started}{finished}"
    return f"@{len(run)}:{run}{len(started)}:{started}{len(finished)}:{finished}{judged_at}"


def arm_call(call: str) -> str:
    """The arm's call of a row's ``call_of``: the same for a row judged again."""
    if not call.startswith("@"):
        return call
    parts, at = [], 1
    for _ in range(3):
        colon = call.index(":", at)
        end = colon + 1 + int(call[at:colon])
        parts.append(call[colon + 1:end])
        at = end
    run, started, finished = parts
    return f"{len(run)}:{run}{len(started)}:{started}{finished}"


def judging_of(call: str, judged: tuple[object, ...]) -> str | None:
    """What names a row's judging: its call and when it was judged (``call_of``), and what its
    judges said (``results.read.Judged``): a row an older judging pass graded again says no
    time, and its new grades tell it apart from its copies. None: a row with no judgment read
    and no time, whose judging (if any) is counted with its call."""
    if not judged and not call.startswith("@"):
        return None
    return f"j{call}{judged!r}"


@dataclass(frozen=True)
class Replaced:
    """A row a merge dropped: its key, calls (None: it named none) and what they cost (a cached
    call 0; None: not known); ``judged``: whether it had judgments."""

    key: Key
    call: str | None
    judging: str | None
    cost_usd: float | None
    judged: bool = False
    judge_cost_usd: float | None = None

    def to_json(self) -> dict[str, Any]:
        benchmark, task_id, arm, epoch = self.key
        found: dict[str, Any] = {"benchmark": benchmark, "task_id": task_id, "arm": arm,
                                 **({"epoch": epoch} if epoch > 1 else {}),
                                 "call": self.call, "cost_usd": self.cost_usd}
        if self.judged:
            found.update(judging=self.judging, judge_cost_usd=self.judge_cost_usd)
        return found

    def ids(self) -> set[str]:
        """The calls it names (none when it names none; its judging is its call's when None)."""
        if self.call is None:
            return set()
        return {self.call} if self.judging is None else {self.call, self.judging}


def record(rows: list[Replaced], unlisted: dict[tuple[str, str], ArmSpend]) -> dict[str, Any]:
    """What a merged meta line records: the first ``LISTED`` rows, each arm's sum of the rest."""
    sums = dict(unlisted)
    for row in rows[LISTED:]:
        add(sums, row)
    found: dict[str, Any] = {"rows": [row.to_json() for row in rows[:LISTED]]}
    if sums:
        found["unlisted"] = [{"benchmark": b, "arm": a, **{k: getattr(s, k) for k in ARM_SUMS}}
                             for (b, a), s in sums.items()]
    return found


def add(sums: dict[tuple[str, str], ArmSpend], row: Replaced, call: bool = True,
        judging: bool = True) -> None:
    """Count ``row``'s spend in its arm's: its call's (``call``) and its judging's."""
    arm = (row.key[0], row.key[2])
    spend = sums.get(arm)
    if spend is None:
        spend = sums[arm] = ArmSpend()
    if judging and row.judged:
        spend.add_judging(row.judge_cost_usd)
    if call:
        spend.add_call(False, row.cost_usd)


def recorded(meta: Meta | None, where: str
             ) -> tuple[list[Replaced], dict[tuple[str, str], ArmSpend]]:
    """The dropped rows an earlier merge recorded in ``meta``, and each arm's sum of those it did
    not list. Read from a file: anything but the shape ``record`` writes is refused, naming it."""
    value = meta.extra.get(FIELD) if meta is not None else None
    if value is None:
        return [], {}
    rows = value.get("rows") if isinstance(value, dict) else None
    sums = value.get("unlisted", []) if isinstance(value, dict) else None
    if not isinstance(rows, list) or not isinstance(sums, list) or len(rows) > LISTED:
        raise StoreError(f'{where}: \'{FIELD}\' must be {{"rows": [...], "unlisted": [...]}} '
                         f"with at most {LISTED} rows; merge the parts again to rewrite it")
    return [_replaced(entry, where) for entry in rows], dict(_sum(entry, where) for entry in sums)


def _replaced(entry: Any, where: str) -> Replaced:
    ok = (isinstance(entry, dict)
          and all(isinstance(entry.get(k), str) for k in ("benchmark", "task_id", "arm"))
          and type(entry.get("epoch", 1)) is int and entry.get("epoch", 1) >= 1
          and isinstance(entry.get("call"), str | None)
          and isinstance(entry.get("judging"), str | None)
          and _cost(entry, "cost_usd") and _cost(entry, "judge_cost_usd"))
    if not ok:
        raise StoreError(f"{where}: '{FIELD}' lists a row that is not {{benchmark, task_id, arm, "
                         "[epoch], call, cost_usd, [judging, judge_cost_usd]}: "
                         f"{str(entry)[:200]}; merge the parts again to rewrite it")
    key = (entry["benchmark"], entry["task_id"], entry["arm"], entry.get("epoch", 1))
    judged = "judge_cost_usd" in entry
    return Replaced(key, entry["call"], entry.get("judging") if judged else None,
                    figure(entry.get("cost_usd")), judged, figure(entry.get("judge_cost_usd")))


def _cost(entry: dict[str, Any], name: str) -> bool:
    """Whether ``entry``'s ``name`` is null, absent or a figure ``store.checks`` takes."""
    value = entry.get(name)
    return value is None or figure(value) is not None


def _sum(entry: Any, where: str) -> tuple[tuple[str, str], ArmSpend]:
    ok = (isinstance(entry, dict)
          and all(isinstance(entry.get(k), str) for k in ("benchmark", "arm"))
          and all(figure(entry.get(k)) is not None for k in ARM_SUMS)
          and all(type(entry[k]) is int for k in ("known", "unknown", "judged", "judge_unknown")))
    if not ok:
        raise StoreError(f"{where}: '{FIELD}' sums an arm that is not {{benchmark, arm, "
                         f"{', '.join(ARM_SUMS)}}} (counts whole): {str(entry)[:200]}; merge the "
                         "parts again to rewrite it")
    sums = ArmSpend(*(entry[k] for k in ARM_SUMS))
    sums.usd, sums.judge_usd = float(entry["usd"]), float(entry["judge_usd"])
    return (entry["benchmark"], entry["arm"]), sums


BOTH = (True, True)


class Calls:
    """What the report counts of each row's spend (``new``) and of a merge's record
    (``replaced``): each arm call's once, and each judging's. A regrade or merge copies its row,
    a key judged again keeps its call and adds a judging. ``known`` holds the calls of each key
    that has more than one row, or a row a merge dropped and recorded (a key's first row is
    always a call not counted yet: most keys have no set)."""

    def __init__(self, spend: dict[tuple[str, str], ArmSpend], seen: Mapping[Key, Named]) -> None:
        self.spend, self.seen = spend, seen
        self.known: dict[Key, set[str]] = {}
        # whether a merge's record gave a key calls before its first row: until then a key's
        # first row needs no look-up (the report's loop over a million rows)
        self.ahead = False

    def new(self, key: Key, older: Named | None, item: Named) -> tuple[bool, bool]:
        """Whether a row's call and its judging are ones not counted yet: a row that does not name
        its call always is, as is the first row of its key; a later one is if no earlier row of
        its key named it."""
        if older is None and not self.ahead:
            return BOTH
        known = self.known.get(key)
        if known is None:
            if older is None:
                return BOTH
            # the key's second row: the first row's calls are its older row's
            known = self.known[key] = ids_of(older)
        call = item.call
        if call is None:  # counted as it comes (the set above keeps the first row's all the same)
            return BOTH
        return _fresh(known, arm_call(call), judging_of(call, item.judged))

    def replaced(self, rows: list[Replaced], sums: dict[tuple[str, str], ArmSpend]) -> None:
        """What the rows a merge dropped spent (its meta line's record), each call once, and each
        arm's sum of those it did not list, counted as it comes."""
        spend = self.spend
        self.ahead = self.ahead or bool(rows)
        for row in rows:
            new = BOTH
            if row.call is not None:
                known = self.known.get(row.key)
                if known is None:
                    older = self.seen.get(row.key)
                    known = self.known[row.key] = set() if older is None else ids_of(older)
                new = _fresh(known, row.call, row.judging)
            add(spend, row, *new)
        for arm, sums_of in sums.items():
            spend.setdefault(arm, ArmSpend()).merge(sums_of)


def ids_of(item: Named) -> set[str]:
    """The calls ``item`` names: its arm's call and its judging (none when it names none)."""
    call = item.call
    if call is None:
        return set()
    judging = judging_of(call, item.judged)
    return {arm_call(call)} if judging is None else {arm_call(call), judging}


def _fresh(known: set[str], call: str, judging: str | None) -> tuple[bool, bool]:
    """Whether ``call`` and ``judging`` are not in ``known`` yet; both are, after."""
    new_call = call not in known
    known.add(call)
    if judging is None:  # judged with its call, if at all: counted with it
        return new_call, new_call
    new_judging = judging not in known
    known.add(judging)
    return new_call, new_judging
