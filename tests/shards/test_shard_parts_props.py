"""Generated sets of shard files (shard K of N, which of its items each holds, how each run of it
ended), merged and reported in any order: whether the sweep is complete, and whether its fixed-n
figures are valid, never depend on the order and never claim more than the files hold."""

from __future__ import annotations

import itertools
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_echo_bench.report.figures import build_report, load_results
from pytest_echo_bench.results.ending import before_resume, collection
from pytest_echo_bench.results.merge import merge
from pytest_echo_bench.shards.partition import shard_of
from pytest_echo_bench.store.files import encode_line, end_line
from pytest_echo_bench.store.writer import write_whole

ARMS = ("a", "b")
PLAN = {"pairs": [["demo", "a", "b"]], "alpha": 0.05, "margin": 0.0}
# how one run of a file ended (None: to its end, no end line)
STOPS = (None, "decided", "exhausted", "pytest")


def owned(n: int, count: int) -> dict[int, list[str]]:
    """``count`` task ids of each shard of ``n``."""
    found: dict[int, list[str]] = {k: [] for k in range(1, n + 1)}
    for i in itertools.count():
        task = f"t{i}"
        mine = found[shard_of(("demo", task, "", 1), n)]
        if len(mine) < count:
            mine.append(task)
        if all(len(v) == count for v in found.values()):
            return found
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Spec:
    """One shard file: its shard, which of the shard's items it holds,
    and how each of its runs ended."""

    k: int
    held: frozenset[int]
    runs: tuple[str | None, ...]
    plan: bool


def meta(k: int, n: int, items: int, plan: bool, run: int) -> dict[str, Any]:
    return {
        "_meta": True,
        "benchmark": "demo",
        "benchmarks": {"demo": {"fingerprint": "f", "items": items * n * 2}},
        "spec_files": [],
        "fingerprint": "f",
        "arms": {"demo": list(ARMS)},
        "selection": {"args": [], "keyword": "", "markexpr": "", "shard": f"{k}/{n}"},
        "run_id": f"r{run}",
        "plugin_version": "0",
        "created_at": "",
        "shard_scheme": 2,
        "shard_items": items * len(ARMS),
        **({"decide": PLAN} if plan else {}),
    }


