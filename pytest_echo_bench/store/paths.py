"""Paths that must be regular files (or directories), checked by
``stat`` before anything opens them.

A spec, a dataset or a results path can name anything the file system holds. Before these checks
a FIFO given as a dataset hung collection, ``/dev/zero`` ran it into MemoryError and ``--bench-out
/dev/null`` ended in INTERNALERROR and left ``/dev/null.lock`` behind. Reads that pass the check go
through a descriptor opened without blocking, checked again (the path may change in between), and
read up to a stated size, so one file can cost neither time nor memory beyond its cap.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from pytest_echo_bench.errors import StoreError

Fail = Callable[[str], Exception]

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
# Never blocks on a FIFO swapped in after the check, never makes a terminal ours.
_OPEN = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)


def kind(mode: int) -> str:
    """What a ``st_mode`` is, in words: "a regular file", "a FIFO (named pipe)", ..."""
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def refusal(path: str | Path, want: str = "file") -> str | None:
    """Why ``path`` is no regular file (``want="file"``) or directory (``"directory"``); None when
    it is one, or does not exist (the caller says what a missing path means)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:  # a symlink loop, a path through a regular file, no permission
        return f"cannot be examined ({exc.strerror or exc})"
    ok = stat.S_ISDIR(mode) if want == "directory" else stat.S_ISREG(mode)
    return (
        None
        if ok
        else f"is {kind(mode)}, not a {'directory' if want == 'directory' else 'regular file'}"
    )


def open_regular(path: str | Path, fail: Fail) -> int:
    """A read-only descriptor on the regular file ``path``; ``fail(reason)`` for anything else.

    OSError (no such file, no permission) propagates: the caller knows what it means.
    """
    why = refusal(path)
    if why is not None:
        raise fail(why)
    fd = os.open(path, _OPEN)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):  # swapped for something else since the check
        os.close(fd)
        raise fail(f"is {kind(mode)}, not a regular file")
    os.set_blocking(fd, True)
    return fd


def open_results(path: str | Path) -> BinaryIO:
    """A results file opened for reading, a line at a time: refused with a StoreError
    naming it when it is no regular file (``report FIFO`` hung in ``open`` before), never
    blocking on a FIFO swapped in."""
    return os.fdopen(open_regular(path, lambda why: StoreError(f"results file {path} {why}")), "rb")


def read_regular(path: str | Path, limit: int, fail: Fail) -> bytes:
    """The whole regular file ``path``, refused with ``fail(reason)`` beyond ``limit`` bytes."""
    fd = open_regular(path, fail)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise fail(f"is {size:,} bytes, over the limit of {limit:,}")
        with os.fdopen(os.dup(fd), "rb") as f:
            # read(n) allocates n bytes first: asking for the limit (2 GiB for an Inspect log) took
            # that much for a file of a few kB. The size fstat gave, and one byte to see it grew.
            data = f.read(size + 1)
            if len(data) > size:  # a file still growing is cut at the limit, not read to its end
                data += f.read(limit + 1 - len(data))
    finally:
        os.close(fd)
    if len(data) > limit:
        raise fail(f"is over the limit of {limit:,} bytes")
    return data
