"""``echo-bench regrade``: stored outputs scored again with the current scorer, no model called."""

from __future__ import annotations

import argparse
from pathlib import Path

from pytest_echo_bench.cli.args import Command, input_file, output_file, say


def arguments(d: argparse.ArgumentParser) -> None:
    d.add_argument("file", type=input_file)
    d.add_argument("--spec", type=Path, action="append", default=[],
                   help="Spec file(s); default: the meta line's")
    d.add_argument("-o", "--output", type=output_file, required=True)
    d.add_argument("--allow-outside-specs", action="store_true",
                   help="Use spec paths of the meta line outside the current directory (and import "
                        "their conftest.py)")


def handle(args: argparse.Namespace) -> int:
    from pytest_echo_bench.results.regrade import regrade
    from pytest_echo_bench.store.owner import held
    from pytest_echo_bench.store.writer import write_whole

    # No run appends to the output while it is read and replaced.
    with held(args.output, "echo-bench regrade"):
        # It refuses before anything is written.
        result = regrade(args.file, args.spec, args.allow_outside_specs)
        write_whole(args.output, result.meta, result.lines)
    for change in result.changes:
        say(change)
    for note in result.notes:
        say(note)
    rows = len(result.lines)
    say(f"echo-bench: regraded {rows} rows ({result.kept} provider errors kept as they were): "
        f"{len(result.changes)} verdicts changed -> {args.output}")
    return 0


COMMAND = Command("regrade", "Re-score stored outputs with the current scorer (no model calls); "
                  "refuses a spec whose dataset or arms differ from the file's", arguments, handle)
