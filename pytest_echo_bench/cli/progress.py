"""``echo-bench progress``: a results file's self-contained progress page, once or until the run
ends."""

from __future__ import annotations

import argparse

from pytest_echo_bench.cli.args import DAY_S, Command, input_file, number, output_file, say


def arguments(g: argparse.ArgumentParser) -> None:
    g.add_argument("file", type=input_file)
    g.add_argument("-o", "--output", type=output_file, required=True)
    g.add_argument("--watch", action="store_true", help="Keep rewriting it until the run ends")
    g.add_argument("--interval", type=number(0, DAY_S, open_low=True), default=5.0,
                   help="Seconds between rewrites with --watch")


def handle(args: argparse.Namespace) -> int:
    from pytest_echo_bench.report.page.html import watch, write_progress

    if args.watch:
        watch(args.file, args.output, args.interval)
    else:
        write_progress(args.file, args.output)
    say(f"echo-bench: wrote {args.output}")
    return 0


COMMAND = Command("progress", "Write the self-contained progress page of a results file",
                  arguments, handle)
