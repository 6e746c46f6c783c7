"""What the ``echo-bench`` command takes from its user and gives back: argument types that refuse a
bad value with one line (argparse's status 2), and every printed line escaped.

Text the command prints comes from results files, datasets, models and providers, so it goes
through ``safe_text.shown`` as pytest's output does: a task id holding ESC, OSC or U+202E cannot
drive the terminal, and one holding a lone surrogate (valid in JSON, not in UTF-8) cannot crash
the print.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_echo_bench.store.paths import refusal
from pytest_echo_bench.store.safe_text import shown

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

DAY_S = 86400.0


@dataclass(frozen=True)
class Command:
    """One subcommand as its module declares it: the name, the line ``echo-bench --help`` gives it,
    what adds its arguments to its parser, and the handler that returns its exit status."""

    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    handle: Callable[[argparse.Namespace], int]


class OutputClosed(BrokenPipeError):
    """The reader of our standard output went away (``echo-bench report F | head``): told apart from
    a broken pipe to a provider, which is an error of the command."""


def say(text: str, err: bool = False) -> None:
    """Print ``text`` escaped; CR LF line ends (the CSV format's RFC 4180 ones) stay as they are: a
    CR right before a LF only ends the line."""
    safe = "\r\n".join(shown(part) for part in text.split("\r\n"))
    try:
        # A text that ends its own lines (CSV) gets no LF after: its last line ends in CR LF too.
        print(
            safe, end="" if safe.endswith("\r\n") else "\n", file=sys.stderr if err else sys.stdout
        )
    except BrokenPipeError as exc:
        raise OutputClosed(*exc.args) from exc


def flush_stdout() -> None:
    """Write out what is buffered now, where a reader gone is handled, rather than at the exit."""
    try:
        sys.stdout.flush()
    except BrokenPipeError as exc:
        raise OutputClosed(*exc.args) from exc


class Parser(argparse.ArgumentParser):
    """argparse, with its messages escaped: they repeat the user's arguments, which may hold
    anything a file name can (``surrogateescape`` makes undecodable bytes lone surrogates)."""

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        if message:
            (file or sys.stderr).write(shown(message))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # the subcommands' parsers, by name
        self.commands: Mapping[str, argparse.ArgumentParser] = {}

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> Any:
        """As argparse, but an argument no subcommand knows is refused with that subcommand's usage
        (argparse gives the top level's, which lists only the subcommands' names)."""
        found, extra = self.parse_known_args(args, namespace)
        if extra:
            command = self.commands.get(getattr(found, "command_name", None), self)
            command.error(f"unrecognized arguments: {' '.join(extra)}")
        return found


def number(
    low: float, high: float, *, open_low: bool = False, open_high: bool = False
) -> Callable[[str], float]:
    """An argparse type: a finite float in the range
    (``open_low``/``open_high`` exclude the ends)."""
    left, right = "(" if open_low else "[", ")" if open_high else "]"
    want = f"a number in {left}{low:g}, {high:g}{right}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number; want {want}") from None
        inside = (low < value if open_low else low <= value) and (
            value < high if open_high else value <= high
        )
        if not math.isfinite(value) or not inside:  # nan compares false both ways: refused here too
            raise argparse.ArgumentTypeError(f"{text!r} is not {want}")
        return value

    return parse


def whole(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number in [low, high]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r} is not in [{low}, {high}]")
        return value

    return parse


def arm_name(text: str) -> str:
    """An argparse type: an arm's name, by the rule a spec's arms follow."""
    from pytest_echo_bench.spec.load import arm_name_problem

    problem = arm_name_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def output_file(text: str) -> Path:
    """An argparse type: where a command writes a file whole (``write_atomic`` moves it into place).

    An existing directory, device or FIFO is refused: the move would replace it (run as root,
    ``-o /dev/null`` would put a regular file in place of the device).
    """
    if not text:
        raise argparse.ArgumentTypeError("an empty path")
    path = Path(text)
    if path.exists() and not path.is_file():
        raise argparse.ArgumentTypeError(
            f"{text!r} exists and is not a regular file; the output would replace it"
        )
    return path


def output_dir(text: str) -> Path:
    """An argparse type: a directory a command writes new files into (made if missing)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path")
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} exists and is not a directory")
    return path


def input_file(text: str) -> Path:
    """An argparse type: a file a command reads (a results file). A FIFO, device, socket or
    directory is refused at once: opening a FIFO for reading waits for a writer, so ``report FIFO``
    hung. A missing file is the reader's to name (it says which of several is missing)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path")
    why = refusal(text)
    if why is not None:
        raise argparse.ArgumentTypeError(f"{text!r} {why}; give a results file")
    return Path(text)
