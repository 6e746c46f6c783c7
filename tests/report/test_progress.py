"""The live progress page: state from a results file, escaping, atomic
writes, ``watch``, a real browser."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from results_files import write

from pytest_echo_bench.analysis.stats import wilson
from pytest_echo_bench.report.page.html import render_progress, watch, write_progress
from pytest_echo_bench.report.page.state import LiveCounters, PageFeed, progress_state
from pytest_echo_bench.store.files import write_atomic

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC).timestamp()
PAYLOAD = "<script>alert(1)</script>\"><img src=x onerror=alert(1)>"
CHROMIUM = Path("/usr/bin/chromium")


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def make_row(
    task: str,
    arm: str,
    status: str = "correct",
    start: float = T0,
    end: float = T0 + 1,
    **extra: Any,
) -> dict[str, Any]:
    row = {
        "task_id": task,
        "arm": arm,
        "passed": status == "correct",
        "detail": status,
        "wall_seconds": end - start,
        "sub_calls": 1,
        "benchmark": "demo",
        "status": status,
        "output": f"So the answer is {task}.",
        "answer": task,
        "target": "42",
        "attempts": 1,
        "retries": 0,
        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
        "started_at": iso(start),
        "finished_at": iso(end),
        "worker": "gw0",
        "run_id": "r1",
        "subtask": None,
    }
    return row | extra


def meta(
    items: int = 8, arms: tuple[str, ...] = ("a", "b"), benchmark: str = "demo"
) -> dict[str, Any]:
    return {
        "_meta": True,
        "benchmark": benchmark,
        "benchmarks": {benchmark: {"spec": "demo.yaml", "fingerprint": "f", "items": items}},
        "arms": {benchmark: list(arms)},
        "created_at": "2026-11-30T12:00:00Z",
    }


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """Arm a: 2 correct, 1 wrong, 1 unparseable (and a duplicate row); arm b: 1 correct, 1 error."""
    return write(tmp_path / "run.jsonl", [
        meta(),
        make_row("q1", "a", retries=2, cost_usd=0.25),
        make_row("q2", "a"),
        make_row("q3", "a", "wrong", output=PAYLOAD),
        make_row("q4", "a", "unparseable", answer=None),
        # a duplicate: each key counts once (test_retry_errors.py: its newest row)
        make_row("q1", "a"),
        make_row("q1", "b", usage=None),
        make_row("q2", "b", "error", retries=1, cost_usd=0.5),
    ])


def test_counts_pass_rates_and_intervals(results: Path) -> None:
    state = progress_state(results, now=T0 + 60)
    a, b = state.arms["a"], state.arms["b"]
    assert (a.expected, a.done, a.correct, a.unparseable, a.errors) == (4, 4, 2, 1, 0)
    assert (b.expected, b.done, b.correct, b.unparseable, b.errors) == (4, 2, 1, 0, 1)
    assert a.interval == wilson(2, 4) and b.interval == wilson(1, 2)
    assert (state.done, state.expected, state.complete) == (6, 8, False)
    assert (state.retries, state.errors) == (3, 1)
    # every row's: spent
    assert (state.prompt_tokens, state.completion_tokens, state.cost_usd) == (60, 30, 0.75)
    assert [(f.task_id, f.status) for f in state.recent] == [("q4", "unparseable"), ("q3", "wrong")]
    page = render_progress(state)
    lo, hi = wilson(2, 4)
    assert f"[{lo:.3f}, {hi:.3f}]" in page and "<td>0.500</td>" in page
    assert (
        "6 / 8 items (75.0%)" in page and "$0.7500" in page and "60 prompt + 30 completion" in page
    )


def test_page_is_self_contained_with_progress_bars(results: Path) -> None:
    page = render_progress(progress_state(results), refresh_s=5)
    assert '<meta http-equiv="refresh" content="5">' in page
    assert page.count('class="arm-progress"') == 2 and 'id="overall-progress"' in page
    assert (
        '<progress class="arm-progress" id="arm-progress-0" data-arm="a" value="4" max="4">' in page
    )
    assert "<svg" in page and "<polyline" in page
    assert not re.search(
        r"<script|<link|\bsrc=|\bhref=|@import|url\(", page.replace(html.escape(PAYLOAD), "")
    )


def test_torn_tail_and_garbage_lines_are_skipped(tmp_path: Path) -> None:
    torn = json.dumps(make_row("q9", "a")).encode()[:-1]  # no newline: still being written
    path = write(
        tmp_path / "run.jsonl", [meta(), make_row("q1", "a")], tail=b"not json\n[1, 2]\n" + torn
    )
    state = progress_state(path)
    assert state.done == 1 and "q9" not in render_progress(state)
    path.write_bytes(path.read_bytes() + b"}\n")  # the line lands
    assert progress_state(path).done == 2


def test_older_rows_without_meta(tmp_path: Path) -> None:
    old = [
        {
            "task_id": "q1",
            "arm": "a",
            "passed": True,
            "detail": "passed",
            "wall_seconds": 0.1,
            "sub_calls": 1,
        },
        {
            "task_id": "q2",
            "arm": "a",
            "passed": False,
            "detail": "unparseable",
            "wall_seconds": 0.1,
            "sub_calls": 1,
        },
    ]
    state = progress_state(write(tmp_path / "old.jsonl", old))
    arm = state.arms["a"]
    assert (arm.expected, arm.done, arm.correct, arm.unparseable) == (None, 2, 1, 1)
    assert state.expected is None and state.throughput is None and state.prompt_tokens is None
    page = render_progress(state)
    assert "2 items (total not known)" in page and "Tokens" not in page


def test_missing_file_renders_an_empty_page(tmp_path: Path) -> None:
    state = progress_state(
        tmp_path / "not-yet.jsonl", LiveCounters({"a": 3}, started_at=T0), now=T0 + 5
    )
    assert (state.done, state.expected, state.throughput) == (0, 3, 0.0)
    assert 'value="0" max="3"' in render_progress(state)


def test_several_benchmarks_key_arms_by_benchmark(tmp_path: Path) -> None:
    head = meta() | {
        "benchmark": "x+y",
        "benchmarks": {"x": {"items": 2}, "y": {"items": 3}},
        "arms": {"x": ["a", "b"], "y": ["a"]},
    }
    path = write(
        tmp_path / "run.jsonl",
        [head, make_row("q1", "a", benchmark="x"), make_row("q1", "a", benchmark="y")],
    )
    state = progress_state(path)
    assert {k: (a.expected, a.done) for k, a in state.arms.items()} == {
        "x/a": (1, 1),
        "x/b": (1, 0),
        "y/a": (3, 1),
    }


def test_throughput_and_eta(tmp_path: Path) -> None:
    rows = [make_row(f"q{i}", "a", start=T0 + 60 * i, end=T0 + 60 * (i + 1)) for i in range(4)]
    state = progress_state(write(tmp_path / "run.jsonl", [meta(8, ("a",)), *rows]), now=T0 + 999)
    assert state.throughput == pytest.approx(1.0) and state.eta_s == pytest.approx(240)
    page = render_progress(state)
    assert "1.0 items/min" in page and "4m 00s" in page


def test_live_counters_add_to_the_file(tmp_path: Path) -> None:
    # a session before this resume
    earlier = [make_row("q1", "a", run_id="r0", start=T0 - 900, end=T0 - 800)]
    now_rows = [make_row(f"q{i}", "a", start=T0, end=T0 + 30 * i) for i in (2, 3)]
    path = write(tmp_path / "run.jsonl", [meta(), *earlier, *now_rows])
    live = LiveCounters(
        {"a": 3}, retries=4, incomplete=1, aborted=2, started_at=T0, stopped="interrupted: Ctrl-C"
    )
    state = progress_state(path, live, now=T0 + 120)
    assert (state.arms["a"].expected, state.done, state.session_done) == (4, 3, 2)
    # 2 rows in the 2 minutes since this session started
    assert state.throughput == pytest.approx(1.0)
    assert (state.retries, state.incomplete, state.aborted, state.eta_s) == (4, 1, 2, None)
    assert "Stopped early:</strong> interrupted: Ctrl-C" in render_progress(state)


def test_everything_from_the_file_is_escaped(tmp_path: Path) -> None:
    evil = [
        make_row(
            PAYLOAD,
            PAYLOAD,
            "wrong",
            output="x" * 500 + PAYLOAD,
            answer=PAYLOAD,
            target=PAYLOAD,
            benchmark=PAYLOAD,
        )
    ]
    path = write(tmp_path / "run.jsonl", [meta(1, (PAYLOAD,), PAYLOAD), *evil])
    Path(str(path) + ".stop.json").write_text(
        json.dumps({"reason": "exhausted", "message": PAYLOAD})
    )
    page = render_progress(progress_state(path))
    assert (
        "<script" not in page.lower()
        and "<img" not in page.lower()
        and "onerror=alert(1)>" not in page
    )
    assert (
        "&lt;script&gt;alert(1)&lt;/script&gt;&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in page
    )
    assert "x" * 201 not in page  # only the tail of the output is shown


def test_stop_marker_is_shown(results: Path) -> None:
    marker = Path(str(results) + ".stop.json")
    marker.write_text(json.dumps({"reason": "exhausted", "message": "quota used up for arm b"}))
    state = progress_state(results)
    assert state.stopped == "exhausted: quota used up for arm b" and state.eta_s is None
    page = render_progress(state)
    assert (
        'id="stopped"' in page
        and "exhausted: quota used up for arm b" in page
        and ">stopped</span>" in page
    )
    marker.write_text("{torn")
    assert progress_state(results).stopped == "stopped: see run.jsonl.stop.json"


def test_write_atomic_replaces_and_leaves_no_temp_file(tmp_path: Path) -> None:
    page = tmp_path / "status.html"
    page.write_text("old")
    write_atomic(page, b"new page")
    assert page.read_text() == "new page" and os.listdir(tmp_path) == ["status.html"]
    assert page.stat().st_mode & 0o777 == 0o644


def test_write_atomic_failure_keeps_the_old_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = tmp_path / "status.html"
    page.write_text("old")

    def refuse(src: str, dst: Path) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError):
        write_atomic(page, b"new")
    assert page.read_text() == "old" and os.listdir(tmp_path) == ["status.html"]


def test_write_progress(results: Path, tmp_path: Path) -> None:
    out = tmp_path / "pages" / "status.html"
    write_progress(results, out, LiveCounters({"a": 0, "b": 2}, started_at=T0))
    assert "echo-bench progress: demo" in out.read_text()


def test_watch_stops_when_told(results: Path, tmp_path: Path) -> None:
    out, calls = tmp_path / "status.html", []

    def stop() -> bool:
        calls.append(1)
        return len(calls) >= 3

    watch(results, out, interval_s=0.01, stop=stop)
    assert len(calls) == 3 and sorted(os.listdir(tmp_path)) == ["run.jsonl", "status.html"]


def test_watch_picks_up_new_rows_then_ends_at_the_stop_marker(
    results: Path, tmp_path: Path
) -> None:
    out, stop = tmp_path / "status.html", threading.Event()
    thread = threading.Thread(target=watch, args=(results, out, 0.02, stop.is_set))
    thread.start()
    try:
        with results.open("a") as f:
            f.write(json.dumps(make_row("q3", "b")) + "\n")
        # Atomically, as the plugin writes it: a half-written marker is a stop of unknown reason.
        write_atomic(
            Path(str(results) + ".stop.json"),
            json.dumps({"reason": "store-error", "message": "disk full"}).encode(),
        )
        thread.join(timeout=10)
        assert not thread.is_alive()  # the marker ended it, not the test's stop event
    finally:
        stop.set()
        thread.join()
    page = out.read_text()
    assert "7 / 8 items" in page
    assert "store-error: disk full" in page


def test_watch_ends_when_the_run_is_complete(tmp_path: Path) -> None:
    path = write(tmp_path / "run.jsonl", [meta(2), make_row("q1", "a"), make_row("q1", "b")])

    def never() -> bool:
        raise AssertionError("watch should have seen the run complete")

    watch(path, tmp_path / "status.html", interval_s=60, stop=never)
    assert ">complete</span>" in (tmp_path / "status.html").read_text()


# ---------------------------------------------------------------- a real browser


def chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)


def test_page_in_a_real_browser(tmp_path: Path) -> None:
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium package: apt-get install chromium")
    attack = (
        '<script>document.title=\'pwned\'</script>"><img id="pwned-img" src=x '
        "onerror=\"document.title='pwned'\">"
        '<b id="pwned-b">bold</b>'
    )
    path = write(
        tmp_path / "run.jsonl",
        [
            meta(),
            make_row("q1", "a"),
            make_row("q2", "a", "wrong", output="Reasoning... " + attack, answer=attack),
            make_row("q1", "b", "unparseable", target=attack),
        ],
    )
    page = tmp_path / "status.html"
    write_progress(path, page)

    dumped = chromium(tmp_path / "profile-dom", "--dump-dom", page.as_uri())
    dom = dumped.stdout
    assert dumped.returncode == 0 and "</html>" in dom, dumped.stderr[-2000:]
    assert dom.count('class="arm-progress"') == 2 and 'id="overall-progress"' in dom
    title = re.search(r"<title>(.*?)</title>", dom, re.S)
    assert title is not None and "pwned" not in title.group(1)
    assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;" in dom  # shown as text
    # never became elements
    assert "<script" not in dom and "<img" not in dom and '<b id="pwned-b"' not in dom

    shot = tmp_path / "shot.png"
    taken = chromium(
        tmp_path / "profile-shot", f"--screenshot={shot}", "--window-size=1200,900", page.as_uri()
    )
    assert shot.exists(), taken.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000



def test_a_kept_feed_reads_only_what_was_appended(tmp_path: Path) -> None:
    """Each refresh reads from where the last one stopped: rewriting a row already read changes
    nothing (a full re-read would count it as a new item), while the appended rows are counted."""
    path = write(tmp_path / "run.jsonl", [meta(8), *(make_row(f"q{i}", "a") for i in range(3))])
    feed = PageFeed(path)
    feed.update()
    assert feed.state().done == 3 and feed.end[0] == path.stat().st_size
    data = path.read_bytes()
    # the first row, same length: another arm
    path.write_bytes(data.replace(b'"arm": "a"', b'"arm": "c"', 1))
    with open(path, "ab") as f:
        f.write(json.dumps(make_row("q3", "a", "wrong")).encode() + b"\n")
    feed.update()
    state = feed.state()
    assert (state.done, state.arms["a"].done, state.arms["a"].correct, "c" in state.arms) == (
        4,
        4,
        3,
        False,
    )
    fresh = progress_state(path)  # the control: a fresh read does see the rewritten row
    assert (fresh.arms["a"].done, fresh.arms["c"].done) == (3, 1)


def test_a_kept_feed_equals_a_fresh_read_as_the_file_grows(tmp_path: Path) -> None:
    """Appends in pieces (a torn line completed later, a duplicate, a second run) give the page a
    fresh read of the whole file would give."""
    path = write(tmp_path / "run.jsonl", [meta(8, ("a", "b"))])
    feed = PageFeed(path)
    rows = [
        make_row("q1", "a"),
        make_row("q2", "a", "wrong", output=PAYLOAD),
        make_row("q1", "b", "error"),
        make_row("q1", "a", "wrong"),
        make_row("q3", "b", "unparseable", run_id="r2", start=T0 + 5, end=T0 + 9),
    ]
    lines = b"".join(json.dumps(r).encode() + b"\n" for r in rows)
    for cut in (0, 37, len(lines) // 2, len(lines) - 3, len(lines)):
        path.write_bytes(
            path.read_bytes()[: len(json.dumps(meta(8, ("a", "b")))) + 1] + lines[:cut]
        )
        feed.update()
        assert render_progress(feed.state(now=T0 + 60)) == render_progress(
            progress_state(path, now=T0 + 60)
        )


def test_a_page_with_a_lone_surrogate_is_written(tmp_path: Path) -> None:
    path = write(
        tmp_path / "run.jsonl", [meta(), make_row("q1", "a", "wrong", output="\ud800 five")]
    )
    out = tmp_path / "status.html"
    # a lone surrogate (a valid JSON escape) is replaced, never fails the page
    write_progress(path, out)
    assert "? five" in out.read_text()


def test_arm_colours_on_the_page_stay_distinct_beyond_ten_arms(tmp_path: Path) -> None:
    arms = tuple(f"arm{i}" for i in range(14))
    rows = [make_row("q1", arm) for arm in arms]
    page = render_progress(
        progress_state(write(tmp_path / "run.jsonl", [meta(14, arms), *rows]), now=T0 + 60)
    )
    swatches = re.findall(r'class="swatch" style="background:(#[0-9a-f]{6})"', page)
    strokes = re.findall(r'<polyline fill="none" stroke="(#[0-9a-f]{6})"', page)
    # the chart matches the table
    assert len(swatches) == 14 and len(set(swatches)) == 14 and strokes == swatches


def test_a_kept_feed_starts_over_when_the_file_is_replaced(tmp_path: Path) -> None:
    path = write(tmp_path / "run.jsonl", [meta(8), make_row("q1", "a", "wrong")])
    feed = PageFeed(path)
    feed.update()
    bigger = write(tmp_path / "other.jsonl", [meta(8), *(make_row(f"q{i}", "a") for i in range(4)),
                                                      make_row("q1", "b")])
    os.replace(bigger, path)  # another, larger file at the same path
    feed.update()
    assert render_progress(feed.state(now=T0 + 60)) == render_progress(
        progress_state(path, now=T0 + 60)
    )
    assert feed.state().arms["a"].correct == 4
