"""The item order: a seeded permutation stratified over subtasks (``plugin.order``), recorded in
the meta line and kept by resumes, shards and xdist."""

from __future__ import annotations

import json
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import Sweep, make_spec
from pytest_echo_bench.plugin.order import order_meta, ordered, stratified


def _items(sizes: list[int], arms: str = "xy", bench: str = "b") -> list[Any]:
    return [
        SimpleNamespace(
            spec=SimpleNamespace(benchmark=bench),
            example=SimpleNamespace(id=f"s{s}-{i}", subtask=f"s{s}"),
            arm=arm,
        )
        for s, n in enumerate(sizes)
        for i in range(n)
        for arm in arms
    ]


@settings(derandomize=True, database=None, max_examples=120, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=6), st.integers(0, 2**32))
def test_every_prefix_holds_each_subtask_in_proportion(sizes: list[int], seed: int) -> None:
    items = _items(sizes)
    out = stratified(items, seed)
    assert sorted(map(id, out)) == sorted(map(id, items))
    units = [i.example for i in out[::2]]
    # The arms of an item are adjacent, in collection order.
    assert all(
        a.example.id == b.example.id and (a.arm, b.arm) == ("x", "y")
        for a, b in zip(out[::2], out[1::2], strict=True)
    )
    n, strata = len(units), len(sizes)
    seen = Counter[str]()
    for k, unit in enumerate(units, 1):
        seen[unit.subtask] += 1
        for s, size in enumerate(sizes):
            share = k * size / n
            assert abs(seen[f"s{s}"] - share) <= 0.5 + strata * size / (2 * n) + 1e-9, (k, s)


def test_four_subtasks_of_a_size_stay_within_one_item_of_their_share_in_every_prefix() -> None:
    out = stratified(_items([50, 50, 50, 50], arms="x"), 0)
    seen = Counter[str]()
    for k, item in enumerate(out, 1):
        seen[item.example.subtask] += 1
        assert all(abs(seen[f"s{s}"] - k / 4) < 1 for s in range(4))


def test_the_order_is_the_seeds_alone() -> None:
    ids = [i.example.id for i in stratified(_items([30, 20]), 5)]
    assert ids == [i.example.id for i in stratified(_items([30, 20]), 5)]
    assert ids != [i.example.id for i in stratified(_items([30, 20]), 6)]
    # not the file's order
    assert ids[::2] != sorted(ids[::2], key=lambda t: (t.split("-")[0], int(t.split("-")[1])))
    assert [i.example.id for i in ordered(_items([3]), order_meta("file", 0))] == [
        i.example.id for i in _items([3])
    ]


def _spec(n: int) -> str:
    items = "\n".join(
        f'    - {{id: q{i}, input: "x{i}", target: "4", subtask: s{i % 3}}}' for i in range(n)
    )
    return (
        f"benchmark: demo\ndataset:\n  loader: inline\n  items:\n{items}\nscorer: exact\narms:\n"
        "  a: {provider: sim, accuracy: 1.0}\n  b: {provider: sim, accuracy: 0.5}\n"
    )


def _ids(rows: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(r["task_id"] for r in rows))


def test_a_sweep_runs_in_the_seeded_order_its_meta_line_records(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, _spec(30))
    result, meta, rows = sweep.run("--bench-seed", "7")
    assert result.ret == 0 and meta is not None
    assert meta["order"] == {"order": "random", "scheme": "stratified-subtask", "seed": 7}
    result.stdout.fnmatch_lines(
        ["*items in a stratified random order (seed 7; --bench-order file for file order)*"]
    )
    ids = _ids(rows)
    assert sorted(ids) == sorted(f"q{i}" for i in range(30)) and ids != [f"q{i}" for i in range(30)]
    # both arms together
    assert all(rows[2 * k]["task_id"] == rows[2 * k + 1]["task_id"] for k in range(30))
    # any prefix in proportion
    assert Counter(r["subtask"] for r in rows[:12]) == {"s0": 4, "s1": 4, "s2": 4}


