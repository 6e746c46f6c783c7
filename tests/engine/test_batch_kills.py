"""Exactly once across crashes: a batched sweep against the loopback batch server, killed with
SIGKILL at each step of a batch's life, then resumed. Every key is recorded once, with the verdict
an uninterrupted run gives, and the server bills every request once."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import batch_server
import pytest
from batch_server import BatchServer, Job
from processes import finish, run, start, wait_for

from conftest import read_rows
from pytest_echo_bench.budget.ledger import lost_in
from pytest_echo_bench.engine.batch_items import custom_id
from pytest_echo_bench.store.batchlog import read_journal

ITEMS = 6
# The server answers item i's prompt with 4 when i is even: the verdicts an uninterrupted run gives.
EXPECTED = {f"q{i}": "correct" if i % 2 == 0 else "wrong" for i in range(ITEMS)}
# A scorer that stops on q1 until ``release`` exists, once ``reached`` says it got there: the
# process is killed between two rows of one batch (mid-append).
HELD_SCORER = """
    import time
    from pathlib import Path
    from pytest_echo_bench import scorer
    from pytest_echo_bench.scoring.verdict import judge

    @scorer("held")
    def held(output, example, options):
        if example.id == "q1" and not Path("release").exists():
            Path("reached").write_text("")
            deadline = time.monotonic() + 60
            while not Path("release").exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        return judge(output.strip(), example.target, output.strip() == example.target)
