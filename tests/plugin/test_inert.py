"""The plugin is installed into every pytest run: an ordinary test suite must not notice it.

Each run is a fresh pytest process (``runpytest_subprocess``), so ``sys.modules`` shows exactly
what loading the entry point imported. A conftest in the suite records, in every process of the
run (the xdist controller and each worker), our modules and the heavy libraries that only a
sweep needs. The same suite run with ``-p no:echo_bench`` is the control: pytest and the other
installed plugins may import any of those libraries themselves, and only what ours adds counts.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from conftest import make_spec, sim_spec

OURS = ["pytest_echo_bench", "pytest_echo_bench.plugin", "pytest_echo_bench.plugin.options"]
HEAVY = ("yaml", "msgspec", "filelock", "sqlite3")

RECORDER = f"""
import json
import sys
import time
from pathlib import Path

import pytest

HEAVY = {HEAVY!r}
OUT = Path(__file__).parent / "modules"


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    # Last hook of the process: everything the run imported is in sys.modules by now. The worker
    # id comes from the config, not the environment, which this suite may inherit from an outer
    # xdist run.
    process = getattr(config, "workerinput", {{}}).get("workerid", "main")
    record = {{"ours": sorted(m for m in sys.modules if m.startswith("pytest_echo_bench")),
              "heavy": sorted(m for m in HEAVY if m in sys.modules)}}
    OUT.mkdir(exist_ok=True)
    written = OUT / (process + ".part")
    written.write_text(json.dumps(record))
    written.replace(OUT / (process + ".json"))  # whole once it exists: the controller waits on it


@pytest.hookimpl(tryfirst=True)  # before xdist's own sessionfinish tears the workers down
def pytest_sessionfinish(session):
    # A worker reaches its unconfigure after it has told the controller it finished, and execnet
    # interrupts a worker still busy 5 s after the controller's teardown: on two loaded cores
    # both workers were cut off before writing their records. The controller waits for them here
    # (bounded: a worker that never writes one fails the test on the missing record).
    workers = getattr(session.config.option, "numprocesses", None)
    if hasattr(session.config, "workerinput") or not workers:
        return
    expected = [OUT / f"gw{{i}}.json" for i in range(int(workers))]
    deadline = time.monotonic() + 60
    while not all(path.exists() for path in expected) and time.monotonic() < deadline:
        time.sleep(0.05)
"""

PLAIN_TESTS = """
def test_adds():
    assert 1 + 1 == 2


def test_joins():
    assert "-".join("ab") == "a-b"
"""

# YAML files that are not specs: the sniff reads them, and must do so without importing yaml.
NOT_SPECS = {
    "config/settings.yaml": "benchmark: not-a-spec\nname: x\n",  # one of the two keys only
    "config/deep/er/arms.yml": "arms:\n  - left\n  - right\n",
    "config/deep/er/list.yaml": "- benchmark: a\n- arms: b\n",  # the keys, but not at top level
}


def plain_suite(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(RECORDER)
    pytester.makepyfile(test_plain=PLAIN_TESTS)
    for name, text in NOT_SPECS.items():
        path = pytester.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def run_recorded(
    pytester: pytest.Pytester, *args: str
) -> tuple[pytest.RunResult, dict[str, dict[str, Any]]]:
    """Run the suite in a new process; (result, the record of each of its processes by name)."""
    records = pytester.path / "modules"
    for old in sorted(records.glob("*.json")) if records.is_dir() else []:
        old.unlink()  # each run's records only
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)
    found = (
        {p.stem: json.loads(p.read_text()) for p in sorted(records.glob("*.json"))}
        if records.is_dir()
        else {}
    )
    return result, found


def assert_inert(
    records: dict[str, dict[str, Any]], control: dict[str, dict[str, Any]], processes: set[str]
) -> None:
    assert set(records) == processes and set(control) == processes
    for process in sorted(processes):
        assert records[process]["ours"] == OURS, process
        assert control[process]["ours"] == [], process  # the control really ran without us
        added = set(records[process]["heavy"]) - set(control[process]["heavy"])
        assert added == set(), f"{process}: the plugin imported {sorted(added)}"


def test_a_plain_suite_imports_only_the_entry_point_and_options(pytester: pytest.Pytester) -> None:
    plain_suite(pytester)
    result, records = run_recorded(pytester)
    control_result, control = run_recorded(pytester, "-p", "no:echo_bench")
    assert result.ret == 0 and control_result.ret == 0
    result.assert_outcomes(passed=2)
    assert_inert(records, control, {"main"})


@pytest.mark.parametrize(("variable", "value"), [
    ("ECHO_BENCH_CONCURRENCY", "abc"),
    ("ECHO_BENCH_FSYNC", "sometimes"),
    ("ECHO_BENCH_PROGRESS_EVERY", "-1"),
])
def test_a_bad_setting_in_the_environment_does_not_break_a_plain_suite(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    plain_suite(pytester)
    monkeypatch.setenv(variable, value)
    result, records = run_recorded(pytester)
    assert result.ret == 0
    result.assert_outcomes(passed=2)
    assert records["main"]["ours"] == OURS
    assert "bench" not in result.stderr.str()


@pytest.mark.parametrize(("variable", "value", "option"), [
    ("ECHO_BENCH_CONCURRENCY", "abc", "--bench-concurrency"),
    ("ECHO_BENCH_FSYNC", "sometimes", "--bench-fsync"),
])
def test_the_same_bad_setting_with_a_spec_is_a_usage_error_naming_it(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    value: str,
    option: str,
) -> None:
    plain_suite(pytester)
    make_spec(pytester, sim_spec(2))
    monkeypatch.setenv(variable, value)
    out = pytester.path / "results.jsonl"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--bench-out", str(out))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{option}*{value!r}*"])
    assert not out.exists()


def test_a_plain_suite_under_xdist_passes_and_stays_inert_in_every_process(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain_suite(pytester)
    monkeypatch.setenv("ECHO_BENCH_CONCURRENCY", "abc")  # not read by the controller or the workers
    result, records = run_recorded(pytester, "-n", "2")
    control_result, control = run_recorded(pytester, "-n", "2", "-p", "no:echo_bench")
    assert result.ret == 0 and control_result.ret == 0
    result.assert_outcomes(passed=2)
    assert_inert(records, control, {"main", "gw0", "gw1"})
