"""Secrets stay out of every artifact; specs cannot run code; model output never meets a shell.

The HTML page escaping model output (a ``<script>`` payload) is proved in test_progress.py
(``test_everything_from_the_file_is_escaped``), and a command arm's ``argv`` given as a shell
string is refused in test_command_provider.py (``test_bad_options_are_spec_errors[string-argv]``).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from pathlib import Path

import pytest
from openai_server import OVERLOADED, FakeOpenAI

from conftest import make_spec

SECRET = "sk-proj-PLANTED7c1e0f9a4b2d4e8fZQ"
# a key cut, masked or wrapped still shows these
SECRET_PARTS = (SECRET, SECRET[8:24], SECRET[-12:])

# A model CLI that needs its key: it answers only when the pass-through
# delivered it, and never prints it.
CLI = f"""#!{sys.executable}
import hashlib, os, sys
prompt = sys.stdin.read()
given = os.environ.get("CMD_SECRET_TEST", "").encode()
if hashlib.sha256(given).hexdigest() != {hashlib.sha256(SECRET.encode()).hexdigest()!r}:
    print("no key"); sys.exit(3)
print("4" if "(0)" in prompt else "5")
"""

BAD_REQUEST = {
    "message": "The prompt was refused by the content filter",
    "type": "invalid_request_error",
    "code": "content_filter",
}


def secret_spec(server: FakeOpenAI, n: int) -> str:
    items = "\n".join(f'    - {{id: q{i}, input: "2+2=? ({i})", target: "4"}}' for i in range(n))
    return (
        f"benchmark: secrets\ndataset:\n  loader: inline\n  items:\n{items}\nscorer: exact\narms:\n"
        f"  gpt: {{provider: openai, model: m, base_url: '{server.base_url}', api_key_env: "
        "OPENAI_SECRET_TEST, client: http}\n"
        f"  cli: {{provider: command, argv: [./model-cli], env: [CMD_SECRET_TEST]}}\n"
        "retries: {attempts: 3, backoff_s: 0.01, max_backoff_s: 0.02}\ntimeout_s: 5\n"
    )


def files_holding(root: Path, parts: tuple[str, ...]) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path}: {part}" for part in parts if part.encode() in data]
    return found


def test_no_artifact_or_output_holds_the_api_key(
    pytester: pytest.Pytester, openai_server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_SECRET_TEST", SECRET)
    monkeypatch.setenv("CMD_SECRET_TEST", SECRET)
    cli = pytester.path / "model-cli"
    cli.write_text(CLI)
    cli.chmod(cli.stat().st_mode | stat.S_IXUSR)
    openai_server.answer = lambda prompt: (
        "4" if int(prompt.rsplit("(", 1)[1].rstrip(")")) % 2 == 0 else "5"
    )
    # a permanent error: q0[gpt] is a failed row
    openai_server.push("error", (400, BAD_REQUEST, {}))
    openai_server.push("error", (529, OVERLOADED, {}))  # a transient one: q1[gpt] is retried
    openai_server.quota_after = 4  # then exhaustion stops the run
    make_spec(pytester, secret_spec(openai_server, 12))
    out = pytester.path / "run" / "r.jsonl"
    page, junit, report = (
        pytester.path / "page.html",
        pytester.path / "junit.xml",
        pytester.path / "report.json",
    )
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "-v",
        "-rA",
        "--bench-out",
        str(out),
        "--bench-concurrency",
        "1",
        "--bench-order",
        "file",
        "--bench-html",
        str(page),
        f"--junitxml={junit}",
        "--json-report",
        f"--json-report-file={report}",
    )
    output = result.stdout.str() + result.stderr.str()

    # The run did meet everything it should: wrong answers, a permanent error, a retry, exhaustion.
    assert result.ret == 2, output[-3000:]
    # run_end: a meta line
    rows = [r for r in map(json.loads, out.read_text().splitlines()[1:]) if not r.get("_meta")]
    statuses = {(r["task_id"], r["arm"]): r["status"] for r in rows}
    assert statuses[("q0", "gpt")] == "error" and "content_filter" in next(
        r["detail"] for r in rows if r["status"] == "error"
    )
    # the CLI got its key
    assert "wrong" in statuses.values() and statuses[("q0", "cli")] == "correct"
    assert any(r["retries"] for r in rows)
    assert json.loads(Path(f"{out}.stop.json").read_text())["reason"] == "exhausted"
    for artifact in (
        out,
        Path(f"{out}.summary.json"),
        Path(f"{out}.stop.json"),
        page,
        junit,
        report,
    ):
        assert artifact.is_file(), artifact
    assert "FAILED" in output and "expected 4 got 5" in output and "resume with:" in output

    # terminal, failure messages included
    assert [part for part in SECRET_PARTS if part in output] == []
    # results (meta and rows), summary, stop
    assert files_holding(pytester.path, SECRET_PARTS) == []
    # marker, page, junit XML, JSON report, response cache: every file
    # the run left anywhere below it
    assert (
        os.environ["OPENAI_SECRET_TEST"] == SECRET
        and openai_server.requests[0]["auth"] == f"Bearer {SECRET}"
    )


@pytest.mark.parametrize(
    "tagged",
    ["!!python/object/apply:os.system ['touch pwned']", "!!python/object:os.system {}",
     "!!python/name:os.system ''"],
    ids=["apply", "object", "name"],
)
def test_python_tags_in_a_spec_are_refused(pytester: pytest.Pytester, tagged: str) -> None:
    make_spec(
        pytester,
        "benchmark: demo\ndataset:\n  loader: inline\n  items:\n    - {id: q0, input: x, "
        "target: '4'}\n"
        f"scorer: exact\narms:\n  a: {{provider: sim, template: {tagged}}}\n",
    )
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--bench-out", str(pytester.path / "r.jsonl")
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "*invalid benchmark spec: *demo.yaml:8: malformed YAML: *could not determine a "
            "constructor "
            "for the tag 'tag:yaml.org,2002:python/*"
        ]
    )
    assert not (pytester.path / "pwned").exists() and not (pytester.path / "r.jsonl").exists()


def test_a_prompt_full_of_shell_syntax_reaches_the_cli_as_one_literal_argument(
    pytester: pytest.Pytester,
) -> None:
    echo = pytester.path / "echo-args"
    echo.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    echo.chmod(echo.stat().st_mode | stat.S_IXUSR)
    prompt = "$(touch pwned1); `touch pwned2` && touch pwned3 | cat > pwned4 ; echo $HOME > pwned5"
    make_spec(
        pytester,
        "benchmark: shell\ndataset:\n  loader: inline\n  items:\n    - {id: q0, input: "
        f"{json.dumps(prompt)}, target: x}}\n"
        "scorer: exact\narms:\n  a: {provider: command, argv: [./echo-args, --ask, "
        "'{prompt}'], prompt: arg}\n",
    )
    out = pytester.path / "r.jsonl"
    result = pytester.runpytest("-p", "no:cacheprovider", "--bench-out", str(out))
    assert result.ret == 0
    row = json.loads(out.read_text().splitlines()[1])
    assert json.loads(row["output"]) == ["--ask", prompt]
    assert not any(pytester.path.glob("pwned*")) and not any(Path.home().glob("pwned*"))
