"""The run session: resume deselection, item execution, abort, exit status and the summary."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from .cache import ResponseCache
from .collect import OUTCOME, BenchItem, SpecFile
from .context import COUNTED, RECORDED, RunContext
from .live import LiveRun
from .options import BenchOptions
from .records import Key, KeySet
from .runner import ABORTED, INCOMPLETE, ROW, UNAVAILABLE, Outcome, Prefetcher, Runner, StopSignal, utcnow, write_marker
from .shard import parse_shard
from .store import ResultsWriter, read_index
from .summary import FileTally, summarize

STOP_GRACE_S = 3.0
STOP_PREFIX = "echo-bench: "  # how the runner's stop messages begin
NOT_RECORDED = {INCOMPLETE: ("incomplete", "I", "INCOMPLETE"), ABORTED: ("aborted", "A", "ABORTED")}


class BenchSession:
    """Registered only when a run has benchmark specs; holds every piece of run state."""

    def __init__(self, config: pytest.Config, opts: BenchOptions, ctx: RunContext) -> None:
        self.config, self.opts, self.ctx = config, opts, ctx
        self.is_worker = hasattr(config, "workerinput")
        self.spec_paths = {Path(p) for p in ctx.specs}
        worker = config.workerinput["workerid"] if self.is_worker else "main"  # type: ignore[attr-defined]
        self.writer = ResultsWriter(Path(ctx.results), opts.fsync, meta=ctx.meta)
        self.stop = StopSignal(ctx.stop_marker)
        cache = ResponseCache(Path(ctx.cache)) if ctx.cache else None
        self.runner = Runner(self.writer, self.stop, ctx.run_id, worker, self._request_stop, cache)
        self.prefetcher = Prefetcher(self.runner, opts.concurrency, STOP_GRACE_S)
        self.session: pytest.Session | None = None
        self.to_run = 0
        self.counts: dict[str, int] = {}
        self.not_completed: dict[tuple[str, str], int] = {}
        self.unfinished: list[tuple[str, str]] = []
        self.unavailable: dict[tuple[str, str], int] = {}  # (arm, reason) -> items skipped
        self.other_failures = 0
        self.collect_errors = 0
        self._resume_said = False
        self.stopped = ""  # why the run stopped early, once decided
        self._pos = 0  # serial: where in session.items the next item to run should be
        self._xdist: Any = None
        self._reporter: Any = None  # the terminal reporter (False: none), looked up once
        self._prefixes: tuple[str, ...] = ()  # "<spec>::": node ids of benchmark items
        self.shard = parse_shard(ctx.shard)
        self.live: LiveRun | None = None
        self.gate_lines: list[str] = []
        self.final: dict[str, Any] | None = None  # the end-of-run summary, once decided

    # -- collection --------------------------------------------------------------------------
    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> SpecFile | None:
        if file_path in self.spec_paths:
            return SpecFile.from_parent(parent, path=file_path)
        return None

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionstart(self, session: pytest.Session) -> Iterator[None]:
        self.session = session
        yield  # after the terminal reporter's header
        if not self.is_worker:
            self._write(f"echo-bench: results -> {self.ctx.results} (run {self.ctx.run_id})")
            for note in self.ctx.notes:
                self._write(note)
            self.live = LiveRun(Path(self.ctx.results), self.ctx.run_id, list(self.ctx.meta["benchmarks"]),
                                Path(self.opts.html) if self.opts.html else None, self.opts.progress_every,
                                self._write, list(self.opts.gates),
                                counted=self.config.stash.get(COUNTED, None) or FileTally())
            self.live.start()

    @pytest.hookimpl(trylast=True)  # after -k/-m deselection, so "to run" counts what will run
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        shard = self.shard
        if shard is not None:
            _deselect(config, items, lambda i: isinstance(i, BenchItem) and not shard.owns(i.key))
        if self.ctx.resume_upto is not None:
            recorded = self._recorded()
            _deselect(config, items, lambda i: isinstance(i, BenchItem) and is_recorded(recorded, i.key))
        self.to_run = sum(isinstance(i, BenchItem) for i in items)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self.live is not None:  # serial: the controller collected (xdist: see below)
            self.live.expect((i.nodeid for i in session.items if isinstance(i, BenchItem)), self._spec_of())

    def _spec_of(self) -> dict[str, str]:
        return {str(info["spec"]): name for name, info in self.ctx.meta["benchmarks"].items()}

    def _recorded(self) -> KeySet:
        # Every process reads the same prefix of the file (up to the controller's offset), so all
        # xdist workers deselect identically even while others append; the controller read it.
        recorded = self.config.stash.get(RECORDED, None)
        return recorded if recorded is not None else read_index(Path(self.ctx.results), self.ctx.resume_upto).keys

    def pytest_report_collectionfinish(self, config: pytest.Config) -> str | None:
        if self.ctx.resume_upto is None or self.is_worker:
            return None
        return self._resume_line(self.to_run)

    def _resume_line(self, to_run: int) -> str:
        return f"echo-bench: resuming {self.ctx.results}: {self.ctx.resume_recorded} recorded, {to_run} to run"

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: Sequence[str]) -> None:
        if self._resume_said:  # every worker collects the same ids: take the first
            return
        self._resume_said = True
        self.to_run = len(ids)
        if self.live is not None:
            self.live.expect(ids, self._spec_of())
        if self.ctx.resume_upto is not None:
            self._write(self._resume_line(len(ids)))

    # -- running -----------------------------------------------------------------------------
    def outcome(self, item: BenchItem) -> Outcome:
        return self.prefetcher.outcome(item, self._upcoming(item))

    def _upcoming(self, item: BenchItem) -> list[BenchItem]:
        """The items this process will run next, so their calls can start now."""
        if self.opts.concurrency == 1 or self.session is None:
            return []
        items = self.session.items
        if self.is_worker:
            indices = self._xdist_queue()
        else:
            start = self._position(items, item) + 1
            indices = list(range(start, min(len(items), start + self.prefetcher.lookahead)))
        return [it for it in (items[i] for i in indices) if isinstance(it, BenchItem)]

    def _position(self, items: list[pytest.Item], item: BenchItem) -> int:
        """Serial runs go through the items in order: follow along instead of indexing them all."""
        pos = self._pos  # the item after the last one seen; or the same one again (a rerun)
        if not (pos < len(items) and items[pos] is item):
            pos = next((n for n in (pos - 1, *range(len(items))) if 0 <= n < len(items) and items[n] is item), len(items))
        self._pos = pos + 1
        return pos

    def _xdist_queue(self) -> list[int]:
        # xdist's worker holds the indices the controller sent it. With --dist worksteal those may
        # be taken back, so there only the next item (already dequeued, never stolen) is safe.
        if self._xdist is None:
            self._xdist = next((p for p in self.config.pluginmanager.get_plugins()
                                if hasattr(p, "torun") and hasattr(p, "nextitem_index")), False)
        if not self._xdist:
            return []
        nxt = self._xdist.nextitem_index
        head = [nxt] if isinstance(nxt, int) else []
        if self.config.getoption("dist", "load") == "worksteal":
            return head
        with self._xdist.torun.lock() as queue:
            rest = [i for i in itertools.islice(queue, self.prefetcher.lookahead) if isinstance(i, int)]
        return head + rest

    def _request_stop(self, message: str) -> None:
        if self.session is not None and not self.session.shouldstop:
            self.session.shouldstop = message  # a worker passes this to the controller (xdist >= 3.6.1)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report = yield
        if isinstance(item, BenchItem) and call.when == "call":
            outcome = item.stash.get(OUTCOME, None)
            if outcome is not None:
                report.bench = bench_payload(item, outcome)  # plain JSON: it travels to the controller
        elif isinstance(item, BenchItem) and call.when == "teardown" and OUTCOME in item.stash:
            del item.stash[OUTCOME]  # the row (with the whole output) is on disk: keep no copy per item
        return report

    def pytest_report_teststatus(self, report: pytest.TestReport) -> tuple[str, str, str] | None:
        bench = getattr(report, "bench", None)
        if bench and report.when == "call" and bench["kind"] in NOT_RECORDED:
            return NOT_RECORDED[bench["kind"]]
        return None

    @pytest.hookimpl(trylast=True)  # after the terminal reporter has filed the report
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call" and report.passed and not report.sections:
            self._unfile(report)
        if self.is_worker:
            _spend(report)  # xdist has sent it on by now
            return
        bench = getattr(report, "bench", None)
        if bench is None:
            if report.failed:
                self.other_failures += 1
            return
        if report.when != "call":
            return
        self.counts[bench["kind"]] = self.counts.get(bench["kind"], 0) + 1
        if self.live is not None:
            self.live.record(bench)
        if bench["kind"] != ROW:
            key = (bench["benchmark"], bench["arm"])
            self.not_completed[key] = self.not_completed.get(key, 0) + 1
            if bench["kind"] == UNAVAILABLE:  # one reason per arm, not one line per item
                reason = (bench["arm"], bench["message"])
                self.unavailable[reason] = self.unavailable.get(reason, 0) + 1
            else:
                self.unfinished.append((report.nodeid, bench["message"]))
        if bench.get("retries"):
            self._write(f"echo-bench: {report.nodeid} took {bench['retries']} retries")
        _spend(report)

    def _unfile(self, report: pytest.TestReport) -> None:
        """Drop a benchmark item's silent setup/teardown report from the terminal reporter's list.

        pytest keeps every such report and, for each failed test, scans them all for teardown
        output (``_get_teardown_reports``): with 10,000 items and 3,000 wrong answers that took
        longer than the sweep. These reports carry no output, so nothing printed changes.
        """
        if self._reporter is None:
            self._reporter = self.config.pluginmanager.get_plugin("terminalreporter") or False
            self._prefixes = tuple(f"{spec}::" for spec in self._spec_of())
        filed = self._reporter.stats.get("") if self._reporter else None
        if filed and filed[-1] is report and report.nodeid.startswith(self._prefixes):
            filed.pop()

    @pytest.hookimpl(optionalhook=True)
    def pytest_json_runtest_metadata(self, item: pytest.Item, call: pytest.CallInfo[None]) -> dict[str, Any] | None:
        """pytest-json-report: each benchmark test's entry carries its result row."""
        outcome = item.stash.get(OUTCOME, None) if isinstance(item, BenchItem) and call.when == "call" else None
        if outcome is None:
            return None
        if outcome.row is None:
            return {"echo_bench": {"kind": outcome.kind, "message": outcome.message}}
        return {"echo_bench": dataclasses.asdict(outcome.row)}

    @pytest.hookimpl(optionalhook=True)
    def pytest_json_modifyreport(self, json_report: dict[str, Any]) -> None:
        """pytest-json-report: the report's root carries the per-arm summary."""
        if self.final is not None:
            json_report["echo_bench"] = self.final

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.collect_errors += 1

    def _write(self, line: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(line)

    # -- the end -----------------------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        stopping = self.stop.is_set() or bool(session.shouldstop) or exitstatus == pytest.ExitCode.INTERRUPTED
        # A stopping run gives calls in flight a few seconds to land, then leaves: resume redoes them.
        self.prefetcher.close(stopping)
        self.writer.close()
        if self.is_worker:
            return
        status = self.final_status(int(exitstatus), session.shouldstop)
        if self.live is not None:
            if self.live.gates:
                passed, self.gate_lines = self.live.check_gates()
                if not passed and status == pytest.ExitCode.OK:
                    status = pytest.ExitCode.TESTS_FAILED  # a CI gate failed: the sweep itself completed
            partial = bool(self.stopped) or status not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
            self.final = self.live.summary(partial, int(status), self.stopped, self.gate_lines)
            self.live.write_files(partial, int(status), self.stopped, self.gate_lines)
        session.exitstatus = status
        with contextlib.suppress(OSError):
            Path(self.ctx.results + ".lock").unlink(missing_ok=True)  # every worker has finished by now

    def final_status(self, status: int, shouldstop: object = None) -> int:
        """0 when the sweep completed (wrong answers included); 2 when it stopped early."""
        marker = self.ctx.stop_marker
        if marker.exists():
            self.stopped = _marker_reason(marker)
            return pytest.ExitCode.INTERRUPTED
        if isinstance(shouldstop, str) and shouldstop.startswith(STOP_PREFIX):
            # Our own stop whose marker could not be written (e.g. the directory is unwritable).
            self.stopped = shouldstop.removeprefix(STOP_PREFIX)
            return pytest.ExitCode.INTERRUPTED
        if status in (pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.INTERNAL_ERROR) or self.collect_errors:
            return status
        left = self.counts.get(INCOMPLETE, 0) + self.counts.get(ABORTED, 0)
        if status == pytest.ExitCode.INTERRUPTED or left:
            reason = "incomplete" if left and status != pytest.ExitCode.INTERRUPTED else "interrupted"
            message = f"{left} items not completed" if left else "the run was interrupted"
            self.stopped = f"{reason}: {message}"
            if self._has_rows() or left:
                write_marker(marker, {"reason": reason, "at": utcnow(), "results": self.ctx.results, "message": message})
            return pytest.ExitCode.INTERRUPTED
        if status == pytest.ExitCode.NO_TESTS_COLLECTED and self.ctx.resume_upto is not None:
            return pytest.ExitCode.OK  # resume found nothing left: the sweep is complete
        if status == pytest.ExitCode.TESTS_FAILED and not self.opts.strict and not self.other_failures:
            return pytest.ExitCode.OK  # wrong answers are results, not a failed run
        return status

    def _has_rows(self) -> bool:
        path = Path(self.ctx.results)
        return path.exists() and path.stat().st_size > 0

    def resume_command(self) -> str:
        cmd = ["pytest", "--bench-resume", self.ctx.results]
        workers = self.config.getoption("numprocesses", None)
        if workers:
            cmd += ["-n", str(workers)]
        return shlex.join(cmd)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int) -> Iterator[None]:
        # The outermost wrapper: the table comes after pytest's failure lists, where it is seen.
        yield
        if self.is_worker:
            return
        tr = terminalreporter
        path = Path(self.ctx.results)
        tr.section("echo-bench summary")
        for line in summarize(path, self.not_completed, self.live.counted if self.live else None):
            tr.write_line(line)
        for (arm, reason), count in sorted(self.unavailable.items()):
            tr.write_line(f"skipped: {count} items of arm {arm}: {reason}")
        for nodeid, message in self.unfinished[:5]:
            tr.write_line(f"not completed: {nodeid}: {message}")
        if len(self.unfinished) > 5:
            tr.write_line(f"... and {len(self.unfinished) - 5} more not completed")
        if self.ctx.resume_upto is not None and self.to_run == 0 and not self.stopped:
            tr.write_line(f"echo-bench: sweep complete: every selected item is recorded in {self.ctx.results}")
        for line in self.gate_lines:
            tr.write_line(line, red="FAILED" in line, green="FAILED" not in line)
        tr.write_line(f"results: {self.ctx.results}")
        if self.stopped:
            tr.write_line(f"echo-bench: stopped early ({self.stopped}); resume with:", bold=True, red=True)
            tr.write_line(f"  {self.resume_command()}", bold=True)


