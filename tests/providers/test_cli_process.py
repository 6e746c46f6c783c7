"""A model CLI's process at the command provider's boundary: when a call
ends, what it keeps, what it kills.

Every CLI here is a real process (a small Python script); nothing of ours is mocked.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from cli_fakes import (
    ECHOES_HEX,
    all_dead,
    claude_provider,
    dead,
    plain_provider,
    python_cli,
    request,
    result,
    running,
)

from conftest import Sweep, make_spec
from pytest_echo_bench.errors import PermanentError, TransientError
from pytest_echo_bench.providers.command import MAX_OUTPUT_BYTES

# What a call that must not wait for its timeout (60 s, ``request``) may take: a third of it, far
# above a Python CLI's start on two loaded cores (load 15-20 while this was written).
NOT_THE_TIMEOUT_S = 20

# Starts a helper that inherits stdout and stderr and outlives the CLI (a language server, a
# telemetry daemon, `sleep 300 &`), notes its pid, answers and exits.
LEAVES_A_HELPER = '''
import subprocess, sys
helper = subprocess.Popen(["sleep", "300"])
open(sys.argv[1] if len(sys.argv) > 1 else "pids", "w").write(str(helper.pid))
print("4", flush=True)
'''


def test_a_helper_holding_stdout_does_not_hold_the_call(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    cli = python_cli(tmp_path / "cli", LEAVES_A_HELPER)
    start = time.monotonic()
    done = plain_provider(cli, prompt="arg").complete(request(str(pids)))
    took = time.monotonic() - start
    assert done.text == "4"
    # the grace after the exit (0.5 s), not the timeout (60 s)
    assert 0.4 < took < NOT_THE_TIMEOUT_S
    assert all_dead([int(pids.read_text())])


def test_a_shell_helper_holding_stdout_does_not_hold_the_call(tmp_path: Path) -> None:
    # The case measured: every call of `sh -c 'sleep 300 & echo answer'` waited for its timeout.
    sh = tmp_path / "sh-cli"
    sh.write_text("#!/bin/sh\nsleep 300 &\necho $! > \"$1\"\necho answer\n")
    sh.chmod(0o755)
    start = time.monotonic()
    done = plain_provider(sh, prompt="arg").complete(request(str(tmp_path / "pids")))
    assert done.text == "answer" and time.monotonic() - start < NOT_THE_TIMEOUT_S
    assert all_dead([int((tmp_path / "pids").read_text())])


def test_the_answer_of_a_cli_that_leaves_a_helper_is_graded(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    # Built by the spec, the CLI runs in its own PID namespace: the pid it notes is
    # that namespace's, so the helper carries the CLI's path in its command line ($0)
    # and is found on the host by it.
    body = LEAVES_A_HELPER.replace(
        'sys.argv[1] if len(sys.argv) > 1 else "pids"', repr(str(pytester.path / "pids"))
    )
    helper = f'["sh", "-c", "sleep 300", {str(pytester.path / "cli")!r}]'
    cli = python_cli(pytester.path / "cli", body.replace('["sleep", "300"]', helper))
    make_spec(
        pytester,
        "benchmark: cli\ndataset:\n  loader: inline\n  items:\n    - {id: q0, input: "
        "'2+2', target: '4'}\n"
        f"scorer: exact\narms:\n  a: {{provider: command, argv: [{cli}]}}\ntimeout_s: 30\n",
    )
    result_, _, rows = sweep.run()
    result_.assert_outcomes(passed=1)
    assert rows[0]["status"] == "correct" and rows[0]["wall_seconds"] < 10  # its timeout_s is 30
    assert (pytester.path / "pids").read_text() and all_dead(running(str(pytester.path / "cli")))


def test_a_cli_that_exits_just_before_its_timeout_has_answered(tmp_path: Path) -> None:
    # Its helper holds the pipes past the timeout: the grace runs out
    # after it, and the answer counts.
    pids = tmp_path / "pids"
    # the call starts a moment later: its timeout ends a moment after this
    timeout_ends = time.time() + 1.5
    cli = python_cli(
        tmp_path / "cli",
        f"import time\ntime.sleep(max(0, {timeout_ends} - 0.25 - time.time()))\n" + LEAVES_A_HELPER,
    )
    done = plain_provider(cli, prompt="arg").complete(replace(request(str(pids)), timeout_s=1.5))
    assert done.text == "4"
    assert all_dead([int(pids.read_text())])


def test_a_cli_that_closes_stdout_early_is_running_until_it_exits(tmp_path: Path) -> None:
    cli = python_cli(
        tmp_path / "cli",
        "import os, time\nos.write(1, b'4')\nos.close(1)\nos.close(2)\ntime.sleep(1)\n",
    )
    start = time.monotonic()
    done = plain_provider(cli).complete(request("x"))
    assert done.text == "4" and time.monotonic() - start >= 1.0


def test_a_cli_that_closes_stdout_and_never_exits_times_out_and_dies(tmp_path: Path) -> None:
    cli = python_cli(
        tmp_path / "cli",
        "import os, sys, time\nopen(sys.argv[1], 'w').write(str(os.getpid()))\n"
        "os.write(1, b'4')\nos.close(1)\ntime.sleep(300)\n",
    )
    pids = tmp_path / "pids"
    start = time.monotonic()
    with pytest.raises(TransientError, match="timed out after 1 s"):
        plain_provider(cli, prompt="arg").complete(replace(request(str(pids)), timeout_s=1))
    assert time.monotonic() - start < 15  # the CLI sleeps 300 s: the 1 s timeout ended it
    assert all_dead([int(pids.read_text())])


@pytest.mark.parametrize("signal_name, number", [("SIGKILL", 9), ("SIGSEGV", 11), ("SIGTERM", 15)])
def test_a_cli_killed_by_a_signal_is_transient_and_says_so(
    tmp_path: Path, signal_name: str, number: int
) -> None:
    cli = python_cli(
        tmp_path / "cli",
        "import os, signal\nprint('half an answer', flush=True)\nos.kill(os.getpid(), "
        f"signal.{signal_name})\n",
    )
    with pytest.raises(TransientError, match=f"was killed by signal {number}: half an answer"):
        plain_provider(cli).complete(request("x"))
    with pytest.raises(TransientError, match=f"was killed by signal {number}"):
        claude_provider(cli).complete(request("x"))


def test_invalid_utf8_is_decoded_with_replacement(tmp_path: Path) -> None:
    cli = python_cli(
        tmp_path / "cli",
        "import sys\nsys.stdout.buffer.write(b'\\xff\\xfe 4 \\xc3\\x28 \\xe2\\x82')\n",
    )
    assert plain_provider(cli).complete(request("x")).text == "\ufffd\ufffd 4 \ufffd( \ufffd"


def test_a_cli_reading_stdin_to_its_end_gets_the_prompt_then_eof(tmp_path: Path) -> None:
    cli = python_cli(
        tmp_path / "cli",
        "import sys\ndata = sys.stdin.buffer.read()\nprint(len(data), data[-3:].decode())\n",
    )
    prompt = "x" * (1 << 20) + "end"  # far more than a pipe holds: written as it reads
    assert plain_provider(cli).complete(request(prompt)).text == f"{len(prompt)} end"


def test_a_cli_reading_stdin_forever_with_the_prompt_in_an_argument_sees_eof(
    tmp_path: Path,
) -> None:
    cli = python_cli(
        tmp_path / "cli", "import sys\nrest = sys.stdin.read()\nprint(sys.argv[1], len(rest))\n"
    )
    start = time.monotonic()
    assert plain_provider(cli, prompt="arg").complete(request("hi")).text == "hi 0"
    assert time.monotonic() - start < NOT_THE_TIMEOUT_S


def test_a_cli_that_never_reads_its_prompt_is_not_waited_for(tmp_path: Path) -> None:
    cli = python_cli(tmp_path / "cli", "print('4')\n")
    start = time.monotonic()
    assert plain_provider(cli).complete(request("x" * (4 << 20))).text == "4"
    assert time.monotonic() - start < NOT_THE_TIMEOUT_S


def test_output_over_the_cap_is_cut_and_counted(tmp_path: Path) -> None:
    cli = python_cli(tmp_path / "cli", "import sys\nsys.stdout.write('a' * 1000)\n")
    done = plain_provider(cli, max_output_bytes=100).complete(request("x"))
    assert done.text == "a" * 100 and done.extra == {
        "output_truncated": True,
        "output_dropped_bytes": 900,
    }
    # exactly the cap: whole
    assert plain_provider(cli, max_output_bytes=1000).complete(request("x")).extra == {}


@pytest.mark.parametrize(
    "cap, kept",
    [
        (4, "abcd"),
        (5, "abcd"),
        (6, "abcd\u00e9"),
        (7, "abcd\u00e9"),
        (8, "abcd\u00e9"),
        (9, "abcd\u00e9\u20ac"),
    ],
)
def test_the_cap_never_cuts_a_character_in_half(tmp_path: Path, cap: int, kept: str) -> None:
    printed = "abcd\u00e9\u20ac\U0001f600"  # 1, 2, 3 and 4 bytes a character
    cli = python_cli(
        tmp_path / "cli", f"import sys\nsys.stdout.buffer.write({printed.encode()!r})\n"
    )
    done = plain_provider(cli, max_output_bytes=cap).complete(request("x"))
    assert done.text == kept
    assert done.extra["output_dropped_bytes"] == len(printed.encode()) - len(kept.encode())


def test_a_cut_answer_is_recorded_as_cut_and_nul_is_kept_as_printed(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    printed = "4\x00\x01\x1b[31m\x00" + "z" * 200
    cli = python_cli(
        pytester.path / "cli", f"import sys\nsys.stdin.read()\nsys.stdout.write({printed!r})\n"
    )
    make_spec(
        pytester,
        "benchmark: cli\ndataset:\n  loader: inline\n  items:\n    - {id: q0, input: "
        "'2+2', target: '4'}\n"
        f"scorer: exact\narms:\n  a: {{provider: command, argv: [{cli}], max_output_bytes: 100}}\n",
    )
    _, _, rows = sweep.run()
    assert rows[0]["output"] == printed[:100]  # NUL and control characters stored as they came
    assert rows[0]["extra"] == {
        "output_truncated": True,
        "output_dropped_bytes": len(printed) - 100,
    }
    # the line stays ASCII
    assert b"\\u0000" in sweep.out.read_bytes() and b"\x00" not in sweep.out.read_bytes()


def test_a_cut_result_object_of_the_claude_preset_is_that_items_error(tmp_path: Path) -> None:
    cli = python_cli(tmp_path / "cli", f"import sys\nsys.stdout.write({result('4' * 5000)!r})\n")
    provider = claude_provider(cli)
    provider.max_output_bytes = 1000
    with pytest.raises(
        PermanentError, match=r"printed more than max_output_bytes \(1000\); \d+ bytes were dropped"
    ):
        provider.complete(request("x"))


def test_stderr_keeps_its_tail_where_the_message_is(tmp_path: Path) -> None:
    cli = python_cli(
        tmp_path / "cli",
        "import sys\nsys.stderr.write('noise ' * 1_000_000)\n"
        "sys.stderr.write('Claude AI usage limit reached|1767225600')\nsys.exit(1)\n",
    )
    with pytest.raises(TransientError) as caught:
        plain_provider(cli).complete(request("x"))
    message = str(caught.value)
    assert message.endswith("usage limit reached|1767225600") and len(message) < 2100


# Runs in a child, so the peak RSS measured is one call's own.
PEAK = """
import resource, sys
from pathlib import Path
from cli_fakes import plain_provider, request
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    done = plain_provider(Path(sys.argv[1])).complete(request("x"))
    kept, extra = len(done.text), done.extra
