"""The commands the README and the docs show are commands the program takes: every `echo-bench`
subcommand and its options, and every `--bench-*` option, exist as spelt (a renamed or removed one
leaves the docs telling users to type what is refused)."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from pytest_echo_bench.cli.main import parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BENCH_OPTION = re.compile(r"--bench-[a-z][a-z-]*[a-z]")
# A shell line that runs the command, in a code block or a code span: `echo-bench SUB ...`.
COMMAND = re.compile(r"(?:^|`|\$ |&& |\| )\s*echo-bench ([a-z]+)((?: [^`\n|;&]*)?)", re.MULTILINE)


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _flags(sub: argparse.ArgumentParser) -> set[str]:
    return {flag for action in sub._actions for flag in action.option_strings}


def _plugin_options(pytester: pytest.Pytester) -> set[str]:
    help_text = pytester.runpytest_subprocess("--help").stdout.str()
    return set(BENCH_OPTION.findall(help_text))


def _shown(page: Path) -> list[tuple[str, list[str]]]:
    """Each `echo-bench SUB ARGS` the page shows, with the option words of its ARGS."""
    out = []
    for sub, rest in COMMAND.findall(page.read_text(encoding="utf-8")):
        try:
            words = shlex.split(rest, comments=True)
        except ValueError:  # an unbalanced quote in prose: the options still read word by word
            words = rest.split()
        # after "--": the command `run` runs
        words = words[:words.index("--")] if "--" in words else words
        out.append(
            (sub, [w.split("=", 1)[0] for w in words if re.fullmatch(r"--?[a-z][a-z-]*(=.*)?", w)])
        )
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_echo_bench_command_shown_is_taken_as_spelt(page: Path) -> None:
    subs = _subparsers()
    wrong = []
    for sub, flags in _shown(page):
        if sub not in subs:
            wrong.append(f"echo-bench {sub}: no such subcommand")
            continue
        wrong += [
            f"echo-bench {sub} {flag}: no such option"
            for flag in flags
            if flag not in _flags(subs[sub])
        ]
    assert wrong == []


def test_the_pages_show_echo_bench_commands() -> None:
    """The check above reads something: the pages show most subcommands."""
    shown = {sub for page in PAGES for sub, _ in _shown(page)}
    assert len(shown & set(_subparsers())) >= 6, shown


def test_every_bench_option_named_in_the_docs_exists(pytester: pytest.Pytester) -> None:
    known = _plugin_options(pytester)
    assert len(known) > 10  # the help listed the plugin's options
    named = {
        (page.name, option)
        for page in PAGES
        for option in BENCH_OPTION.findall(page.read_text(encoding="utf-8"))
    }
    assert sorted(f"{name}: {option}" for name, option in named if option not in known) == []


def test_every_bench_option_is_in_the_options_table(pytester: pytest.Pytester) -> None:
    """docs/options.md lists every option: a row of its table starts with each one."""
    table = (ROOT / "docs" / "options.md").read_text(encoding="utf-8")
    rows = {m.group(1) for m in re.finditer(r"^\| `(--bench-[a-z-]+)", table, re.MULTILINE)}
    assert sorted(_plugin_options(pytester) - rows) == []
