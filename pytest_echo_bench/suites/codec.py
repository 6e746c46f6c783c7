"""The strict plain-data codec: the only form in which values cross
between the tests and the completion.

Only ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, ``list``, ``tuple``, ``dict`` and
``set`` cross, as exact types (a subclass of ``int`` or ``str`` could carry an ``__eq__`` of the
completion's), nested at most ``MAX_DEPTH`` deep, in a frame of at most ``MAX_MESSAGE`` bytes.
The decoder treats its input as hostile: every length is checked against what is left, a count
never preallocates, and anything else raises ``CodecError`` (so it never runs code of the sender's).

Stdlib only and no import of our package: the sandbox executes this file's source as it is.
"""

from __future__ import annotations

import struct
from typing import Any

MAX_MESSAGE = 8 << 20  # bytes in one frame
MAX_DEPTH = 64  # containers inside containers; HumanEval's values nest 3 deep at most
MAX_INT_BYTES = 1 << 16  # an int of about 157,000 digits
_LEN = struct.Struct(">I")
_FLOAT = struct.Struct(">d")
_ATOMS = {None: b"N", True: b"T", False: b"F"}
_CONTAINERS: dict[type, bytes] = {list: b"l", tuple: b"t", set: b"S", dict: b"d"}


class CodecError(ValueError):
    """A value that is not plain data, or bytes that are not a well-formed message."""


def encode(value: Any, limit: int = MAX_MESSAGE) -> bytes:
    """``value`` as one message; CodecError names the first thing that is not plain data."""
    out: list[bytes] = []
    _encode(value, out, 0)
    data = b"".join(out)
    if len(data) > limit:
        raise CodecError(f"message of {len(data)} bytes is over the limit of {limit}")
    return data


def _encode(value: Any, out: list[bytes], depth: int) -> None:
    kind = type(value)
    if value is None or kind is bool:
        out.append(_ATOMS[value])
    elif kind is int:
        size = (value.bit_length() + 8) // 8  # room for the sign bit
        if size > MAX_INT_BYTES:
            raise CodecError(f"int of {size} bytes is over the limit of {MAX_INT_BYTES}")
        out += [b"i", _LEN.pack(size), value.to_bytes(size, "big", signed=True)]
    elif kind is float:
        out += [b"f", _FLOAT.pack(value)]
    elif kind is str:
        _blob(b"s", value.encode("utf-8", "surrogatepass"), out)
    elif kind is bytes:
        _blob(b"b", value, out)
    elif kind in _CONTAINERS:
        if depth >= MAX_DEPTH:
            raise CodecError(f"nested deeper than {MAX_DEPTH}")
        out += [_CONTAINERS[kind], _LEN.pack(len(value))]
        for item in (value.items() if kind is dict else value):
            if kind is dict:
                _encode(item[0], out, depth + 1)
                _encode(item[1], out, depth + 1)
            else:
                _encode(item, out, depth + 1)
    else:
        raise CodecError(
            f"not plain data: {kind.__module__}.{kind.__qualname__}".replace("builtins.", "")
        )


def _blob(tag: bytes, data: bytes, out: list[bytes]) -> None:
    out += [tag, _LEN.pack(len(data)), data]


def decode(data: bytes) -> Any:
    """The value of one message; CodecError for anything malformed, oversized or too deep."""
    if len(data) > MAX_MESSAGE:
        raise CodecError(f"message of {len(data)} bytes is over the limit of {MAX_MESSAGE}")
    reader = _Reader(bytes(data))
    value = reader.value(0)
    if reader.pos != len(reader.data):
        raise CodecError(f"{len(reader.data) - reader.pos} bytes after the value")
    return value


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if n > len(self.data) - self.pos:
            raise CodecError(f"truncated: {n} bytes wanted at offset {self.pos}")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def length(self) -> int:
        return int(_LEN.unpack(self.take(4))[0])

    def value(self, depth: int) -> Any:
        tag = self.take(1)
        if tag in (b"N", b"T", b"F"):
            return {b"N": None, b"T": True, b"F": False}[tag]
        if tag == b"i":
            size = self.length()
            if size > MAX_INT_BYTES:
                raise CodecError(f"int of {size} bytes is over the limit of {MAX_INT_BYTES}")
            return int.from_bytes(self.take(size), "big", signed=True)
        if tag == b"f":
            return float(_FLOAT.unpack(self.take(8))[0])
        if tag == b"s":
            try:
                return self.take(self.length()).decode("utf-8", "surrogatepass")
            except UnicodeDecodeError as exc:
                raise CodecError(f"invalid text: {exc.reason}") from None
        if tag == b"b":
            return self.take(self.length())
        if tag in (b"l", b"t", b"S", b"d"):
            return self.container(tag, depth)
        raise CodecError(f"unknown tag {tag!r} at offset {self.pos - 1}")

    def container(self, tag: bytes, depth: int) -> Any:
        if depth >= MAX_DEPTH:
            raise CodecError(f"nested deeper than {MAX_DEPTH}")
        count = self.length()
        # every item takes a byte at least: no huge preallocation
        if count > len(self.data) - self.pos:
            raise CodecError(f"truncated: {count} items announced at offset {self.pos}")
        try:
            if tag == b"d":
                result: Any = {}
                for _ in range(count):
                    key = self.value(depth + 1)
                    result[key] = self.value(depth + 1)
                return result
            items = [self.value(depth + 1) for _ in range(count)]
            return items if tag == b"l" else tuple(items) if tag == b"t" else set(items)
        except TypeError as exc:  # a list as a dict key or set member
            raise CodecError(f"unhashable key: {exc}") from None


def frame(payload: bytes) -> bytes:
    """A message as it goes on the pipe: its length, then the bytes."""
    return _LEN.pack(len(payload)) + payload


def frame_length(head: bytes) -> int:
    """The length a frame's 4-byte head announces, refused past ``MAX_MESSAGE``."""
    size = int(_LEN.unpack(head)[0])
    if size > MAX_MESSAGE:
        raise CodecError(f"frame of {size} bytes announced, over the limit of {MAX_MESSAGE}")
    return size
