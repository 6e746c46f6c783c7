"""The anytime-valid test behind --bench-stop-when-decided
(``analysis.sequential``, ``analysis.decide.monitor``).

The simulations run the plugin's own code (``Betting.update`` for every item, ``Monitor`` for
Holm over pairs), never a copy. Items are drawn i.i.d.: a paired difference is +1 (only a right),
-1 (only b right) or 0. Arms correlated as real arms are share the items' difficulty, which shows
as few discordant items: both are right on the easy items and wrong on the hard ones.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_echo_bench.analysis.decide.monitor import Monitor, Plan, resolve_pair
from pytest_echo_bench.analysis.power import n_for_power
from pytest_echo_bench.analysis.sequential import BET_CAP, Betting, interval
from pytest_echo_bench.store.meta import DecideRecord

ALPHA = 0.05


def _difficulty_discordance() -> float:
    """P(only a right) = P(only b right) when both arms answer right with
    the item's own p: E[p(1 - p)]."""
    mixture = [(0.4, 0.95), (0.3, 0.1), (0.3, 0.6)]  # easy, hard and middling items
    return sum(w * p * (1 - p) for w, p in mixture)


def _sweep(
    rng: random.Random, items: int, a_only: float, b_only: float, null: float = 0.0
) -> int | None:
    """Items to the first decision at alpha (looking after every item), or None: never decided."""
    test = Betting(null)
    for n in range(1, items + 1):
        u = rng.random()
        test.update(1.0 if u < a_only else -1.0 if u < a_only + b_only else 0.0)
        if test.decided(ALPHA):
            return n
    return None


def test_under_the_null_false_decisions_stay_below_alpha_over_2000_sweeps() -> None:
    # Figure for docs/statistics.md: 2,000 sweeps of 300 items, a look after
    # each: 1.5% decided (SE 0.27%).
    rng = random.Random(20261201)
    share = _difficulty_discordance()
    sweeps = 2000
    false = sum(_sweep(rng, 300, share, share) is not None for _ in range(sweeps))
    rate = false / sweeps
    se = math.sqrt(rate * (1 - rate) / sweeps)
    print(
        f"null: {rate:.4f} of {sweeps} sweeps decided (SE {se:.4f}), discordant share "
        f"{2 * share:.3f}"
    )
    assert rate + 2 * se <= ALPHA


def test_under_a_non_inferiority_null_it_seldom_says_non_inferior() -> None:
    # a is worse by exactly the margin: "non-inferior" is the false decision.
    rng = random.Random(7)
    sweeps, wrong = 1000, 0
    for _ in range(sweeps):
        test = Betting(-0.05)
        for _ in range(300):
            u = rng.random()
            test.update(1.0 if u < 0.10 else -1.0 if u < 0.25 else 0.0)  # mean 0.10 - 0.15 = -0.05
            if test.decided(ALPHA):
                wrong += test.direction() > 0
                break
    assert wrong / sweeps <= ALPHA / 2 + 2 * math.sqrt(ALPHA / 2 / sweeps)


def test_the_type_one_error_is_at_most_alpha_exactly_over_every_sequence_of_eight_items() -> None:
    # Every one of the 3^8 sequences, weighted by its probability under
    # the null: no simulation error.
    alpha, q = 0.3, 0.3  # P(+1) = P(-1) = q; alpha large enough that eight items can decide
    total = 0.0
    for seq in itertools.product((1.0, -1.0, 0.0), repeat=8):
        test = Betting()
        for z in seq:
            test.update(z)
            if test.decided(alpha):
                total += math.prod(q if z else 1 - 2 * q for z in seq)
                break
    assert 0 < total <= alpha


def test_under_an_alternative_the_median_decision_comes_near_the_fixed_n_for_80_percent_power() -> (
    None
):
    # Figures for docs/statistics.md: diff 0.10 at 30% discordant: McNemar needs 234 items
    # for 80% power (Connor); the sequential test's median is about 250 and it stops on its
    # own, without knowing the diff.
    rng = random.Random(11)
    stops = [_sweep(rng, 3000, 0.20, 0.10) or 10**9 for _ in range(300)]
    median, fixed = statistics.median(stops), n_for_power(0.10, 0.30)
    print(f"alternative: median {median} items to a decision; fixed-n McNemar {fixed}")
    assert fixed is not None and median <= 1.4 * fixed
    assert sum(s <= 3000 for s in stops) >= 0.95 * len(stops)


def _wealth(zs: list[float], null: float) -> tuple[float, float]:
    """The two gamblers' largest wealth, recomputed from the paper's
    formulas as products (not log sums)."""
    m = (null + 1) / 2
    best, wealth = [1.0, 1.0], [1.0, 1.0]
    xs: list[float] = []
    sq = 0.0
    for z in zs:
        mu = (0.5 + sum(xs)) / (len(xs) + 1)
        var = (0.25 + sq) / (len(xs) + 1)
        lam = (mu - m) / (var + (mu - m) ** 2)
        x = (z + 1) / 2
        wealth[0] *= 1 + min(BET_CAP, max(0.0, lam)) * (x - m)
        wealth[1] *= 1 - min(BET_CAP, max(0.0, -lam)) * (x - m)
        best = [max(b, w) for b, w in zip(best, wealth, strict=True)]
        xs.append(x)
        sq += (x - (0.5 + sum(xs)) / (len(xs) + 1)) ** 2
    return best[0], best[1]


