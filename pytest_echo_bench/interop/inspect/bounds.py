"""The bounds an Inspect log is read within: its size inflated (a ``.eval`` zip checked by its
declared sizes before anything is inflated, then inflated in chunks that stop at the cap, since the
declared sizes can lie) and the depth of its JSON.

Before these bounds a 1 MB ``.eval`` whose entries inflate to 1 GiB took 1 GB of memory before it
was refused (``zipfile`` inflates as much as one read asks for, then cuts it to the declared size: a
read of the cap was the cap in memory), and a log nested 600 deep ended in a RecursionError that
named no file. Both readers (the plain one and Inspect's own) are behind them: a ``.eval`` is
scanned here before Inspect opens it.
"""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path
from typing import Any, BinaryIO

from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.store.paths import open_regular

LOG_LIMIT = 1 << 30  # bytes of a .json log, and of a .eval zip's entries inflated, in all
ENTRY_LIMIT = 64 << 20  # bytes of one inflated zip entry: a header or one sample
MAX_DEPTH = 200  # nesting of a log's JSON: Inspect's own reader (pydantic's jiter) refuses deeper
CHUNK = 1 << 20  # bytes inflated at a time
ZSTD = 93  # the zip compression method number of Zstandard (APPNOTE 4.4.5)
EXTRA = "pip install 'pytest-echo-bench[inspect]'"


def open_zip(path: Path, data: bytes | BinaryIO) -> zipfile.ZipFile:
    """The zip of ``data`` (the bytes read from ``path``, or the file open on it; the caller closes
    a file), its declared sizes checked."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data) if isinstance(data, bytes) else data)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise StoreError(f"{path}: not a .eval log (not a zip file: {exc})") from exc
    try:
        check_declared(path, archive.infolist())
    except StoreError:
        archive.close()
        raise
    return archive


def check_declared(path: Path, infos: list[zipfile.ZipInfo]) -> None:
    """Refuse, before inflating anything, a zip whose entries say they inflate beyond the caps."""
    for info in infos:
        if info.file_size > ENTRY_LIMIT:
            raise StoreError(
                f"{path}: entry {info.filename} inflates to {info.file_size:,} bytes, over "
                f"{ENTRY_LIMIT:,}, the most one entry (a header or one sample) may hold"
            )
    total = sum(info.file_size for info in infos)
    if total > LOG_LIMIT:
        raise StoreError(
            f"{path}: its entries inflate to {total:,} bytes, over {LOG_LIMIT:,}, the most a "
            "log may hold"
        )


def inflate(archive: zipfile.ZipFile, info: zipfile.ZipInfo, path: Path, left: int,
            keep: bool = True) -> tuple[bytearray, int]:
    """Entry ``info`` inflated a chunk at a time and its size, refused the moment it
    passes its cap or the ``left`` bytes the log has left; with ``keep`` false only
    counted (the bytes are empty)."""
    cap = min(ENTRY_LIMIT, left)
    out, size = bytearray(), 0
    try:
        with archive.open(info) as f:
            while chunk := f.read(CHUNK):
                size += len(chunk)
                if size > cap:
                    what = (
                        f"{ENTRY_LIMIT:,} bytes, the most one entry may hold"
                        if cap == ENTRY_LIMIT
                        else (f"{LOG_LIMIT:,} bytes in all, the most a log may hold")
                    )
                    raise StoreError(
                        f"{path}: entry {info.filename} inflates beyond {what} (its declared size, "
                        f"{info.file_size:,}, is not what it holds)"
                    )
                if keep:
                    out += chunk
    except StoreError:
        raise
    except NotImplementedError as exc:
        if info.compress_type == ZSTD:
            raise StoreError(
                f"{path}: its entries are zstd-compressed (Inspect's default .eval format), "
                "which this "
                f"Python cannot read without inspect_ai: {EXTRA}, or convert it with "
                "`inspect log convert --to json`"
            ) from None
        raise StoreError(f"{path}: cannot read entry {info.filename}: {exc}") from exc
    # zlib.error is an Exception: below
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        raise StoreError(f"{path}: cannot read entry {info.filename}: {exc}") from exc
    # zlib.error, zstandard.ZstdError: a damaged entry, said as such
    except Exception as exc:  # noqa: BLE001
        raise StoreError(
            f"{path}: cannot read entry {info.filename}: {type(exc).__name__}: {exc}"
        ) from exc
    return out, size


def scan(path: Path) -> None:
    """Inflate every entry of the ``.eval`` at ``path`` without keeping it: what Inspect's reader
    would hold is within the caps before it opens the file (it trusts the declared sizes)."""
    fd = open_regular(path, lambda why: StoreError(f"{path}: {why}"))
    with os.fdopen(fd, "rb") as f, open_zip(path, f) as archive:
        left = LOG_LIMIT
        for info in archive.infolist():
            left -= inflate(archive, info, path, left, keep=False)[1]


def too_deep(value: Any, limit: int = MAX_DEPTH) -> str | None:
    """Where ``value`` first nests deeper than ``limit`` (``samples[0].scores.match.value[0]...``),
    or None. Iterative: the check cannot itself run out of stack."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        )
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > limit:
                    return deep_path(value, limit)
                stack.append((child, depth + 1))
    return None


def deep_path(value: Any, limit: int = MAX_DEPTH) -> str:
    """The path to the first value deeper than ``limit``: a second walk, only once one was found."""
    stack: list[tuple[Any, int, tuple[str, ...]]] = [(value, 0, ())]
    while stack:
        item, depth, names = stack.pop()
        pairs = [
            (f".{k}" if isinstance(k, str) else f"[{k}]", v)
            for k, v in (
                item.items()
                if isinstance(item, dict)
                else enumerate(item)
                if isinstance(item, list)
                else ()
            )
        ]
        for name, child in reversed(pairs):
            if isinstance(child, dict | list):
                if depth + 1 > limit:
                    shown = "".join(names[:8]).lstrip(".") + ("..." if len(names) > 8 else "")
                    return shown or "the top level"
                stack.append((child, depth + 1, (*names, name)))
    return "the top level"
