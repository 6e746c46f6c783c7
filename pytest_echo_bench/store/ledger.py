"""The budget's ledger: what a run may spend, has spent and holds for calls in flight, in one small
file beside the results (``RUN.jsonl.budget``) that every process of the run changes under one lock.

The file is JSON, made atomically at the run's start, then read and rewritten in place under an
exclusive ``flock`` of the file itself by every change; the progress line reads it under a shared
one, so no reader sees half a state. Amounts are US dollars.

    accounts  name -> {limit, spent, held}: "run", "bench:<benchmark>", "arm:<benchmark>/<arm>"
    pledged   "<benchmark>\\t<task_id>\\t<epoch>" -> {arm: USD}: what a started item's other arms hold
    closed    benchmarks whose new items are refused (one did not fit: the rest finish what started)
    refused   calls not sent for the budget; ``needed`` the worst case they would have cost
    holders   "<host>/<pid>/<start>" -> {account: [held, exposed]}: which process holds what of each
              account's ``held`` (``exposed``: the worst cases of the calls it sent), so that any
              process can settle the holds of one that is gone (``store.holders``)
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
from pytest_echo_bench.store.files import budget_path, write_atomic

try:
    import fcntl
except ImportError:  # not POSIX: one process's threads still exclude each other; xdist workers would not
    fcntl = None  # type: ignore[assignment]

T = TypeVar("T")
# Float sums of the same amounts in another order differ in the last bits: a reservation that
# fits exactly must not be refused for 1e-17 dollars, and none may pass by more than this.
EPSILON_USD = 1e-9


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
    short: list[str] = field(default_factory=list)  # accounts a refused call did not fit: the binding limits
    where: dict[str, str] = field(default_factory=dict)  # account -> the spec's FILE:LINE that sets its limit

    def fits(self, names: list[str], amount: float) -> bool:
        return all(self.accounts[n].room() + EPSILON_USD >= amount for n in names if n in self.accounts)

    def hold(self, names: list[str], amount: float, holder: str | None = None) -> None:
        for name in names:
            if name in self.accounts:
                self.accounts[name].held += amount
        if holder is not None:
            self.own(names, holder, amount)

    def own(self, names: list[str], holder: str, held: float, exposed: float = 0.0) -> None:
        """Mark ``held`` (already in the accounts' ``held``) as ``holder``'s, and ``exposed`` as what
        the calls it sent may cost."""
        mine = self.holders.setdefault(holder, {})
        for name in names:
            if name in self.accounts:
                entry = mine.setdefault(name, [0.0, 0.0])
                entry[0] += held
                entry[1] += exposed

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
        for name in [n for n, (h, x) in mine.items() if abs(h) < EPSILON_USD and abs(x) < EPSILON_USD]:
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
                    account.spent += min(max(exposed, 0.0), max(held, 0.0))
            self.released.append(holder)
        return len(lost)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LedgerState:
        accounts = {str(k): Account(None if v["limit"] is None else float(v["limit"]), float(v["spent"]), float(v["held"]))
                    for k, v in dict(data["accounts"]).items()}
        pledged = {str(k): {str(a): float(u) for a, u in dict(v).items()} for k, v in dict(data.get("pledged", {})).items()}
        holders = {str(h): {str(n): [float(v[0]), float(v[1])] for n, v in dict(mine).items()}
                   for h, mine in dict(data.get("holders", {})).items()}
        return cls(accounts, pledged, [str(b) for b in data.get("closed", [])], int(data.get("refused", 0)),
                   float(data.get("needed", 0.0)), holders, [str(h) for h in data.get("released", [])],
                   [str(n) for n in data.get("short", [])],
                   {str(k): str(v) for k, v in dict(data.get("where", {})).items()})


class Ledger:
    """The ledger file of one results file; ``change`` is the only way to alter it.

    Every change locks the file itself (``flock`` on a descriptor kept open, as the results
    file's append lock does) and rewrites it in place, padded with spaces to its longest length
    so far: a change took 2.2 ms with ``FileLock`` and an atomic rename per change, which capped a
    run at about 200 reservations a second, under 8 calls in flight at 20 ms a call.
    """

    def __init__(self, results: str | Path) -> None:
        self.path = budget_path(results)
        self._threads = threading.Lock()  # flock does not exclude threads sharing one descriptor
        self._fd: int | None = None
        self._size = 0  # the longest text written through this descriptor: shorter ones are padded to it

    def create(self, limits: Mapping[str, float | None], spent: Mapping[str, float],
               where: Mapping[str, str] | None = None) -> LedgerState:
        """A fresh ledger for this run: the limits, with what the results file already spent."""
        state = LedgerState({name: Account(limit, spent.get(name, 0.0)) for name, limit in limits.items()},
                            where=dict(where or {}))
        try:
            write_atomic(self.path, _encode(state))  # a new file: no process of an older run holds this one
        except OSError as exc:
            raise StoreError(f"cannot write the budget ledger {self.path}: {exc.strerror or exc}") from exc
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
                raise StoreError(f"the budget ledger {self.path} cannot be opened ({exc.strerror or exc}): "
                                 "the run cannot tell what it may spend") from exc
        return self._fd

    def _read(self, fd: int) -> LedgerState:
        try:
            data = os.pread(fd, max(os.fstat(fd).st_size, 1), 0)
            self._size = max(self._size, len(data))
            return LedgerState.from_json(json.loads(data))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StoreError(f"the budget ledger {self.path} is unreadable ({exc}): the run cannot tell what it "
                             "may spend") from exc

    def _write(self, fd: int, data: bytes) -> None:
        # Padded, never truncated: a reader (or a crash) between a write and a truncate would see a tail.
        data = data.ljust(self._size)
        self._size = len(data)
        try:
            os.pwrite(fd, data, 0)
        except OSError as exc:
            raise StoreError(f"cannot write the budget ledger {self.path}: {exc.strerror or exc}") from exc


def _encode(state: LedgerState) -> bytes:
    return json.dumps(state.to_json(), separators=(",", ":")).encode("ascii")


def _flock(fd: int, exclusive: bool) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)


def _unlock(fd: int) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
