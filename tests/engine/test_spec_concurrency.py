"""A spec's top-level ``concurrency:``: calls in flight per process across all the spec's arms.

It was parsed and then ignored (the shipped ``humaneval.yaml`` sets it); now it caps the spec's
calls like ``--bench-concurrency`` does, whichever is lower, counted at a real server.
"""

from __future__ import annotations

import threading
import time

import pytest
from openai_server import FakeOpenAI

from conftest import Sweep, make_spec, sim_spec


def two_arm_spec(server: FakeOpenAI, n: int, extra: str) -> str:
    arm = (
        "    provider: openai\n    model: local-model\n"
        f"    base_url: {server.base_url}\n"
        "    api_key_env: TEST_OPENAI_KEY\n"
        "    client: http\n"
    )
    return sim_spec(n, arms=f"  a:\n{arm}  b:\n{arm}", extra="timeout_s: 10\n" + extra)


class Slow:
    """The server's answer, counting the calls it is answering at once. Counted here, before the
    reply is written: the server's own count ends after the write, when the client may already have
    started its next call in the freed slot (one call too many, seen on a quiet machine)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0

    def __call__(self, prompt: str) -> str:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(0.15)  # long enough that every call the process allows is in flight together
        with self.lock:
            self.now -= 1
        return "4"


pytestmark = pytest.mark.usefixtures("api_key")


@pytest.mark.parametrize(("spec_cap", "cli_cap", "most"), [(2, "8", 2), (8, "3", 3)])
def test_the_lower_of_the_spec_and_the_option_caps_calls_in_flight(
    pytester: pytest.Pytester,
    sweep: Sweep,
    openai_server: FakeOpenAI,
    spec_cap: int,
    cli_cap: str,
    most: int,
) -> None:
    openai_server.answer = slow = Slow()
    make_spec(pytester, two_arm_spec(openai_server, 5, f"concurrency: {spec_cap}\n"))
    result, _, rows = sweep.run("--bench-concurrency", cli_cap)
    assert result.ret == 0 and len(rows) == 10
    assert 2 <= slow.most <= most  # the cap holds, and calls still overlap


def test_without_it_only_the_option_caps(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI
) -> None:
    openai_server.answer = slow = Slow()
    make_spec(pytester, two_arm_spec(openai_server, 5, ""))
    result, _, rows = sweep.run("--bench-concurrency", "8")
    assert result.ret == 0 and len(rows) == 10
    assert slow.most > 2
