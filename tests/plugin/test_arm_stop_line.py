"""An arm's stop is said on a line of its own, not glued to the progress characters before it."""

from __future__ import annotations

import pytest
from openai_server import FakeOpenAI

from conftest import Sweep, make_spec, sim_spec


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_an_arm_stopped_message_starts_its_own_line(
    pytester: pytest.Pytester,
    sweep: Sweep,
    openai_server: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
    workers: tuple[str, ...],
) -> None:
    # the openai arm cannot work: it stops at its first item
    monkeypatch.delenv("TEST_OPENAI_KEY", raising=False)
    arms = ("  good: {provider: sim, accuracy: 1.0}\n"
            f"  gpt:\n    provider: openai\n    model: m\n    base_url: {openai_server.base_url}\n"
            "    api_key_env: TEST_OPENAI_KEY\n")
    make_spec(pytester, sim_spec(12, arms=arms))
    result, _, rows = sweep.run(*workers, "--bench-order", "file")
    assert result.ret == 2 and {r["arm"] for r in rows} == {"good"}
    said = [line for line in result.stdout.lines if "echo-bench: arm gpt stopped" in line]
    assert said and all(line.startswith("echo-bench: arm gpt stopped") for line in said), said
