"""``echo-bench export``: a results file written as Inspect eval logs, one per benchmark and arm."""

from __future__ import annotations

import argparse
from pathlib import Path

from pytest_echo_bench.cli.args import Command, input_file, output_dir, say


def arguments(x: argparse.ArgumentParser) -> None:
    x.add_argument("file", type=input_file)
    x.add_argument("--format", choices=["inspect"], default="inspect")
    x.add_argument("-o", "--output", type=output_dir, required=True,
                   help="The directory of the logs")
    x.add_argument("--spec", type=Path, action="append", default=[],
                   help="Spec file(s) whose datasets give the samples' inputs (rows do not store "
                        "the prompt; default: the specs the meta line names); a dataset other than "
                        "the file's is refused")


def handle(args: argparse.Namespace) -> int:
    from pytest_echo_bench.interop.inspect.exporter import export_inspect

    done = export_inspect(args.file, args.output, args.spec)
    for note in done.notes:
        say(note, err=True)
    for path in done.paths:
        say(f"echo-bench: wrote {path}")
    say(f"echo-bench: exported {done.samples} samples as {len(done.paths)} Inspect logs -> "
        f"{args.output}")
    return 0


COMMAND = Command("export", "A results file as Inspect eval logs, one per benchmark and arm",
                  arguments, handle)
