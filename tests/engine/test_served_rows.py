"""What a sweep's rows record of what served them and what they asked: the served model and
fingerprint (an item's own call, a composite arm's calls, a cached answer) and the item's digest
(the same in two runs, changed by a changed item)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai_server import FakeOpenAI

from conftest import Sweep, inline_items, make_spec, sim_spec
from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.engine.fingerprint import item_digest

pytestmark = pytest.mark.usefixtures("api_key")


def independent_digest(item_id: str, text: str, target: str, subtask: str | None = None,
                       metadata: dict[str, Any] | None = None) -> str:
    """The item digest as the results docs define it, written apart from the engine's."""
    item = {"id": item_id, "input": text, "target": target, "subtask": subtask,
            "metadata": metadata or {}}
    canonical = json.dumps(item, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def openai_arm(name: str, server: FakeOpenAI, model: str) -> str:
    return (f"  {name}: {{provider: openai, model: {model}, client: http, "
            f"base_url: '{server.base_url}', api_key_env: TEST_OPENAI_KEY}}\n")


def test_a_sweep_records_the_digest_of_each_item_and_the_served_model_where_known(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI
) -> None:
    openai_server.answer = lambda prompt: "4"
    openai_server.fingerprint = "fp_1"
    arms = openai_arm("gpt", openai_server, "gpt-m") + "  sim: {provider: sim, accuracy: 1.0}\n"
    make_spec(pytester, sim_spec(4, arms=arms))
    result, _, rows = sweep.run("--bench-cache", "off")
    result.assert_outcomes(passed=8)
    for row in rows:
        i = int(row["task_id"][1:])
        assert row["item_sha256"] == independent_digest(f"q{i}", f"2+2=? ({i})", "4")
        if row["arm"] == "gpt":
            assert (row["served_model"], row["served_fingerprint"]) == ("gpt-m", "fp_1")
        else:  # the simulator names no model: nothing recorded, never a guess
            assert "served_model" not in row and "served_fingerprint" not in row


def test_the_same_item_has_the_same_digest_in_two_runs_and_a_changed_input_another(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, sim_spec(3))
    _, _, first = sweep.run()
    sweep.out = pytester.path / "again.jsonl"
    _, _, again = sweep.run()
    changed = inline_items(3).replace("2+2=? (1)", "2+2=? (one)")
    make_spec(pytester, sim_spec(3).replace(inline_items(3), changed))
    sweep.out = pytester.path / "changed.jsonl"
    _, _, third = sweep.run()

    def digests(rows: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
        return {(r["task_id"], r["arm"]): r["item_sha256"] for r in rows}

    assert digests(first) == digests(again) and len(digests(first)) == 6
    differ = {key for key, value in digests(third).items() if digests(first)[key] != value}
    assert differ == {("q1", "good"), ("q1", "bad")}
    # the arms of one item asked the same item
    assert len({digests(first)[("q0", arm)] for arm in ("good", "bad")}) == 1


EXAMPLES = st.builds(
    Example, st.text(max_size=10), st.text(max_size=30), st.text(max_size=5),
    st.one_of(st.none(), st.text(max_size=5)),
    st.dictionaries(st.text(max_size=5), st.one_of(st.integers(), st.text(max_size=5),
                                                   st.lists(st.integers(), max_size=3))),
)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(example=EXAMPLES, other=EXAMPLES)
def test_the_digest_is_the_canonical_json_of_the_item_and_tells_items_apart(
    example: Example, other: Example
) -> None:
    assert item_digest(example) == independent_digest(
        example.id, example.input, example.target, example.subtask, dict(example.metadata))
    same = (example.id, example.input, example.target, example.subtask, example.metadata) == (
        other.id, other.input, other.target, other.subtask, other.metadata)
    assert (item_digest(example) == item_digest(other)) is same


def test_metadata_key_order_does_not_change_the_digest() -> None:
    a = Example("q", "x", "y", None, {"a": 1, "b": [1, 2]})
    b = Example("q", "x", "y", None, {"b": [1, 2], "a": 1})
    assert item_digest(a) == item_digest(b)
    assert item_digest(a) != item_digest(Example("q", "x", "y", "sub", {"a": 1, "b": [1, 2]}))


def test_a_composite_arm_records_its_calls_served_models_each_once(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI
) -> None:
    openai_server.answer = lambda prompt: "4"
    pytester.makeconftest("""
        from pytest_echo_bench import arm

        @arm("both")
        def both(ctx):
            ctx.call("small"), ctx.call("small", "again: " + ctx.prompt)
            return ctx.call("big")
    """)
    arms = (openai_arm("small", openai_server, "small-m")
            + openai_arm("big", openai_server, "big-m")
            + "  both: {provider: python, function: both}\n"
            + "  cascade: {provider: cascade, cheap: small, n: 2, strong: big}\n")
    make_spec(pytester, sim_spec(3, arms=arms))
    result, _, rows = sweep.run("--bench-cache", "off", "-k", "both or cascade")
    assert result.ret == 0, result.stdout.str()
    served = {(r["arm"], r["served_model"]) for r in rows}
    # the cascade's two cheap answers agree ("4"): it never asks the strong arm
    assert served == {("both", "small-m, big-m"), ("cascade", "small-m")}


def test_a_cached_answer_records_the_model_that_served_it_and_an_older_cache_none(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI
) -> None:
    openai_server.answer = lambda prompt: "4"
    openai_server.served_model, openai_server.fingerprint = "m-1", "fp_1"
    make_spec(pytester, sim_spec(3, arms=openai_arm("gpt", openai_server, "gpt-m")))
    cache = pytester.path / "cache.sqlite"
    sweep.run("--bench-cache", str(cache))
    asked = len(openai_server.requests)
    openai_server.served_model, openai_server.fingerprint = "m-2", "fp_2"

    sweep.out = pytester.path / "cached.jsonl"
    _, _, cached = sweep.run("--bench-cache", str(cache))
    assert len(openai_server.requests) == asked  # every answer from the cache
    assert {(r["cache_hits"], r["served_model"], r["served_fingerprint"]) for r in cached} == {
        (1, "m-1", "fp_1")}

    # A cache file made before it kept what served an answer: the answer is used, its served
    # model unknown (never today's guess), and the file takes the new columns.
    older = pytester.path / "older.sqlite"
    made_before(cache, older)
    sweep.out = pytester.path / "from_older.jsonl"
    _, _, from_older = sweep.run("--bench-cache", str(older))
    assert len(openai_server.requests) == asked
    assert all(r["cache_hits"] == 1 and "served_model" not in r for r in from_older)
    assert all("served_fingerprint" not in r for r in from_older)
    assert {"served_model", "served_fingerprint"} <= columns(older)


def made_before(cache: Path, older: Path) -> None:
    """``cache``'s answers in a file of the layout before the served columns."""
    db = sqlite3.connect(older)
    db.execute("CREATE TABLE responses (key TEXT PRIMARY KEY, text TEXT NOT NULL, usage TEXT)")
    db.execute("ATTACH DATABASE ? AS new", (str(cache),))
    db.execute("INSERT INTO responses SELECT key, text, usage FROM new.responses")
    db.commit()
    db.close()
    assert columns(older) == {"key", "text", "usage"}


def columns(path: Path) -> set[str]:
    db = sqlite3.connect(path)
    try:
        return {row[1] for row in db.execute("PRAGMA table_info(responses)")}
    finally:
        db.close()
