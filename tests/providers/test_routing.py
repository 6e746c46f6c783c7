"""Routing arms (cascade, oracle), the shared response cache, and pricing."""

from __future__ import annotations

import contextlib
import gc
import os
from pathlib import Path

import pytest
from openai_server import FakeOpenAI
from processes import open_descriptors

from conftest import Sweep, make_spec, sim_spec

CHEAP_STRONG = ("  cheap: {provider: sim, accuracy: 0.5}\n"
                "  strong: {provider: sim, accuracy: 1.0}\n")


def test_cascade_escalates_exactly_when_cheap_answers_disagree(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    arms = CHEAP_STRONG + "  cascade: {provider: cascade, cheap: cheap, n: 2, strong: strong}"
    make_spec(pytester, sim_spec(40, arms=arms))
    result, _, rows = sweep.run("-k", "cascade")
    assert result.ret == 0 and len(rows) == 40
    for row in rows:
        extra = row["extra"]
        agree = (
            extra["cheap_answers"][0] == extra["cheap_answers"][1]
            and extra["cheap_answers"][0] is not None
        )
        assert extra["agreed"] is agree and extra["escalated"] is (not agree)
        assert row["sub_calls"] == (2 if agree else 3)
        if extra["escalated"]:
            assert row["passed"]  # the strong arm is always right here
    escalated = sum(r["extra"]["escalated"] for r in rows)
    assert 5 < escalated < 35  # two independent draws at 0.5 disagree about half the time


def test_cascade_with_a_judge_and_personas(pytester: pytest.Pytester, sweep: Sweep) -> None:
    pytester.makeconftest("""
        from pytest_echo_bench import arm

        @arm("always_no")
        def always_no(ctx):
            assert "Do these answers reach the same final answer?" in ctx.prompt
            return "No."
    """)
    arms = CHEAP_STRONG + (
        "  judge: {provider: python, function: always_no}\n"
        "  cascade: {provider: cascade, cheap: cheap, n: 2, personas: [Be brief., Be careful.],"
        " agreement: judge, judge: judge, strong: strong}"
    )
    make_spec(pytester, sim_spec(5, arms=arms))
    result, _, rows = sweep.run("-k", "cascade")
    assert result.ret == 0
    # two cheap calls, the judge (a python arm: no model call of its own) and the strong arm
    assert all(r["extra"]["escalated"] and r["sub_calls"] == 3 and r["passed"] for r in rows)


@pytest.mark.parametrize(("accuracy", "escalations"), [(0.0, 10), (1.0, 0)])
def test_oracle_escalates_only_when_every_cheap_answer_is_wrong(
    pytester: pytest.Pytester, sweep: Sweep, accuracy: float, escalations: int
) -> None:
    arms = (
        f"  cheap: {{provider: sim, accuracy: {accuracy}}}\n  strong: {{provider: sim, "
        "accuracy: 1.0}\n"
        "  oracle: {provider: oracle, cheap: [cheap], strong: strong}"
    )
    make_spec(pytester, sim_spec(10, arms=arms))
    _, _, rows = sweep.run("-k", "oracle")
    assert sum(r["extra"]["escalated"] for r in rows) == escalations
    assert all(r["passed"] for r in rows)


def test_oracle_is_right_when_any_cheap_arm_is(pytester: pytest.Pytester, sweep: Sweep) -> None:
    arms = (
        "  a: {provider: sim, accuracy: 0.5}\n  b: {provider: sim, accuracy: 0.5}\n"
        "  strong: {provider: sim, accuracy: 0.0}\n  oracle: {provider: oracle, cheap: [a, "
        "b], strong: strong}"
    )
    make_spec(pytester, sim_spec(30, arms=arms))
    _, _, rows = sweep.run()
    by = {(r["task_id"], r["arm"]): r["passed"] for r in rows}
    for i in range(30):
        assert by[(f"q{i}", "oracle")] == (by[(f"q{i}", "a")] or by[(f"q{i}", "b")])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ("cheap: nope, strong: strong", "cheap names 'nope'"),
        ("cheap: cheap", "strong must name an arm"),
        ("cheap: cheap, strong: strong, agreement: vibes", "agreement must be lexical or judge"),
        ("cheap: cheap, strong: strong, agreement: judge", "judge must name an arm"),
        ("cheap: cheap, strong: strong, speed: 2", "unknown cascade option 'speed'"),
    ],
)
def test_bad_cascade_specs_name_the_place(
    pytester: pytest.Pytester, sweep: Sweep, options: str, message: str
) -> None:
    make_spec(
        pytester, sim_spec(2, arms=CHEAP_STRONG + f"  cascade: {{provider: cascade, {options}}}")
    )
    result, _, _ = sweep.run()
    result.stdout.fnmatch_lines([f"*demo.yaml:*arms.cascade*{message}*"])