"""


def answer(prompt: str) -> str:
    return "4" if int(prompt.rsplit("(", 1)[1].rstrip(")")) % 2 == 0 else "5"


@pytest.fixture
def server() -> Iterator[BatchServer]:
    with BatchServer(answer=answer) as fake:
        yield fake


def write_spec(where: Path, kind: str, server: BatchServer) -> None:
    url = server.openai_url if kind == "openai" else server.base_url
    key = "TEST_OPENAI_KEY" if kind == "openai" else "TEST_ANTHROPIC_KEY"
    items = "\n".join(f'    - {{id: q{i}, input: "2+2=? ({i})", target: "4"}}'
                      for i in range(ITEMS))
    (where / "conftest.py").write_text(_dedent(HELD_SCORER))
    (where / "demo.yaml").write_text(
        f"benchmark: demo\ndataset:\n  loader: inline\n  items:\n{items}\nscorer: held\n"
        f"timeout_s: 10\nretries: {{attempts: 3, backoff_s: 0.01, max_backoff_s: 0.02}}\narms:\n"
        f"  gpt:\n    provider: {kind}\n    model: m\n    base_url: {url}\n"
        f"    api_key_env: {key}\n    batch: {{size: 3, poll_s: 0.05}}\n")


def _dedent(text: str) -> str:
    import textwrap
    return textwrap.dedent(text)


def blocking(step: str, server: BatchServer, then: str | None = None) -> tuple[threading.Event,
                                                                                 threading.Event]:
    """The server holds its reply at ``step`` (once) until released; ``then``: what it does next."""
    reached, release = threading.Event(), threading.Event()

    def hook(job: Job | None) -> str | None:
        if reached.is_set():
            return None
        reached.set()
        release.wait(30)
        return then

    server.hooks[step] = hook
    return reached, release


ARGS = ("-p", "no:randomly", "--bench-out", "r.jsonl", "--bench-cache", "off", "--bench-order",
        "file")


def killed(where: Path, reached: threading.Event | None) -> None:
    """Start the sweep, SIGKILL it once ``reached`` is set (or ``reached`` the file exists)."""
    proc = start(where, *ARGS)
    try:
        if reached is not None:
            assert reached.wait(60), finish(proc, 5)
        else:
            wait_for(lambda: (where / "reached").exists())
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def resumed(where: Path, server: BatchServer, kind: str, *args: str) -> None:
    server.hooks.clear()
    (where / "release").write_text("")
    status, output = run(where, "-p", "no:randomly", "--bench-resume", "r.jsonl",
                         "--bench-cache", "off", *args)
    assert status == 0, output
    _, rows = read_rows(where / "r.jsonl")
    assert sorted(r["task_id"] for r in rows) == sorted(EXPECTED)  # every key once
    assert {r["task_id"]: r["status"] for r in rows} == EXPECTED
    ids = [custom_id("demo", task, "gpt", 1) for task in EXPECTED]
    assert {cid: server.billed[cid] for cid in ids} == dict.fromkeys(ids, 1)
    assert sum(server.billed.values()) == ITEMS
    assert not read_journal(where / "r.jsonl").open()


KINDS = ["openai", "anthropic"]


@pytest.mark.parametrize("kind", KINDS)
def test_uninterrupted(pytester: pytest.Pytester, api_key: None, server: BatchServer,
                       kind: str) -> None:
    write_spec(pytester.path, kind, server)
    (pytester.path / "release").write_text("")
    status, output = run(pytester.path, *ARGS)
    assert status == 0, output
    _, rows = read_rows(pytester.path / "r.jsonl")
    assert {r["task_id"]: r["status"] for r in rows} == EXPECTED
    assert all(r["batch_id"] for r in rows) and len(server.jobs) == 2
    assert sum(server.billed.values()) == ITEMS


def test_killed_before_submit(pytester: pytest.Pytester, api_key: None,
                              server: BatchServer) -> None:
    """The journal names the batch, the provider never got it (OpenAI's upload held): the resume
    looks it up, finds nothing, and sends it."""
    write_spec(pytester.path, "openai", server)
    reached, release = blocking("upload", server, "reset")
    killed(pytester.path, reached)
    release.set()
    assert read_journal(pytester.path / "r.jsonl").open()
    resumed(pytester.path, server, "openai")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("step", ["create", "status", "results"])
def test_killed_at_a_step(pytester: pytest.Pytester, api_key: None, server: BatchServer,
                          kind: str, step: str) -> None:
    """Killed after the submit before its record (the reply to the create held), mid-poll or
    mid-download: the resume finds or re-attaches to the batch, and sends none of it again."""
    write_spec(pytester.path, kind, server)
    reached, release = blocking(step, server)
    killed(pytester.path, reached)
    release.set()
    resumed(pytester.path, server, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_killed_mid_append(pytester: pytest.Pytester, api_key: None, server: BatchServer,
                           kind: str) -> None:
    write_spec(pytester.path, kind, server)
    killed(pytester.path, None)
    _, rows = read_rows(pytester.path / "r.jsonl")
    assert len(rows) == 1  # q0 recorded, q1 not: the batch's rows cut in the middle
    resumed(pytester.path, server, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_a_resume_placing_its_items_one_by_one_collects_every_one(
        pytester: pytest.Pytester, api_key: None, server: BatchServer, kind: str) -> None:
    """One call in flight: the resume places one item of the earlier batch, which ends and is
    collected before the next item comes; that one's answer is read again, never waited for in
    vain."""
    write_spec(pytester.path, kind, server)
    reached, release = blocking("status", server)
    killed(pytester.path, reached)
    release.set()
    resumed(pytester.path, server, kind, "--bench-concurrency", "1")


def one_spec(where: Path, kind: str, server: BatchServer) -> None:
    """The sweep's six items in one batch."""
    write_spec(where, kind, server)
    spec = where / "demo.yaml"
    spec.write_text(spec.read_text().replace("size: 3,", "size: 6,"))


def swept(where: Path, server: BatchServer) -> dict[str, dict[str, object]]:
    """Run the sweep to its end: its rows by task, every key once, every request billed once."""
    (where / "release").write_text("")
    status, output = run(where, *ARGS)
    _, rows = read_rows(where / "r.jsonl")
    assert sorted(r["task_id"] for r in rows) == sorted(EXPECTED), output
    assert dict(server.billed) == {custom_id("demo", t, "gpt", 1): 1 for t in EXPECTED}
    assert not read_journal(where / "r.jsonl").open()
    return {str(r["task_id"]): r for r in rows}


@pytest.mark.parametrize("kind", KINDS)
def test_a_status_word_the_client_does_not_know_is_polled_on(
        pytester: pytest.Pytester, api_key: None, server: BatchServer, kind: str) -> None:
    """A new state (say "queued") is no end: the batch is polled until it ends, none of its
    requests is sent again."""
    write_spec(pytester.path, kind, server)
    said: list[str] = []

    def queued(job: Job | None) -> tuple[int, bytes] | None:
        if job is None or said:
            return None
        said.append(job.id)
        body = server.openai_batch(job) if kind == "openai" else server.anthropic_batch(job)
        body["status" if kind == "openai" else "processing_status"] = "queued"
        return 200, json.dumps(body).encode()

    server.hooks["status"] = queued
    rows = swept(pytester.path, server)
    assert said and len(server.jobs) == 2
    assert {t: r["status"] for t, r in rows.items()} == EXPECTED


@pytest.mark.parametrize("kind", KINDS)
def test_an_unreadable_result_line_is_an_error_row_never_a_second_batch(
        pytester: pytest.Pytester, api_key: None, server: BatchServer, kind: str) -> None:
    """The answer of a request whose result line cannot be read may exist (and be billed): the
    request gets an error row naming the batch (``--bench-retry-errors`` sends it again), and is
    not sent again unasked."""
    one_spec(pytester.path, kind, server)

    def cut(job: Job | None) -> tuple[int, bytes]:
        if kind == "anthropic":
            assert job is not None
            body = server.anthropic_results(job)
        else:
            [ended] = [j for j in server.jobs.values() if j.phase == "ended"]
            body = server.files[str(ended.files[0])]
        first, rest = body.split(b"\n", 1)
        return 200, b"{not json\n" + rest

    server.hooks["results"] = cut
    rows = swept(pytester.path, server)
    assert len(server.jobs) == 1
    broken = [r for r in rows.values() if r["status"] == "error"]
    assert len(broken) == 1 and "could not all be read" in str(broken[0]["detail"])
    assert all(r["status"] == EXPECTED[t] for t, r in rows.items() if r not in broken)


def test_a_batched_cache_hit_has_the_batch_price(pytester: pytest.Pytester, api_key: None,
                                                  server: BatchServer) -> None:
    """An answer the response cache gives a batched arm records the price of the call it stands
    for (the batch's), as a live arm's hit records its list price."""
    write_spec(pytester.path, "openai", server)
    spec = pytester.path / "demo.yaml"
    spec.write_text(spec.read_text() + "pricing:\n  gpt: {input: 1000, output: 2000, "
                    "batch_discount: 0.5}\n")
    (pytester.path / "release").write_text("")
    costs = []
    for out in ("r1.jsonl", "r2.jsonl"):
        status, output = run(pytester.path, "-p", "no:randomly", "--bench-out", out,
                             "--bench-cache", "c.sqlite")
        assert status == 0, output
        _, rows = read_rows(pytester.path / out)
        costs.append({r["task_id"]: (r["cost_usd"], r["cache_hits"]) for r in rows})
    assert sum(server.billed.values()) == ITEMS  # the second run asked nothing
    first, second = costs
    assert all(cost > 0 and hits == 0 for cost, hits in first.values())
    assert second == {task: (cost, 1) for task, (cost, _) in first.items()}


@pytest.fixture
def live(monkeypatch: pytest.MonkeyPatch, server: BatchServer) -> Counter[str]:
    """The server answers OpenAI's live chat completions too: the prompts it was asked, counted."""
    asked: Counter[str] = Counter()

    def completion(h: Any, path: str, query: Any, body: bytes) -> Any:
        prompt = str(json.loads(body)["messages"][-1]["content"])
        asked[prompt] += 1
        return "live", None, (200, {
            "id": "x", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": answer(prompt)}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}})

    monkeypatch.setitem(batch_server.ROUTES, ("POST", "/v1/chat/completions"), completion)
    return asked


def test_a_resume_with_the_arm_live_collects_the_open_batches(
        pytester: pytest.Pytester, api_key: None, server: BatchServer,
        live: Counter[str]) -> None:
    """Killed mid-poll, resumed with ``batch: false``: the requests an open batch holds are
    collected from it, none is sent again live; only the others go live."""
    write_spec(pytester.path, "openai", server)
    reached, release = blocking("status", server)
    killed(pytester.path, reached)
    release.set()
    held = {cid for sub in read_journal(pytester.path / "r.jsonl").open() for cid in sub.open_ids}
    assert held
    spec = pytester.path / "demo.yaml"
    spec.write_text(spec.read_text().replace("batch: {size: 3, poll_s: 0.05}", "batch: false"))
    server.hooks.clear()
    (pytester.path / "release").write_text("")
    status, output = run(pytester.path, "-p", "no:randomly", "--bench-resume", "r.jsonl",
                         "--bench-cache", "off")
    assert status == 0, output
    _, rows = read_rows(pytester.path / "r.jsonl")
    assert {r["task_id"]: r["status"] for r in rows} == EXPECTED  # every key once
    cids = {i: custom_id("demo", f"q{i}", "gpt", 1) for i in range(ITEMS)}
    sent = [server.billed[cids[i]] + live[f"2+2=? ({i})"] for i in range(ITEMS)]
    assert sent == [1] * ITEMS  # each request answered once, in a batch or live
    assert all(server.billed[cid] == 1 for cid in held)
    assert not read_journal(pytester.path / "r.jsonl").open()


@pytest.mark.parametrize("first", [(), ("--bench-budget-usd", "100")])
def test_answers_collected_on_a_resume_are_charged_once(
        pytester: pytest.Pytester, api_key: None, server: BatchServer,
        first: tuple[str, ...]) -> None:
    """Killed mid-poll (with a budget or without), resumed with one: an answer collected from the
    earlier run's batch is charged what it cost (its row's ``charged_usd``, the ledger's spend),
    and a call the killed run's lost holds already counted is not counted again."""
    write_spec(pytester.path, "openai", server)
    spec = pytester.path / "demo.yaml"
    spec.write_text(spec.read_text().replace("    batch:", "    max_tokens: 10\n    batch:")
                    + "pricing:\n  gpt: {input: 1000, output: 2000, batch_discount: 0.5}\n")
    reached, release = blocking("status", server)
    proc = start(pytester.path, *ARGS, *first)
    try:
        assert reached.wait(60), finish(proc, 5)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    release.set()
    held = {cid for sub in read_journal(pytester.path / "r.jsonl").open() for cid in sub.open_ids}
    lost = lost_in(pytester.path / "r.jsonl").get("run", 0.0)  # the killed run's sent calls
    assert held and (lost > 0) == bool(first)
    server.hooks.clear()
    (pytester.path / "release").write_text("")
    status, output = run(pytester.path, "-p", "no:randomly", "--bench-resume", "r.jsonl",
                         "--bench-cache", "off", "--bench-budget-usd", "100")
    assert status == 0, output
    _, rows = read_rows(pytester.path / "r.jsonl")
    assert {r["task_id"]: r["status"] for r in rows} == EXPECTED
    assert all(r["cost_usd"] > 0 and r["charged_usd"] == r["cost_usd"] for r in rows)
    ledger = json.loads((pytester.path / "r.jsonl.budget").read_text())
    adopted = sum(r["cost_usd"] for r in rows
                  if custom_id("demo", str(r["task_id"]), "gpt", 1) in held)
    others = sum(r["cost_usd"] for r in rows) - adopted
    # the adopted calls once: at the worst case the killed run's lost holds charged, else cost
    assert ledger["accounts"]["run"]["spent"] == pytest.approx((lost or adopted) + others)
    assert ledger["lost"].get("run", 0.0) == pytest.approx(0.0)
    assert sum(server.billed.values()) == ITEMS
