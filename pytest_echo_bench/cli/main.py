"""The ``echo-bench`` command: its parser, assembled from one module per subcommand (each declares
its arguments and its handler), and the dispatch that turns what a handler raises into one line
and an exit status."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence

from pytest_echo_bench.cli import (
    compare,
    estimate,
    export_logs,
    import_logs,
    judge,
    merge,
    power,
    progress,
    regrade,
    report,
    run,
    trend,
)
from pytest_echo_bench.cli.args import Command, OutputClosed, Parser, flush_stdout, say
from pytest_echo_bench.errors import EchoBenchError
from pytest_echo_bench.store.safe_text import shown

# In the order ``echo-bench --help`` lists them.
COMMANDS: tuple[Command, ...] = (report.COMMAND, compare.COMMAND, power.COMMAND, estimate.COMMAND,
                                 progress.COMMAND,
                                 run.COMMAND, regrade.COMMAND, judge.COMMAND,
                                 merge.COMMAND, trend.COMMAND, import_logs.COMMAND,
                                 export_logs.COMMAND)
# A file or value the command cannot use (missing, unreadable, not a results file, refused).
BAD_INPUT = 2
BUG = 3  # an exception no bad input explains
# What a shell reports of a command SIGPIPE ended, as ``cat F | head`` does.
OUTPUT_CLOSED = 128 + 13
DEBUG_ENV = "ECHO_BENCH_DEBUG"  # set, and not to 0: exceptions propagate, traceback and all


def parser() -> argparse.ArgumentParser:
    """The parser of every subcommand; each sets ``func``, its handler, and ``command_name``."""
    p = Parser(prog="echo-bench", description="Reports and operations for pytest-echo-bench sweeps")
    sub = p.add_subparsers(dest="command_name", required=True)
    p.commands = sub.choices
    for command in COMMANDS:
        one = sub.add_parser(command.name, help=command.help)
        command.arguments(one)
        one.set_defaults(func=command.handle)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; its exit status. Bad arguments: argparse's usage line and status 2. A
    file or value the command cannot use: one line naming it, status 2 (``BAD_INPUT``). Anything
    else is a bug of ours: one line and status 3, or with ``ECHO_BENCH_DEBUG=1`` its traceback."""
    try:
        args = parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2): argparse has printed it
        return exc.code if isinstance(exc.code, int) else 2
    try:
        status = int(args.func(args))
        flush_stdout()
        return status
    except OutputClosed:
        _quiet_stdout()
        return OUTPUT_CLOSED
    except KeyboardInterrupt:
        say(f"echo-bench {args.command_name}: interrupted", err=True)
        return 2  # as pytest says it of an interrupted run
    except (EchoBenchError, OSError, ValueError, RecursionError) as exc:  # what bad input raises
        if _debugging():
            raise
        say(f"echo-bench {args.command_name}: {_one_line(exc)}", err=True)
        return BAD_INPUT
    except Exception as exc:
        if _debugging():
            raise
        say(f"echo-bench {args.command_name}: internal error ({type(exc).__name__}: "
            f"{_one_line(exc)}); a bug: {DEBUG_ENV}=1 shows the traceback", err=True)
        return BUG


def _quiet_stdout() -> None:
    """Python's recipe for a closed pipe: point stdout at devnull, so the flush at the exit cannot
    fail a second time and print "Exception ignored ... BrokenPipeError"."""
    with contextlib.suppress(OSError, ValueError):  # a stdout without a file descriptor (captured)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _debugging() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def _one_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return shown(text, newlines=False)  # a multi-line message must not draw lines of its own


if __name__ == "__main__":
    sys.exit(main())
