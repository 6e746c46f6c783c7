"""``echo-bench trend``: each arm's pass rate per run in time order, with the runs that differ from
the run before on the paired test marked."""

from __future__ import annotations

import argparse
from pathlib import Path

from pytest_echo_bench.cli.args import Command, say
from pytest_echo_bench.store.paths import refusal

FORMATS = ("text", "markdown", "json", "csv", "html")


def run_source(text: str) -> Path:
    """An argparse type: a results file or a directory of them (a FIFO or device is refused at
    once: reading one waits for a writer)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path")
    # stat only through ``refusal``: a name too long to stat is refused, not raised
    why = refusal(text)
    if why is not None and refusal(text, "directory") is not None:
        raise argparse.ArgumentTypeError(f"{text!r} {why}; give a results file or a directory")
    return Path(text)


def arguments(r: argparse.ArgumentParser) -> None:
    r.add_argument("runs", nargs="+", type=run_source, metavar="RUN.jsonl|DIR",
                   help="Results files, or directories of them; the files of one run id make "
                        "one run")
    r.add_argument("--format", choices=FORMATS, default="text")


def handle(args: argparse.Namespace) -> int:
    from pytest_echo_bench.report.formats import trend, trend_html
    from pytest_echo_bench.report.trend import build_trend
    from pytest_echo_bench.results.runs import read_runs

    draw = {"text": trend.render_text, "markdown": trend.render_markdown,
            "json": trend.render_json, "csv": trend.render_csv, "html": trend_html.render_html}
    say(draw[args.format](build_trend(read_runs(args.runs))))
    return 0


COMMAND = Command("trend", "Each arm's pass rate per run over time, changed runs marked",
                  arguments, handle)
