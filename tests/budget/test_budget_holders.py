"""A lost process's holds on the budget: real processes holding a reservation, killed with SIGKILL.

A worker killed mid-call never settles its hold. Any other process of the run that finds no room
settles it: what the lost calls were sent with is charged (their reply never came), the rest of its
hold comes back, and the call goes through (or is refused) at once instead of waiting 10 minutes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_echo_bench.budget import holders
from pytest_echo_bench.budget.hold import Budget
from pytest_echo_bench.budget.ledger import Account, Ledger, LedgerState
from pytest_echo_bench.budget.worst import call_worst, item_worst
from pytest_echo_bench.errors import BudgetError
from pytest_echo_bench.spec.load import Spec, load_spec

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="names processes by their /proc start time"
)

SPEC = """benchmark: units
dataset: {loader: inline, items: [{id: q, input: x, target: x}]}
scorer: exact
arms:
  a: {provider: openai, model: m, max_tokens: 10}
  b: {provider: openai, model: m, max_tokens: 10}
  judge: {provider: openai, model: m, max_tokens: 2}
  casc: {provider: cascade, cheap: a, n: 2, strong: b, agreement: judge, judge: judge}
pricing:
  a: {input: 1000, output: 1000}
  b: {input: 1000, output: 1000}
  judge: {input: 1000, output: 1000}
