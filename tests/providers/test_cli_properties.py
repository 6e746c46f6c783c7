"""Generated model-CLI behaviours, each a real Python child: the command
provider's boundary holds for all.

What a CLI may do: print any bytes (NUL, invalid UTF-8, control characters) of any size up to
a few times the cap, write noise on stderr, close stdout early, wait, exit with any status or die
by a signal, leave a helper holding its pipes. Whatever it does, the call raises nothing outside
the error tree, keeps its output as printed (up to the cap), leaves no process behind and ends in
bounded time.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from cli_fakes import ECHOES_HEX, all_dead, claude_provider, plain_provider, python_cli, request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_echo_bench.errors import EchoBenchError, PermanentError, ProviderError, TransientError
from pytest_echo_bench.providers.base import Completion

# The behaviour comes in a JSON file named on stdin: the CLI reads its prompt as a real one does.
BEHAVES = '''
import json, os, subprocess, sys, time
b = json.load(open(sys.stdin.read()))
if b["helper"]:
    helper = subprocess.Popen(["sleep", "300"])  # inherits stdout and stderr, outlives the CLI
    open(b["pids"], "w").write(str(helper.pid))
out, err = bytes.fromhex(b["out"]) * b["times"], bytes.fromhex(b["err"]) * b["err_times"]
half = len(out) // 2
os.write(1, out[:half]) if half else None
sys.stderr.buffer.write(err)
sys.stderr.flush()
sys.stdout.buffer.write(out[half:])
sys.stdout.flush()
if b["close_early"]:
    os.close(1)
time.sleep(b["delay"])
if b["signal"]:
    os.kill(os.getpid(), b["signal"])
sys.exit(b["rc"])
'''
GRACE_S = 0.5
SLACK_S = 15.0  # interpreter start-up on a busy two-core machine, far under the 60 s timeout

behaviours = st.fixed_dictionaries({
    "out": st.binary(max_size=48).map(bytes.hex),
    "times": st.sampled_from([1, 1, 3, 200, 3000]),  # up to ~140 KB: more than a pipe holds
    "err": st.binary(max_size=32).map(bytes.hex),
    "err_times": st.sampled_from([0, 1, 2000]),
    "rc": st.sampled_from([0, 0, 0, 1, 2, 127]),
    "signal": st.sampled_from([0, 0, 0, 9, 15]),
    "delay": st.sampled_from([0.0, 0.0, 0.1]),
    "close_early": st.booleans(),
    "helper": st.sampled_from([False, False, True]),
    "cap": st.sampled_from([16, 1000, 70_000]),
    "preset": st.sampled_from([False, False, True]),
})


def _call(tmp: Path, b: dict[str, Any]) -> tuple[Completion | BaseException, float]:
    cli = python_cli(tmp / "cli", BEHAVES)
    (tmp / "b.json").write_text(json.dumps({**b, "pids": str(tmp / "pids")}))
    provider = claude_provider(cli) if b["preset"] else plain_provider(cli)
    provider.max_output_bytes = b["cap"]
    start = time.monotonic()
    try:
        outcome: Completion | BaseException = provider.complete(request(str(tmp / "b.json")))
    except BaseException as exc:  # noqa: BLE001 - what escapes is what the property judges
        outcome = exc
    return outcome, time.monotonic() - start


def _check_plain(b: dict[str, Any], outcome: Completion | BaseException) -> None:
    printed = bytes.fromhex(b["out"]) * b["times"]
    if b["rc"] != 0 or b["signal"]:
        how = f"killed by signal {b['signal']}" if b["signal"] else f"exited with status {b['rc']}"
        assert isinstance(outcome, TransientError) and how in str(outcome), outcome
        return
    assert isinstance(outcome, Completion), outcome
    dropped = outcome.extra.get("output_dropped_bytes", 0)
    kept = len(printed) - dropped
    if len(printed) <= b["cap"]:
        assert dropped == 0 and outcome.extra == {}
    else:  # cut at the cap, or up to 3 bytes before it where a character would be cut in half
        assert b["cap"] - 3 <= kept <= b["cap"] and outcome.extra["output_truncated"] is True
        # and never inside a character: what is kept reads as the start of what was printed
        assert printed.decode("utf-8", "replace").startswith(
            printed[:kept].decode("utf-8", "replace")
        )
    assert outcome.text == printed[:kept].decode("utf-8", "replace").strip()


def check(tmp: Path, b: dict[str, Any]) -> None:
    outcome, took = _call(tmp, b)
    assert not isinstance(outcome, BaseException) or isinstance(outcome, EchoBenchError), repr(
        outcome
    )
    assert took < b["delay"] + GRACE_S + SLACK_S, took
    if b["helper"]:
        assert all_dead([int((tmp / "pids").read_text())])
    if b["preset"]:
        assert isinstance(outcome, (Completion, ProviderError)), outcome
    else:
        _check_plain(b, outcome)


@settings(max_examples=30, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(b=behaviours)
def test_any_cli_behaviour_stays_inside_the_boundary(
    tmp_path_factory: pytest.TempPathFactory, b: dict[str, Any]
) -> None:
    check(tmp_path_factory.mktemp("cli"), b)


def quiet(**changes: Any) -> dict[str, Any]:
    base = {
        "out": b"4".hex(),
        "times": 1,
        "err": "",
        "err_times": 0,
        "rc": 0,
        "signal": 0,
        "delay": 0.0,
        "close_early": False,
        "helper": False,
        "cap": 1000,
        "preset": False,
    }
    return {**base, **changes}


@pytest.mark.parametrize(
    "b",
    [
        quiet(out=b"\x00\xff\x1b[0m\xc3".hex(), times=3000, cap=16, helper=True),
        quiet(out=b"\xe2\x82\xac".hex(), times=400, cap=1000, close_early=True, delay=0.1),
        quiet(out=b"\xf0\x9f\x98\x80".hex(), times=5, cap=16, preset=True),
        quiet(err=b"noise\n".hex(), err_times=2000, rc=1, helper=True),
        quiet(signal=9, close_early=True),
    ],
    ids=[
        "binary-cut-with-helper",
        "euro-cut-closed-early",
        "preset-cut",
        "noisy-failure-with-helper",
        "killed",
    ],
)
def test_chosen_cli_behaviours_stay_inside_the_boundary(tmp_path: Path, b: dict[str, Any]) -> None:
    check(tmp_path, b)


# Any text a dataset can hold, lone surrogates included (JSON can spell them).
prompts = st.text(st.characters(exclude_categories=()), max_size=40)


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompt=prompts, mode=st.sampled_from(["stdin", "arg"]))
def test_any_prompt_reaches_the_cli_as_its_bytes_or_is_that_items_error(
    tmp_path_factory: pytest.TempPathFactory, prompt: str, mode: str
) -> None:
    tmp = tmp_path_factory.mktemp("prompt")
    provider = plain_provider(python_cli(tmp / "cli", ECHOES_HEX), prompt=mode)
    try:
        done = provider.complete(request(prompt))
    except PermanentError as exc:
        assert "cannot be given this prompt" in str(exc)
        assert any(0xD800 <= ord(c) <= 0xDFFF for c in prompt) or (
            mode == "arg" and "\x00" in prompt
        )
        return
    assert bytes.fromhex(done.text) == prompt.encode("utf-8", "surrogateescape")
