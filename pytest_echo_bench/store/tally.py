"""Per-arm counts of a results file, read incrementally: the end-of-run table, resume's start-up
count and the live summary all build on ``FileTally``."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.store.checks import FIGURE_MAX, count, figure
from pytest_echo_bench.store.files import STATUSES, UNGRADED, UNJUDGED
from pytest_echo_bench.store.keyscan import RowScan
from pytest_echo_bench.store.reader import parse_line
from pytest_echo_bench.store.records import ArmEpoch, Key, KeySet
from pytest_echo_bench.store.rows import StatusRow, all_cached, fields_of, view

# The verdict of each key's newest row, as a small int (its status's index, plus PASSED when the
# row says passed): CPython shares those, so a million keys cost a dict slot each and no object.
# ``code % PASSED`` is the status's index, ``code >= PASSED`` the pass.
CODES = {status: code for code, status in enumerate(STATUSES)}
PASSED = len(STATUSES)
# the codes of rows with no grade (error, unjudged): run again by ``--bench-retry-errors``
RETRIED = frozenset(CODES[status] for status in UNGRADED)
UNJUDGED_CODE = CODES[UNJUDGED]


@dataclass
class ArmTally:
    items: int = 0
    correct: int = 0
    unparseable: int = 0
    errors: int = 0
    unjudged: int = 0  # rows a judge gave no grade: counted apart, out of the pass rate
    wall: float = 0.0
    not_completed: int = 0
    spent: float = 0.0  # USD the rows' calls cost (``add_spend``): every row, a replaced one too
    costed: int = 0  # rows whose cost is known (a cached one included)
    # rows whose cost is not known, by the report's rule
    # (``budget.spend.ArmSpend``): not counted as 0
    unknown: int = 0
    # rows that sent calls whose cost is unknown: a budgeted resume counts their worst case
    uncosted: int = 0

    @property
    def graded(self) -> int:
        """The rows a pass rate is of: every row but the unjudged ones."""
        return self.items - self.unjudged

    @property
    def pass_rate(self) -> float:
        return self.correct / self.graded if self.graded else 0.0

    def count(self, code: int, wall: float, sign: int = 1) -> None:
        """Count one row (its ``CODES`` code; ``sign`` -1: take back a row a
        newer one of its key replaced)."""
        verdict = STATUSES[code % PASSED]
        self.items += sign
        self.correct += sign * (code >= PASSED)  # ``passed`` counts, as in the report
        self.unparseable += sign * (verdict == "unparseable")
        self.errors += sign * (verdict == "error")
        self.unjudged += sign * (verdict == UNJUDGED)
        self.wall += sign * wall

    def add_spend(self, r: TallyRow) -> None:
        """Count what row ``r`` spent (every row: money spent stays spent, whichever row is newest).

        Its ``charged_usd`` when a budget ran (a reply without usage is charged its worst case, and
        ``cost_usd`` is then null), else its ``cost_usd``, unless every call was answered from the
        cache (a cached reply costs nothing; a routing row with some cached calls counts whole:
        never less). Its cost is known as the report counts it (``budget.spend.ArmSpend.add``): a
        cost that is a figure, or every call cached; ``uncosted`` counts the rows with neither a
        valid charge nor a known cost, whose worst case a budgeted resume counts.
        """
        charged, cost = r.charged_usd, r.cost_usd
        cached = bool(r.cache_hits) and r.cached()  # no hits, the common row: no call
        charge_known = charged is not None and 0.0 <= charged <= FIGURE_MAX
        cost_known = cost is not None and 0.0 <= cost <= FIGURE_MAX
        spent = charged if charge_known else cost if cost_known and not cached else 0.0
        if not charge_known:  # a budget's charge covers the judges' calls too
            spent += _judges_spent(r.judge_cost_usd)  # type: ignore[operator]
        self.spent += spent  # type: ignore[operator]
        if cost_known or cached:
            self.costed += 1
        else:
            self.unknown += 1
        self.uncosted += not (charge_known or cached or cost_known)


def _judges_spent(cost: float | None) -> float:
    """A row's ``judge_cost_usd`` as spent (what its judges' calls sent; unknown: none)."""
    return cost if cost is not None and 0.0 <= cost <= FIGURE_MAX else 0.0


class TallyRow(view("_Tally", "wall_seconds", "cost_usd", "cache_hits", "sub_calls", "charged_usd",
                    "judge_cost_usd", base=StatusRow), gc=False):  # type: ignore[misc]
    """The fields the table counts; the rest of each row is validated, not built.

    Typed as our writer writes them (faster to decode); a row with other types goes to the
    full parser and is counted by the same rules.
    """

    def cached(self) -> bool:
        """``all_cached`` of the row's figures read as the report reads them (``store.checks``)."""
        hits = self.cache_hits
        # no hits, the common row: no call
        return bool(hits) and all_cached(count(hits), figure(self.sub_calls))


