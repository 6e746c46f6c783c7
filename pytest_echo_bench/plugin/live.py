"""What the controller shows while a sweep runs: a per-arm progress line, ``RUN.summary.json``
(rewritten atomically, ``"partial": true`` until the sweep completes), the HTML page, and the
end-of-run table."""

from __future__ import annotations

import collections
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_echo_bench.analysis.decide.monitor import Sequential
from pytest_echo_bench.analysis.gates import Gate, arm_key
from pytest_echo_bench.analysis.stats import wilson
from pytest_echo_bench.budget.money import usd
from pytest_echo_bench.plugin import budget
from pytest_echo_bench.plugin.batches import progress_part
from pytest_echo_bench.plugin.collect import split_name
from pytest_echo_bench.plugin.payload import Payload
from pytest_echo_bench.report import decision
from pytest_echo_bench.report.page.html import write_progress
from pytest_echo_bench.report.page.state import LiveCounters, PageFeed
from pytest_echo_bench.store.files import read_stop, summary_path, write_atomic
from pytest_echo_bench.store.safe_text import unescape_id
from pytest_echo_bench.store.tally import CODES, PASSED, ArmTally, FileTally

FILE_EVERY_S = 5.0
DECISIONS_SHOWN = 40  # the end summary's -v list of limiter decisions: the latest this many


