"""``echo-bench`` at its boundary: whatever the arguments and files, one line and a status, never a
traceback, and every line it prints escaped.

Generated argument vectors for every subcommand (random options and values: nan, inf, huge,
negative, empty, unicode, lone surrogates; missing files, directories, ``/dev/null``, garbage,
results files with hostile task ids) run in-process through ``main(argv)``. The property: the
status is an int and not ``BUG`` (an exception no bad input explains), nothing printed holds
"Traceback" or a raw control or bidi character. The examples that found bugs are plain tests.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shared_server import made_once, session_dir

import pytest_echo_bench.cli
from pytest_echo_bench.cli import main as cli_main
from pytest_echo_bench.cli.main import BUG, main, parser
from pytest_echo_bench.store.files import encode_line

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# What must never reach a terminal raw (line feeds and tabs may).
UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
HOSTILE = "\x1b[2J\x1b]52;c;ZXZpbA==\x07\u202eexe.txt\u202c\x9b31m\r\n===== 2 passed =====\ud800"
IDS = (HOSTILE, "q\ud800", "q\udcff\u2066", "plain")


def hostile_sweep(root: Path) -> tuple[Path, Path]:
    """A real sweep (a pytest subprocess) over task ids with controls, bidi
    characters and lone surrogates."""
    items = [
        {"id": task, "input": f"ask {n} {task}", "target": f"4{task}"} for n, task in enumerate(IDS)
    ]
    (root / "items.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))
    spec = root / "demo.yaml"
    spec.write_text(
        "benchmark: demo\ndataset:\n  loader: jsonl\n  path: items.jsonl\nscorer: exact\narms:\n"
        "  sim: {provider: sim, accuracy: 0.5}\n  ref: {provider: reference}\n"
    )
    out = root / "results.jsonl"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(spec),
            "--bench-out",
            str(out),
        ],
        cwd=root,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert out.exists()
    return spec, out


@pytest.fixture(scope="session")
def inputs(
    pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """Every kind of file the commands may be pointed at: made once per session (a
    real sweep makes the results), whichever xdist worker asks first; the commands
    only read them (``check`` makes sure)."""
    root = made_once(
        session_dir(pytestconfig, tmp_path_factory), "cli-inputs", write_inputs, timeout_s=300
    )
    return input_files(root, root / "demo.yaml", root / "results.jsonl")


def write_inputs(root: Path) -> None:
    spec, results = hostile_sweep(root)
    files = input_files(root, spec, results)
    files["empty"].write_bytes(b"")
    files["garbage"].write_bytes(b"\x00\x01{not json\n}}}\n")
    files["notutf8"].write_bytes(b'{"task_id": "\xff\xfe", "arm": "a"}\n')
    files["deep"].write_bytes(b"[" * 100_000 + b"\n")
    files["list"].write_bytes(
        b'[1, 2]\n{"task_id": 5, "arm": null, "status": [1]}\n{"task_id": "x", "arm": "a", '
        b'"passed": "yes", "wall_seconds": "nan", "epoch": -1}\n'
    )
    files["meta_only"].write_bytes(results.read_bytes().splitlines(keepends=True)[0])
    files["hostile_row"].write_bytes(
        encode_line(
            {
                "task_id": HOSTILE,
                "arm": "a\u202e",
                "benchmark": HOSTILE,
                "status": "wrong",
                "output": HOSTILE,
                "detail": HOSTILE,
            }
        )
    )
    files["yaml"].write_bytes(f"benchmark: [\n{HOSTILE}\n".encode("utf-8", "surrogatepass"))
    samples = [
        {
            "id": task,
            "epoch": 1,
            "input": HOSTILE,
            "target": HOSTILE,
            "output": {"completion": HOSTILE},
            "scores": {"match": {"value": value, "answer": HOSTILE}},
            "error": error,
        }
        for task, value, error in zip(
            IDS, ("C", "P", [1], None), (None, None, None, {"message": HOSTILE}), strict=True
        )
    ]
    files["inspect_log"].write_text(
        json.dumps({"eval": {"task": HOSTILE, "model": f"m{HOSTILE}"}, "samples": samples})
    )


def input_files(root: Path, spec: Path, results: Path) -> dict[str, Path]:
    return {
        "results": results,
        "spec": spec,
        "missing": root / "missing.jsonl",
        "dir": root,
        "devnull": Path("/dev/null"),
        "empty": root / "empty.jsonl",
        "garbage": root / "garbage.jsonl",
        "notutf8": root / "notutf8.jsonl",
        "deep": root / "deep.jsonl",
        "list": root / "list.jsonl",
        "meta_only": root / "meta.jsonl",
        "hostile_row": root / "hostile_row.jsonl",
        "yaml": root / "bad.yaml",
        # an Inspect log whose task, model, ids and outputs are hostile
        "inspect_log": root / "inspect.json",
    }


@pytest.fixture
def outdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("out")


# Values at the edges: not numbers, not finite, too small to square, too big to hold, not ASCII.
EDGES = st.sampled_from(
    [
        "nan",
        "-nan",
        "inf",
        "-inf",
        "1e-300",
        "5e-324",
        "1e308",
        "1e400",
        "-1",
        "0",
        "",
        " ",
        "abc",
        "\u0663",
        "0x10",
        "9" * 5000,
        "--",
        "-h",
        "\ud800",
        "\x1b[2J",
        "\u202e1",
        "a,b,c",
        ",",
    ]
)
# surrogates and controls included
TEXT = st.text(st.characters(exclude_categories=()), max_size=12)
ODD = st.one_of(EDGES, EDGES, TEXT, st.floats().map(repr), st.integers(-(10**20), 10**20).map(str))
FILES = (
    "results",
    "spec",
    "missing",
    "dir",
    "devnull",
    "empty",
    "garbage",
    "notutf8",
    "deep",
    "list",
    "meta_only",
    "hostile_row",
    "yaml",
)
# What `run` may run: nothing, a command that is not there, one that is not executable, quick ones.
COMMANDS = (
    [],
    ["--"],
    ["--", "/nonexistent/echo-bench-missing"],
    ["--", "/dev/null"],
    ["--", sys.executable, "-c", "pass"],
    ["--", sys.executable, "-c", "import sys; sys.exit(2)"],
)
# Vectors that work, per subcommand ({results}, {spec}, {out} filled in); each example breaks a
# few of their values, so most of what is generated gets past argparse to the code behind it.
# (`progress --watch` rewrites the page until the run ends: it has a test of its own.)
BASES = {
    "report": [
        ["{results}"],
        [
            "{results}",
            "--format",
            "json",
            "--oracle",
            "sim,ref",
            "--gate",
            "sim>=0.5",
            "--reduce",
            "mean",
        ],
        ["{results}", "{results}", "--format", "html", "--gate", "sim >= ref - 0.02 @95"],
    ],
    "compare": [
        ["{results}", "{results}"],
        ["{results}", "{results}", "--format", "html", "-o", "{out}/c.html", "--gate",
         "no-regression@95"],
        ["--base", "{results}", "--cand", "{results}", "--pair", "sim=sim", "--format", "csv",
         "--gate", "sim >= base - 0.02 @95 anytime"],
    ],
    "power": [
        ["--diff", "0.03", "--discordant", "0.12", "--alpha", "0.05", "--power", "0.8"],
        ["{results}", "--pair", "sim,ref", "--diff", "0.03"],
        ["{results}", "--pair", "sim,ref", "--repeats", "3"],
    ],
    "estimate": [
        ["{spec}"],
        ["{spec}", "-k", "sim", "--format", "json", "--results", "{results}", "--cache", "off"],
        [
            "{spec}",
            "--bench-shard",
            "1/2",
            "--concurrency",
            "4",
            "--workers",
            "2",
            "--rootdir",
            "{out}",
        ],
    ],
    "progress": [["{results}", "-o", "{out}/page.html", "--interval", "5"]],
    "run": [["--max-retries", "1", "--backoff", "0", "--grace", "1"]],
    "regrade": [
        ["{results}", "--spec", "{spec}", "-o", "{out}/new.jsonl"],
        ["{results}", "-o", "{out}/new.jsonl"],
    ],
    "judge": [
        ["{results}", "--spec", "{spec}", "-o", "{out}/judged.jsonl"],
        ["{results}", "--spec", "{spec}", "-o", "{out}/judged.jsonl", "-j", "2", "--cache", "off",
         "--budget-usd", "1", "--retry-unjudged"],
    ],
    "merge": [["{results}", "{results}", "-o", "{out}/merged.jsonl"]],
    "trend": [["{results}"], ["{results}", "{results}", "--format", "html"],
              ["{out}", "{results}", "--format", "csv"]],
    "import": [
        ["{log}", "-o", "{out}/imported.jsonl"],
        [
            "{log}",
            "{log}",
            "--arm",
            "a",
            "--arm",
            "b",
            "--scorer",
            "match",
            "-o",
            "{out}/both.jsonl",
        ],
    ],
    "export": [
        ["{results}", "--format", "inspect", "-o", "{out}/logs"],
        ["{results}", "--spec", "{spec}", "-o", "{out}"],
    ],
}
EXTRA = {
    "report": ["--format", "--oracle", "--reduce", "--gate"],
    "compare": ["--base", "--cand", "--pair", "--format", "--gate"],
    "power": ["--pair", "--diff", "--discordant", "--alpha", "--power", "--repeats"],
    "estimate": [
        "-k",
        "--bench-shard",
        "--format",
        "--results",
        "--cache",
        "--rootdir",
        "--concurrency",
        "--workers",
    ],
    "progress": ["--interval"],
    "run": ["--max-retries", "--backoff", "--grace", "--retry-errors"],
    "regrade": ["--spec"],
    "judge": ["--spec", "-j", "--cache", "--budget-usd", "--bench-budget-usd"],
    "merge": [],
    "trend": ["--format"],
    "import": ["--arm", "--scorer"],
    "export": ["--spec", "--format"],
}
OUTPUTS = ("-o", "--output")


@st.composite
def argv_for(draw: st.DrawFn, command: str, files: dict[str, Path], out: Path) -> list[str]:
    """A working vector of ``command`` with a few values broken, a stray option or file added."""
    base = draw(st.sampled_from(BASES[command]))
    argv = [
        t.format(results=files["results"], spec=files["spec"], out=out, log=files["inspect_log"])
        for t in base
    ]
    values = [i for i, t in enumerate(argv) if not t.startswith("-")]
    for i in draw(st.lists(st.sampled_from(values), max_size=2, unique=True)) if values else []:
        argv[i] = draw(_broken(argv[i - 1] if i else "", files, out))
    for option in draw(st.lists(st.sampled_from(EXTRA[command] + ["--bogus"]), max_size=1)):
        argv += [option] if option == "--retry-errors" else [option, draw(ODD)]
    argv += (
        [str(files[name]) for name in draw(st.lists(st.sampled_from(FILES), max_size=1))]
        if command != "run"
        else []
    )
    return [command, *argv, *(draw(st.sampled_from(COMMANDS)) if command == "run" else [])]


def _broken(option: str, files: dict[str, Path], out: Path) -> st.SearchStrategy[str]:
    """An odd value for the token after ``option`` (a positional file when that is no option)."""
    # never an existing path outside the scratch directory: the output replaces it
    if option in OUTPUTS:
        return st.sampled_from(
            [str(out), "", str(out / "missing" / "x.jsonl"), str(out / "\ud800\x1b.jsonl")]
        )
    if not option.startswith("-") or option == "--spec":
        return st.one_of(st.sampled_from([str(files[n]) for n in FILES]), ODD)
    return ODD


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out + captured.err


def assert_clean(status: object, printed: str) -> None:
    assert isinstance(status, int) and status != BUG, printed
    assert "Traceback" not in printed, printed
    # A CR right before a LF only ends the line: CSV's RFC 4180 line ends stay as they are.
    assert not UNSAFE.search(printed.replace("\r\n", "\n")), UNSAFE.search(
        printed.replace("\r\n", "\n")
    )


def check(argv: list[str], capsys: pytest.CaptureFixture[str], out: Path | None = None) -> int:
    # belt and braces: no generated vector may name /dev/null or an input as an output
    if out is not None:
        named = [argv[i + 1] for i, t in enumerate(argv[:-1]) if t in OUTPUTS]
        assert all(not (p and Path(p).exists()) or p.startswith(str(out)) for p in named), argv
    status, printed = run_main(argv, capsys)
    assert_clean(status, printed)
    return status


@pytest.fixture(autouse=True)
def _no_debug(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("ECHO_BENCH_DEBUG", raising=False)
    yield


def test_every_subcommand_is_generated() -> None:
    listed = set(parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    assert listed == set(BASES)


@pytest.mark.parametrize("command", sorted(BASES))
def test_generated_arguments_never_give_a_traceback(
    command: str, inputs: dict[str, Path], outdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    examples = 40 if command == "run" else 100  # each `run` example may start a process

    @settings(SETTINGS, max_examples=examples)
    @given(argv=argv_for(command, inputs, outdir))
    def prop(argv: list[str]) -> None:
        check(argv, capsys, outdir)

    prop()


# -- the examples that found bugs, kept as plain tests -------------------------------------------
@pytest.mark.parametrize(
    "argv, said",
    [
        (
            ["power", "--diff", "nan", "--discordant", "0.1"],
            "--diff: 'nan' is not a number in [-1, 1]",
        ),
        (
            ["power", "--diff", "0.03", "--discordant", "inf"],
            "--discordant: 'inf' is not a number in (0, 1]",
        ),
        (
            ["power", "--diff", "0.03", "--discordant", "0.1", "--alpha", "1e-300"],
            "--alpha: '1e-300' is not a number",
        ),
        (
            ["progress", "r.jsonl", "-o", "p.html", "--watch", "--interval", "nan"],
            "--interval: 'nan' is not a number",
        ),
        (
            ["progress", "r.jsonl", "-o", "p.html", "--interval", "0"],
            "--interval: '0' is not a number in (0, 86400]",
        ),
        (
            ["run", "--backoff", "-1", "--", "pytest"],
            "--backoff: '-1' is not a number in [0, 691200]",
        ),
        (["run", "--grace", "nan", "--", "pytest"], "--grace: 'nan' is not a number in [0, 86400]"),
        (
            ["run", "--max-retries", "-3", "--", "pytest"],
            "--max-retries: '-3' is not in [0, 10000]",
        ),
        (["run", "--max-retries", "9" * 5000, "--", "pytest"], "is not a whole number"),
    ],
)
def test_bad_numbers_are_refused_by_argparse(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, printed = run_main(argv, capsys)
    assert status == 2 and said in printed and "Traceback" not in printed


def test_a_tiny_difference_is_not_a_division_by_zero(capsys: pytest.CaptureFixture[str]) -> None:
    status, printed = run_main(["power", "--diff", "1e-300", "--discordant", "0.1"], capsys)
    assert_clean(status, printed)
    # Refused before any arithmetic: a difference below 0.0001 is one no sweep has the items for.
    assert status == 2 and "--diff 1e-300 is below 0.0001" in printed


def test_an_unknown_oracle_arm_is_one_line(
    inputs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    status, printed = run_main(["report", str(inputs["results"]), "--oracle", "a,typo"], capsys)
    assert status == 2 and printed.count("\n") == 1 and "unknown oracle arm(s): a, typo" in printed


def test_report_of_hostile_ids_is_escaped(
    inputs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    for fmt in ("table", "markdown", "json", "csv", "html"):
        status, printed = run_main(["report", str(inputs["results"]), "--format", fmt], capsys)
        assert_clean(status, printed)
        # shown escaped, not dropped (no ids in CSV)
        assert status == 0 and ("\\ud800" in printed or fmt == "csv"), fmt


@pytest.mark.parametrize(
    "name", ["deep", "notutf8", "garbage", "dir", "devnull", "list", "hostile_row"]
)
def test_bad_files_give_one_line(
    name: str, inputs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (
        ["report", str(inputs[name])],
        ["merge", str(inputs[name]), "-o", str(inputs["dir"] / "m.jsonl")],
        ["power", str(inputs[name]), "--pair", "a,b"],
    ):
        check(argv, capsys)


def test_an_output_that_is_not_a_regular_file_is_refused(
    tmp_path: Path, inputs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for out in (fifo, tmp_path):
        status, printed = run_main(["merge", str(inputs["results"]), "-o", str(out)], capsys)
        assert status == 2 and "exists and is not a regular file" in printed
    assert fifo.exists() and not fifo.is_file()  # still the FIFO


def test_a_bug_is_one_line_and_status_3_or_a_traceback_when_debugging(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import pytest_echo_bench.cli.power as power_cli

    def broken(args: object) -> tuple[list[str], int]:
        raise TypeError("a bug of ours")

    monkeypatch.setattr(power_cli, "power_lines", broken)
    status, printed = run_main(["power", "--diff", "0.1", "--discordant", "0.2"], capsys)
    assert (
        status == BUG == 3
        and "internal error (TypeError: a bug of ours)" in printed
        and "ECHO_BENCH_DEBUG=1" in printed
    )
    monkeypatch.setenv("ECHO_BENCH_DEBUG", "0")
    assert run_main(["power", "--diff", "0.1", "--discordant", "0.2"], capsys)[0] == BUG
    monkeypatch.setenv("ECHO_BENCH_DEBUG", "1")
    with pytest.raises(TypeError, match="a bug of ours"):
        main(["power", "--diff", "0.1", "--discordant", "0.2"])


def test_argparse_messages_are_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    status, printed = run_main(["report", "x", "--format", "\x1b[2J\u202e", "\ud800"], capsys)
    assert status == 2
    assert_clean(status, printed)
    status, printed = run_main(["merge", "x", "-o", "y", "--bogus\x1b]0;t\x07"], capsys)
    assert status == 2 and "unrecognized arguments: --bogus\\x1b]0;t\\x07" in printed


def test_each_subcommand_is_a_module_that_declares_its_arguments_and_handler() -> None:
    """Every ``COMMAND`` a module of ``cli/`` declares is a subcommand, in ``main.COMMANDS``' order,
    parsed by the arguments its module adds and handled by its module's handler."""
    modules = (importlib.import_module(f"pytest_echo_bench.cli.{m.name}")
               for m in pkgutil.iter_modules(pytest_echo_bench.cli.__path__))
    declared = {m.COMMAND.name: m.COMMAND for m in modules if hasattr(m, "COMMAND")}
    assert sorted(declared) == sorted(c.name for c in cli_main.COMMANDS)
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == [c.name for c in cli_main.COMMANDS]
    for name, command in declared.items():
        one = sub.choices[name]
        assert one.get_default("func") is command.handle
        fresh = argparse.ArgumentParser()
        command.arguments(fresh)
        assert [a.dest for a in one._actions] == [a.dest for a in fresh._actions]


def test_help_is_status_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main(["--help"], capsys)[0] == 0
    assert run_main(["power", "--help"], capsys)[0] == 0
