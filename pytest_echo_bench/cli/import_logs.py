"""``echo-bench import``: Inspect eval logs written as a new results file."""

from __future__ import annotations

import argparse
from pathlib import Path

from pytest_echo_bench.cli.args import Command, arm_name, output_file, say
from pytest_echo_bench.store.safe_text import shown


def arguments(i: argparse.ArgumentParser) -> None:
    i.add_argument("logs", nargs="+", type=Path)
    i.add_argument("-o", "--output", type=output_file, required=True,
                   help="The new results file (never an existing one)")
    i.add_argument("--arm", action="append", default=[], type=arm_name,
                   help="The arm instead of the log's model: once for every log, or once per log "
                        "in their order")
    i.add_argument("--scorer",
                   help="The scorer whose value is the verdict (default: the log's first)")


def handle(args: argparse.Namespace) -> int:
    from pytest_echo_bench.interop.inspect.importer import import_logs, write_new

    imported = import_logs(args.logs, args.arm, args.scorer)  # refuses before anything is written
    write_new(args.output, imported.meta, imported.lines)
    for note in imported.notes:
        say(note, err=True)
    # Names from the logs, escaped here with their line ends: say() keeps a CR LF (CSV's), and a
    # task named "x\r\n===== 2 passed =====" would draw a line of its own.
    arms = sorted(shown(f"{b}[{a}]", newlines=False)
                  for b, names in imported.meta["arms"].items() for a in names)
    say(f"echo-bench: imported {len(args.logs)} Inspect logs: {len(imported.lines)} rows of "
        f"{', '.join(arms)} -> {args.output}")
    return 0


COMMAND = Command("import", "Inspect eval logs (.eval, .json) as a new results file: a sample's "
                  "epochs are rows, its model the arm, its task the benchmark", arguments, handle)
