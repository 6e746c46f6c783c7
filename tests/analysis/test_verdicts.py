"""The verdicts as bits (``analysis.verdicts``) count what sets and dicts of the same verdicts
count: each pair's table, the oracle, complementarity and the disagreements, in task-id order."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_echo_bench.analysis.compare import pair
from pytest_echo_bench.analysis.verdicts import table

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True, database=None)


@dataclass(frozen=True)
class Graded:
    task_id: str
    passed: bool


arms = st.dictionaries(
    st.sampled_from(["a", "b", "c", "d"]),
    st.lists(st.tuples(st.sampled_from(["t1", "t10", "t2", "x", "é", ""]), st.booleans()),
             max_size=8),
    min_size=1,
)


@SETTINGS
@given(found=arms)
def test_bits_count_what_sets_count(found: dict[str, list[tuple[str, bool]]]) -> None:
    by_arm = {arm: [Graded(t, p) for t, p in items] for arm, items in found.items()}
    verdicts = {arm: {i.task_id: i.passed for i in items} for arm, items in by_arm.items()}
    bits = table(by_arm)
    sets = {arm: (set(v), {t for t, ok in v.items() if ok}) for arm, v in verdicts.items()}
    for a in by_arm:
        for b in by_arm:
            assert pair("x", a, b, bits.sets(a), bits.sets(b)) == pair("x", a, b, sets[a], sets[b])
    shared = set.intersection(*(set(v) for v in verdicts.values()))
    names = list(by_arm)
    assert bits.oracle(names) == (len(shared),
                                  sum(any(verdicts[a][t] for a in names) for t in shared))
    alone = {arm: sum(1 for t in shared if verdicts[arm][t]
                      and not any(verdicts[o][t] for o in names if o != arm)) for arm in names}
    assert bits.alone() == (len(shared), alone)
    split = sorted(t for t in shared if len({v[t] for v in verdicts.values()}) == 2)
    assert bits.split(2) == (len(split), split[:2])
    assert all(bits.verdict(arm, t) == verdicts[arm][t] for t in split for arm in names)
