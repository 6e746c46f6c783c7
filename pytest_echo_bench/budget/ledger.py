"""The budget's ledger: what a run may spend, has spent and holds for calls in flight, in one small
file beside the results (``RUN.jsonl.budget``) that every process of the run changes under one lock.

The file is JSON, made atomically at the run's start, then read and rewritten in place under an
exclusive ``flock`` of the file itself by every change; the progress line reads it under a shared
one, so no reader sees half a state. Amounts are US dollars.

    accounts  name -> {limit, spent, held}: "run", "bench:<benchmark>", "arm:<benchmark>/<arm>"
    pledged   "<benchmark>\\t<task_id>\\t<epoch>" -> {arm: USD}: what a started item's other
              arms hold
    closed    benchmarks whose new items are refused (one did not fit: the rest finish what started)
    refused   calls not sent for the budget; ``needed`` the worst case they would have cost
    holders   "<host>/<pid>/<start>" -> {account: [held, exposed]}: which process holds what of each
              account's ``held`` (``exposed``: the worst cases of the calls it sent), so that any
              process can settle the holds of one that is gone (``budget.holders``)
    released  the holders settled so: one that was not gone after all settles nothing twice
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.store.checks import figure
from pytest_echo_bench.store.files import budget_path, write_atomic
from pytest_echo_bench.store.safe_text import shown

try:
    import fcntl
# not POSIX: one process's threads still exclude each other; xdist workers would not
except ImportError:
    fcntl = None  # type: ignore[assignment]

T = TypeVar("T")
# Float sums of the same amounts in another order differ in the last bits: a reservation that
# fits exactly must not be refused for 1e-17 dollars, and none may pass by more than this.
EPSILON_USD = 1e-9
OVER_NOTES = 20  # replies over their bound named one by one; the rest are counted


@dataclass
class Account:
    limit: float | None  # None: no limit of its own (the run's account still counts what is spent)
    spent: float = 0.0  # settled: what calls cost (or, when a reply said no usage, what they held)
    held: float = 0.0  # reserved for calls in flight and for the other arms of started items

    def room(self) -> float:
        return float("inf") if self.limit is None else self.limit - self.spent - self.held


@dataclass
class LedgerState:
    accounts: dict[str, Account] = field(default_factory=dict)
    pledged: dict[str, dict[str, float]] = field(default_factory=dict)
    closed: list[str] = field(default_factory=list)
    refused: int = 0
    needed: float = 0.0
    holders: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    released: list[str] = field(default_factory=list)
    # accounts a refused call did not fit: the binding limits
    short: list[str] = field(default_factory=list)
    # account -> the spec's FILE:LINE that sets its limit
    where: dict[str, str] = field(default_factory=dict)
    over: int = 0  # replies that reported more than their request allows (charged as reported)
    # what they reported beyond their calls' worst cases: the budget's overshoot at most
    over_usd: float = 0.0
    # the first OVER_NOTES of them, said as they came
    notes: list[str] = field(default_factory=list)
    # account -> calls of lost processes charged: no row has them
    lost: dict[str, float] = field(default_factory=dict)
    # the sweep whose spend this is (its meta line's run id): another's lost calls are not carried
    sweep: str = ""
    # [spent, held] of the binding account as a benchmark closed
    closed_at: list[float] = field(default_factory=list)

    def note_over(self, text: str, excess: float) -> None:
        """A reply reported ``excess`` more than its call's worst case:
        counted, and named (the first ones)."""
        self.over += 1
        self.over_usd += excess
        if len(self.notes) < OVER_NOTES:
            self.notes.append(text)

    def fits(self, names: list[str], amount: float) -> bool:
        return all(
            self.accounts[n].room() + EPSILON_USD >= amount for n in names if n in self.accounts
        )

    def hold(self, names: list[str], amount: float, holder: str | None = None) -> None:
        for name in names:
            if name in self.accounts:
                self.accounts[name].held += amount
        if holder is not None:
            self.own(names, holder, amount)

    def own(self, names: list[str], holder: str, held: float, exposed: float = 0.0) -> None:
        """Mark ``held`` (already in the accounts' ``held``) as ``holder``'s, and ``exposed`` as
        what the calls it sent may cost."""
        mine = self.holders.setdefault(holder, {})
        for name in names:
            if name in self.accounts:
                entry = mine.setdefault(name, [0.0, 0.0])
                entry[0] += held
                entry[1] += exposed

    def counted_lost(self, names: list[str], worst: float) -> bool:
        """Whether an earlier run's lost holds (``lost``, carried by a resume and in ``spent``)
        counted a call of ``worst`` in every account of ``names``: that run sent it and was
        killed. If so, ``worst`` leaves ``lost``: the call's row now says what it cost."""
        known = [n for n in names if n in self.accounts]
        if worst <= EPSILON_USD or not known or any(
                self.lost.get(n, 0.0) < worst - EPSILON_USD for n in known):
            return False
        for name in known:
            self.lost[name] = max(0.0, self.lost[name] - worst)
        return True

    def settle(self, names: list[str], held: float, spent: float, holder: str | None = None,
               exposed: float = 0.0) -> None:
        """``held`` is released and ``spent`` charged, in every account of ``names``."""
        if holder in self.released:
            return  # settled already, as gone, at no less than these calls may have cost
        for name in names:
            if (account := self.accounts.get(name)) is not None:
                account.held = max(0.0, account.held - held)
                account.spent += spent
        if holder is not None:
            self.own(names, holder, -held, -exposed)
            self._tidy(holder)

    def _tidy(self, holder: str) -> None:
        mine = self.holders.get(holder, {})
        for name in [
            n for n, (h, x) in mine.items() if abs(h) < EPSILON_USD and abs(x) < EPSILON_USD
        ]:
            del mine[name]
        if not mine:
            self.holders.pop(holder, None)

    def release_gone(self, gone: Callable[[str], bool]) -> int:
        """Settle the holds of every holder that is ``gone``; how many there were.

        What its calls were sent with may have been spent (a reply that never came keeps its hold,
        as it does in a live process): their worst cases are charged, never more than it held, since
        a process never has calls out for more than its hold. The rest goes back to the run.
        """
        lost = [h for h in self.holders if gone(h)]
        for holder in lost:
            for name, (held, exposed) in self.holders.pop(holder).items():
                if (account := self.accounts.get(name)) is not None:
                    account.held = max(0.0, account.held - held)
                    charged = min(max(exposed, 0.0), max(held, 0.0))
                    account.spent += charged
                    # a resume carries it: no row says it
                    self.lost[name] = self.lost.get(name, 0.0) + charged
            self.released.append(holder)
        return len(lost)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> LedgerState:
        """The state a ledger file holds; ``ValueError`` naming the field when a value is
        not what a run writes (an amount that is not a finite number >= 0, a count that is
        not a whole one, a wrong type)."""
        top = _object(data, "the file")
        accounts = {
            name: Account(
                None
                if (v := _object(raw, f"accounts.{name}")).get("limit") is None
                else _amount(v["limit"], f"accounts.{name}.limit"),
                _amount(v.get("spent"), f"accounts.{name}.spent"),
                _amount(v.get("held"), f"accounts.{name}.held"),
            )
            for name, raw in _object(top.get("accounts"), "accounts").items()
        }
        if "run" not in accounts:
            raise ValueError("it has no account named run")
        pledged = {
            key: {
                arm: _amount(u, f"pledged.{key}.{arm}")
                for arm, u in _object(v, f"pledged.{key}").items()
            }
            for key, v in _object(top.get("pledged", {}), "pledged").items()
        }
        holders = {
            h: {n: _entry(v, f"holders.{h}.{n}") for n, v in _object(mine, f"holders.{h}").items()}
            for h, mine in _object(top.get("holders", {}), "holders").items()
        }
        return cls(
            accounts,
            pledged,
            _texts(top.get("closed", []), "closed"),
            _count(top.get("refused", 0), "refused"),
            _amount(top.get("needed", 0.0), "needed"),
            holders,
            _texts(top.get("released", []), "released"),
            _texts(top.get("short", []), "short"),
            {k: _text(v, f"where.{k}") for k, v in _object(top.get("where", {}), "where").items()},
            _count(top.get("over", 0), "over"),
            _amount(top.get("over_usd", 0.0), "over_usd"),
            _texts(top.get("notes", []), "notes"),
            {k: _amount(v, f"lost.{k}") for k, v in _object(top.get("lost", {}), "lost").items()},
            _text(top.get("sweep", ""), "sweep"),
            _entry(closed, "closed_at") if (closed := top.get("closed_at")) else [],
        )


def _shown(value: object) -> str:
    text = json.dumps(value) if not isinstance(value, float) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _object(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{where} is {_shown(value)}, not an object")
    return value


def _amount(value: object, where: str) -> float:
    """An amount of US dollars: a finite number >= 0 (NaN, infinities,
    negatives, text and booleans refused)."""
    number = figure(value)
    if number is None:
        raise ValueError(
            f"{where} is {_shown(value)}, not an amount of US dollars (a finite number >= 0)"
        )
    return number


def _entry(value: object, where: str) -> list[float]:
    """A holder's [held, exposed]: amounts, each allowed a float sum's last bits below 0."""
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError(f"{where} is {_shown(value)}, not a pair [held, exposed]")
    return [
        _amount(0.0 if isinstance(v, float) and -EPSILON_USD <= v < 0 else v, where) for v in value
    ]


def _count(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where} is {_shown(value)}, not a count (a whole number >= 0)")
    return value


def _text(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where} is {_shown(value)}, not text")
    return value


def _texts(value: object, where: str) -> list[str]:
    if not isinstance(value, list):
        raise ValueError(f"{where} is {_shown(value)}, not a list")
    return [_text(v, f"{where}[{i}]") for i, v in enumerate(value)]


class Ledger:
    """The ledger file of one results file; ``change`` is the only way to alter it.

    Every change locks the file itself (``flock`` on a descriptor kept open, as the results
    file's append lock does) and rewrites it in place, padded with spaces to its longest length
    so far: a change took 2.2 ms with ``FileLock`` and an atomic rename per change, which capped a
    run at about 200 reservations a second, under 8 calls in flight at 20 ms a call.
    """

    def __init__(
        self, results: str | Path, limits: Mapping[str, float | None] | None = None
    ) -> None:
        self.path = budget_path(results)
        # The limits are the command line's and the specs': the file only caches them, so an edit
        # of the file cannot raise them (read back, they are replaced by these, and written so).
        self.limits = dict(limits) if limits is not None else None
        # the most each account was seen to have spent: it never goes down
        self._spent: dict[str, float] = {}
        self._threads = threading.Lock()  # flock does not exclude threads sharing one descriptor
        self._fd: int | None = None
        # the longest text written through this descriptor: shorter ones are padded to it
        self._size = 0

    def create(self, limits: Mapping[str, float | None], spent: Mapping[str, float],
               where: Mapping[str, str] | None = None, lost: Mapping[str, float] | None = None,
               sweep: str = "") -> LedgerState:
        """A fresh ledger for this run: the limits, with what the results file already
        spent (``lost``: what of it calls lost in an earlier run's crash were charged,
        carried on to every later run)."""
        state = LedgerState(
            {name: Account(limit, spent.get(name, 0.0)) for name, limit in limits.items()},
            where=dict(where or {}),
            lost=dict(lost or {}),
            sweep=sweep,
        )
        try:
            # a new file: no process of an older run holds this one
            write_atomic(self.path, _encode(state))
        except OSError as exc:
            raise StoreError(
                f"cannot write the budget ledger {self.path}: {exc.strerror or exc}"
            ) from exc
        return state

    def change(self, fn: Callable[[LedgerState], T]) -> T:
        """Read, let ``fn`` change the state, write it back: all under the lock."""
        with self._threads:
            fd = self._open()
            try:
                _flock(fd, exclusive=True)
                state = self._read(fd)
                result = fn(state)
                self._write(fd, _encode(state))
                return result
            finally:
                _unlock(fd)

    def read(self) -> LedgerState | None:
        """The state as last written (for what is only shown); None if missing or unreadable."""
        try:
            with self._threads:
                fd = self._open()
                try:
                    _flock(fd, exclusive=False)
                    return self._read(fd)
                finally:
                    _unlock(fd)
        except StoreError:
            return None

    def close(self) -> None:
        with self._threads:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _open(self) -> int:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDWR)
            except OSError as exc:
                raise StoreError(
                    f"the budget ledger {self.path} cannot be opened ({exc.strerror or exc}): "
                    "the run cannot tell what it may spend"
                ) from exc
        return self._fd

    def _read(self, fd: int) -> LedgerState:
        try:
            data = os.pread(fd, max(os.fstat(fd).st_size, 1), 0)
        except OSError as exc:
            raise StoreError(
                f"the budget ledger {self.path} is unreadable ({exc.strerror or exc}): the "
                "run cannot "
                "tell what it may spend"
            ) from exc
        self._size = max(self._size, len(data))
        try:
            state = LedgerState.from_json(json.loads(data))
            if self.limits is not None:
                self._cached(state)
        except (ValueError, RecursionError) as exc:
            raise StoreError(
                f"the budget ledger {self.path} is damaged: {shown(str(exc))}. It records "
                "what this run spent: "
                "restore it, or remove it (a resume then counts only what the results file's rows "
                "spent)"
            ) from exc
        return state

    def _cached(self, state: LedgerState) -> None:
        """The limits as this run set them, whatever the file says
        (every account it needs present)."""
        assert self.limits is not None
        missing = [name for name in self.limits if name not in state.accounts]
        if missing:
            raise ValueError(f"it has no account named {missing[0]}, which this run's budget needs")
        for name, account in state.accounts.items():
            account.limit = self.limits.get(name)
            seen = self._spent.get(name, 0.0)
            # every change adds to it: lowered, it would raise the room
            if account.spent < seen - EPSILON_USD:
                raise ValueError(
                    f"accounts.{name}.spent went down from {seen!r} to {account.spent!r}, "
                    "which no run does"
                )
            self._spent[name] = max(seen, account.spent)

    def _write(self, fd: int, data: bytes) -> None:
        # Padded, never truncated: a reader (or a crash) between a write
        # and a truncate would see a tail.
        data = data.ljust(self._size)
        self._size = len(data)
        try:
            os.pwrite(fd, data, 0)
        except OSError as exc:
            raise StoreError(
                f"cannot write the budget ledger {self.path}: {exc.strerror or exc}"
            ) from exc


def lost_in(results: str | Path, sweep: str = "") -> dict[str, float]:
    """Per account, the charges of calls an earlier run of this ``sweep`` lost (a process killed
    mid-call) in the ledger beside ``results``: those it settled, and the holds it left (the whole
    run killed) at their sent calls' worst cases. Every holder left is gone: the caller owns the
    results file now. A ledger another sweep left carries nothing. StoreError when it is unreadable.
    """
    ledger = Ledger(results)
    try:
        if not ledger.path.exists():
            return {}
        state = ledger.change(lambda found: found)
    finally:
        ledger.close()
    if state.sweep and sweep and state.sweep != sweep:
        return {}
    state.release_gone(lambda holder: True)
    return state.lost


def _encode(state: LedgerState) -> bytes:
    return json.dumps(state.to_json(), separators=(",", ":")).encode("ascii")


def _flock(fd: int, exclusive: bool) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)


def _unlock(fd: int) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
