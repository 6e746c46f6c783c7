"""Collection: a benchmark spec is a pytest File; each (task_id, arm) is a pytest Item."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import pytest

from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.datasets.prompts import Prompter, prompter
from pytest_echo_bench.datasets.registry import LOAD_WARNINGS, load_benchmark
from pytest_echo_bench.engine.check import check_spec
from pytest_echo_bench.engine.outcome import ROW, Outcome
from pytest_echo_bench.errors import DatasetWarning, SpecError, UnavailableError
from pytest_echo_bench.plugin.context import SPEC_CACHE
from pytest_echo_bench.spec.load import Spec
from pytest_echo_bench.store.safe_text import escape_id, shown

if TYPE_CHECKING:
    from _pytest._code.code import ExceptionInfo, TerminalRepr

OUTCOME = pytest.StashKey[Outcome]()
# how this process runs an item (the worker plugin)
RUN = pytest.StashKey[Callable[["BenchItem"], Outcome]]()
_MARK_SAFE = re.compile(r"[^A-Za-z0-9_]")
NO_PROMPTERS: Mapping[str, Prompter] = MappingProxyType({})


class WrongAnswer(Exception):
    """Raised by an item whose answer was wrong, unparseable or an error; rendered briefly."""


def not_recorded(message: str) -> BaseException:
    """The skip of an item that did not complete (incomplete, aborted,
    unavailable): reported, never recorded.

    pytest's own skip exception, not a subclass: pytest strips only its name from the reason
    ("unavailable: ..." rather than "pytest_echo_bench.plugin.collect.NotRecorded: unavailable:
    ..."); placed at the item (the spec's arm line), not at this module.
    """
    return pytest.skip.Exception(message, _use_item_location=True)


def mark_name(prefix: str, value: str) -> str:
    return f"{prefix}_{_MARK_SAFE.sub('_', value)}"


class SpecFile(pytest.File):
    """A benchmark spec YAML file."""

    # its path as pytest shows it (``Item.location``), once its first item asked
    relpath: str | None = None

    def collect(self) -> Iterator[BenchItem]:
        try:
            spec, examples = load_benchmark(self.path, self.config.stash.get(SPEC_CACHE, None))
            check_spec(spec)
            # Every arm's templates checked against every item here, naming the item and the field.
            prompters = {
                arm: made
                for arm in spec.arms
                if (made := prompter(spec, arm, examples)) is not None
            }
        except SpecError as exc:
            # pytest prints a CollectError's message alone: file, line, key and what to do.
            raise self.CollectError(shown(f"echo-bench: invalid benchmark spec: {exc}")) from exc
        except UnavailableError as exc:
            pytest.skip(shown(f"echo-bench: {exc}"))
        for message in LOAD_WARNINGS.get(self.path, []):
            self.warn(DatasetWarning(shown(message)))  # in the warnings summary, under this spec
        # Every mark an item gets is registered, so --strict-markers accepts them.
        for arm in spec.arms:
            self.config.addinivalue_line("markers", f"{mark_name('arm', arm)}: items of arm {arm}")
        for subtask in dict.fromkeys(ex.subtask for ex in examples if ex.subtask):
            self.config.addinivalue_line(
                "markers", f"{mark_name('subtask', subtask)}: items of subtask {shown(subtask)}"
            )
        for ex in examples:
            # pytest prints node names as they are (-v, the short summary, JUnit XML): a task id
            # holding ESC or bidi characters would drive the terminal. Escaped reversibly, so two
            # ids never share a node id; the item's key keeps the id itself (resume, shards).
            name = escape_id(ex.id)
            for arm in spec.arms:
                for epoch in range(1, spec.epochs + 1):
                    yield BenchItem.from_parent(
                        self,
                        name=item_name(name, arm, epoch, spec.epochs),
                        spec=spec,
                        example=ex,
                        arm=arm,
                        epoch=epoch,
                        prompters=prompters,
                    )


def item_name(task: str, arm: str, epoch: int, epochs: int) -> str:
    """``q1[strong]``, or with ``epochs: K`` > 1 ``q1[strong-e2]`` (epochs 1..K): ``-k e2`` picks an
    epoch, ``-k "strong and e2"`` one arm's. Arm names may hold "-": ``split_name`` reads the last
    ``-e<digits>`` as the epoch only for a benchmark with epochs."""
    return f"{task}[{arm}]" if epochs <= 1 else f"{task}[{arm}-e{epoch}]"


def split_name(bracket: str, epochs: int) -> tuple[str, int]:
    """(arm, epoch) of the part of a node name between its last "[" and "]"."""
    if epochs > 1:
        arm, sep, epoch = bracket.rpartition("-e")
        if sep and epoch.isdigit():
            return arm, int(epoch)
    return bracket, 1


@functools.lru_cache(maxsize=4096)
def item_marks(arm: str, subtask: str | None) -> tuple[pytest.MarkDecorator, ...]:
    """The marks of an item, built once per (arm, subtask) and shared: a sweep has many items."""
    marks = [getattr(pytest.mark, mark_name("arm", arm)), pytest.mark.bench_arm(arm)]
    if subtask:
        marks += [
            getattr(pytest.mark, mark_name("subtask", subtask)),
            pytest.mark.bench_subtask(subtask),
        ]
    return tuple(marks)


class BenchItem(pytest.Item):
    """One benchmark item under one arm (and one epoch): node id ``<spec>::<task_id>[<arm>]`` (see
    ``item_name``), the task id escaped by ``escape_id``; ``key`` holds the id itself."""

    def __init__(self, *, spec: Spec, example: Example, arm: str, epoch: int = 1,
                 prompters: Mapping[str, Prompter] = NO_PROMPTERS, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec, self.example, self.arm, self.epoch = spec, example, arm, epoch
        self.prompters = prompters  # the spec's arms' prompts, one mapping shared by its items
        for mark in item_marks(arm, example.subtask):
            self.add_marker(mark)

    # pytest gives every node an empty set of extra -k names (216 bytes); a sweep has tens of
    # thousands of items and no plugin of ours adds any. Made on first use, so a plugin that does
    # add names still gets a set of its own.
    @property
    def extra_keyword_matches(self) -> set[str]:
        extra: set[str] | None = self.__dict__.get("_extra_keyword_matches")
        if extra is None:
            extra = self.__dict__["_extra_keyword_matches"] = set()
        return extra

    @extra_keyword_matches.setter
    def extra_keyword_matches(self, value: set[str]) -> None:
        if value:
            self.__dict__["_extra_keyword_matches"] = value

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.spec.benchmark, self.example.id, self.arm, self.epoch)

    def runtest(self) -> None:
        outcome = self.config.stash[RUN](self)
        self.stash[OUTCOME] = outcome
        if outcome.kind == ROW:
            assert outcome.row is not None
            if not outcome.row.passed:
                raise WrongAnswer(shown(outcome.row.detail))
            return
        raise not_recorded(shown(f"{outcome.kind}: {outcome.message}"))

    def repr_failure(
        self, excinfo: ExceptionInfo[BaseException], style: Any = None
    ) -> str | TerminalRepr:
        outcome = self.stash.get(OUTCOME, None)
        if isinstance(excinfo.value, WrongAnswer) and outcome and outcome.row:
            return failure_text(outcome)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        line = self.spec.arms[self.arm].line  # 1-based; pytest's are 0-based and shown plus one
        return self.path, line - 1 if line else None, self.name  # the name is "<task_id>[<arm>]"

    @functools.cached_property
    def location(self) -> tuple[str, int | None, str]:
        """pytest's, with the spec's path made relative once per spec rather than once per item
        (absolute, then relative to the rootdir: a few percent of a sweep's time at 4,000 items)."""
        parent = self.parent
        if not isinstance(parent, SpecFile):
            return super().location
        if parent.relpath is None:
            parent.relpath = super().location[0]
        _, line, name = self.reportinfo()
        return parent.relpath, line, name


def failure_text(outcome: Outcome) -> str:
    """A few domain lines instead of a traceback: verdict, expected vs got, the output's tail.

    Everything in it came from a model or a dataset and goes to the terminal, JUnit XML and
    json-report: controls and bidi characters are shown escaped (``shown``), and so are lone
    surrogates (a model's broken output, kept exactly in the row), which could not cross to the
    xdist controller (execnet sends UTF-8).
    """
    row = outcome.row
    assert row is not None
    tail = shown(row.output.strip()[-300:])
    # The detail of an error or unparseable row already opens with its status: say it once.
    verdict = row.detail if row.detail.startswith(row.status) else f"{row.status}: {row.detail}"
    lines = [
        shown(verdict),
        f"  target: {shown(row.target)}",
        f"  answer: {shown(str(row.answer))}",
    ]
    if tail:
        lines.append("  output tail: " + tail.replace("\n", "\n    "))
    return "\n".join(lines)
