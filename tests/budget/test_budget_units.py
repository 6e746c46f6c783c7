"""The budget's pure parts: worst cases, and the ledger's reservations driven directly."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_echo_bench.budget.hold import Budget
from pytest_echo_bench.budget.ledger import EPSILON_USD, Ledger
from pytest_echo_bench.budget.worst import (
    MESSAGE_TOKENS,
    REPLY_TOKENS,
    item_worst,
    prompt_tokens,
    unbounded,
)
from pytest_echo_bench.errors import BudgetError
from pytest_echo_bench.spec.load import Spec, load_spec

SPEC = """benchmark: units
dataset: {loader: inline, items: [{id: q, input: x, target: x}]}
scorer: exact
arms:
  a: {provider: openai, model: m, max_tokens: 10}
  b: {provider: openai, model: m, max_tokens: 10, system: "be brief"}
  judge: {provider: openai, model: m, max_tokens: 2}
  casc: {provider: cascade, cheap: a, n: 2, strong: b, agreement: judge, judge: judge}
  py: {provider: python, function: "os:getcwd"}
pricing:
  a: {input: 1000, output: 1000}
  b: {input: 1000, output: 10000}
  judge: {input: 1000, output: 1000}
"""


@pytest.fixture
def spec(tmp_path: Path) -> Spec:
    path = tmp_path / "units.yaml"
    path.write_text(SPEC)
    return load_spec(path)


def test_a_prompt_is_bounded_by_its_utf8_bytes_and_framing() -> None:
    assert prompt_tokens("héllo") == 6 + MESSAGE_TOKENS + REPLY_TOKENS
    assert prompt_tokens("be brief", "x") == 9 + 2 * MESSAGE_TOKENS + REPLY_TOKENS
    assert prompt_tokens(None, "") == REPLY_TOKENS  # no message at all: only the reply's priming


def test_a_routing_arms_worst_case_is_the_sum_of_the_calls_it_may_make(spec: Spec) -> None:
    a = (prompt_tokens("x") + 10) * 1000 / 1e6
    b = (prompt_tokens("be brief", "x") * 1000 + 10 * 10000) / 1e6
    cascade = item_worst(spec, "casc", "x")
    assert item_worst(spec, "a", "x") == pytest.approx(a)
    assert item_worst(spec, "b", "x") == pytest.approx(b)
    judge = cascade - 2 * a - b  # type: ignore[operator]
    assert judge > (2 * 2 * 10) * 1000 / 1e6  # the judge's prompt quotes both cheap answers
    assert unbounded(spec, "casc") is None and "Python arm" in str(unbounded(spec, "py"))


def make_budget(tmp_path: Path, limit: float) -> Budget:
    ledger = Ledger(tmp_path / "r.jsonl")
    ledger.create({"run": limit}, {})
    return Budget(ledger)


def test_a_reply_without_usage_keeps_its_whole_hold_as_spent(tmp_path: Path, spec: Spec) -> None:
    budget = make_budget(tmp_path, 1.0)
    worst = item_worst(spec, "a", "x")
    with budget.item(spec, "a", "x", ("units", "q", 1)), budget.call(spec, "a", "x") as settle:
        settle(None)
    with (
        budget.item(spec, "a", "x", ("units", "q2", 1)),
        contextlib.suppress(RuntimeError),
        budget.call(spec, "a", "x"),
    ):
        raise RuntimeError("no reply")  # an error, or no reply: the hold stands too
    state = budget.ledger.read()
    assert state is not None
    run = state.accounts["run"]
    assert run.spent == pytest.approx(2 * worst) and run.held == 0  # type: ignore[operator]


def test_a_call_the_items_hold_does_not_cover_takes_more_only_if_it_fits(
    tmp_path: Path, spec: Spec
) -> None:
    a = item_worst(spec, "a", "x")
    assert a is not None
    budget = make_budget(tmp_path, 2.5 * a)
    budget.max_wait_s = 0.0
    with budget.item(spec, "a", "x", ("units", "q", 1)):
        with budget.call(spec, "a", "x") as settle:
            settle(a)
        # a second call the item's hold never counted: it fits
        with budget.call(spec, "a", "x") as settle:
            settle(a)
        with (
            pytest.raises(BudgetError, match="its next call's worst case"),
            budget.call(spec, "a", "x"),
        ):
            pass
    state = budget.ledger.read()
    assert (
        state is not None
        and state.accounts["run"].spent == pytest.approx(2 * a)
        and state.refused == 1
    )


@settings(max_examples=80, deadline=None, derandomize=True, database=None)
@given(limit_calls=st.floats(0.5, 12.0), wave=st.integers(1, 6),
       paid=st.lists(st.sampled_from([0.0, 0.25, 1.0, None]), min_size=2, max_size=40))
def test_interleaved_items_never_overshoot_and_pairs_stay_whole(
    tmp_path_factory: pytest.TempPathFactory,
    limit_calls: float,
    wave: int,
    paid: list[float | None],
) -> None:
    """Items of two arms, ``wave`` of them open at once: every hold is taken before any settles.
    Whatever the replies cost (a share of the worst case, or unknown), the spend never passes the
    limit, and an item with one arm sent has the other sent too."""
    tmp = tmp_path_factory.mktemp("ledger")
    path = tmp / "units.yaml"
    path.write_text(SPEC)
    spec = load_spec(path)
    worst = item_worst(spec, "a", "x")
    assert worst is not None
    budget = make_budget(tmp, limit_calls * worst)
    # one thread holds every call of a wave: none settles while another waits
    budget.max_wait_s = 0.0
    items = [(f"q{i}", arm) for i in range(len(paid) // 2) for arm in ("a", "a2")]
    for i in range(len(paid) // 2):
        budget.plan[("units", f"q{i}", 1)] = ("a", "a2")
    spec.arms["a2"] = spec.arms["a"]
    spec.pricing["a2"] = spec.pricing["a"]
    charged, sent = 0.0, set()
    for start in range(0, len(items), wave):
        with contextlib.ExitStack() as stack:
            settles = []
            for (task, arm), fraction in zip(
                items[start : start + wave], paid[start : start + wave], strict=False
            ):
                stack.enter_context(budget.item(spec, arm, "x", ("units", task, 1)))
                try:
                    settles.append((stack.enter_context(budget.call(spec, arm, "x")), fraction))
                    sent.add((task, arm))
                except BudgetError:
                    continue
            for settle, fraction in settles:
                cost = None if fraction is None else fraction * worst
                settle(cost)
                charged += worst if cost is None else cost
        state = budget.ledger.read()
        assert state is not None
        run = state.accounts["run"]
        assert run.spent + run.held <= run.limit + EPSILON_USD  # type: ignore[operator]
    assert charged <= limit_calls * worst + EPSILON_USD
    assert all(((t, "a") in sent) == ((t, "a2") in sent) for t, _ in items)


def test_the_budget_stop_comes_after_a_marked_stop_and_an_interrupt() -> None:
    from pytest_echo_bench.plugin.exit_status import STOPPED, Outcomes, Stops, decide
    from pytest_echo_bench.store.files import StopReason

    stop = StopReason("budget", "spent $1 of $1")
    decided = decide(
        Outcomes(1, left=4, has_rows=True, budget=stop, budget_details={"suggested_usd": 2.0}),
        Stops(),
    )
    assert (decided.status, decided.stop, decided.write, decided.details) == (
        STOPPED,
        stop,
        True,
        {"suggested_usd": 2.0},
    )
    exhausted = StopReason("exhausted", "quota")
    assert decide(Outcomes(1, left=4, budget=stop), Stops(marked=exhausted)).stop == exhausted
    interrupted = decide(Outcomes(STOPPED, left=4, budget=stop), Stops()).stop
    assert interrupted.reason == "interrupted"  # type: ignore[union-attr]


def test_a_new_item_waits_for_room_that_calls_in_flight_hold(tmp_path: Path, spec: Spec) -> None:
    """Room held by a call in flight comes back when it settles: a new item waits for it rather
    than closing the benchmark while the budget is mostly unspent."""
    worst = item_worst(spec, "a", "x")
    assert worst is not None
    budget = make_budget(tmp_path, 1.5 * worst)
    entered, release = threading.Event(), threading.Event()

    def first() -> None:
        with budget.item(spec, "a", "x", ("units", "q1", 1)), budget.call(spec, "a", "x") as settle:
            entered.set()
            release.wait(10)
            settle(worst / 10)

    thread = threading.Thread(target=first)
    thread.start()
    assert entered.wait(10)
    threading.Timer(0.2, release.set).start()
    t0 = time.monotonic()
    with budget.item(spec, "a", "x", ("units", "q2", 1)), budget.call(spec, "a", "x") as settle:
        settle(worst / 10)  # sent once the first settled
    thread.join(10)
    assert time.monotonic() - t0 >= 0.15
    state = budget.ledger.read()
    assert (
        state is not None
        and state.refused == 0
        and state.accounts["run"].spent == pytest.approx(worst / 5)
    )
    # Spent and pledged leave no room even once everything settles: refused at once, and closed.
    budget.ledger.change(lambda s: setattr(s.accounts["run"], "spent", 1.4 * worst))
    with (
        pytest.raises(BudgetError),
        budget.item(spec, "a", "x", ("units", "q3", 1)),
        budget.call(spec, "a", "x"),
    ):
        pass
    state = budget.ledger.read()
    assert state is not None and state.closed == ["units"]


def pledged_pair(tmp_path: Path, spec: Spec, room: float) -> tuple[Budget, float]:
    """A budget of ``room`` pairs (a, b) of item q1 and q2: their worst case, and the budget."""
    pair = sum(item_worst(spec, arm, "x") or 0.0 for arm in ("a", "b"))
    budget = make_budget(tmp_path, room * pair)
    for task in ("q1", "q2"):
        budget.plan[("units", task, 1)] = ("a", "b")
    return budget, pair


def test_a_new_item_waits_for_the_pledge_of_a_started_item_to_settle(
    tmp_path: Path, spec: Spec
) -> None:
    """q1's arm b is pledged, not in flight: counting the pledge as spent closed the benchmark to q2
    although q1's b, once sent, settles at a tenth of it (two workers, a budget of 1.5 pairs)."""
    budget, pair = pledged_pair(tmp_path, spec, 1.5)
    started, go = threading.Event(), threading.Event()

    def q1() -> None:
        with budget.item(spec, "a", "x", ("units", "q1", 1)):
            with budget.call(spec, "a", "x") as settle:
                settle(pair / 20)
            started.set()
        go.wait(10)
        with budget.item(spec, "b", "x", ("units", "q1", 1)), budget.call(spec, "b", "x") as settle:
            settle(pair / 20)

    thread = threading.Thread(target=q1)
    thread.start()
    assert started.wait(10)
    threading.Timer(0.3, go.set).start()
    with budget.item(spec, "a", "x", ("units", "q2", 1)), budget.call(spec, "a", "x") as settle:
        settle(pair / 20)  # sent once q1's b settled
    thread.join(10)
    state = budget.ledger.read()
    assert state is not None and state.refused == 0 and state.closed == []


def test_a_pledge_that_does_not_settle_refuses_once_nothing_moves(
        tmp_path: Path, spec: Spec, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pledged arm queued behind the waiting call itself never comes: the wait ends
    once nothing in the run settled for STILL_S (not the 10 minutes a call in flight may
    take), and the benchmark closes."""
    monkeypatch.setattr("pytest_echo_bench.budget.hold.STILL_S", 0.3)
    budget, pair = pledged_pair(tmp_path, spec, 1.5)
    with budget.item(spec, "a", "x", ("units", "q1", 1)), budget.call(spec, "a", "x") as settle:
        settle(pair / 20)
    t0 = time.monotonic()
    with (
        pytest.raises(BudgetError, match="does not fit"),
        budget.item(spec, "a", "x", ("units", "q2", 1)),
        budget.call(spec, "a", "x"),
    ):
        pass
    assert 0.25 <= time.monotonic() - t0 < 5
    state = budget.ledger.read()
    assert state is not None and state.closed == ["units"] and len(state.closed_at) == 2
