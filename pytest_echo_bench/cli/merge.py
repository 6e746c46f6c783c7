"""``echo-bench merge``: results files (shards, say) written as one, and how each shard ended."""

from __future__ import annotations

import argparse

from pytest_echo_bench.cli.args import Command, input_file, output_file, say
from pytest_echo_bench.store.safe_text import shown


def _pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not (sep and name and value):
        raise argparse.ArgumentTypeError(f"expected BENCHMARK=FINGERPRINT, got {text!r}")
    return name, value


def arguments(m: argparse.ArgumentParser) -> None:
    m.add_argument("files", nargs="+", type=input_file)
    m.add_argument("-o", "--output", type=output_file, required=True)
    m.add_argument("--assume-fingerprint", metavar="BENCHMARK=FINGERPRINT", action="append",
                   default=[], type=_pair,
                   help="Rows of BENCHMARK in a file that records no fingerprint for it (no meta "
                        "line) were recorded with FINGERPRINT (repeatable); without it such a file "
                        "is refused")
    m.add_argument("--allow-mismatch", action="store_true",
                   help="Merge files whose fingerprints of a benchmark differ; the merged file "
                        "gets a fingerprint no spec gives, so resuming it needs "
                        "--bench-allow-mismatch")


def handle(args: argparse.Namespace) -> int:
    from pytest_echo_bench.results.merge import merge
    from pytest_echo_bench.store.owner import held
    from pytest_echo_bench.store.writer import write_whole

    # No run appends to the output (an input too, maybe) meanwhile.
    with held(args.output, "echo-bench merge"):
        merged = merge(args.files, dict(args.assume_fingerprint), args.allow_mismatch)
        for conflict in merged.conflicts:
            say(f"conflict: {conflict}", err=True)
        write_whole(args.output, merged.meta, merged.lines)
    say(f"echo-bench: merged {len(args.files)} files: {len(merged.lines)} rows, "
        f"{merged.duplicates} duplicates removed, {len(merged.conflicts)} conflicts -> "
        f"{args.output}")
    cover = merged.coverage
    for end in cover.ends:  # how each shard file ended (a reason is a file's text: shown escaped)
        say(shown(f"echo-bench: {end.text()}", newlines=False))
    if cover.shards:
        say(shown(f"echo-bench: {cover.describe()}", newlines=False) + ("" if cover.complete else
            f"; {args.output} is marked incomplete, and a gate on it fails unless --allow-partial"))
    return 0


COMMAND = Command("merge", "Merge results files (e.g. shards) into one", arguments, handle)
