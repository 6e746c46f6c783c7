"""The claude preset's reading of the CLI's output, and what a command call's own failures mean.

The texts are the real CLI's: 2.1.332 as it printed them here (not logged in, and against a local
server answering with the API's errors), and older wordings as users reported them.
"""

from __future__ import annotations

import errno
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from cli_fakes import SCRIPTED, claude_provider, request, result, scripted, write_executable

from pytest_echo_bench.errors import (
    ArmError,
    ExhaustedError,
    LocalError,
    PermanentError,
    ProviderError,
    TransientError,
)
from pytest_echo_bench.providers.claude_cli import LOGIN_HINT, MODEL_HINT, read, resume_at

BERLIN = ZoneInfo("Europe/Berlin")
NOW = datetime(2026, 12, 1, 11, 0, tzinfo=BERLIN)  # 10:00 UTC


def at(zone: str, year: int, month: int, day: int, hour: int, minute: int = 0) -> float:
    return datetime(year, month, day, hour, minute, tzinfo=ZoneInfo(zone)).timestamp()


@pytest.mark.parametrize(
    "out, rc, kind, hint",
    [
        (result("Not logged in \u00b7 Please run /login", is_error=True), 1, ArmError, LOGIN_HINT),
        ("Not logged in \u00b7 Please run /login\n", 1, ArmError, LOGIN_HINT),
        ("Not logged in \u00b7 Please run /login\n", 0, ArmError, LOGIN_HINT),
        (
            result("Invalid API key \u00b7 Fix external API key", is_error=True, status=401),
            1,
            ArmError,
            LOGIN_HINT,
        ),
        (result("Invalid API key \u00b7 Please run /login", status=None), 0, ArmError, LOGIN_HINT),
        (
            result(
                "Failed to authenticate. API Error: 401 OAuth token has expired.",
                is_error=True,
                status=401,
            ),
            1,
            ArmError,
            LOGIN_HINT,
        ),
        (
            result(
                "Failed to authenticate. API Error: 403 Your API key does not have "
                "permission to use the specified resource.",
                is_error=True,
                status=403,
            ),
            1,
            ArmError,
            LOGIN_HINT,
        ),
        (
            result(
                "There's an issue with the selected model (claude-x). It may not exist or "
                "you may not have access to it.",
                is_error=True,
                status=404,
            ),
            1,
            ArmError,
            MODEL_HINT,
        ),
        (
            result(
                "API Error: 529 Overloaded. This is a server-side issue, usually temporary",
                is_error=True,
                status=529,
            ),
            1,
            TransientError,
            None,
        ),
        (
            result(
                "API Error: 500 Internal server error. This is a server-side issue, usually "
                "temporary",
                is_error=True,
                status=500,
            ),
            1,
            TransientError,
            None,
        ),
        (
            result(
                "API Error: Request rejected (429) \u00b7 Number of request tokens has "
                "exceeded your per-minute rate limit",
                is_error=True,
                status=429,
            ),
            1,
            TransientError,
            None,
        ),
        # anthropics/claude-code#79500
        (result("API Error: Rate limit reached", is_error=True), 0, TransientError, None),
        (result(None, is_error=True, subtype="error_during_execution"), 1, TransientError, None),
        ("", -9, TransientError, None),
        (result("Credit balance is too low", is_error=True, status=400), 1, ExhaustedError, None),
        (
            result(
                "API Error: 400 There is an issue with your account's payment method.",
                is_error=True,
                status=400,
            ),
            1,
            ExhaustedError,
            None,
        ),
        (result("Prompt is too long", is_error=True, status=400), 1, PermanentError, None),
    ],
    ids=[
        "not-logged-in",
        "not-logged-in-text",
        "not-logged-in-exit0",
        "bad-key",
        "bad-key-exit0",
        "oauth-expired",
        "403",
        "404-model",
        "529",
        "500",
        "429",
        "rate-limit-exit0",
        "error-subtype",
        "killed",
        "credit",
        "billing",
        "too-long",
    ],
)
def test_failures_are_classified_by_text_and_status(
    out: str, rc: int, kind: type[ProviderError], hint: str | None
) -> None:
    with pytest.raises(kind) as caught:
        read("claude", rc, out, "")
    assert type(caught.value) is kind
    if hint is not None:
        assert isinstance(caught.value, ArmError) and caught.value.hint == hint


