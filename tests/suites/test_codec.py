"""The strict plain-data codec: what crosses between the tests and the
completion, and what never does."""

from __future__ import annotations

import enum
import math
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_echo_bench.suites.codec import (
    MAX_DEPTH,
    MAX_INT_BYTES,
    MAX_MESSAGE,
    CodecError,
    decode,
    encode,
    frame,
    frame_length,
)

HASHABLE = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary(),
    lambda inner: st.tuples(inner, inner),
    max_leaves=8,
)
PLAIN = st.recursive(
    HASHABLE,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.tuples(inner, inner)
        | st.sets(HASHABLE, max_size=5)
        | st.dictionaries(HASHABLE, inner, max_size=5)
    ),
    max_leaves=30,
)


def _same(a: Any, b: Any) -> bool:
    """Equal, with the exact same types all the way down (True is not 1, a tuple is not a list)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(PLAIN)
def test_plain_data_round_trips_with_its_exact_types(value: Any) -> None:
    assert _same(decode(encode(value)), value)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.binary(max_size=200))
def test_any_bytes_decode_to_plain_data_or_a_codec_error(data: bytes) -> None:
    try:
        value = decode(data)
    except CodecError:
        return
    assert _same(decode(encode(value)), value)


@pytest.mark.parametrize(
    "value",
    [
        math.nan,
        math.inf,
        -math.inf,
        -0.0,
        2**4000,
        -(2**4000) + 1,
        0,
        -1,
        "\ud800 lone surrogate",
        b"\x00\xff",
        (),
        set(),
        {(1, "a"): [None]},
    ],
)
def test_edge_values_cross_exactly(value: Any) -> None:
    back = decode(encode(value))
    assert _same(back, value)
    if isinstance(value, float):
        assert math.copysign(1, back) == math.copysign(1, value)


class Colour(enum.IntEnum):
    RED = 1


class Sneaky(str):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = str.__hash__


def _generator() -> Any:
    yield 1


@pytest.mark.parametrize(
    ("value", "named"),
    [
        (Colour.RED, "Colour"),
        (Sneaky("x"), "Sneaky"),
        (_generator(), "generator"),
        (frozenset({1}), "frozenset"),
        (object(), "object"),
        (lambda: 1, "function"),
        (bytearray(b"x"), "bytearray"),
        ([1, [2, {3: complex(1, 2)}]], "complex"),
    ],
)
def test_anything_else_is_refused_and_named(value: Any, named: str) -> None:
    with pytest.raises(CodecError, match=f"not plain data: .*{named}"):
        encode(value)


def test_a_cycle_or_a_deep_nesting_is_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(CodecError, match="nested deeper"):
        encode(loop)
    deep: Any = None
    for _ in range(MAX_DEPTH + 1):
        deep = [deep]
    with pytest.raises(CodecError, match="nested deeper"):
        encode(deep)


HOSTILE = {
    "deep nesting": b"l\x00\x00\x00\x01" * 100_000 + b"N",
    "a huge count with nothing behind it": b"l\xff\xff\xff\xff",
    "a huge string length": b"s\xff\xff\xff\xffabc",
    "an int over the limit": b"i"
    + struct.pack(">I", MAX_INT_BYTES + 1)
    + b"\x01" * (MAX_INT_BYTES + 1),
    "a list as a set member": b"S\x00\x00\x00\x01l\x00\x00\x00\x00",
    "a list as a dict key": b"d\x00\x00\x00\x01l\x00\x00\x00\x00N",
    "invalid UTF-8": b"s\x00\x00\x00\x02\xc3\x28",
    "an unknown tag": b"X",
    "bytes after the value": b"NN",
    "nothing": b"",
    "a truncated float": b"f\x00\x00",
}


@pytest.mark.parametrize("data", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_bytes_are_a_codec_error_and_never_more(data: bytes) -> None:
    with pytest.raises(CodecError):
        decode(data)


def test_frames_are_bounded() -> None:
    assert frame_length(frame(encode("x"))[:4]) == len(encode("x"))
    with pytest.raises(CodecError, match="over the limit"):
        frame_length(struct.pack(">I", MAX_MESSAGE + 1))
    with pytest.raises(CodecError, match="over the limit"):
        encode("x" * (MAX_MESSAGE + 1))
    with pytest.raises(CodecError, match="over the limit"):
        decode(b"N" * (MAX_MESSAGE + 1))
