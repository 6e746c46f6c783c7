"""A resume is the run it resumes: the cache, the calls in flight and the budget its meta line
records hold for every resume unless its own command line says otherwise (and then it says so), and
a file that holds no row never blocks the corrected command.

Driven as a user would: real pytest processes, the real loopback OpenAI server, a real kill -9.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from openai_server import FakeOpenAI
from processes import rows_in, run, start, wait_for

from conftest import make_spec, read_rows, sim_spec
from pytest_echo_bench.store.records import Meta


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_OPENAI_KEY", "sk-test-resume")
    for name in ("ECHO_BENCH_CACHE", "ECHO_BENCH_CONCURRENCY", "ECHO_BENCH_BUDGET_USD"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        def answer(prompt: str) -> str:
            time.sleep(0.05)  # calls overlap: the server sees how many are in flight at once
            return "42"

        fake.answer = answer
        yield fake


def openai_spec(server: FakeOpenAI, n: int, extra: str = "") -> str:
    arm = (f"  a:\n    provider: openai\n    model: m-a\n    base_url: {server.base_url}\n"
           f"    api_key_env: TEST_OPENAI_KEY\n    max_tokens: 4\n")
    return sim_spec(n, arms=arm, extra=extra)


def keys_once(path: Path) -> list[dict[str, object]]:
    _, rows = read_rows(path)
    keys = [(r["task_id"], r["arm"]) for r in rows]
    assert len(keys) == len(set(keys)), "a key recorded twice"
    return rows


def printed_resume(output: str) -> list[str]:
    return shlex.split(
        next(
            line.strip()
            for line in output.splitlines()
            if line.strip().startswith("pytest --bench-resume")
        )
    )


def test_a_resume_after_kill_9_keeps_the_cache_off_and_the_concurrency(
    pytester: pytest.Pytester, server: FakeOpenAI
) -> None:
    make_spec(pytester, openai_spec(server, 30))
    # An earlier sweep filled the default cache with every answer: a resume that forgot
    # "--bench-cache off" took most of its rows from it (38 of 60 measured).
    assert run(pytester.path, "demo.yaml", "--bench-out", str(pytester.path / "warm.jsonl"))[0] == 0
    out = pytester.path / "k.jsonl"
    proc = start(
        pytester.path,
        "demo.yaml",
        "-n",
        "2",
        "--bench-cache",
        "off",
        "--bench-concurrency",
        "2",
        "--bench-out",
        str(out),
    )
    wait_for(lambda: rows_in(out) >= 4)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    before, server.max_in_flight = rows_in(out), 0
    status, output = run(pytester.path, "--bench-resume", str(out), "-n", "2")
    assert status == 0, output
    assert "echo-bench: --bench-" not in output  # nothing overridden
    rows = keys_once(out)
    assert len(rows) == 30 > before
    # every answer was asked for, none cached
    assert [r["task_id"] for r in rows if r["cache_hits"]] == []
    # two workers, two calls each (the default would allow 16)
    assert 1 <= server.max_in_flight <= 2 * 2
    assert read_rows(out)[0]["options"] == {"cache": "off", "concurrency": 2, "budget_usd": None,
                                            "judge": "now"}


def test_a_resume_keeps_the_recorded_concurrency(
    pytester: pytest.Pytester, server: FakeOpenAI
) -> None:
    make_spec(pytester, openai_spec(server, 12))
    out = pytester.path / "k.jsonl"
    assert (
        run(
            pytester.path,
            "demo.yaml",
            "-k",
            "q0",
            "--bench-concurrency",
            "1",
            "--bench-out",
            str(out),
        )[0]
        == 0
    )
    server.max_in_flight = 0
    status, output = run(pytester.path, "--bench-resume", str(out), "demo.yaml")
    assert status == 0, output
    assert len(keys_once(out)) == 12
    # one call at a time, as recorded (the default 8 overlapped them)
    assert server.max_in_flight == 1


def test_an_option_given_to_a_resume_wins_over_the_record_said_and_printed(
        pytester: pytest.Pytester, server: FakeOpenAI) -> None:
    make_spec(pytester, openai_spec(server, 6))
    out = pytester.path / "k.jsonl"
    # the provider's quota runs out: the run stops and prints its resume command
    server.quota_after = 2
    status, output = run(
        pytester.path,
        "demo.yaml",
        "--bench-cache",
        "off",
        "--bench-concurrency",
        "1",
        "--bench-out",
        str(out),
    )
    assert status == 2, output
    assert printed_resume(output) == [
        "pytest",
        "--bench-resume",
        str(out),
        "--rootdir",
        str(pytester.path),
    ]
    status, output = run(pytester.path, "--bench-resume", str(out), "--bench-concurrency", "3")
    assert status == 2, output  # the quota is still out
    assert (
        "echo-bench: --bench-concurrency 3 overrides the 1 this sweep's meta line records" in output
    )
    assert printed_resume(output) == [
        "pytest",
        "--bench-resume",
        str(out),
        "--bench-concurrency",
        "3",
        "--rootdir",
        str(pytester.path),
    ]
    server.quota_after = None
    status, output = run(pytester.path, *printed_resume(output)[1:])
    assert status == 0, output
    # the command it printed says so again
    assert "echo-bench: --bench-concurrency 3 overrides the 1" in output
    assert "echo-bench: --bench-cache" not in output  # the cache stays off, as recorded
    assert len(keys_once(out)) == 6 and all(r["cache_hits"] == 0 for r in keys_once(out))


def test_a_resume_takes_the_recorded_budget(pytester: pytest.Pytester, server: FakeOpenAI) -> None:
    make_spec(pytester, openai_spec(server, 4, extra="pricing:\n  a: {input: 0, output: 1000}\n"))
    # every run stops at once: each prints its budget line and resume command
    server.quota_after = 0
    out = pytester.path / "r.jsonl"
    status, output = run(
        pytester.path, "demo.yaml", "--bench-budget-usd", "0.5", "--bench-out", str(out)
    )
    assert status == 2, output
    assert read_rows(out)[0]["options"]["budget_usd"] == 0.5
    status, output = run(pytester.path, "--bench-resume", str(out))
    assert status == 2, output
    assert "of $0.5000" in output  # the budget holds for the plain resume too
    assert "--bench-budget-usd 0.5" in " ".join(printed_resume(output))
    status, output = run(pytester.path, "--bench-resume", str(out), "--bench-budget-usd", "2")
    assert (
        "echo-bench: --bench-budget-usd 2 overrides the 0.5 this sweep's meta line records"
        in output
    )


def test_a_file_without_the_record_resumes_as_before(
    pytester: pytest.Pytester, server: FakeOpenAI
) -> None:
    make_spec(pytester, openai_spec(server, 4))
    assert run(pytester.path, "demo.yaml", "--bench-out", str(pytester.path / "warm.jsonl"))[0] == 0
    out = pytester.path / "old.jsonl"
    assert (
        run(
            pytester.path,
            "demo.yaml",
            "--bench-cache",
            "off",
            "-k",
            "q0 or q1",
            "--bench-out",
            str(out),
        )[0]
        == 0
    )
    lines = out.read_text().splitlines()
    meta = json.loads(lines[0])
    meta.pop("options", None)  # as a file written before the record
    out.write_text("\n".join([json.dumps(meta), *lines[1:]]) + "\n")
    status, output = run(pytester.path, "--bench-resume", str(out), "demo.yaml")
    assert status == 0, output
    rows = keys_once(out)
    # the default cache, as before
    assert sorted(r["task_id"] for r in rows if r["cache_hits"]) == ["q2", "q3"]


def test_a_meta_line_whose_options_no_run_wrote_is_refused_naming_the_file(
    pytester: pytest.Pytester,
) -> None:
    make_spec(pytester, sim_spec(2))
    out = pytester.path / "r.jsonl"
    assert run(pytester.path, "demo.yaml", "-k", "q0", "--bench-out", str(out))[0] == 0
    lines = out.read_text().splitlines()
    meta = json.loads(lines[0])
    meta["options"]["concurrency"] = 10**6
    out.write_text("\n".join([json.dumps(meta), *lines[1:]]) + "\n")
    status, output = run(pytester.path, "--bench-resume", str(out))
    assert status == 4, output
    assert f"--bench-resume {out}: the meta line's options give concurrency 1000000" in output
    assert "Traceback" not in output


# -- a file that holds no row ------------------------------------------------------------------

TYPO = (
    "  a: {provider: openai, model: m, base_url: 'http://127.0.0.1:9/v1', api_key_evn: "
    "TEST_OPENAI_KEY}"
)


def test_a_typo_in_the_spec_does_not_block_the_corrected_command(
    pytester: pytest.Pytester, server: FakeOpenAI
) -> None:
    make_spec(pytester, sim_spec(3, arms=TYPO))
    out = pytester.path / "x.jsonl"
    status, output = run(pytester.path, "demo.yaml", "--bench-out", str(out))
    assert status != 0 and "unknown openai option 'api_key_evn'" in output, output
    assert not out.exists() or read_rows(out)[1] == []  # no row: nothing a fresh run would lose
    make_spec(pytester, openai_spec(server, 3))  # the typo fixed
    status, output = run(pytester.path, "demo.yaml", "--bench-out", str(out))
    assert status == 0, output
    assert "already holds a sweep" not in output
    if "held the meta line" in output:
        assert (
            f"echo-bench: {out} held the meta line of run " in output
            and "and no row: replaced by this run's" in output
        )
    meta, rows = read_rows(out)
    assert len(rows) == 3 and meta is not None and meta["benchmarks"]["demo"]["fingerprint"]
    assert out.read_text().count('"_meta"') == 1 + out.read_text().count('"run_end"')


def test_a_file_with_rows_is_still_refused(pytester: pytest.Pytester) -> None:
    make_spec(pytester, sim_spec(2))
    out = pytester.path / "r.jsonl"
    assert run(pytester.path, "demo.yaml", "-k", "q0", "--bench-out", str(out))[0] == 0
    before = out.read_bytes()
    status, output = run(pytester.path, "demo.yaml", "--bench-out", str(out))
    assert status == 4 and "the file already holds a sweep" in output, output
    assert out.read_bytes() == before


def test_a_meta_only_file_is_replaced_in_place_saying_so(pytester: pytest.Pytester) -> None:
    make_spec(pytester, sim_spec(2))
    out = pytester.path / "r.jsonl"
    status, output = run(pytester.path, "demo.yaml", "-k", "nothing", "--bench-out", str(out))
    old = json.loads(out.read_text().splitlines()[0])["run_id"]
    status, output = run(pytester.path, "demo.yaml", "--bench-out", str(out))
    assert status == 0, output
    assert (
        f"echo-bench: {out} held the meta line of run {old} and no row: replaced by this run's"
        in output
    )
    meta, rows = read_rows(out)
    assert meta is not None and meta["run_id"] != old and len(rows) == 4


def test_a_file_with_no_row_but_a_lost_paid_call_is_kept_for_its_resume(
        pytester: pytest.Pytester, server: FakeOpenAI) -> None:
    make_spec(pytester, openai_spec(server, 2, extra="pricing:\n  a: {input: 0, output: 1000}\n"))
    out = pytester.path / "r.jsonl"
    server.quota_after = 0
    status, output = run(
        pytester.path, "demo.yaml", "--bench-budget-usd", "1", "--bench-out", str(out)
    )
    assert status == 2 and read_rows(out)[1] == [], output
    ledger = Path(f"{out}.budget")
    state = json.loads(ledger.read_text())
    state["lost"] = {"run": 0.004}  # a call sent and paid for, its process killed before its row
    ledger.write_text(json.dumps(state))
    before = out.read_bytes()
    status, output = run(
        pytester.path, "demo.yaml", "--bench-budget-usd", "1", "--bench-out", str(out)
    )
    assert status == 4 and "the file already holds a sweep. Resume it with" in output, output
    assert out.read_bytes() == before  # its resume counts the lost call against the budget


# -- the record is data ------------------------------------------------------------------------

@pytest.mark.parametrize(
    "options",
    [
        [],
        "off",
        {"cache": "rel/cache.sqlite"},
        {"cache": 1},
        {"concurrency": True},
        {"concurrency": 0},
        {"concurrency": 1025},
        {"concurrency": 2.0},
        {"budget_usd": float("nan")},
        {"budget_usd": float("inf")},
        {"budget_usd": 0},
        {"budget_usd": -1},
        {"budget_usd": "5"},
        {"budget_usd": 1e13},
    ],
)
def test_a_recorded_value_no_run_writes_is_a_usage_error(options: object) -> None:
    from pytest_echo_bench.plugin.recorded import recorded

    with pytest.raises(
        pytest.UsageError, match="^--bench-resume r.jsonl: the meta line's options "
    ):
        recorded(Meta.from_json({"_meta": True, "options": options}), "r.jsonl")


@pytest.mark.parametrize(
    "options",
    [
        {"cache": "off", "concurrency": 1, "budget_usd": None},
        {"cache": "default", "concurrency": 1024, "budget_usd": 0.25},
        {"cache": "/abs/cache.sqlite", "concurrency": 8, "budget_usd": 7},
        {},
    ],
)
def test_every_value_a_run_writes_is_read_back(options: dict[str, object]) -> None:
    from pytest_echo_bench.plugin.recorded import recorded

    found = recorded(Meta.from_json({"_meta": True, "options": options}), "r.jsonl")
    assert found is not None and found.to_json() == options
    # A file from before the record:
    assert recorded(Meta.from_json({"_meta": True}), "r.jsonl") is None
