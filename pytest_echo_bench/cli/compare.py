"""``echo-bench compare``: two runs paired arm by arm and item by item, in one format, and the gates
across runs judged on them (exit 1 when one fails)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_echo_bench.analysis.across import AcrossGate, parse_across_gate
from pytest_echo_bench.cli.args import Command, input_file, output_file, say
from pytest_echo_bench.store.safe_text import shown

if TYPE_CHECKING:
    from pytest_echo_bench.results.read import Item

FORMATS = ("text", "markdown", "json", "csv", "html")


def _gate(text: str) -> AcrossGate:
    try:
        return parse_across_gate(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _pair(text: str) -> tuple[str, str]:
    base, sep, cand = text.partition("=")
    if not sep or not base.strip() or not cand.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: write BASEARM=CANDARM, e.g. strong=strong_v2")
    return base.strip(), cand.strip()


def arguments(r: argparse.ArgumentParser) -> None:
    r.add_argument("files", nargs="*", type=input_file, metavar="BASE CAND",
                   help="The two runs' results files (or give each side with --base and --cand)")
    r.add_argument("--base", nargs="+", type=input_file, metavar="FILE",
                   help="BASE's files: shards of one sweep, merged as report merges them")
    r.add_argument("--cand", nargs="+", type=input_file, metavar="FILE",
                   help="CAND's files: shards of one sweep, merged as report merges them")
    r.add_argument("--pair", metavar="BASEARM=CANDARM", action="append", default=[], type=_pair,
                   help="Pair BASE's arm with CAND's arm of another name (repeatable)")
    r.add_argument("--format", choices=FORMATS, default="text")
    r.add_argument("-o", "--output", metavar="FILE", type=output_file,
                   help="Write the comparison to FILE instead of standard output")
    r.add_argument("--gate", metavar="RULE", action="append", default=[], type=_gate,
                   help="Exit 1 unless the rule holds: 'ARM >= base - 0.02 @95' (non-inferiority "
                        "on the paired interval), 'no-regression@95' (every arm), either with "
                        "'anytime' after the level (repeatable)")


def _sides(args: argparse.Namespace) -> tuple[list[Path], list[Path]]:
    if args.files and (args.base or args.cand):
        raise ValueError("give BASE CAND as two files, or --base FILE... --cand FILE..., not both")
    if args.files:
        if len(args.files) != 2:
            raise ValueError(f"compare takes two files, BASE and CAND; got {len(args.files)} "
                             "(several files of one run: --base A B --cand C D)")
        return [args.files[0]], [args.files[1]]
    if not args.base or not args.cand:
        raise ValueError("give the two runs: echo-bench compare BASE.jsonl CAND.jsonl, or "
                         "--base FILE... --cand FILE...")
    return list(args.base), list(args.cand)


def handle(args: argparse.Namespace) -> int:
    from pytest_echo_bench.store.owner import held

    base_files, cand_files = _sides(args)
    if args.output is None:
        return _compare(args, base_files, cand_files)
    _not_an_input(args.output, base_files + cand_files)
    # a live run's results file is refused, and no run starts on the output while it is written
    with held(args.output, "echo-bench compare"):
        return _compare(args, base_files, cand_files)


def _not_an_input(output: Path, inputs: list[Path]) -> None:
    """``-o`` naming an input (by any name: a symlink, a hard link) would replace a results file
    with the comparison, tonight's rows gone."""
    for path in inputs:
        try:
            same = os.path.samefile(output, path)
        except OSError:  # the output does not exist yet (or the input: its reader says so)
            same = False
        if same:
            raise ValueError(f"-o {output}: that is the results file {path}, an input of the "
                             "comparison; writing there would replace its rows: give another "
                             "file")


def _compare(args: argparse.Namespace, base_files: list[Path], cand_files: list[Path]) -> int:
    from pytest_echo_bench.analysis.across import figures
    from pytest_echo_bench.report import compare as formats
    from pytest_echo_bench.results.across import pair_runs
    from pytest_echo_bench.results.read import load_results
    from pytest_echo_bench.store.files import write_atomic

    # compare shows no spend: its calls need not be named
    base, cand = load_results(base_files, spend=False), load_results(cand_files, spend=False)
    for side, results, files in (("BASE", base, base_files), ("CAND", cand, cand_files)):
        if not results.rows:
            raise ValueError(f"{side} has no rows: {', '.join(map(str, files))}")
    base_arms, cand_arms = _arms(base.rows), _arms(cand.rows)
    pairs = _pairs(args.pair, base_arms, cand_arms)
    _check_once(pairs, base_arms, cand_arms)
    paired = pair_runs(base, cand, pairs)
    arms = figures(paired)
    text = _render(args.format, formats.compare_json(paired, arms))
    if args.output is None:
        say(text)
    else:
        safe = "\r\n".join(shown(part) for part in text.split("\r\n"))
        write_atomic(args.output, safe.encode("utf-8", "surrogateescape"))
    failed = 0
    for gate in args.gate:
        for ok, line in gate.check(arms):
            failed += not ok
            # one line each: an arm's name from a file cannot start another
            say(shown(line, newlines=False), err=True)
    return 1 if failed else 0


