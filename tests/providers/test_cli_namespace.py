"""A model CLI cannot read what it was not given: in a PID namespace of its own, with its own /proc,
the environment of the run (every key in it) is out of its reach; and the run says at once whether
that holds here. The CLIs are real processes: scripts, and the real claude CLI from npm."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_fakes import (
    NOT_INSTALLED,
    REAL_CLAUDE,
    LocalAPI,
    api_message,
    plain_provider,
    python_cli,
    request,
)

from conftest import Sweep, make_spec, sim_spec
from pytest_echo_bench.providers import cli_isolation

SECRET_NAME = "ECHO_TEST_UNGIVEN_KEY"
SECRET = "sk-ungiven-0b1c2d3e4f5a6b7c8d9e"

# Looks for the variable it was not given where a process can read another's environment: its
# parent's /proc entry, then every /proc/*/environ it may read. Says what it found, never a value.
SNOOP = f'''
import os
name = b"{SECRET_NAME}="
def holds(path):
    try:
        with open(path, "rb") as f:
            return any(entry.startswith(name) for entry in f.read().split(b"\\0"))
    except OSError:
        return False
parent = holds(f"/proc/{{os.getppid()}}/environ")
others = [p for p in os.listdir("/proc") if p.isdigit() and holds(f"/proc/{{p}}/environ")]
visible = sum(p.isdigit() for p in os.listdir("/proc"))
print("parent" if parent else "none", len(others), visible)
'''


@pytest.fixture(autouse=True)
def secret_in_the_run(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # In the environment of every process started from here (set before its exec, so it is in its
    # /proc/<pid>/environ), never passed to the CLI; and a process
    # that holds it, as the run's would.
    monkeypatch.setenv(SECRET_NAME, SECRET)
    holder = subprocess.Popen(["sleep", "120"])
    try:
        yield
    finally:
        holder.kill()
        holder.wait()


def test_a_cli_finds_no_key_it_was_not_given_in_proc(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    cli = python_cli(pytester.path / "snoop", SNOOP)
    make_spec(pytester, sim_spec(1, arms=f"  cli: {{provider: command, argv: [{cli}]}}"))
    # the run's own process holds the key from its start
    result, _, rows = sweep.run(subprocess=True)
    assert len(rows) == 1, result.stdout.str()[-2000:]
    found, others, visible = rows[0]["output"].split()
    assert (found, others) == ("none", "0"), rows[0]["output"]
    assert int(visible) <= 4  # its own processes only: the host's /proc shows the whole machine
    result.stdout.fnmatch_lines(
        ["echo-bench: model CLIs run in their own PID namespace (bubblewrap)*"]
    )


def test_the_control_finds_the_key_without_a_namespace(tmp_path: Path) -> None:
    """The same script outside a namespace does find it: the tests here can fail."""
    cli = python_cli(tmp_path / "snoop", SNOOP)
    # constructed directly: no launcher
    _, others, _ = plain_provider(cli).complete(request("x")).text.split()
    assert int(others) > 0


@pytest.mark.parametrize(
    "launcher",
    range(len(cli_isolation.candidates())),
    ids=[
        " ".join(os.path.basename(c[0]) for c in [c]) + f"-{i}"
        for i, c in enumerate(cli_isolation.candidates())
    ],
)
def test_every_launcher_this_machine_has_hides_the_run(tmp_path: Path, launcher: int) -> None:
    candidate = cli_isolation.candidates()[launcher]
    if not cli_isolation.works(candidate):
        pytest.skip(f"{' '.join(candidate[:3])}... cannot make a PID namespace here")
    cli = python_cli(tmp_path / "snoop", SNOOP)
    provider = plain_provider(cli)
    provider.isolation = tuple(candidate)
    found, others, _ = provider.complete(request("x")).text.split()
    assert (found, others) == ("none", "0")


def test_an_executable_the_launcher_cannot_start_is_the_arms_error(tmp_path: Path) -> None:
    if not cli_isolation.prefix():
        pytest.skip("no PID namespace here")
    cli = python_cli(tmp_path / "cli", "print(4)\n")
    cli.chmod(0o644)
    provider = plain_provider(cli)
    provider.isolation = cli_isolation.prefix()
    from pytest_echo_bench.errors import ArmError
    with pytest.raises(ArmError, match="could not be started: Permission denied"):
        provider.complete(request("x"))


def test_a_cli_killed_by_a_signal_in_its_namespace_says_so(tmp_path: Path) -> None:
    if not cli_isolation.prefix():
        pytest.skip("no PID namespace here")
    cli = python_cli(
        tmp_path / "cli",
        "import os, signal\nprint('half', flush=True)\nos.kill(os.getpid(), signal.SIGKILL)\n",
    )
    provider = plain_provider(cli)
    provider.isolation = cli_isolation.prefix()
    from pytest_echo_bench.errors import TransientError
    with pytest.raises(TransientError, match="was killed by signal 9: half"):
        provider.complete(request("x"))


def test_a_run_without_a_namespace_says_so_on_its_first_lines(
    pytester: pytest.Pytester, sweep: Sweep, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As on a machine with neither tool (the run is in this process:
    # the probe's answer is replaced).
    monkeypatch.setattr(cli_isolation, "prefix", lambda: ())
    cli = python_cli(pytester.path / "snoop", SNOOP)
    make_spec(pytester, sim_spec(1, arms=f"  cli: {{provider: command, argv: [{cli}]}}"))
    result, _, rows = sweep.run()
    lines = result.stdout.lines
    warning = next(
        i
        for i, line in enumerate(lines)
        if "WARNING: model CLIs run without a PID namespace" in line
    )
    # before any item runs
    assert warning < next(i for i, line in enumerate(lines) if line.startswith("collected"))
    assert int(rows[0]["output"].split()[1]) > 0  # and indeed: it read the key


def test_the_lines_say_what_holds() -> None:
    assert "own PID namespace" in cli_isolation.summary_line(("/usr/bin/bwrap",))
    weaker = cli_isolation.summary_line(())
    assert (
        "WARNING" in weaker
        and "can read the environment of other processes" in weaker
        and "bubblewrap" in weaker
    )


def test_the_real_claude_cli_answers_from_its_namespace(pytester: pytest.Pytester, sweep: Sweep,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    if not REAL_CLAUDE.exists():
        pytest.skip(NOT_INSTALLED)
    with LocalAPI(200, api_message("4")) as api:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-made-up-for-127.0.0.1")
        arm = (
            "{provider: command, preset: claude, model: claude-sonnet-4-5, binary: "
            f"{REAL_CLAUDE}, "
            "env: [ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL]}"
        )
        make_spec(pytester, sim_spec(1, arms=f"  claude: {arm}", extra="timeout_s: 60\n"))
        result, _, rows = sweep.run()
    assert [r["output"] for r in rows] == ["4"], result.stdout.str()[-3000:]
    assert api.calls >= 1
    result.stdout.fnmatch_lines(["echo-bench: model CLIs run in their own PID namespace*"])