class FileTally:
    """Per-arm counts of a results file, each (benchmark, task_id, arm, epoch) once: its newest
    row counts. ``update`` reads only what was appended since the last call: a resumed run counts
    the rows it starts with once, and its end-of-run table reads just the rows it added.

    A key's newest row replaces the one counted before: its verdict exactly; its wall time
    exactly when the replaced row was an error or unjudged (the rows ``--bench-retry-errors`` runs
    again, whose walls are kept), else the first row's wall stays (a repeated row after a lost
    worker).
    """

    def __init__(self) -> None:
        self.arms: dict[tuple[str, str], ArmTally] = defaultdict(ArmTally)
        # (benchmark, arm, epoch) -> task id -> verdict code
        self.codes: dict[ArmEpoch, dict[str, int]] = {}
        # walls of keys whose newest row is an error or unjudged (``RETRIED``)
        self.error_walls: dict[Key, float] = {}
        self.meta: dict[str, Any] | None = None
        # line 1 as read (``RowScan.head``): later meta lines are checked against it
        self.head: dict[str, Any] | None = None
        self.end = (0, 1)  # where the next update starts reading: byte offset, line number

    def recorded(self, retry_errors: bool = False) -> KeySet:
        """The keys resume deselects: every counted key, or with ``retry_errors`` those whose
        newest row is graded (neither an error nor unjudged)."""
        keys = KeySet()
        for arm, codes in self.codes.items():
            keys.by_arm[arm] = (
                {t for t, c in codes.items() if c % PASSED not in RETRIED}
                if retry_errors
                else set(codes)
            )
        return keys

    def retried(self) -> dict[str, int]:
        """How many keys' newest row is of each status a retrying resume runs again (error,
        unjudged), the statuses with none left out."""
        found: dict[str, int] = {}
        for codes in self.codes.values():
            for code in codes.values():
                if code % PASSED in RETRIED:
                    status = STATUSES[code % PASSED]
                    found[status] = found.get(status, 0) + 1
        return found

    def previous(self, key: Key) -> tuple[int, float] | None:
        """The verdict code and wall counted for ``key`` so far (the wall when it is an error or
        unjudged, else 0.0), or None if it has no row."""
        code = self.codes.get((key[0], key[2], key[3]), {}).get(key[1])
        if code is None:
            return None
        return code, self.error_walls.get(key, 0.0)

    def update(self, path: Path, strict: bool = False) -> dict[tuple[str, str], ArmTally]:
        """Count what was appended since the last update.

        Not ``strict`` (the table only counts), a line that is not a row is skipped, and the count
        stops at another sweep's meta line (``store.metalines``); ``strict`` (resume reading what it
        deselects), both are refused with their line number, as by ``read_index``.
        """
        scan = RowScan(
            path,
            TallyRow,
            lambda raw, lineno, last_ok: parse_line(raw, path, lineno, strict and last_ok),
            start=self.end,
            head=self.head,
        )
        try:
            for fast, slow in scan.batches():
                self.meta = scan.meta or self.meta
                self._add(fast, slow)
        except StoreError:
            if strict:
                raise
        except OSError as exc:
            if strict:
                raise StoreError(f"cannot read results file {path}: {exc.strerror or exc}") from exc
        self.end, self.head = scan.end, scan.head
        return self.arms

    def _add(self, fast: list[TallyRow], slow: list[dict[str, Any]]) -> None:
        by_arm, default = self.codes, str((self.meta or {}).get("benchmark", ""))
        # One loop, no call per row but the verdict's and the spend's: a resumed million-row file
        # is counted here. Slow rows first: in a batch with both they are line 1 (keyscan._lines).
        for r in [fields_of(TallyRow, d) for d in slow] + fast:
            epoch = r.epoch if r.epoch is not None and r.epoch > 1 else 1
            arm = (r.benchmark or default, r.arm, epoch)
            codes = by_arm.get(arm)
            if codes is None:
                codes = by_arm[arm] = {}
            status = r.status
            code = CODES[status if isinstance(status, str) and status in CODES else r.verdict()]
            # an unjudged row has no grade: ``passed`` beside it is not a pass (``rows.read_row``)
            code += PASSED * (r.passed is True and code != UNJUDGED_CODE)
            wall = r.wall_seconds or 0.0
            # a negative, infinite or absurd wall is unknown: it adds nothing
            if not 0.0 <= wall <= FIGURE_MAX:
                wall = 0.0
            old = codes.get(r.task_id)
            t = self.arms[arm[:2]]
            t.add_spend(r)
            if old is not None:
                self._replace(t, (arm[0], r.task_id, r.arm, epoch), old, code, wall)
            else:
                t.count(code, wall)
            codes[r.task_id] = code
            if code % PASSED in RETRIED:
                self.error_walls[arm[0], r.task_id, r.arm, epoch] = wall

    def _replace(self, t: ArmTally, key: Key, old: int, code: int, wall: float) -> None:
        """A newer row of a counted key: its verdict replaces the old one (see the
        class docstring for the wall)."""
        old_wall = self.error_walls.pop(key, None)
        t.count(old, old_wall or 0.0, -1)
        t.count(code, wall if old_wall is not None else 0.0)


