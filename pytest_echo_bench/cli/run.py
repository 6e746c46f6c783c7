"""``echo-bench run``: a sweep run unattended, resumed after exhaustion (``supervise`` does the
work)."""

from __future__ import annotations

import argparse
import contextlib
import sys

from pytest_echo_bench.cli.args import DAY_S, Command, number, say, whole

MAX_BACKOFF_S = 8 * DAY_S  # as far ahead as the supervisor trusts a provider's reset time
USAGE = 4  # pytest's status for a usage error: the command given is not one to supervise


def arguments(u: argparse.ArgumentParser) -> None:
    u.add_argument("--max-retries", type=whole(0, 10_000), default=10,
                   help="Resumes after exhaustion (default 10)")
    u.add_argument("--backoff", type=number(0, MAX_BACKOFF_S), default=3600.0,
                   help="Seconds to wait before resuming (default 3600)")
    u.add_argument("--grace", type=number(0, DAY_S), default=30.0,
                   help="Seconds the run has to stop after Ctrl-C or SIGTERM before it gets "
                        "SIGTERM, then SIGKILL (default 30)")
    u.add_argument("--retry-errors", action="store_true",
                   help="Pass --bench-retry-errors to the run and every resume (the command must "
                        "use --bench-resume)")
    u.add_argument("command", nargs=argparse.REMAINDER)


def handle(args: argparse.Namespace) -> int:
    from pytest_echo_bench.cli.supervise import supervise

    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        say("echo-bench run: give the pytest command after --, e.g. echo-bench run -- pytest "
            "bench_specs -n 4", err=True)
        return USAGE
    if args.retry_errors:
        # Every resume the supervisor starts keeps the command's other options, this one included.
        if not any(a == "--bench-resume" or a.startswith("--bench-resume=") for a in command):
            say("echo-bench run: --retry-errors re-runs the error rows of a results file: give the "
                "pytest command --bench-resume PATH", err=True)
            return USAGE
        if "--bench-retry-errors" not in command:
            command = [*command, "--bench-retry-errors"]
    return supervise(command, args.max_retries, args.backoff, log=_log, grace_s=args.grace)


def _log(line: str) -> None:
    # A closed terminal or pipe must not end supervision while the run it supervises goes on.
    with contextlib.suppress(OSError):
        say(line)
        sys.stdout.flush()


COMMAND = Command("run", "Run a sweep unattended, resuming after exhaustion: echo-bench run -- "
                  "pytest ...", arguments, handle)