def test_file_order_is_one_option_away_and_the_ini_and_env_say_it_too(
    pytester: pytest.Pytester, sweep: Sweep, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_spec(pytester, _spec(9))
    _, meta, rows = sweep.run("--bench-order", "file")
    assert (
        meta is not None
        and meta["order"] == {"order": "file"}
        and _ids(rows) == [f"q{i}" for i in range(9)]
    )
    monkeypatch.setenv("ECHO_BENCH_ORDER", "file")
    _, meta, _ = sweep.run("--bench-out", str(pytester.path / "env.jsonl"))
    assert json.loads((pytester.path / "env.jsonl").read_text().splitlines()[0])["order"] == {
        "order": "file"
    }
    monkeypatch.delenv("ECHO_BENCH_ORDER")
    pytester.makeini("[pytest]\nbench_seed = 11\n")
    sweep.run("--bench-out", str(pytester.path / "ini.jsonl"))
    assert (
        json.loads((pytester.path / "ini.jsonl").read_text().splitlines()[0])["order"]["seed"] == 11
    )


@pytest.mark.parametrize(("args", "message"), [
    (["--bench-seed", "-1"], "*--bench-seed must be a whole number*"),
    (["--bench-seed", "²"], "*--bench-seed must be a whole number*"),
    (["--bench-seed", str(2**63)], "*--bench-seed must be a whole number*"),
])
def test_a_bad_seed_is_a_usage_error(
    pytester: pytest.Pytester, sweep: Sweep, args: list[str], message: str
) -> None:
    make_spec(pytester, _spec(3))
    result, _, _ = sweep.run(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def _file_ids(path: Any) -> list[str]:
    return _ids([json.loads(line) for line in path.read_text().splitlines()[1:]])


def test_a_resume_keeps_the_order_and_seed_of_its_meta_line(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, _spec(30))
    sweep.run("--bench-seed", "3", "--bench-out", str(pytester.path / "whole.jsonl"))
    whole = _file_ids(pytester.path / "whole.jsonl")
    result, _, _ = sweep.run("--bench-seed", "3", "-k", "not q13 and not q29")
    assert result.ret == 0
    result, _, rows = sweep.run(
        "--bench-resume", str(sweep.out), "--bench-seed", "9", "-k", "q13 or q29"
    )
    assert result.ret == 0 and len(rows) == 60
    result.stdout.fnmatch_lines(
        [
            "*--bench-seed ignored: the sweep keeps the order its meta line records "
            "(random, seed 3), not random, seed 9*"
        ]
    )
    assert _ids(rows)[-2:] == [t for t in whole if t in ("q13", "q29")]


def test_xdist_workers_collect_one_order_and_a_shard_keeps_it(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, _spec(24))
    result, _, rows = sweep.run("-n", "2")
    # xdist refuses workers that collect different orders
    assert result.ret == 0 and len(rows) == 48
    sweep.run("--bench-out", str(pytester.path / "serial.jsonl"))
    sweep.run("--bench-shard", "1/2", "--bench-out", str(pytester.path / "s1.jsonl"))
    order, shard = _file_ids(pytester.path / "serial.jsonl"), _file_ids(pytester.path / "s1.jsonl")
    assert (
        sorted(_ids(rows)) == sorted(order)
        and 0 < len(shard) < 24
        and shard == [t for t in order if t in shard]
    )


@pytest.mark.parametrize(
    "order",
    [
        '"random"',
        '{"order": "shuffled"}',
        '{"order": "random", "seed": -3}',
        '{"order": "random", "seed": true}',
    ],
)
def test_a_meta_line_with_an_order_of_the_wrong_type_is_refused_naming_it(
    pytester: pytest.Pytester, sweep: Sweep, order: str
) -> None:
    make_spec(pytester, _spec(3))
    sweep.run("--bench-order", "file")
    lines = sweep.out.read_text().splitlines()
    meta = json.loads(lines[0])
    meta["order"] = json.loads(order)
    sweep.out.write_text("\n".join([json.dumps(meta), *lines[1:]]) + "\n")
    result, _, _ = sweep.run("--bench-resume", str(sweep.out))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*meta line field 'order' must be an object (order: random or file*"]
    )
