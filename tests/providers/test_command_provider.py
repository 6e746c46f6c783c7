"""The command provider with a real executable standing in for the ``claude`` CLI."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest
from cli_fakes import all_dead, running

from conftest import Sweep, make_spec

ANTHROPIC_KEY = "sk-ant-cli-planted-secret-51c0de"
OPENAI_KEY = "sk-openai-planted-secret-e2a9f7"
FAST_RETRY = "retries: {attempts: 2, backoff_s: 0.01, max_backoff_s: 0.02}\n"

# What the stand-in says for a magic word in the prompt: [text, exit status,
# is_error, api_error_status]. The texts are the real CLI's (2.1.332, or as users
# reported older ones); see claude_cli.
SAYS = {
    "USAGE-LIMIT": ["Claude AI usage limit reached|1767225600", 1, True, None],
    "OLD-LIMIT-EXIT0": ["Claude AI usage limit reached|1767225600", 0, False, None],
    "FIVE-HOUR": ["5-hour limit reached \u2219 resets 3pm", 1, True, None],
    "HIT-LIMIT-EXIT0": ["You've hit your limit \u00b7 resets 1pm", 0, True, None],
    "SESSION-LIMIT": [
        "You've hit your session limit \u00b7 resets 1:30pm (Europe/Berlin)",
        1,
        True,
        None,
    ],
    "BAD-KEY": ["Invalid API key \u00b7 Please run /login", 1, True, 401],
    "BAD-KEY-EXIT0": ["Invalid API key \u00b7 Please run /login", 0, False, None],
    "CREDIT": ["Credit balance is too low", 1, True, 400],
    "TOO-LONG": ["Prompt is too long", 1, True, 400],
    "CRASH": [
        "API Error: 500 Internal server error. This is a server-side issue, usually temporary",
        1,
        True,
        500,
    ],
}

# The stand-in CLI. It refuses an argv the claude preset would not produce, reads the prompt on
# stdin (or after "--"), acts on magic words in the prompt, and answers in the format asked for.
# Its #! names this interpreter, not `/usr/bin/env python3`: a pyenv shim there would add PYENV_*
# variables to the environment the isolation test inspects.
FAKE_CLAUDE = '''\
#!__PYTHON__
import hashlib, json, os, subprocess, sys, time

SAYS = __SAYS__
args = sys.argv[1:]
i = args.index("--setting-sources") if "--setting-sources" in args else -1
if "--print" not in args or "--model" not in args or i < 0 or args[i + 1:i + 2] != [""]:
    print(f"bad argv: {args!r}", file=sys.stderr)
    sys.exit(64)
as_json = ("--output-format" in args
           and args[args.index("--output-format") + 1:][:1] == ["json"])

def say(text, rc=0, is_error=False, status=None):
    if as_json:
        print(json.dumps({"type": "result", "subtype": "success", "is_error": is_error,
                          "api_error_status": status, "result": text, "total_cost_usd": 0.0001,
                          "usage": {"input_tokens": 11, "output_tokens": 1}}))
    else:
        print(text, file=sys.stderr if rc else sys.stdout)
    sys.exit(rc)

if "--" in args:
    prompt = args[args.index("--") + 1]
    assert sys.stdin.read() == "", "stdin should be empty when the prompt is an argument"
else:
    prompt = sys.stdin.read()
for word, said in SAYS.items():
    if word in prompt.split():
        say(*said)
if "FLAKY" in prompt:
    seen = prompt.split()[-1]
    if not os.path.exists(seen):
        open(seen, "w").close()
        say("API Error: 529 Overloaded. This is a server-side issue, usually temporary",
            1, True, 529)
if "SLEEP" in prompt:
    # $0: found by its command line
    helper = subprocess.Popen(["sh", "-c", "sleep 60", sys.argv[0]])
    with open(prompt.split()[-1], "a") as f:
        f.write(f"{os.getpid()} {helper.pid}\\n")
    time.sleep(60)
if "ENV?" in prompt:
    env = {k: hashlib.sha256(v.encode()).hexdigest() for k, v in os.environ.items()}
    say(json.dumps({"cwd": os.getcwd(), "listing": os.listdir("."), "home": os.environ.get("HOME"),
                    "env": env, "model": args[args.index("--model") + 1]}))
say("4" if "2+2" in prompt else f"echo: {prompt}")
'''.replace("__SAYS__", repr(SAYS)).replace("__PYTHON__", sys.executable)


@pytest.fixture
def fake_bin(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory holding the stand-in ``claude``, put first on PATH."""
    bin_dir = tmp_path_factory.mktemp("bin")
    claude = bin_dir / "claude"
    claude.write_text(FAKE_CLAUDE)
    claude.chmod(claude.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    monkeypatch.delenv("CLAUDE_CODE_OAUTH_TOKEN", raising=False)
    return bin_dir


def cli_spec(
    inputs: list[str],
    arm: str = "{provider: command, preset: claude, model: sonnet}",
    extra: str = "",
) -> str:
    items = "\n".join(
        f"    - {{id: q{i}, input: {json.dumps(text)}, target: '4'}}"
        for i, text in enumerate(inputs)
    )
    return (f"benchmark: cli\ndataset:\n  loader: inline\n  items:\n{items}\nscorer: exact\n"
            f"arms:\n  claude: {arm}\n{FAST_RETRY}timeout_s: 5\n{extra}")


def test_answers_are_recorded(pytester: pytest.Pytester, sweep: Sweep, fake_bin: Path) -> None:
    make_spec(pytester, cli_spec(["2+2=?", "what is 2+2"]))
    result, _, rows = sweep.run()
    result.assert_outcomes(passed=2)
    assert [r["output"] for r in rows] == ["4", "4"] and all(r["attempts"] == 1 for r in rows)
    # Tokens from the CLI's JSON result; its total_cost_usd is not taken (the spec's prices decide,
    # so a cached answer costs what a fresh one does).
    assert (
        rows[0]["usage"] == {"prompt_tokens": 11, "completion_tokens": 1}
        and rows[0].get("cost_usd") is None
    )


def test_the_cli_runs_isolated(
    pytester: pytest.Pytester, sweep: Sweep, fake_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The project around the run: an instructions file, settings and hooks, and variables.
    pytester.makefile(".md", CLAUDE="You are the project's own assistant.")
    (pytester.path / ".claude").mkdir()
    (pytester.path / ".claude" / "settings.json").write_text('{"hooks": {}}')
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("ECHO_BENCH_PROJECT_SETTING", "project")
    make_spec(pytester, cli_spec(["ENV?"]))
    _, _, rows = sweep.run()
    seen = json.loads(rows[0]["output"])
    assert seen["model"] == "sonnet"
    assert seen["listing"] == []
    cwd = Path(seen["cwd"])
    assert not cwd.is_relative_to(pytester.path) and not cwd.exists()  # removed afterwards
    assert seen["home"] != os.path.expanduser("~") and Path(seen["home"]).parent == cwd.parent
    # Python itself may add LC_CTYPE (PEP 538 locale coercion) before the script looks, and
    # bubblewrap PWD (the call's empty working directory).
    assert set(seen["env"]) - {"LC_CTYPE", "PWD"} <= {
        "PATH",
        "LANG",
        "LC_ALL",
        "TERM",
        "HOME",
        "TMPDIR",
        "ANTHROPIC_API_KEY",
        "CLAUDE_CODE_MAX_RETRIES",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
    }
    assert seen["env"]["ANTHROPIC_API_KEY"] == hashlib.sha256(ANTHROPIC_KEY.encode()).hexdigest()
    assert ANTHROPIC_KEY not in sweep.out.read_text()


def test_keep_home_and_extra_env(
    pytester: pytest.Pytester, sweep: Sweep, fake_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    arm = "{provider: command, preset: claude, model: opus, keep_home: true, env: [OPENAI_API_KEY]}"
    make_spec(pytester, cli_spec(["ENV?"], arm=arm))
    _, _, rows = sweep.run()
    seen = json.loads(rows[0]["output"])
    assert seen["model"] == "opus" and seen["home"] == os.path.expanduser("~")
    # env replaces the preset's list
    assert "OPENAI_API_KEY" in seen["env"] and "ANTHROPIC_API_KEY" not in seen["env"]


@pytest.mark.parametrize(
    "magic, message",
    [
        ("USAGE-LIMIT", "Claude AI usage limit reached"),
        ("OLD-LIMIT-EXIT0", "Claude AI usage limit reached|1767225600"),
        ("FIVE-HOUR", "5-hour limit reached"),
        ("HIT-LIMIT-EXIT0", "You've hit your limit"),
        ("SESSION-LIMIT", "You've hit your session limit"),
        ("CREDIT", "Credit balance is too low"),
    ],
)
def test_usage_limit_stops_the_run(
    pytester: pytest.Pytester, sweep: Sweep, fake_bin: Path, magic: str, message: str
) -> None:
    make_spec(pytester, cli_spec(["2+2=?", f"2+2=? {magic}", "2+2 again"]))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 2
    # the exhausted item and those after it have no row
    assert [r["task_id"] for r in rows] == ["q0"]
    marker = json.loads((pytester.path / "results.jsonl.stop.json").read_text())
    assert marker["reason"] == "exhausted" and message in marker["message"]
    if "|1767225600" in SAYS[magic][0]:
        # when the CLI says the window resets, the supervisor waits till then
        assert marker["resume_at"] == 1767225600
    result.stdout.fnmatch_lines(["*resume with:*", f"*pytest --bench-resume {sweep.out}*"])


@pytest.mark.parametrize(
    "magic, extra",
    [("USAGE-LIMIT", ""), ("FIVE-HOUR", "errors:\n  exhaustion: ['5-hour limit']\n")],
    ids=["built-in-pattern", "spec-pattern"],
)
def test_a_plain_argv_cli_is_classified_by_its_output(
    pytester: pytest.Pytester, sweep: Sweep, fake_bin: Path, magic: str, extra: str
) -> None:
    arm = '{provider: command, argv: [claude, --print, --model, m, --setting-sources, ""], env: []}'
    make_spec(pytester, cli_spec([f"2+2=? {magic}"], arm=arm, extra=extra))
    result, _, rows = sweep.run()
    assert result.ret == 2 and rows == []
    marker = json.loads((pytester.path / "results.jsonl.stop.json").read_text())
    assert marker["reason"] == "exhausted"


def test_an_unrecognised_failure_is_retried(
    pytester: pytest.Pytester, sweep: Sweep, fake_bin: Path
) -> None:
    make_spec(pytester, cli_spec(["2+2=?", "2+2=? CRASH"]))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 2 and [r["task_id"] for r in rows] == ["q0"]
    result.stdout.fnmatch_lines(["*not completed*q1*claude exited with status 1: API Error: 500*"])
    marker = json.loads((pytester.path / "results.jsonl.stop.json").read_text())
    assert marker["reason"] == "incomplete"


def test_overloaded_is_retried_then_answers(
    pytester: pytest.Pytester, sweep: Sweep, fake_bin: Path
) -> None:
    make_spec(pytester, cli_spec([f"2+2=? FLAKY {pytester.path / 'seen'}"]))
    result, _, rows = sweep.run()
    assert result.ret == 0 and rows[0]["output"] == "4" and rows[0]["attempts"] == 2


@pytest.mark.parametrize("magic", ["BAD-KEY", "BAD-KEY-EXIT0"])
def test_a_login_message_stops_the_arm_with_either_exit_status(
    pytester: pytest.Pytester, sweep: Sweep, fake_bin: Path, magic: str
) -> None:
    make_spec(pytester, cli_spec([f"2+2=? {magic}", "2+2"]))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    # the login text is never an answer, even with exit status 0
    assert result.ret == 2 and rows == []
    marker = json.loads((pytester.path / "results.jsonl.stop.json").read_text())
    assert marker["reason"] == "arm-unavailable"
    result.stdout.fnmatch_lines(
        ["*Invalid API key*", "*run `claude` and log in, or set ANTHROPIC_API_KEY*"]
    )


def test_a_prompt_too_long_is_that_items_error_row(
    pytester: pytest.Pytester, sweep: Sweep, fake_bin: Path
) -> None:
    make_spec(pytester, cli_spec(["2+2=?", "2+2=? TOO-LONG"]))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert [(r["task_id"], r["status"]) for r in rows] == [("q0", "correct"), ("q1", "error")]
    assert "Prompt is too long" in rows[1]["detail"]


def test_timeout_kills_the_process_group_then_leaves_the_item_incomplete(
    pytester: pytest.Pytester, sweep: Sweep, fake_bin: Path
) -> None:
    pids = pytester.path / "pids.txt"
    make_spec(pytester, cli_spec([f"SLEEP {pids}"]).replace("timeout_s: 5", "timeout_s: 0.5"))
    start = time.monotonic()
    result, _, rows = sweep.run()
    assert time.monotonic() - start < 15
    assert result.ret == 2 and rows == []
    result.stdout.fnmatch_lines(["*timed out after 0.5 s*", "*1 incomplete*"])
    marker = json.loads((pytester.path / "results.jsonl.stop.json").read_text())
    assert marker["reason"] == "incomplete"
    started = [int(p) for line in pids.read_text().splitlines() for p in line.split()]
    assert len(started) == 4  # two attempts, each the CLI and the helper it started
    # The pids it wrote are its PID namespace's: on the host, the CLI and its helper are found by
    # the stand-in's path in their command lines.
    assert all_dead(running(str(fake_bin / "claude")))


def test_prompt_as_an_argument(pytester: pytest.Pytester, sweep: Sweep, fake_bin: Path) -> None:
    arm = (
        '{provider: command, argv: [claude, --print, --model, haiku, --setting-sources, "", '
        '"--", "Q: {prompt}"], prompt: arg}'
    )
    make_spec(pytester, cli_spec(["hello there"], arm=arm))
    _, _, rows = sweep.run()
    assert rows[0]["output"] == "echo: Q: hello there"


def test_missing_binary_skips_with_its_name(
    pytester: pytest.Pytester, sweep: Sweep, fake_bin: Path
) -> None:
    arm = "{provider: command, preset: claude, model: sonnet, binary: no-such-model-cli}"
    make_spec(pytester, cli_spec(["2+2=?", "2+2"], arm=arm))
    result, _, rows = sweep.run("-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(
        ["*runs 'no-such-model-cli', which was not found on PATH: install it or set binary:*"]
    )
    assert rows == []


def test_binary_overrides_the_executable(
    pytester: pytest.Pytester, sweep: Sweep, fake_bin: Path
) -> None:
    moved = fake_bin / "claude-nightly"
    (fake_bin / "claude").rename(moved)
    make_spec(
        pytester,
        cli_spec(
            ["2+2=?"], arm=f"{{provider: command, preset: claude, model: sonnet, binary: {moved}}}"
        ),
    )
    result, _, rows = sweep.run()
    assert result.ret == 0 and rows[0]["output"] == "4"


@pytest.mark.parametrize(
    "arm, message",
    [
        (
            "{provider: command, argv: 'claude --print'}",
            "*argv must be a list of arguments, not a shell string*",
        ),
        (
            "{provider: command, argv: [claude], prompt: arg}",
            "*prompt: arg needs an argument containing {prompt}*",
        ),
        ("{provider: command, preset: claude}", "*preset claude needs a 'model'*"),
        ("{provider: command, preset: gemini, model: m}", "*unknown preset 'gemini'*"),
        (
            "{provider: command, preset: claude, model: m, env: ['KEY=value']}",
            "*env lists variable names*",
        ),
        ("{provider: command, argv: [claude], shell: true}", "*unknown command option 'shell'*"),
        (
            "{provider: command, argv: [claude], max_output_bytes: 0}",
            "*max_output_bytes must be a positive number of bytes, got 0*",
        ),
        (
            "{provider: command, argv: [claude], max_output_bytes: -5}",
            "*max_output_bytes must be a positive number*",
        ),
        (
            "{provider: command, argv: [claude], max_output_bytes: 4MB}",
            "*max_output_bytes has the wrong type: '4MB'*",
        ),
        (
            "{provider: command, argv: [claude], max_output_bytes: true}",
            "*max_output_bytes has the wrong type: True*",
        ),
    ],
    ids=[
        "string-argv",
        "arg-without-slot",
        "preset-model",
        "preset-name",
        "env-value",
        "unknown",
        "cap-zero",
        "cap-negative",
        "cap-string",
        "cap-bool",
    ],
)
def test_bad_options_are_spec_errors(
    pytester: pytest.Pytester, sweep: Sweep, fake_bin: Path, arm: str, message: str
) -> None:
    make_spec(pytester, cli_spec(["2+2=?"], arm=arm))
    result, _, rows = sweep.run()
    assert result.ret == 2 and rows == []
    result.stdout.fnmatch_lines(["*invalid benchmark spec*" + message.lstrip("*")])



def test_a_result_object_over_max_output_bytes_is_that_items_error_row(
    pytester: pytest.Pytester, sweep: Sweep, fake_bin: Path
) -> None:
    # the result object is ~170 bytes
    arm = "{provider: command, preset: claude, model: sonnet, max_output_bytes: 40}"
    make_spec(pytester, cli_spec(["2+2=?"], arm=arm))
    _, _, rows = sweep.run()
    # not retried: it would be cut again
    assert [r["status"] for r in rows] == ["error"] and rows[0]["attempts"] == 1
    assert "claude printed more than max_output_bytes (40);" in rows[0]["detail"]
    assert "bytes were dropped and its result could not be read" in rows[0]["detail"]