def openai_arms(server: FakeOpenAI) -> str:
    return (
        "".join(
            f"  {name}:\n    provider: openai\n    client: http\n    model: {model}\n    "
            f"base_url: {server.base_url}\n"
            "    api_key_env: null\n"
            for name, model in (("small", "small-model"), ("big", "big-model"))
        )
        + "  cascade: {provider: cascade, cheap: small, n: 2, strong: big}\n"
    )


def test_cache_shares_answers_with_sub_arms_and_makes_reruns_free(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    with FakeOpenAI(lambda prompt: "4") as server:
        pricing = (
            "pricing:\n  small: {input: 1.0, output: 2.0}\n  big: {input: 10.0, output: 20.0}\n"
            "  unit: {arm: big, prompt_tokens: 1000, completion_tokens: 0}\n"
        )
        make_spec(pytester, sim_spec(5, arms=openai_arms(server), extra=pricing))
        cache = pytester.path / "cache.sqlite"
        result, _, rows = sweep.run("--bench-cache", str(cache), "--bench-concurrency", "1")
        assert result.ret == 0
        # small 5 + big 5 + cascade 5 x (sample 0: small's answer, a hit; sample 1: a call) = 15
        assert len(server.requests) == 15
        cascade = [r for r in rows if r["arm"] == "cascade"]
        assert all(
            r["cache_hits"] == 1 and r["sub_calls"] == 2 and not r["extra"]["escalated"]
            for r in cascade
        )
        small = next(r for r in rows if r["arm"] == "small")
        tokens = small["usage"]["prompt_tokens"] * 1.0 + small["usage"]["completion_tokens"] * 2.0
        assert small["cost_usd"] == pytest.approx(tokens / 1e6)
        assert small["cost_units"] == pytest.approx(small["cost_usd"] / (1000 * 10.0 / 1e6))
        # list price, cached or not
        assert cascade[0]["cost_usd"] == pytest.approx(2 * small["cost_usd"])
        sweep.out.unlink()
        result, _, again = sweep.run("--bench-cache", str(cache))
        assert result.ret == 0 and len(server.requests) == 15  # the re-run asked nothing
        assert all(
            r["cache_hits"] >= 1 and r["attempts"] == 0 for r in again if r["arm"] != "cascade"
        )
        sweep.out.unlink()
        result, _, _ = sweep.run("--bench-cache", "off")
        assert len(server.requests) == 15 + 20  # no cache: the cascade asks both samples itself


def sockets_to(port: int) -> set[str]:
    """The ``socket:[inode]`` of every TCP connection on this
    machine whose remote end is ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in list(f)[1:]:
                fields = line.split()
                if int(fields[2].rsplit(":", 1)[1], 16) == port:
                    found.add(f"socket:[{fields[9]}]")
    return found


@pytest.mark.skipif(
    not Path("/proc/net/tcp").exists(),
    reason="lists this process's descriptors and sockets in /proc",
)
@pytest.mark.parametrize("client", ["http", "sdk"])
@pytest.mark.parametrize("concurrency", ["1", "4"])
def test_a_run_closes_its_connections_to_the_server_and_the_cache(
    pytester: pytest.Pytester, sweep: Sweep, concurrency: str, client: str
) -> None:
    # Each calling thread opens its own connection to the server and to the cache (the file, its WAL
    # and shared memory), which only the cycle collector closed: a long session of in-process runs
    # kept dozens of descriptors. With the collector off, what is open after the run, the run left.
    cache_dir = pytester.path / "cache"
    with FakeOpenAI(lambda prompt: "4") as server:
        make_spec(
            pytester,
            sim_spec(8, arms=openai_arms(server).replace("client: http", f"client: {client}")),
        )
        gc.collect()
        gc.disable()
        try:
            result, _, rows = sweep.run(
                "--bench-cache", str(cache_dir / "c.sqlite"), "--bench-concurrency", concurrency
            )
            left = open_descriptors()
            to_server = sockets_to(server.httpd.server_address[1])
        finally:
            gc.enable()
    assert result.ret == 0 and len(rows) == 24
    assert [t for t in left if t.startswith(f"{cache_dir}{os.sep}")] == []
    assert [t for t in left if t in to_server] == []


def test_cache_is_shared_by_xdist_workers(pytester: pytest.Pytester, sweep: Sweep) -> None:
    with FakeOpenAI(lambda prompt: "4") as server:
        make_spec(pytester, sim_spec(12, arms=openai_arms(server)))
        cache = pytester.path / "cache.sqlite"
        result, _, rows = sweep.run("-n", "2", "--bench-cache", str(cache))
        assert result.ret == 0 and {r["worker"] for r in rows} == {"gw0", "gw1"}
        first = len(server.requests)
        # small + big + the cascade's second samples; its first samples are small's answers unless
        # both asks were in flight at once (workers race: the cache saves what it can, never lies)
        assert 36 <= first <= 48
        sweep.out.unlink()
        result, _, again = sweep.run("-n", "2", "--bench-cache", str(cache))
        assert result.ret == 0 and len(again) == 36
        assert len(server.requests) == first  # the other run's answers, from the shared file