def write(
    path: Path, spec: Spec, n: int, tasks: dict[int, list[str]], items: int, index: int
) -> Path:
    """The file, written run by run: each run appends a share of its rows, then its end
    line as a run writes it (``plugin.ending``: after a stop, or a resume that ran after
    one), carrying a decided stop."""
    path.write_bytes(encode_line(meta(spec.k, n, items, spec.plan, index)))
    rows = [
        encode_line(
            {
                "task_id": tasks[spec.k][i],
                "arm": arm,
                "passed": arm == "a",
                "detail": "",
                "benchmark": "demo",
                "status": "correct" if arm == "a" else "wrong",
                "wall_seconds": 0.1,
                "sub_calls": 1,
            }
        )
        for i in sorted(spec.held)
        for arm in ARMS
    ]
    share = -(-len(rows) // len(spec.runs)) if rows else 0
    for run, stop in enumerate(spec.runs):
        size = path.stat().st_size
        before = before_resume(path, size)
        with open(path, "ab") as f:
            f.write(b"".join(rows[run * share:(run + 1) * share]))
            if stop is not None or (run and before.early):
                f.write(
                    end_line(
                        f"r{index}-{run}",
                        "",
                        {"reason": stop} if stop else None,
                        before.decided_text,
                    )
                )
    return path


files_of = st.integers(1, 3).flatmap(
    lambda n: st.tuples(
        st.just(n),
        st.integers(0, 3),
        st.lists(
            st.builds(
                Spec,
                st.integers(1, n),
                st.frozensets(st.integers(0, 2), max_size=3),
                st.lists(st.sampled_from(STOPS), min_size=1, max_size=3).map(tuple),
                st.booleans(),
            ),
            min_size=1,
            max_size=4,
        ),
    )
)


@settings(derandomize=True, database=None, deadline=None, max_examples=60)
@given(case=files_of, order=st.randoms(use_true_random=False))
def test_completeness_and_validity_are_order_independent_and_never_claim_more(
    case: Any, order: Any
) -> None:
    n, items, specs = case
    specs = [Spec(s.k, frozenset(i for i in s.held if i < items), s.runs, s.plan) for s in specs]
    tasks = owned(n, max(items, 1))
    with tempfile.TemporaryDirectory() as tmp:
        paths = [
            write(Path(tmp) / f"s{i}.jsonl", s, n, tasks, items, i) for i, s in enumerate(specs)
        ]
        # What the files hold: a shard is whole when the union of its files' items is all of them.
        union = {k: set().union(*(s.held for s in specs if s.k == k)) for k in {s.k for s in specs}}
        complete = all(k in union and len(union[k]) == items for k in range(1, n + 1))
        unfinished = [f"{k}/{n}" for k in sorted(union) if len(union[k]) < items]
        decided = any(stop == "decided" for s in specs for stop in s.runs)
        planned = any(s.plan for s in specs)
        shuffled = list(paths)
        order.shuffle(shuffled)
        for given_paths in (paths, shuffled):
            merged = merge(given_paths)
            assert (merged.coverage.complete, merged.coverage.unfinished) == (complete, unfinished)
            report = build_report(load_results(given_paths), ended=collection(given_paths))
            assert (report.coverage.complete, report.coverage.unfinished) == (complete, unfinished)
            assert (report.sequential is not None) == planned
            if report.sequential is not None:
                assert report.sequential.fixed_n_valid is not decided
            # Written and read back, then merged again with a part of the
            # files: the record carries both.
            out = Path(tmp) / "merged.jsonl"
            write_whole(out, merged.meta, merged.lines)
            again = [out, given_paths[0]]
            assert merge(again, allow_mismatch=True).coverage.complete == complete
            report = build_report(load_results([out]), ended=collection([out]))
            assert report.coverage.complete == complete
            if report.sequential is not None:
                assert report.sequential.fixed_n_valid is not decided
            out.unlink()


def test_a_file_decided_then_resumed_and_stopped_otherwise_is_not_valid(tmp_path: Path) -> None:
    """An example the property above found, kept as it is: decided, then
    a resume stopped by --maxfail."""
    tasks = owned(1, 3)
    path = write(
        tmp_path / "s.jsonl",
        Spec(1, frozenset({0, 1}), ("decided", "pytest"), True),
        1,
        tasks,
        3,
        0,
    )
    report = build_report(load_results([path]), ended=collection([path]))
    assert report.sequential is not None and report.sequential.collection == "stopped-before-end"
    assert report.sequential.fixed_n_valid is False and report.sequential.earlier.startswith(
        "a run stopped when decided"
    )


def test_a_merge_of_a_stopped_and_a_complete_copy_of_one_shard_is_whole(tmp_path: Path) -> None:
    """Two files of one shard: the union of their rows counts, not how the first one ended."""
    tasks = owned(2, 2)
    stopped = write(
        tmp_path / "a.jsonl", Spec(1, frozenset({0}), ("exhausted",), False), 2, tasks, 2, 0
    )
    rerun = write(tmp_path / "b.jsonl", Spec(1, frozenset({1}), (None,), False), 2, tasks, 2, 1)
    other = write(tmp_path / "c.jsonl", Spec(2, frozenset({0, 1}), (None,), False), 2, tasks, 2, 2)
    for order in itertools.permutations([stopped, rerun, other]):
        cover = merge(list(order)).coverage
        assert cover.complete and [e.how for e in cover.ends if e.file == str(stopped)] == [
            "stopped"
        ]
    cover = merge([stopped, other]).coverage
    assert not cover.complete and cover.unfinished == ["1/2"]
