"""The columns the report and compare take of every row of a results file: one msgspec view,
decoded chunk by chunk by ``keyscan.RowScan``.

A view declares each figure with ``store.checks``'s bounds (a finite number in [0,
``FIGURE_MAX``]) and each text as a string, so a line decodes into it only when every value it
takes is one the reference reader (``store.rows.read_row``) would take as it is. Any other line (a
NaN, a negative cost, a number where text belongs, a token count of 1.5) fails to decode, and its
chunk goes to the full parser: the fast path only ever reads rows whose figures the reference
reads the same (tests/store/test_columns.py compares the two on generated and hostile files).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from pytest_echo_bench.store.checks import FIGURE_MAX
from pytest_echo_bench.store.rows import StatusRow, all_cached

# the usage's token classes in ``spec.pricing.CLASS_KEYS``'s order (the store imports no spec)
_CLASSES = ("cache_read_tokens", "cache_write_tokens", "reasoning_tokens")

# What ``store.checks`` takes as it is: a figure, a count, a grade (a judge's scale may be < 0).
Figure = Annotated[float, msgspec.Meta(ge=0.0, le=FIGURE_MAX)]
Count = Annotated[int, msgspec.Meta(ge=0, le=int(FIGURE_MAX))]
Grade = Annotated[float, msgspec.Meta(ge=-FIGURE_MAX, le=FIGURE_MAX)]
NULL = msgspec.Raw(b"null")


class Flags(msgspec.Struct, gc=False):
    """What the report reads of a row's ``extra`` (the rest is validated, never built)."""

    escalated: Any = None
    random_guess: Any = None


class JudgmentView(msgspec.Struct, gc=False):
    """What the report reads of one judgment record, each value as the record holds it (None when
    absent, as ``dict.get`` gives); its reply, prompt and usage are validated, never built. A list
    of judgments holding anything but records fails to decode, and its chunk goes to the full
    parser, which skips what is not a record."""

    judge: Any = None
    model: Any = None
    grade: Any = None
    label: Any = None
    order: Any = None
    prompt_sha256: Any = None


class ReportRow(StatusRow, gc=False):  # type: ignore[misc]
    """The columns of a row the report and compare read (``results.read.Item`` and the spend)."""

    subtask: str | None = None
    answer: str | None = None
    # the output is read only when the row has no answer: left as its JSON text until then
    output: msgspec.Raw = NULL
    item_sha256: str | None = None
    served_model: str | None = None
    run_id: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    judged_at: str | None = None
    wall_seconds: Figure | None = None
    sub_calls: Figure | None = None
    cost_usd: Figure | None = None
    cost_units: Figure | None = None
    judge_cost_usd: Figure | None = None
    cache_hits: Count | None = None
    usage: dict[str, Count | None] | None = None
    flags: Flags | None = msgspec.field(default=None, name="extra")
    score: Grade | None = None
    # a list of records: ``judgments`` as ``rows.read_row`` keeps them (the objects of a list)
    judged: list[JudgmentView] | None = msgspec.field(default=None, name="judgments")

    @property
    def judgments(self) -> tuple[JudgmentView, ...]:
        return () if self.judged is None else tuple(self.judged)

    def cached(self) -> bool:
        return all_cached(self.cache_hits, self.sub_calls)

    def text(self) -> str | None:
        """The row's output when it is text (None otherwise), decoded now."""
        if self.output is NULL:
            return None
        value = msgspec.json.decode(self.output)
        return value if isinstance(value, str) else None

    def tokens(self) -> tuple[int, int] | None:
        """(prompt, completion) tokens as ``results.read`` keeps them (a null count is none)."""
        usage = self.usage
        if usage is None:
            return None
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        return (0 if prompt is None else prompt, 0 if completion is None else completion)

    def classes(self) -> tuple[int, int, int] | None:
        """(cache read, cache write, reasoning) tokens as ``results.read`` keeps them: None
        unless the usage keeps one of them apart."""
        usage = self.usage
        if usage is None or usage.keys().isdisjoint(_CLASSES):
            return None
        read, write, reasoning = (usage.get(key) or 0 for key in _CLASSES)
        return (read, write, reasoning)

