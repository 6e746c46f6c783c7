"""The budget ledger read back: any value in any field is either a state of finite amounts >= 0, or
refused with an error that names the file and the field; never another exception."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_echo_bench.budget.ledger import Ledger
from pytest_echo_bench.errors import StoreError

GOOD: dict[str, Any] = {
    "accounts": {
        "run": {"limit": 1.0, "spent": 0.25, "held": 0.1},
        "arm:b/a": {"limit": None, "spent": 0.25, "held": 0.1},
    },
    "pledged": {"b\tq\t1": {"a": 0.05}},
    "closed": [],
    "refused": 0,
    "needed": 0.0,
    "holders": {"host/1/2": {"run": [0.1, 0.02]}},
    "released": [],
    "short": [],
    "where": {},
    "over": 0,
    "over_usd": 0.0,
    "notes": [],
    "lost": {"run": 0.01},
}
PATHS = [
    ("accounts", "run", "limit"),
    ("accounts", "run", "spent"),
    ("accounts", "arm:b/a", "held"),
    ("pledged", "b\tq\t1", "a"),
    ("holders", "host/1/2", "run"),
    ("refused",),
    ("needed",),
    ("over",),
    ("over_usd",),
    ("lost", "run"),
    ("closed",),
    ("notes",),
    ("where",),
    ("accounts", "run"),
    ("accounts",),
]
hostile = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**30), 10**30),
    st.booleans(),
    st.none(),
    st.text(max_size=5),
    st.lists(st.floats(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def replaced(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    data = json.loads(json.dumps(GOOD))
    inner = data
    for key in path[:-1]:
        inner = inner[key]
    inner[path[-1]] = value
    return data


def amounts(state: Any) -> list[float]:
    found = [state.needed, state.over_usd, *state.lost.values()]
    for account in state.accounts.values():
        found += [account.spent, account.held] + (
            [account.limit] if account.limit is not None else []
        )
    found += [u for shares in state.pledged.values() for u in shares.values()]
    found += [x for mine in state.holders.values() for pair in mine.values() for x in pair]
    return found


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(PATHS), value=hostile)
def test_any_value_is_read_as_finite_amounts_or_refused_naming_the_file(
        tmp_path: Path, path: tuple[str, ...], value: Any) -> None:
    results = tmp_path / "r.jsonl"
    Path(f"{results}.budget").write_text(json.dumps(replaced(path, value)))
    ledger = Ledger(results)
    try:
        state = ledger.change(lambda found: found)
    except StoreError as exc:
        assert f"the budget ledger {results}.budget is damaged: " in str(exc)
        return
    finally:
        ledger.close()
    assert all(isinstance(x, float) and math.isfinite(x) and x >= 0 for x in amounts(state))
    assert isinstance(state.refused, int) and state.refused >= 0 and state.over >= 0


@pytest.mark.parametrize(
    "text",
    [
        '{"accounts": {"run": {"limit": NaN, "spent": 0, "held": 0}}}',
        "[]",
        "{",
        "null",
        '{"accounts": {}}',
        '{"accounts": {"run": {"limit": 1, "spent": 1e999, "held": 0}}}',
    ],
)
def test_a_file_no_run_wrote_is_refused_naming_it(tmp_path: Path, text: str) -> None:
    results = tmp_path / "r.jsonl"
    Path(f"{results}.budget").write_text(text)
    with pytest.raises(
        StoreError, match="the budget ledger .*r.jsonl.budget is (damaged|unreadable)"
    ):
        Ledger(results).change(lambda found: found)


def test_the_runs_limits_replace_the_files(tmp_path: Path) -> None:
    results = tmp_path / "r.jsonl"
    Path(f"{results}.budget").write_text(json.dumps(replaced(("accounts", "run", "limit"), 1000.0)))
    state = Ledger(results, {"run": 1.0, "arm:b/a": 0.5}).change(lambda found: found)
    assert state.accounts["run"].limit == 1.0 and state.accounts["arm:b/a"].limit == 0.5
    # written back
    assert json.loads(Path(f"{results}.budget").read_text())["accounts"]["run"]["limit"] == 1.0
    with pytest.raises(
        StoreError, match="has no account named bench:b, which this run's budget needs"
    ):
        Ledger(results, {"run": 1.0, "bench:b": 2.0}).change(lambda found: found)