except Exception as exc:
    kept, extra = -1, {"error": str(exc)[:200], "length": len(str(exc))}
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
print(__import__("json").dumps({"grown_kib": grown, "kept": kept, "extra": extra}))
"""


@pytest.mark.parametrize("stream, fd", [("stdout", 1), ("stderr", 2)])
def test_fifty_megabytes_in_memory_bounded_and_promptly(
    tmp_path: Path, stream: str, fd: int
) -> None:
    size = 50 << 20
    cli = python_cli(
        tmp_path / "cli",
        f"import os\nchunk = b'\\0' * (1 << 20)\nfor _ in range(50): os.write({fd}, chunk)\n"
        f"os._exit({0 if fd == 1 else 1})\n",
    )
    start = time.monotonic()
    child = subprocess.run(
        [sys.executable, "-c", PEAK, str(cli)],
        cwd=Path(__file__).parents[1],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert time.monotonic() - start < 30, child  # within its 60 s timeout, whatever the load
    seen = json.loads(child.stdout)
    # Before the cap, 50 MB of output grew the caller by about 150 MB (bytes, then text).
    assert seen["grown_kib"] < 3 * MAX_OUTPUT_BYTES // 1024 + 8 * 1024, seen
    if fd == 1:
        assert (
            seen["kept"] == MAX_OUTPUT_BYTES
            and seen["extra"]["output_dropped_bytes"] == size - MAX_OUTPUT_BYTES
        )
    else:
        assert seen["kept"] == -1 and "exited with status 1" in seen["extra"]["error"]
        assert seen["extra"]["length"] < 2100  # the message shows the tail of the 64 KiB kept


def test_an_interrupted_call_leaves_nothing_behind(tmp_path: Path) -> None:
    cli = python_cli(tmp_path / "cli", LEAVES_A_HELPER + "import time\ntime.sleep(300)\n")
    pids = tmp_path / "pids"
    code = ("import sys\nfrom pathlib import Path\nfrom cli_fakes import plain_provider, request\n"
            "plain_provider(Path(sys.argv[1]), prompt='arg').complete(request(sys.argv[2]))\n")
    caller = subprocess.Popen(
        [sys.executable, "-c", code, str(cli), str(pids)],
        cwd=Path(__file__).parents[1],
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 10
    while not (pids.exists() and pids.read_text()) and time.monotonic() < deadline:
        time.sleep(0.02)
    helper = int(pids.read_text())
    assert not dead(helper)
    caller.send_signal(2)  # Ctrl-C in the caller while the CLI and its helper run
    _, err = caller.communicate(timeout=10)
    assert b"KeyboardInterrupt" in err
    assert all_dead([helper])


@pytest.mark.parametrize(
    "mode, prompt, given",
    [
        ("stdin", "a\x00b", b"a\x00b"),
        ("stdin", "a\udcffb", b"a\xffb"),
        ("arg", "a\udcffb", b"a\xffb"),
        ("arg", "\u00e9\x1b[0m", "\u00e9\x1b[0m".encode()),
        ("arg", "a\x00b", None),
        ("stdin", "a\ud800b", None),
        ("arg", "a\ud800b", None),
    ],
    ids=[
        "stdin-nul",
        "stdin-escaped-byte",
        "arg-escaped-byte",
        "arg-control",
        "arg-nul",
        "stdin-surrogate",
        "arg-surrogate",
    ],
)
def test_a_prompt_reaches_the_cli_exactly_or_is_that_items_error(
    tmp_path: Path, mode: str, prompt: str, given: bytes | None
) -> None:
    provider = plain_provider(python_cli(tmp_path / "cli", ECHOES_HEX), prompt=mode)
    if given is None:
        with pytest.raises(PermanentError, match="cannot be given this prompt"):
            provider.complete(request(prompt))
    else:
        assert bytes.fromhex(provider.complete(request(prompt)).text) == given


@pytest.mark.parametrize("body, text, at_least_s", [
    (LEAVES_A_HELPER, "4", 0.4),
    ("import os, time\nos.write(1, b'4')\nos.close(1)\nos.close(2)\ntime.sleep(0.5)\n", "4", 0.5),
], ids=["helper-holds-stdout", "closes-stdout-early"])
def test_without_an_exit_descriptor_the_exit_is_polled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, text: str, at_least_s: float
) -> None:
    def no_pidfd(pid: int) -> int:
        raise OSError(38, "Function not implemented")  # a kernel before 5.3

    monkeypatch.setattr("os.pidfd_open", no_pidfd)
    start = time.monotonic()
    assert (
        plain_provider(python_cli(tmp_path / "cli", body), prompt="arg")
        .complete(request(str(tmp_path / "pids")))
        .text
        == text
    )
    assert at_least_s <= time.monotonic() - start < NOT_THE_TIMEOUT_S


@pytest.mark.parametrize("timeout_s", [float("inf"), 1e300], ids=["inf", "1e300"])
def test_a_timeout_too_large_for_the_clock_is_no_timeout(tmp_path: Path, timeout_s: float) -> None:
    done = plain_provider(python_cli(tmp_path / "cli", "print('4')\n")).complete(
        replace(request("x"), timeout_s=timeout_s)
    )
    assert done.text == "4"