def test_a_refused_connection_is_the_arms_until_it_has_answered() -> None:
    out = result(
        "API Error: Connection refused \u2014 a firewall or proxy may be blocking it "
        "(ECONNREFUSED)",
        is_error=True,
    )
    with pytest.raises(ArmError) as caught:
        read("claude", 1, out, "")
    assert isinstance(caught.value.fallback, TransientError)


@pytest.mark.parametrize("rc", [0, 1])
@pytest.mark.parametrize(
    "text",
    [
        "Claude AI usage limit reached|1767225600",
        "5-hour limit reached \u2219 resets 3pm",
        "You've hit your limit \u00b7 resets 1pm",
        "You\u2019ve hit your session limit \u00b7 resets 1:30pm (Europe/Berlin)",
        "You've hit your weekly limit \u00b7 resets Jan 30, 11:30am (Asia/Calcutta)",
        "Claude usage limit reached. Your limit will reset at 5pm (Europe/Warsaw).",
    ],
)
@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_a_usage_limit_is_never_an_answer(text: str, rc: int, as_json: bool) -> None:
    out = result(text, is_error=bool(rc)) if as_json else text + "\n"
    with pytest.raises(ExhaustedError) as caught:
        read("claude", rc, out, "")
    assert caught.value.resume_at is not None


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Claude AI usage limit reached|1767225600", 1767225600.0),
        (
            "You've hit your limit \u00b7 resets 1pm (Europe/Berlin)",
            at("Europe/Berlin", 2026, 12, 1, 13),
        ),
        (
            "You've hit your session limit \u00b7 resets 1:30pm (Europe/Berlin)",
            at("Europe/Berlin", 2026, 12, 1, 13, 30),
        ),
        # passed: tomorrow
        (
            "You've hit your limit \u00b7 resets 10am (Europe/Berlin)",
            at("Europe/Berlin", 2026, 12, 2, 10),
        ),
        # just reset
        (
            "You've hit your limit \u00b7 resets 10:58am (Europe/Berlin)",
            at("Europe/Berlin", 2026, 12, 1, 10, 58),
        ),
        (
            "You've hit your session limit \u00b7 resets 8:30pm (Asia/Tokyo)",
            at("Asia/Tokyo", 2026, 12, 1, 20, 30),
        ),
        (
            "You've hit your session limit \u00b7 resets 12:50am (America/Los_Angeles)",
            at("America/Los_Angeles", 2026, 12, 2, 0, 50),
        ),
        (
            "You've hit your limit \u00b7 resets Jan 30, 11:30am (Asia/Calcutta)",
            at("Asia/Calcutta", 2027, 1, 30, 11, 30),
        ),
        (
            "Claude usage limit reached. Your limit will reset at 5pm (Europe/Warsaw).",
            at("Europe/Warsaw", 2026, 12, 1, 17),
        ),
        # local time (TZ below)
        ("5-hour limit reached \u2219 resets 3pm", at("America/New_York", 2026, 12, 1, 15)),
        ("You've hit your limit \u00b7 resets 1pm (Mars/Olympus_Mons)", None),
        ("You've hit your limit \u00b7 resets 13pm", None),
        ("You've hit your limit \u00b7 resets in 2h", None),
        ("You've hit your limit", None),
    ],
)
def test_resume_at_is_the_next_time_the_cli_names(
    text: str, expected: float | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        assert resume_at(text, now=NOW) == expected
    finally:
        monkeypatch.undo()
        time.tzset()


def test_resume_at_keeps_the_wall_clock_across_a_dst_change() -> None:
    saturday = datetime(2026, 10, 24, 14, 0, tzinfo=BERLIN)  # clocks go back in the night
    assert resume_at("resets 1pm (Europe/Berlin)", now=saturday) == at(
        "Europe/Berlin", 2026, 10, 25, 13
    )


def test_answers_and_their_usage_come_from_the_result_object() -> None:
    usage = {
        "input_tokens": 11,
        "output_tokens": 2,
        "cache_read_input_tokens": 5000,
        "cache_creation_input_tokens": 0,
    }
    done = read("claude", 0, result("4", usage=usage), "")
    assert done.text == "4" and done.cost_usd is None
    # The cache's reads counted in the input billed, and kept apart to be priced as they are.
    assert done.usage == {
        "prompt_tokens": 5011,
        "completion_tokens": 2,
        "cache_read_tokens": 5000,
    }


@pytest.mark.parametrize("out, text", [
    ("4\n", "4"),
    (result("The log said 'usage limit reached' twice, so the answer is 4."),
     "The log said 'usage limit reached' twice, so the answer is 4."),
], ids=["plain-text", "an-answer-that-mentions-a-limit"])
def test_an_answer_is_an_answer(out: str, text: str) -> None:
    assert read("claude", 0, out, "").text == text


@pytest.fixture
def scripted_claude(tmp_path: Path) -> Path:
    return write_executable(tmp_path / "bin" / "claude", SCRIPTED)


@pytest.mark.parametrize("rc", [0, 1])
def test_a_limit_with_either_exit_status_stops_the_run_through_a_real_process(
    scripted_claude: Path, rc: int
) -> None:
    prompt = scripted(
        result("You've hit your limit \u00b7 resets 1pm (Europe/Berlin)", is_error=bool(rc)), rc
    )
    with pytest.raises(ExhaustedError) as caught:
        claude_provider(scripted_claude).complete(request(prompt))
    assert caught.value.resume_at is not None


def test_an_executable_gone_since_the_arm_was_built_is_the_arms_error(
    scripted_claude: Path,
) -> None:
    provider = claude_provider(scripted_claude)
    scripted_claude.unlink()
    with pytest.raises(ArmError, match="could not be started: No such file or directory") as caught:
        provider.complete(request(scripted()))
    assert "binary:" in caught.value.hint


def test_an_executable_that_cannot_be_executed_is_the_arms_error(scripted_claude: Path) -> None:
    scripted_claude.chmod(0o644)
    with pytest.raises(ArmError, match="Permission denied"):
        claude_provider(scripted_claude).complete(request(scripted()))


def test_a_missing_interpreter_is_the_arms_error(tmp_path: Path) -> None:
    broken = write_executable(tmp_path / "claude", "#!/no/such/interpreter\n")
    with pytest.raises(ArmError, match="No such file or directory"):
        claude_provider(broken).complete(request(scripted()))


# Run in a child: lowering its own open-file limit would break the test session.
TOO_MANY_OPEN_FILES = """
import os, resource, sys
from pathlib import Path
from cli_fakes import claude_provider, request, scripted
provider = claude_provider(Path(sys.argv[1]))
free = len(os.listdir("/proc/self/fd")) + 1  # one more descriptor: too few for the call's pipes
resource.setrlimit(resource.RLIMIT_NOFILE, (free, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
try:
    provider.complete(request(scripted("4")))
except Exception as exc:
    print(type(exc).__name__, exc)
"""


def test_too_many_open_files_is_a_local_error(scripted_claude: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", TOO_MANY_OPEN_FILES, str(scripted_claude)],
        cwd=Path(__file__).parents[1],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        done.stdout.startswith("LocalError ")
        and "EMFILE" in done.stdout
        and "ulimit -n" in done.stdout
    ), done


def test_a_full_disk_for_the_temporary_directory_is_a_local_error(
    scripted_claude: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(*args: object, **kwargs: object) -> str:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tempfile, "mkdtemp", full)
    with pytest.raises(LocalError, match="ENOSPC"):
        claude_provider(scripted_claude).complete(request(scripted("4")))
