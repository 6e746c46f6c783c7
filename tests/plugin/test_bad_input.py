"""Bad input: bytes that are not UTF-8, lone surrogates, a 10 MB answer, an empty one.

Each gives a clear error naming the place, or a recorded row, and loses nothing: the results
file parses, ``echo-bench report`` reads it and the progress page is written. (Malformed YAML,
bad keys and garbage lines in a results file are covered in test_spec_errors.py and
test_resume.py.)
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from conftest import Sweep, make_spec, sim_spec
from pytest_echo_bench.cli.main import main

BIG = 10 * 1024 * 1024

ARMS_PY = '''
from pytest_echo_bench import arm

@arm("surrogates")
def surrogates(ctx):
    # lone surrogates (valid JSON escapes, not encodable) in a wrong answer
    return "\\ud800 5 \\udfff"

@arm("huge")
def huge(ctx):
    return "x" * BIG + " 4" if ctx.example.id == "q0" else "4"

@arm("empty")
def empty(ctx):
    return ""

@arm("raises")
def raises(ctx):
    raise ValueError("refused \\udcff")    # a permanent error whose message holds a lone surrogate
'''.replace("BIG", str(BIG))

# Prints bytes that are not UTF-8 around a right answer.
# The interpreter running the tests (a machine may have no python3 on PATH, or another one).
BINARY_CLI = (
    f"#!{sys.executable}\nimport sys\nsys.stdin.read()\nsys.stdout.buffer.write(b'\\xff\\xfe 4 "
    "\\xc3\\x28\\n')\n"
)


def test_spec_with_bytes_that_are_not_utf8_names_file_and_line(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    body = sim_spec(2).encode().replace(b"2+2=? (1)", b"2+2=? \xff\xfe")
    (pytester.path / "demo.yaml").write_bytes(body)
    result, _, rows = sweep.run()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        ["*invalid benchmark spec: *demo.yaml:6: not UTF-8: byte 0xff at column 30"]
    )
    assert "Traceback" not in result.stdout.str() and rows == []


def test_jsonl_dataset_with_bytes_that_are_not_utf8_names_the_data_line(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    (pytester.path / "data.jsonl").write_bytes(
        b'{"id": "a", "input": "x", "target": "y"}\n{"id": "b", "input": "\xff", "target": "y"}\n'
    )
    make_spec(
        pytester,
        "benchmark: demo\ndataset:\n  loader: jsonl\n  path: data.jsonl\nscorer: "
        "exact\narms:\n  a: {provider: sim}\n",
    )
    result, _, rows = sweep.run()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        ["*[[]dataset.path[]]: *data.jsonl:2: not UTF-8: byte 0xff at column 23"]
    )
    assert "Traceback" not in result.stdout.str() and rows == []


@pytest.fixture
def odd_outputs(pytester: pytest.Pytester) -> Path:
    """Arms that answer with surrogates, 10 MB, nothing, a surrogate
    error and bytes that are not UTF-8."""
    pytester.makeconftest(ARMS_PY)
    cli = pytester.path / "binary-cli"
    cli.write_text(BINARY_CLI)
    cli.chmod(cli.stat().st_mode | stat.S_IXUSR)
    arms = "".join(
        f"  {name}: {{provider: python, function: {name}}}\n"
        for name in ("surrogates", "huge", "empty", "raises")
    )
    arms += "  binary: {provider: command, argv: [./binary-cli]}"
    return make_spec(pytester, sim_spec(2, arms=arms).replace("scorer: exact", "scorer: numeric"))


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_odd_outputs_are_recorded_reported_and_paged(
    pytester: pytest.Pytester,
    sweep: Sweep,
    odd_outputs: Path,
    workers: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    page = pytester.path / "status.html"
    # A subprocess: its terminal output is encoded for real, as a user's would be.
    result, _, rows = sweep.run("--bench-html", str(page), *workers, subprocess=True)
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == 0, output[-3000:]
    assert "Traceback" not in output and "INTERNALERROR" not in output and "crashed" not in output
    by_arm = {r["arm"]: r for r in rows if r["task_id"] == "q0"}
    assert len(rows) == 10 and set(by_arm) == {"surrogates", "huge", "empty", "raises", "binary"}
    assert by_arm["surrogates"]["output"] == "\ud800 5 \udfff"  # stored exactly, as JSON escapes
    # and shown in a failure report without breaking it
    assert by_arm["surrogates"]["status"] == "wrong"
    assert len(by_arm["huge"]["output"]) == BIG + 2 and by_arm["huge"]["passed"]
    assert by_arm["empty"]["status"] == "unparseable" and by_arm["empty"]["output"] == ""
    assert by_arm["raises"]["status"] == "error" and by_arm["raises"]["detail"].endswith(
        "refused \udcff"
    )
    assert by_arm["binary"]["output"] == "\ufffd\ufffd 4 \ufffd(" and by_arm["binary"]["passed"]
    assert sweep.out.read_bytes().isascii()  # every line pure ASCII: no encoding in the file at all

    capsys.readouterr()
    assert main(["report", str(sweep.out), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {a: v["n"] for a, v in report["arms"].items()} == {
        "surrogates": 2,
        "huge": 2,
        "empty": 2,
        "raises": 2,
        "binary": 2,
    }
    assert main(["report", str(sweep.out)]) == 0
    assert "surrogates" in capsys.readouterr().out

    html = page.read_text(encoding="utf-8")
    assert "huge" in html and "x" * 1000 not in html  # the page shows tails, not 10 MB
    again = pytester.path / "again.html"
    assert main(["progress", str(sweep.out), "-o", str(again)]) == 0
    assert again.stat().st_size < 200_000