def _deselect(config: pytest.Config, items: list[pytest.Item], drop: Callable[[pytest.Item], bool]) -> None:
    """Remove items the way --lf does: edit the list in place and tell the deselected hook."""
    dropped = [i for i in items if drop(i)]
    if dropped:
        items[:] = [i for i in items if not drop(i)]
        config.hook.pytest_deselected(items=dropped)


def is_recorded(recorded: KeySet, key: Key) -> bool:
    # Rows of the older format name no benchmark (and may have no meta line): match on
    # (task_id, arm) alone for those.
    return key in recorded or ("", key[1], key[2]) in recorded


def _marker_reason(marker: Path) -> str:
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "see " + str(marker)
    return f"{data.get('reason')}: {data.get('message', '')}".strip()


_NO_KEYWORDS: Mapping[str, Any] = MappingProxyType({})
_NO_SECTIONS: Any = ()  # for the lists: immutable and shared, like the keywords


def _spend(report: pytest.TestReport) -> None:
    """Drop what every hook has now read from a benchmark item's call report.

    pytest keeps every report to the end (the terminal reporter's counts and failure lists),
    with a dict of the item's keywords, two lists and our payload each: about 500 bytes an
    item that nothing reads after this hook. Unrecorded kinds keep their payload: the short
    summary asks ``pytest_report_teststatus`` again for their word. A report with captured
    output keeps its sections.
    """
    bench = getattr(report, "bench", None)
    if bench is None:
        return
    if bench["kind"] == ROW:
        del report.bench
    report.keywords = _NO_KEYWORDS  # read-only: a late writer fails loudly instead of sharing
    if not report.sections:
        report.sections = _NO_SECTIONS
    if not report.user_properties:
        report.user_properties = _NO_SECTIONS


def bench_payload(item: BenchItem, outcome: Outcome) -> dict[str, Any]:
    row = outcome.row
    return {
        "kind": outcome.kind, "benchmark": item.spec.benchmark, "task_id": item.example.id, "arm": item.arm,
        "status": row.status if row else outcome.kind, "wall_seconds": row.wall_seconds if row else None,
        "retries": outcome.retries, "message": outcome.message,
    }


__all__ = ["ROW", "BenchSession"]