Arms = set[tuple[str, str]]  # (benchmark, arm) of a run's rows


def _pairs(given: list[tuple[str, str]], base: Arms, cand: Arms) -> dict[str | tuple[str, str],
                                                                          str]:
    """``--pair`` as ``pair_runs`` takes it: a bare BASE arm pairs in every benchmark that has it,
    ``BENCHMARK/ARM`` in that benchmark only. A name a run does not have would pair nothing,
    silently: refused, as is one BASE arm paired twice."""
    pairs: dict[str | tuple[str, str], str] = {}
    for old, new in given:
        key, bench = _base_arm(old, new, base)
        arm = _cand_arm(old, new, bench, cand)
        if isinstance(key, str) and arm != new and "/" in new:  # bare BASE, full CAND arm
            key = (new.partition("/")[0], old)
            if key not in base:
                raise ValueError(f"--pair {old}={new}: BASE has no arm {old!r} in benchmark "
                                 f"{key[0]!r} (its arms: {_listed(base)})")
        if key in pairs:
            raise ValueError(f"--pair names one BASE arm twice: {old}")
        pairs[key] = arm
    return pairs


def _base_arm(old: str, new: str, base: Arms) -> tuple[str | tuple[str, str], str | None]:
    """BASE's arm ``old`` names: a bare name (every benchmark), or (benchmark, arm)."""
    if any(arm == old for _, arm in base):
        return old, None
    bench, _, arm = old.partition("/")
    if (bench, arm) in base:
        return (bench, arm), bench
    raise ValueError(f"--pair {old}={new}: BASE has no arm {old!r} (its arms: {_listed(base)})")


def _cand_arm(old: str, new: str, bench: str | None, cand: Arms) -> str:
    """CAND's arm ``new`` names, in ``bench`` when BASE's arm was named with its benchmark."""
    if any(arm == new and bench in (None, b) for b, arm in cand):
        return new
    b, _, arm = new.partition("/")
    if bench in (None, b) and (b, arm) in cand:
        return arm
    where = "" if bench is None else f" in benchmark {bench!r}"
    raise ValueError(f"--pair {old}={new}: CAND has no arm {new!r}{where} (its arms: "
                     f"{_listed(cand)})")


def _listed(arms: Arms) -> str:
    """A run's arms as a user names them: bare in one benchmark, ``BENCHMARK/ARM`` in several."""
    several = len({b for b, _ in arms}) > 1
    return ", ".join(sorted(f"{b}/{a}" if several else a for b, a in arms))


def _arms(rows: Iterable[Item]) -> set[tuple[str, str]]:
    return set(map(attrgetter("benchmark", "arm"), rows))


def _check_once(pairs: dict[str | tuple[str, str], str], base: Arms, cand: Arms) -> None:
    """A CAND arm meets one BASE arm: ``--pair a=b`` while BASE has a ``b`` of its own would pair
    CAND's ``b`` twice, and its figures, flips and gate would be counted twice under one name."""
    from pytest_echo_bench.results.across import meets

    met: dict[tuple[str, str], list[str]] = {}
    for bench, arm in sorted(base):
        other = (bench, meets(pairs, bench, arm))
        if other in cand:
            met.setdefault(other, []).append(arm)
    for (bench, arm), olds in met.items():
        if len(olds) > 1:
            how = ", ".join(f"{o!r} ({'same name' if o == arm else 'by --pair'})" for o in olds)
            raise ValueError(f"--pair: CAND's arm {arm!r} (benchmark {bench!r}) would meet "
                             f"{len(olds)} BASE arms: {how}; a CAND arm meets one BASE arm: "
                             f"pair the others with other CAND arms (--pair BASEARM=CANDARM)")


def _render(form: str, data: dict[str, object]) -> str:
    from pytest_echo_bench.report import compare as formats

    if form == "html":
        from pytest_echo_bench.report.compare_html import render_html

        return render_html(data)
    renderers = {"text": formats.render_text, "markdown": formats.render_markdown,
                 "json": formats.render_json, "csv": formats.render_csv}
    return renderers[form](data)  # type: ignore[arg-type]


COMMAND = Command("compare", "Two runs paired item by item: flips, paired tests, gates across runs",
                  arguments, handle)