"""
# The child takes an item's hold, sends its first call, says so, and waits to be killed.
HOLDER = """
import sys, time
from pytest_echo_bench.budget.hold import Budget
from pytest_echo_bench.spec.load import load_spec
from pytest_echo_bench.budget.ledger import Ledger
spec, results, arm, sub = load_spec(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
budget = Budget(Ledger(results))
with budget.item(spec, arm, "x", ("units", "held", 1)), budget.call(spec, sub, "x"):
    print("held", flush=True)
    time.sleep(60)
"""


@pytest.fixture
def spec(tmp_path: Path) -> Spec:
    path = tmp_path / "units.yaml"
    path.write_text(SPEC)
    return load_spec(path)


def budget_of(tmp_path: Path, limit: float) -> Budget:
    ledger = Ledger(tmp_path / "r.jsonl")
    ledger.create({"run": limit}, {})
    budget = Budget(ledger)
    # (600 s by default) a hold that lingered would keep a call waiting this long
    budget.max_wait_s = 20.0
    return budget


def killed_holder(tmp_path: Path, arm: str, sub: str) -> str:
    """A real process that holds ``arm``'s item with its ``sub`` call in flight, killed with SIGKILL
    (and not reaped: a zombie holds nothing either); its name in the ledger."""
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    proc = subprocess.Popen(
        [
            sys.executable,
            str(script),
            str(tmp_path / "units.yaml"),
            str(tmp_path / "r.jsonl"),
            arm,
            sub,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        state = Ledger(tmp_path / "r.jsonl").read()
        assert state is not None and len(state.holders) == 1
        name = next(iter(state.holders))
        assert name.split("/")[1] == str(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while holders.start_time(proc.pid) is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        return name
    finally:
        proc.kill()
        proc.wait(10)


def test_a_killed_processs_unsent_hold_comes_back_at_once(tmp_path: Path, spec: Spec) -> None:
    a, casc, b = (
        call_worst(spec, "a", "x"),
        item_worst(spec, "casc", "x"),
        item_worst(spec, "b", "x"),
    )
    assert a is not None and casc is not None and b is not None
    # b fits only once the cascade's unsent calls are released
    budget = budget_of(tmp_path, casc + b / 2)
    lost = killed_holder(tmp_path, "casc", "a")
    t0 = time.monotonic()
    with budget.item(spec, "b", "x", ("units", "q", 1)), budget.call(spec, "b", "x") as settle:
        settle(b)
    assert time.monotonic() - t0 < 3.0
    state = budget.ledger.read()
    assert state is not None and state.released == [lost] and state.holders == {}
    run = state.accounts["run"]
    # the lost call's worst case stands as spent: its reply never came
    assert run.spent == pytest.approx(a + b)
    assert run.held == pytest.approx(0.0, abs=1e-12) and run.spent <= casc + b / 2


def test_a_call_that_cannot_fit_even_then_is_refused_at_once(tmp_path: Path, spec: Spec) -> None:
    a = item_worst(spec, "a", "x")
    assert a is not None
    budget = budget_of(tmp_path, 1.5 * a)
    killed_holder(tmp_path, "a", "a")
    t0 = time.monotonic()
    with (
        pytest.raises(BudgetError, match="does not fit"),
        budget.item(spec, "a", "x", ("units", "q", 1)),
        budget.call(spec, "a", "x"),
    ):
        pass
    # before: the lost hold read as coming back, and the call waited 600 s
    assert time.monotonic() - t0 < 3.0
    state = budget.ledger.read()
    assert (
        state is not None
        and state.accounts["run"].spent == pytest.approx(a)
        and state.accounts["run"].held < 1e-12
    )


def test_a_live_processs_hold_is_kept(tmp_path: Path, spec: Spec) -> None:
    a = item_worst(spec, "a", "x")
    assert a is not None
    budget = budget_of(tmp_path, 1.5 * a)
    budget.max_wait_s = 0.3
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    proc = subprocess.Popen(
        [
            sys.executable,
            str(script),
            str(tmp_path / "units.yaml"),
            str(tmp_path / "r.jsonl"),
            "a",
            "a",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        with (
            pytest.raises(BudgetError),
            budget.item(spec, "a", "x", ("units", "q", 1)),
            budget.call(spec, "a", "x"),
        ):
            pass
        state = budget.ledger.read()
        assert state is not None and state.released == [] and len(state.holders) == 1
        assert state.accounts["run"].held == pytest.approx(a)
    finally:
        proc.kill()
        proc.wait(10)


def test_a_name_is_gone_only_when_its_process_is() -> None:
    me = holders.me()
    host, pid, start = me.split("/")
    assert pid == str(os.getpid()) and not holders.gone(me)
    # the pid now runs another process: the owner is gone
    assert holders.gone(f"{host}/{pid}/{int(start) + 1}")
    # another host's pid means nothing here
    assert not holders.gone(f"elsewhere~0/{pid}/{int(start) + 1}")
    assert not holders.gone("not a name")
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    # exited (its pid is free, or someone else's)
    assert holders.gone(f"{host}/{done.stdout.strip()}/{start}")
    # judged by the pid alone: running
    assert not holders.gone(f"{host}/{pid}/{holders.UNKNOWN_START}")


def test_a_holder_settled_as_gone_settles_nothing_twice() -> None:
    state = LedgerState({"run": Account(1.0)})
    state.hold(["run"], 0.5, "h")
    state.own(["run"], "h", 0.0, 0.2)
    assert state.release_gone(lambda name: name == "h") == 1
    assert (state.accounts["run"].spent, state.accounts["run"].held) == (
        pytest.approx(0.2),
        pytest.approx(0.0),
    )
    state.hold(["run"], 0.3, "other")
    # "h" was alive after all: it released and was charged already
    state.settle(["run"], 0.5, 0.1, "h", 0.2)
    assert (state.accounts["run"].spent, state.accounts["run"].held) == (
        pytest.approx(0.2),
        pytest.approx(0.3),
    )
    assert state.release_gone(lambda name: False) == 0 and list(state.holders) == ["other"]


def test_more_sent_than_held_is_charged_as_held() -> None:
    """Exposure counts each call's worst case, so cheap settled calls can make it exceed the hold; a
    process never has more out than it holds, so the hold bounds what a lost one may have spent."""
    state = LedgerState({"run": Account(1.0)})
    state.hold(["run"], 0.4, "h")
    state.own(["run"], "h", 0.0, 0.6)
    state.release_gone(lambda name: True)
    assert state.accounts["run"].spent == pytest.approx(0.4) and state.accounts["run"].held == 0.0
    assert LedgerState.from_json(state.to_json()) == state


def test_the_runs_end_settles_a_lost_hold_no_call_waited_on(tmp_path: Path, spec: Spec) -> None:
    from pytest_echo_bench.plugin import budget as plugin_budget

    a = item_worst(spec, "a", "x")
    assert a is not None
    budget_of(tmp_path, 10 * a)
    killed_holder(tmp_path, "a", "a")
    assert plugin_budget.settle_lost(tmp_path / "r.jsonl") == (1, "")
    spend = plugin_budget.read(tmp_path / "r.jsonl")
    # what the end reports counts the lost call
    assert spend is not None and spend.spent == pytest.approx(a)
    assert plugin_budget.settle_lost(tmp_path / "r.jsonl") == (0, "")


class Named(Budget):
    """One process's side of the budget under a name of its own: several share one ledger here."""

    def __init__(self, ledger: Ledger, name: str, dead: set[str]) -> None:
        super().__init__(ledger)
        self.name = name
        self.gone = dead.__contains__
        self.max_wait_s = 0.0  # one thread drives them all: nothing settles while a call waits

    @property
    def holder(self) -> str:
        return self.name


def _consistent(state: LedgerState) -> None:
    """What the holders hold and the items pledge is what the run's
    account holds; none overspends."""
    run = state.accounts["run"]
    owned = sum(mine["run"][0] for mine in state.holders.values() if "run" in mine)
    pledged = sum(sum(shares.values()) for shares in state.pledged.values())
    assert owned + pledged == pytest.approx(run.held, abs=1e-9)
    assert run.spent + run.held <= run.limit + 1e-9  # type: ignore[operator]


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(
    limit_calls=st.floats(0.5, 10.0),
    plan=st.lists(
        st.tuples(st.integers(0, 3), st.booleans(), st.sampled_from([0.0, 0.5, 1.0, None])),
        min_size=1,
        max_size=30,
    ),
)
def test_processes_lost_at_any_point_leave_a_ledger_that_adds_up(
    tmp_path_factory: pytest.TempPathFactory,
    limit_calls: float,
    plan: list[tuple[int, bool, float | None]],
) -> None:
    """Four processes take items in turn; after each, the process is lost (its item never settles)
    or settles what the reply cost. The holders' records always add up to what the account holds,
    the spend plus the holds never pass the limit, and once every lost
    one is released nothing is held."""
    tmp = tmp_path_factory.mktemp("holders")
    (tmp / "units.yaml").write_text(SPEC)
    spec = load_spec(tmp / "units.yaml")
    worst = item_worst(spec, "a", "x")
    assert worst is not None
    ledger = Ledger(tmp / "r.jsonl")
    ledger.create({"run": limit_calls * worst}, {})
    dead: set[str] = set()
    procs = [Named(ledger, f"p{i}", dead) for i in range(4)]
    abandoned = []  # a lost process's open item: never closed, as SIGKILL leaves it
    for n, (who, lost, paid) in enumerate(plan):
        proc = procs[who]
        if proc.name in dead:
            continue
        item = proc.item(spec, "a", "x", ("units", f"q{n}", 1))
        item.__enter__()
        try:
            call = proc.call(spec, "a", "x")
            settle = call.__enter__()
        except BudgetError:
            item.__exit__(None, None, None)
            continue
        if lost:
            dead.add(proc.name)
            abandoned.append((item, call))
        else:
            settle(None if paid is None else paid * worst)
            call.__exit__(None, None, None)
            item.__exit__(None, None, None)
        state = ledger.read()
        assert state is not None
        _consistent(state)
    state = ledger.read()
    assert state is not None
    ledger.change(lambda s: s.release_gone(dead.__contains__))
    state = ledger.read()
    assert state is not None
    _consistent(state)
    assert state.holders == {} and state.accounts["run"].held == pytest.approx(0.0, abs=1e-9)
