"""A spec file's YAML, parsed within stated bounds, with the line of every key.

What a spec file may cost is bounded before its values are built: at most ``MAX_SPEC_BYTES`` of
a regular file (a FIFO or a device is refused by ``stat`` before it is opened), aliases that add
at most ``MAX_ALIAS_NODES`` nodes to what the file spells out, nesting at most ``MAX_DEPTH`` deep,
and every mapping key a string. Before these bounds a 1 KB "billion laughs" file ran 50 s into
MemoryError: its node graph is small, but walking it for line numbers and environment variables
expands every alias. Every refusal, and every value YAML cannot build (``2001-02-30``, an integer of
5,000 digits), is a SpecError naming the file and line.
"""

from __future__ import annotations

from math import isqrt
from pathlib import Path
from typing import Any

import yaml

from pytest_echo_bench.errors import SpecError
from pytest_echo_bench.store.paths import read_regular

KeyPath = tuple[Any, ...]

MAX_SPEC_BYTES = 4 << 20  # 4 MiB: about 90,000 inline items; larger datasets belong in a JSONL file
MAX_ALIAS_NODES = 100_000  # what aliases may add: a few shared blocks, never a bomb
MAX_DEPTH = 100  # a spec nests a handful of levels; the walks below recurse once per level
# libyaml's composer (CSafeLoader) recurses in C once per level, past Python's recursion limit:
# 50,000 nested brackets overflow the C stack and kill the process. A text that could nest more
# deeply than this is first measured with the parser's events, which do not recurse.
_C_SAFE_DEPTH = 2_000
_OPENERS = ("[", "{", "-", "?")

_STR = "tag:yaml.org,2002:str"
_MERGE = "tag:yaml.org,2002:merge"


def read_spec(path: Path) -> str:
    """The text of spec file ``path``: a regular file of at most MAX_SPEC_BYTES, in UTF-8."""
    def fail(message: str) -> SpecError:
        return SpecError(f"the spec file {message}", str(path))

    try:
        raw = read_regular(path, MAX_SPEC_BYTES, fail)
    except OSError as exc:
        raise SpecError(f"cannot read spec: {exc}", str(path)) from exc
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_start = raw.rfind(b"\n", 0, exc.start) + 1
        raise SpecError(
            f"not UTF-8: byte 0x{raw[exc.start]:02x} at column {exc.start - line_start + 1}",
            str(path),
            raw.count(b"\n", 0, exc.start) + 1,
        ) from exc


# libyaml's safe loader when present: a 1,000-item inline spec parses ~10x faster.
_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_Base):  # type: ignore[misc]
    """The safe loader (specs never construct Python objects); a value it cannot
    build is a YAML error at its node."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        # ValueError (2001-02-30), KeyError (!!bool x), ...: all a bad value
        except Exception as exc:
            raise yaml.constructor.ConstructorError(None, None, f"cannot read this value: {exc}",
                                                    node.start_mark) from None


def parse_yaml(text: str, path: str) -> tuple[Any, dict[KeyPath, int]]:
    """The document's data and the line of every key path."""
    _check_depth(text, path)
    loader = _Loader(text)
    try:
        node = loader.get_single_node()  # one parse gives both the data and the line numbers
        if node is not None:
            check_nodes(node, path)  # before anything walks the graph as a tree
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        raise _malformed(exc, text, path) from exc
    except RecursionError as exc:  # the pure-Python composer recurses per level
        raise SpecError(f"nested more than {MAX_DEPTH} levels deep", path) from exc
    finally:
        loader.dispose()
    lines: dict[KeyPath, int] = {}
    if node is not None:
        _record_lines(node, (), lines)
    return data, lines