@dataclass
class LiveRun:
    results: Path
    run_id: str
    benchmarks: list[str]
    html: Path | None
    line_every_s: float
    write_line: Callable[[str], None]
    gates: list[Gate] = field(default_factory=list)
    expected: dict[str, int] = field(default_factory=dict)  # arm key -> items to run this session
    done: dict[str, int] = field(default_factory=dict)  # arm key -> rows recorded this session
    tallies: dict[tuple[str, str], ArmTally] = field(default_factory=dict)
    # the file as read at start; updated by the table
    counted: FileTally = field(default_factory=FileTally)
    # benchmark -> its spec's epochs, when more than 1
    epochs: dict[str, int] = field(default_factory=dict)
    retries: int = 0
    throttled: int = 0  # calls the provider answered 429 (rate limited)
    # arm key -> its endpoint's current concurrency limit
    limits: dict[str, int] = field(default_factory=dict)
    # arm key -> requests/s its endpoint is paced at
    paces: dict[str, float] = field(default_factory=dict)
    # The limiters' last decisions, from every process (shown with -v: why
    # a run went at the pace it did).
    decisions: collections.deque[str] = field(
        default_factory=lambda: collections.deque(maxlen=DECISIONS_SHOWN)
    )
    incomplete: int = 0
    aborted: int = 0
    started: float = field(default_factory=time.time)
    _last_line: float = field(default_factory=time.monotonic)
    _last_file: float = 0.0
    # arm key -> of expected, items the file has a row for
    rerun: dict[str, int] = field(default_factory=dict)
    # (benchmark, task id, epoch) of the tests to run
    items: set[tuple[str, str, int]] = field(default_factory=set)
    # keys whose old row was taken back
    _replaced: set[tuple[str, str, str, int]] = field(default_factory=set)
    _page: PageFeed | None = None  # the page's tallies, fed with what each refresh finds appended
    # the run has a spend ledger: the line, summary and page show spend against it
    budget: bool = False
    # With a decide plan: the controller's figures (``Deciding.sequential``), given the stop reason
    # and whether the sweep is still running. The summary and the page both show what it returns.
    decide: Callable[[str | None, bool], Sequential] | None = None

    def start(self) -> None:
        """Take what the file already holds (a resumed sweep) as the starting tallies."""
        self.counted.update(self.results)
        self.tallies = {k: replace(t) for k, t in self.counted.arms.items()}

    def expect(self, nodeids: Iterable[str], spec_of: Mapping[str, str]) -> None:
        """Items to run, from node ids ``<spec>::<task>[<arm>]`` and a spec -> benchmark map."""
        for nodeid in nodeids:
            spec, _, rest = nodeid.partition("::")
            if spec in spec_of and rest.endswith("]") and "[" in rest:
                cut, benchmark = rest.rindex("["), spec_of[spec]
                arm, epoch = split_name(rest[cut + 1 : -1], self.epochs.get(benchmark, 1))
                key = self.key(benchmark, arm)
                self.expected[key] = self.expected.get(key, 0) + 1
                self.items.add((benchmark, unescape_id(rest[:cut]), epoch))
                if self.counted.codes and self.counted.previous(
                    (benchmark, unescape_id(rest[:cut]), arm, epoch)
                ):
                    # an error row run again: not one item more
                    self.rerun[key] = self.rerun.get(key, 0) + 1
        self.flush(force=True)

    def key(self, benchmark: str, arm: str) -> str:
        return arm_key(benchmark, arm, self.benchmarks)

    def record(self, bench: Payload) -> None:
        """One item's report (the payload that travels from workers)."""
        self.retries += bench.retries
        self.throttled += bench.throttled
        self.decisions.extend(bench.decisions)
        if bench.limit is not None:
            key = self.key(bench.benchmark, bench.arm)
            self.limits[key] = bench.limit
            if bench.pace:
                self.paces[key] = bench.pace
            else:
                self.paces.pop(key, None)  # not paced (any more)
        kind = bench.kind
        if kind == "row":
            t = self.tallies.setdefault((bench.benchmark, bench.arm), ArmTally())
            self._replace(t, bench)
            t.count(
                CODES[bench.status] + PASSED * (bench.status == "correct"),
                bench.wall_seconds or 0.0,
            )
            key = self.key(bench.benchmark, bench.arm)
            self.done[key] = self.done.get(key, 0) + 1
        elif kind == "incomplete":
            self.incomplete += 1
        elif kind == "aborted":
            self.aborted += 1
        self.flush()

    def _replace(self, t: ArmTally, bench: Payload) -> None:
        """An item the file already had a row for (``--bench-retry-errors``):
        its new row replaces that one."""
        key = bench.key
        previous = self.counted.previous(key) if key not in self._replaced else None
        if previous is not None:
            self._replaced.add(key)
            t.count(previous[0], previous[1], -1)

    def flush(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last_file >= FILE_EVERY_S:
            self._last_file = now
            self.write_files(partial=True)
        if self.line_every_s and now - self._last_line >= self.line_every_s:
            self._last_line = now
            self.write_line(self.progress_line())

    def progress_line(self) -> str:
        total, done = sum(self.expected.values()), sum(self.done.values())
        parts = [f"echo-bench: {done}/{total} done"]
        for (benchmark, arm), t in sorted(self.tallies.items()):
            key = self.key(benchmark, arm)
            if key in self.expected:
                limit = f" limit {self.limits[key]}" if key in self.limits else ""
                limit += f" pace {self.paces[key]:g}/s" if key in self.paces else ""
                # unjudged rows (no grade) are out of the pass rate: said beside it
                unjudged = f" ({t.unjudged} unjudged)" if t.unjudged else ""
                parts.append(
                    f"{key} {self.done.get(key, 0)}/{self.expected[key]} pass "
                    f"{t.pass_rate:.3f}{unjudged}{limit}"
                )
        if self.retries:
            parts.append(f"{self.retries} retries")
        if self.throttled:
            parts.append(f"{self.throttled} rate-limited (429)")
        spend = budget.read(self.results) if self.budget else None
        if spend is not None:
            parts.append(spend.text())
        batches = progress_part(self.results)
        if batches:
            parts.append(batches)
        eta = self._eta(done, total)
        if eta:
            parts.append(f"ETA {eta}")
        return " · ".join(parts)

    def _eta(self, done: int, total: int) -> str:
        elapsed = time.time() - self.started
        if not done or done >= total or elapsed <= 0:
            return ""
        seconds = int((total - done) * elapsed / done)
        return (
            f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
            if seconds >= 3600
            else f"{seconds // 60}m{seconds % 60:02d}s"
        )

    def rates(self) -> dict[str, float]:
        return {self.key(b, a): t.pass_rate for (b, a), t in self.tallies.items() if t.graded}

    def summary(
        self,
        partial: bool,
        status: int | None = None,
        stopped: str = "",
        gates: list[str] | None = None,
        decided: Sequential | None = None,
    ) -> dict[str, Any]:
        arms = {}
        for (benchmark, arm), t in sorted(self.tallies.items()):
            lo, hi = wilson(t.correct, t.graded)
            arms[self.key(benchmark, arm)] = {
                # n: the graded rows the rate is of; unjudged ones are counted apart
                "benchmark": benchmark, "arm": arm, "n": t.graded, "correct": t.correct,
                "pass_rate": round(t.pass_rate, 6), "ci95": [round(lo, 6), round(hi, 6)],
                "unparseable": t.unparseable, "errors": t.errors, "unjudged": t.unjudged,
                "wall_mean": round(t.wall / t.items, 4) if t.items else None,
                "concurrency_limit": self.limits.get(self.key(benchmark, arm)),
                "pace_per_s": self.paces.get(self.key(benchmark, arm)),
            }
        total, done = sum(self.expected.values()), sum(self.done.values())
        return {
            "results": str(self.results),
            "run_id": self.run_id,
            "partial": partial,
            "updated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "status": status,
            "stopped": stopped,
            "to_run": total,
            "done": done,
            "remaining": max(0, total - done),
            "retries": self.retries,
            "rate_limited": self.throttled,
            "incomplete": self.incomplete,
            "aborted": self.aborted,
            "arms": arms,
            "gates": gates or [],
            **self._spend(),
            **(
                {"decide": decision.to_json(seq)}
                if (seq := decided or self._decided(status)) is not None
                else {}
            ),
        }

    def _decided(self, status: int | None) -> Sequential | None:
        """The decide figures now: running until the end gives a status
        (or a stop marker is written)."""
        if self.decide is None:
            return None
        stop = read_stop(self.results)
        return self.decide(None if stop is None else stop.reason, status is None)

    def _spend(self) -> dict[str, Any]:
        spend = budget.read(self.results) if self.budget else None
        if spend is None:
            return {}
        return {"budget": {"spent_usd": round(spend.spent, 6), "budget_usd": spend.limit,
                           "refused_calls": spend.refused, "needed_usd": round(spend.needed, 6)}}

    def write_files(self, partial: bool, status: int | None = None, stopped: str = "",
                    gates: list[str] | None = None) -> None:
        # Best effort: a full disk must not turn a progress page into a failed sweep.
        try:
            decided = self._decided(status)  # once: the summary and the page show the same figures
            text = (
                json.dumps(self.summary(partial, status, stopped, gates, decided), indent=1) + "\n"
            )
            write_atomic(summary_path(self.results), text.encode("utf-8"))
            if self.html is not None:
                spend = budget.read(self.results) if self.budget else None
                live = LiveCounters(
                    dict(self.expected),
                    self.retries,
                    self.incomplete,
                    self.aborted,
                    self.started,
                    stopped,
                    dict(self.rerun),
                    dict(self.limits),
                    self.throttled,
                    spend.text() if spend else "",
                    decided,
                )
                self._page = self._page or PageFeed(self.results, self.started)
                write_progress(self.results, self.html, live, feed=self._page)
        except OSError:
            pass

    def reconcile(self, run_start: int) -> bool:
        """Count from the file itself: True when it holds rows no report counted.

        After a stop, calls in flight still finish and append their rows, on xdist workers whose
        reports no longer reach the controller (two Ctrl-C: "done 40" for a file of 66 rows). Once
        every worker is gone, the whole file's tallies (``counted``, read on from where it was)
        replace the report-fed ones, and ``done`` is the keys of the rows after ``run_start``.
        """
        tallies = {k: replace(t) for k, t in self.counted.update(self.results).items() if t.items}
        mine = FileTally()
        # the meta line, if any, is before ``run_start``
        mine.end = (run_start, 1 if run_start == 0 else 2)
        mine.update(self.results)
        done: dict[str, int] = {}
        for (benchmark, arm, _), codes in mine.codes.items():
            done[self.key(benchmark, arm)] = done.get(self.key(benchmark, arm), 0) + len(codes)
        changed = done != self.done or tallies != {k: t for k, t in self.tallies.items() if t.items}
        self.done, self.tallies = done, tallies
        return changed

    def check_gates(self) -> tuple[bool, list[str]]:
        rates = self.rates()
        results = [gate.check(rates) for gate in self.gates]
        return all(ok for ok, _ in results), [text for _, text in results]


def _spend(t: ArmTally) -> str:
    """The spend column as the report shows it (``budget.spend.spend_text``): what was
    spent (cached rows: 0), and the rows whose cost is not known, counted apart:
    ``0.0123 + 2 unknown``, ``3 unknown``."""
    unknown = f"{t.unknown} unknown" if t.unknown else ""
    if not t.spent and not t.costed:
        return unknown or ("0" if t.items else "-")
    return usd(t.spent) + (f" + {unknown}" if unknown else "")


def end_table(
    path: Path, not_completed: dict[tuple[str, str], int], counted: FileTally | None = None
) -> list[str]:
    """The table's lines; ``counted`` is what was already counted of
    the file (at the run's start)."""
    arms = {k: replace(t) for k, t in (counted or FileTally()).update(path).items()}
    for key, count in not_completed.items():
        arms.setdefault(key, ArmTally()).not_completed += count
    if not arms:
        return []
    # the unjudged column only where a judge left rows without a grade: a sweep without one
    # never has any
    judged = any(t.unjudged for t in arms.values())
    header = (
        "benchmark",
        "arm",
        "items",
        "correct",
        "pass rate",
        "unparseable",
        "errors",
        *(("unjudged",) if judged else ()),
        "not completed",
        "mean wall s",
        "spend $",
    )
    rows = [header] + [_end_row(b, a, t, judged) for (b, a), t in sorted(arms.items())]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return [
        "  ".join(
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ] + ([UNJUDGED_LINE] if judged else [])


def _end_row(benchmark: str, arm: str, t: ArmTally, judged: bool) -> tuple[str, ...]:
    """One arm's line of the end table (``judged``: with the unjudged column)."""
    return (
        benchmark,
        arm,
        str(t.items),
        str(t.correct),
        f"{t.pass_rate:.3f}" if t.graded else "n/a",
        str(t.unparseable),
        str(t.errors),
        *((str(t.unjudged),) if judged else ()),
        str(t.not_completed),
        f"{t.wall / t.items:.3f}" if t.items else "-",
        _spend(t),
    )


# said under the end table when it has unjudged rows
UNJUDGED_LINE = ("unjudged: rows a judge gave no grade (it failed, or its reply held none): not "
                 "wrong answers, left out of the pass rate; a resume with --bench-retry-errors "
                 "judges them again")