@settings(derandomize=True, database=None, max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from([1.0, 0.0, -1.0, 0.5, -0.5]), max_size=60),
    st.sampled_from([0.0, -0.05, -0.2]),
)
def test_the_p_value_is_the_papers_wealth_recomputed_independently(
    zs: list[float], null: float
) -> None:
    test = Betting(null)
    for z in zs:
        test.update(z)
    up, down = _wealth(zs, null)
    assert test.p_value() == pytest.approx(min(1.0, 2 / max(up, down)), rel=1e-9)


@settings(derandomize=True, database=None, max_examples=150, deadline=None)
@given(st.lists(st.sampled_from([1.0, 0.0, -1.0]), min_size=1, max_size=120))
def test_a_decision_and_the_interval_agree(zs: list[float]) -> None:
    """Decided at alpha exactly when the interval at 1 - alpha leaves out the
    null; the interval holds the mean."""
    test = Betting()
    for z in zs:
        test.update(z)
    lo, hi = interval(zs, ALPHA)
    assert -1 <= lo <= statistics.fmean(zs) <= hi <= 1
    if test.p_value() <= ALPHA:
        assert lo > 0 if test.direction() > 0 else hi < 0
    else:
        assert lo <= 0 <= hi


def test_the_interval_covers_the_true_difference_at_every_stop() -> None:
    rng = random.Random(3)
    missed = 0
    for _ in range(100):
        zs = []
        for _ in range(60):
            u = rng.random()
            zs.append(1.0 if u < 0.25 else -1.0 if u < 0.35 else 0.0)  # true difference 0.15
        lo, hi = interval(zs, ALPHA)
        missed += not lo <= 0.15 <= hi
    assert missed / 100 <= ALPHA


def test_holm_over_two_pairs_keeps_the_family_wise_error_under_alpha() -> None:
    # Through the monitor the controller runs: rows fed one at a time, pairs formed by task id.
    rng = random.Random(5)
    plan = Plan((("b", "x", "y"), ("b", "x", "z")))
    sweeps, wrong = 200, 0
    for _ in range(sweeps):
        monitor = Monitor(plan)
        for t in range(100):
            p = rng.choice((0.95, 0.1, 0.6))
            for arm in ("x", "y", "z"):
                monitor.add("b", f"t{t}", arm, 1, float(rng.random() < p))
            if any(s.decided_at is not None for s in monitor.pairs):
                wrong += 1
                break
    assert wrong / sweeps <= ALPHA + 2 * math.sqrt(ALPHA / sweeps)


def test_the_monitor_pairs_items_by_task_and_waits_for_every_epoch() -> None:
    monitor = Monitor(Plan((("b", "x", "y"),)), {"b": 2})
    assert not monitor.add("b", "t1", "x", 1, 1.0)
    assert not monitor.add("b", "t1", "y", 1, 0.0)
    assert not monitor.add("b", "t1", "x", 2, 0.0)
    assert monitor.add("b", "t1", "y", 2, 0.0)  # now both arms have both epochs: 0.5 - 0
    assert monitor.pairs[0].test.zs == [0.5]
    # a repeated row of a key changes nothing a look has seen
    assert not monitor.add("b", "t1", "y", 2, 1.0)
    assert not monitor.add("other", "t1", "x", 1, 1.0)


def test_a_clear_difference_is_decided_and_stays_decided() -> None:
    monitor = Monitor(Plan((("b", "x", "y"),)))
    for t in range(200):
        monitor.add("b", f"t{t}", "x", 1, 1.0)
        monitor.add("b", f"t{t}", "y", 1, float(t % 2))
        if monitor.all_decided():
            break
    state = monitor.pairs[0]
    assert state.decided_at is not None and state.decided_at < 60 and state.direction == 1
    assert state.verdict(0.0) == "x better than y"
    figures = monitor.figures()[0]
    assert (
        figures.ci[0] > 0
        and figures.decided_at == state.decided_at
        and figures.direction == "a-better"
    )


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("a", "two arms"),
        ("a,b,c", "two arms"),
        ("a,a", "itself"),
        ("a,zz", "unknown arm 'zz'"),
        ("one/a,two/d", "one benchmark"),
        ("a,c", "name it benchmark/arm"),
        ("nope/a,b", "unknown arm 'nope/a'"),
    ],
)
def test_a_pair_that_cannot_be_compared_is_refused(text: str, why: str) -> None:
    arms = {"one": ["a", "b", "c"], "two": ["c", "d"]}
    with pytest.raises(ValueError, match=why):
        resolve_pair(text, arms)


def test_a_pair_resolves_to_its_benchmark() -> None:
    arms = {"one": ["a", "b", "c"], "two": ["c", "d"]}
    assert resolve_pair("a, b", arms) == ("one", "a", "b")
    assert resolve_pair("two/c,two/d", arms) == ("two", "c", "d")