def _check_depth(text: str, path: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH before libyaml's recursive composer sees it."""
    # Each level opens with one of _OPENERS (a flow or block collection, an explicit key; at most
    # two levels each: a sequence entry may hold a mapping) or with more indentation than the last
    # (depth d costs d*(d+1)/2 spaces): most specs are far under the bound and pay nothing.
    bound = 2 * sum(map(text.count, _OPENERS)) + isqrt(2 * len(text)) + 1
    if bound <= _C_SAFE_DEPTH:
        return
    depth = 0
    try:
        for event in yaml.parse(text, Loader=_Base):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise SpecError(
                        f"nested more than {MAX_DEPTH} levels deep", path, event.start_mark.line + 1
                    )
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError as exc:
        raise _malformed(exc, text, path) from exc


def _malformed(exc: yaml.YAMLError, text: str, path: str) -> SpecError:
    # a character YAML refuses: it carries an offset, no mark
    if isinstance(exc, yaml.reader.ReaderError):
        start = text.rfind("\n", 0, exc.position) + 1
        code = (
            exc.character if isinstance(exc.character, int) else ord(str(exc.character)[:1] or "\0")
        )
        return SpecError(
            f"malformed YAML: {exc.reason} (character #x{code:04x} at column "
            f"{exc.position - start + 1})",
            path,
            text.count("\n", 0, exc.position) + 1,
        )
    # The context mark is where the broken construct starts (an unclosed bracket, say);
    # the problem mark is where the parser noticed, often the end of the file.
    start = getattr(exc, "context_mark", None)
    found = getattr(exc, "problem_mark", None)
    mark = start or found
    line = mark.line + 1 if mark is not None else None
    where = (
        f" (detected at line {found.line + 1})"
        if start and found and found.line != start.line
        else ""
    )
    problem = getattr(exc, "problem", None) or str(exc)
    return SpecError(f"malformed YAML: {problem}{where}", path, line)


def check_nodes(root: yaml.Node, path: str) -> None:
    """Refuse a recursive alias, aliases that expand the document by more than MAX_ALIAS_NODES,
    nesting deeper than MAX_DEPTH and a mapping key that is not a string; each at its line.

    One pass over the node graph, each shared collection sized once: the graph of an alias bomb
    is small, so this costs what the file's length costs. The first reference to a collection
    walks it; every later one is an alias and adds its size. Scalars are not remembered: an alias
    of one adds a single node, as its ``*name`` in the file does.
    """
    done: dict[int, tuple[int, int]] = {}  # id(collection) -> (nodes once expanded, height)
    # collections whose subtree is being walked: meeting one again is a cycle
    walking: set[int] = set()
    added = 0

    def visit(node: yaml.Node, depth: int, parent: yaml.Node) -> tuple[int, int]:
        nonlocal added
        if isinstance(node, yaml.ScalarNode):
            return 1, 1
        key = id(node)
        known = done.get(key)
        if known is not None:  # an alias: all of it again
            added += known[0]
            if added > MAX_ALIAS_NODES:
                raise SpecError(
                    f"aliases expand the document by more than {MAX_ALIAS_NODES:,} nodes (a YAML "
                    "alias bomb?); write the repeated values out, or put the data in a JSONL "
                    "dataset",
                    path,
                    parent.start_mark.line + 1,
                )
            if depth + known[1] - 1 > MAX_DEPTH:
                raise SpecError(
                    f"nested more than {MAX_DEPTH} levels deep", path, parent.start_mark.line + 1
                )
            return known
        if key in walking:
            raise SpecError("an alias refers to a node that contains it (a recursive structure)",
                            path, parent.start_mark.line + 1)
        if depth > MAX_DEPTH:
            raise SpecError(
                f"nested more than {MAX_DEPTH} levels deep", path, node.start_mark.line + 1
            )
        walking.add(key)
        if isinstance(node, yaml.MappingNode):
            _check_keys(node, path)
            children = [child for pair in node.value for child in pair]
        else:
            children = node.value
        size, height = 1, 0
        for child in children:
            grown, high = visit(child, depth + 1, node)
            size, height = size + grown, max(height, high)
        walking.discard(key)
        done[key] = (size, height + 1)
        return size, height + 1

    visit(root, 1, root)


def _check_keys(node: yaml.Node, path: str) -> None:
    """Every mapping key a plain string: ``yes:`` is True and ``1:`` an int in YAML, and a key path
    must be text to be named in an error (``<<`` merges are kept)."""
    if not isinstance(node, yaml.MappingNode):
        return
    for key, _ in node.value:
        if isinstance(key, yaml.ScalarNode) and key.tag in (_STR, _MERGE):
            continue
        shown = (
            key.value
            if isinstance(key, yaml.ScalarNode)
            else "a " + type(key).__name__.replace("Node", "").lower()
        )
        raise SpecError(
            f"mapping key {shown!r} is not text (YAML reads it as {key.tag.rsplit(':', 1)[-1]}); "
            "quote it",
            path,
            key.start_mark.line + 1,
        )


def _record_lines(node: yaml.Node, at: KeyPath, lines: dict[KeyPath, int]) -> None:
    lines[at] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            _record_lines(value_node, at + (key,), lines)
            lines[at + (key,)] = key_node.start_mark.line + 1  # the key's line, not its value's
    elif isinstance(node, yaml.SequenceNode):
        for i, child in enumerate(node.value):
            _record_lines(child, at + (i,), lines)


def nearest_line(lines: dict[KeyPath, int], keys: KeyPath) -> int | None:
    for n in range(len(keys), -1, -1):
        line = lines.get(tuple(keys[:n]))
        if line is not None:
            return line
    return None
