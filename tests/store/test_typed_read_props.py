"""Generated rows and meta lines against the typed contract of the results file: ``read_row``
reads any value of any field without raising and never gives a figure that is negative or not a
number; a meta line is either refused with a StoreError or read, and what it reads writes back
and reads again the same."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.store.records import Meta
from pytest_echo_bench.store.rows import FIELDS, FIGURES, read_row

SETTINGS = settings(max_examples=200, deadline=None, derandomize=True, database=None)

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6,
)
rows = st.fixed_dictionaries(
    {"task_id": st.text(min_size=1, max_size=8), "arm": st.text(min_size=1, max_size=8)},
    optional={name: values for name in FIELDS},
)


@SETTINGS
@given(record=rows)
def test_any_field_value_reads_as_known_or_unknown_never_a_crash(record: dict[str, Any]) -> None:
    row = read_row(record, "demo")
    assert (row.task_id, row.arm, row.benchmark) == (record["task_id"], record["arm"], "demo")
    for name in FIGURES:
        figure = getattr(row, name)
        assert figure is None or (math.isfinite(figure) and figure >= 0), (name, figure)
        if figure is None and record.get(name) is not None:
            assert name in row.unknown
    for name in ("output", "answer", "target", "detail"):
        text = getattr(row, name)
        assert text is None or text == record[name]  # a text is the row's own, never made up
    assert row.usage is None or all(type(v) is int and v >= 0 for v in row.usage.values())


metas = st.fixed_dictionaries(
    {"_meta": st.just(True), "benchmark": st.text(min_size=1, max_size=6)},
    optional={
        key: values for key in (
            "schema", "created_at", "fingerprint", "arms", "benchmarks", "selection", "order",
            "decide", "options", "shard_items", "shard_parts", "epochs", "run_id",
        )
    },
)


@SETTINGS
@given(record=metas)
def test_a_meta_line_is_refused_or_written_back_as_it_reads(record: dict[str, Any]) -> None:
    try:
        meta = Meta.from_json(record)
    except StoreError:
        return
    again = Meta.from_json(meta.to_json())
    assert again.to_json() == meta.to_json()
    assert again.benchmark == meta.benchmark