def test_a_plan_read_back_from_a_meta_line() -> None:
    plan = Plan((("b", "x", "y"),), 0.01, 0.02)
    assert Plan.read(DecideRecord.from_json(plan.record().to_json())) == plan
    for bad in (
        {},
        {"pairs": [["b", "x"]]},
        {"pairs": [["b", "x", "y"]], "alpha": 2},
        {"pairs": 3},
    ):
        assert isinstance(Plan.read(DecideRecord.from_json(bad)), str)


@settings(derandomize=True, database=None, max_examples=150, deadline=None)
@given(st.lists(st.sampled_from([1.0, 0.0, -1.0, 0.5, -0.5]), max_size=80), st.floats(-0.9, 0.9),
       st.sampled_from([0.05, 0.2]))
def test_the_intervals_gamblers_are_the_tests_gamblers(
    zs: list[float], null: float, alpha: float
) -> None:
    """The bisection's replay (its course computed once for every step) beats a null exactly when
    ``Betting`` fed the same items held 2 / alpha on that side: the same bets, to the last bit."""
    from pytest_echo_bench.analysis.sequential import _beats, _course

    test = Betting(null)
    for z in zs:
        test.update(z)
    goal = math.log(2.0 / alpha)
    course = _course(zs)
    assert _beats(course, null, alpha, 1) == (test.best_up >= goal)
    assert _beats(course, null, alpha, -1) == (test.best_down >= goal)


def _fed(
    rows: list[tuple[str, str, str, int, float]], pair: tuple[str, str, str], want: int
) -> list[float]:
    """The paired differences a pair's test gets, recomputed plainly: an item once both arms have
    ``want`` samples (the first row of each key), its difference of means then."""
    scores: dict[tuple[str, str], dict[int, float]] = {}
    done: set[str] = set()
    zs = []
    for bench, task, arm, epoch, score in rows:
        if bench != pair[0] or arm not in pair[1:]:
            continue
        scores.setdefault((task, arm), {}).setdefault(epoch, score)
        a, b = (scores.get((task, name), {}) for name in pair[1:])
        if task not in done and len(a) >= want and len(b) >= want:
            done.add(task)
            zs.append(math.fsum(a.values()) / len(a) - math.fsum(b.values()) / len(b))
    return zs


@settings(derandomize=True, database=None, max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["x", "y"]),
            st.sampled_from(["t0", "t1", "t2", "t3"]),
            st.sampled_from(["a", "b", "c", "d"]),
            st.integers(1, 3),
            st.sampled_from([0.0, 1.0]),
        ),
        max_size=120,
    ),
    st.integers(1, 3),
)
def test_the_monitor_feeds_each_pair_each_item_once_whatever_the_rows(
        rows: list[tuple[str, str, str, int, float]], want: int) -> None:
    """Repeated keys, extra epochs, other benchmarks and unplanned arms: each pair gets exactly the
    items the plain recomputation gives, in its order (the monitor indexes pairs by arm instead
    of trying every pair, and keeps no set of the items done)."""
    pairs = (("x", "a", "b"), ("x", "b", "c"), ("x", "a", "c"), ("y", "a", "b"))
    monitor = Monitor(Plan(pairs, alpha=0.2), {"x": want})
    for row in rows:
        monitor.add(*row)
    for state in monitor.pairs:
        assert state.test.zs == _fed(rows, state.key, want if state.key[0] == "x" else 1)


def test_a_monitor_fed_a_plan_naming_one_arm_twice_feeds_it_once() -> None:
    # only a hand-edited meta line can say so
    monitor = Monitor(Plan((("x", "a", "a"),), alpha=0.2))
    assert monitor.add("x", "t0", "a", 1, 1.0) and monitor.pairs[0].test.zs == [0.0]


@settings(derandomize=True, database=None, max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([f"t{i}" for i in range(12)]),
            st.sampled_from(["a", "b", "c"]),
            st.sampled_from([0.0, 1.0, 1.0]),
        ),
        max_size=150,
    ),
    st.sampled_from([0.05, 0.3, 0.6]),
)
def test_holm_after_every_row_is_holm_over_the_pairs_p_values_then(
    rows: list[tuple[str, str, float]], alpha: float
) -> None:
    """The monitor runs Holm only when a pair's best wealth moved; what it holds after every row is
    still Holm over every pair's p-value at that row, and each decision the first row it held."""
    from pytest_echo_bench.analysis.stats import holm

    monitor = Monitor(Plan((("x", "a", "b"), ("x", "b", "c"), ("x", "a", "c")), alpha=alpha))
    decided: list[int | None] = [None, None, None]
    for task, arm, score in rows:
        if not monitor.add("x", task, arm, 1, score):
            continue
        adjusted = holm([s.test.p_value() for s in monitor.pairs])
        decided = [
            d if d is not None or q > alpha else s.test.n
            for d, q, s in zip(decided, adjusted, monitor.pairs, strict=True)
        ]
        assert [s.p_holm for s in monitor.pairs] == adjusted
        assert [s.decided_at for s in monitor.pairs] == decided
