"""``-k`` without pytest: the expression pytest's ``-k`` takes, matched against an item's names.

The ``echo-bench`` command never imports pytest (``tests/project/test_layout.py``), yet ``echo-bench
estimate -k EXPR`` must count exactly the items ``pytest SPEC -k EXPR`` would run. This is the
grammar of ``_pytest/mark/expression.py`` (pytest 8-9) for ``-k``:

    expression: expr? EOF
    expr:       and_expr ('or' and_expr)*
    and_expr:   not_expr ('and' not_expr)*
    not_expr:   'not' not_expr | '(' expr ')' | ident
    ident:      (\\w|:|\\+|-|\\.|\\[|\\]|\\\\|/)+

An ident matches when it is a case-insensitive substring of one of the item's names (pytest's
``KeywordMatcher``); the empty expression selects everything, as pytest skips an empty ``-k``.
``-k`` takes no call arguments (``name(x=1)``): refused, as pytest refuses them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection

_IDENT = re.compile(r"(?:\w|:|\+|-|\.|\[|\]|\\|/)+")
_WORDS = {"or", "and", "not"}

Matcher = Callable[[Collection[str]], bool]  # the item's names (already lower-cased) -> selected


def _tokens(text: str) -> list[tuple[str, str, int]]:
    """(kind, value, position): kind is "(", ")", "or", "and", "not", "ident" or "end"."""
    found: list[tuple[str, str, int]] = []
    pos = 0
    while pos < len(text):
        char = text[pos]
        if char in " \t":
            pos += 1
        elif char in "()":
            found.append((char, char, pos))
            pos += 1
        else:
            match = _IDENT.match(text, pos)
            if not match:
                raise ValueError(f"-k {text!r}: unexpected character {char!r} at column {pos + 1}")
            word = match.group(0)
            found.append((word if word in _WORDS else "ident", word, pos))
            pos = match.end()
    found.append(("end", "", pos))
    return found


class _Parser:
    def __init__(self, text: str) -> None:
        self.text, self.tokens, self.at = text, _tokens(text), 0

    def peek(self) -> str:
        return self.tokens[self.at][0]

    def take(self, kind: str) -> str | None:
        if self.peek() != kind:
            return None
        self.at += 1
        return self.tokens[self.at - 1][1]

    def fail(self, wanted: str) -> ValueError:
        kind, _, pos = self.tokens[self.at]
        got = "end of input" if kind == "end" else repr(self.tokens[self.at][1])
        return ValueError(f"-k {self.text!r}: expected {wanted} at column {pos + 1}, got {got}")

    def expr(self) -> Matcher:
        parts = [self.and_expr()]
        while self.take("or") is not None:
            parts.append(self.and_expr())
        return parts[0] if len(parts) == 1 else (lambda names: any(p(names) for p in parts))

    def and_expr(self) -> Matcher:
        parts = [self.not_expr()]
        while self.take("and") is not None:
            parts.append(self.not_expr())
        return parts[0] if len(parts) == 1 else (lambda names: all(p(names) for p in parts))

    def not_expr(self) -> Matcher:
        if self.take("not") is not None:
            inner = self.not_expr()
            return lambda names: not inner(names)
        if self.take("(") is not None:
            inner = self.expr()
            if self.take(")") is None:
                raise self.fail("')'")
            return inner
        word = self.take("ident")
        if word is None:
            raise self.fail("'not', '(' or a name")
        if self.peek() == "(":  # pytest's keyword arguments, which -k refuses
            raise ValueError(f"-k {self.text!r}: keyword expressions take no call arguments")
        sub = word.lower()
        return lambda names: any(sub in name for name in names)


def parse_keyword(text: str | None) -> Matcher:
    """The matcher of ``-k text``; ValueError naming the column for an
    expression pytest refuses too."""
    text = (text or "").lstrip()  # pytest strips the left only: "a " parses, as there
    if not text:
        return lambda names: True
    parser = _Parser(text)
    matcher = parser.expr()
    if parser.peek() != "end":
        raise parser.fail("end of input")
    return matcher


def item_keywords(
    name: str, spec_file: str, folders: Collection[str], marks: Collection[str]
) -> frozenset[str]:
    """The names pytest's ``KeywordMatcher.from_item`` gives a benchmark item, lower-cased: its own
    name, its spec file's, the folders between the rootdir and the spec, and its marks' names."""
    return frozenset(n.lower() for n in (name, spec_file, *folders, *marks))
