"""Text from a model or a dataset cannot drive the terminal: ESC, OSC, BEL, C1 and bidi characters
in a task id, a model's output or a server's error reach stdout, JUnit XML and json-report escaped,
while the results file keeps them exactly and resume still finds every item by its id."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from openai_server import FakeOpenAI

from conftest import Sweep, make_spec, report_args, reports
from pytest_echo_bench.store.redaction import redact
from pytest_echo_bench.store.safe_text import escape_id, shown, unescape_id

# Clear the screen, draw a fake pytest result line, write the clipboard (OSC 52), ring the bell,
# a C1 CSI, and bidi overrides and isolates that reorder what a reader sees.
HOSTILE = ("\x1b[2J\x1b[H===== 2 passed in 0.01s =====\x1b]52;c;ZXZpbA==\x07\x9b31m"
           "\u202eexe.txt\u202c \u2066iso\u2069 \u202a\u202b\u202d\x1b]0;title\x1b\\ \x00\x7f\x08")
# Every character that must never reach a report unescaped (line feeds and tabs may).
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
ODD_ID = "q\x1b[31m\u202eodd\x07"
# the escaped spelling of ODD_ID as a plain id: must stay distinct
LOOKALIKE = "q\\x1b[31m\\u202eodd\\x07"
IDS = (ODD_ID, LOOKALIKE, "plain", "bad")


def write_dataset(pytester: pytest.Pytester) -> None:
    items = [{"id": task, "input": f"ask {n}", "target": "4"} for n, task in enumerate(IDS)]
    items[0]["target"] = "4\x1b[5m\u202e"  # a dataset's target is shown too
    (pytester.path / "items.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))


def hostile_spec(server: FakeOpenAI) -> str:
    return (
        "benchmark: demo\ndataset:\n  loader: jsonl\n  path: items.jsonl\nscorer: exact\narms:\n"
        f"  gpt:\n    provider: openai\n    model: m\n    base_url: {server.base_url}\n"
        "    api_key_env: TEST_OPENAI_KEY\n    client: http\nretries: {attempts: 1, "
        "backoff_s: 0.01}\n"
    )


def answer(prompt: str) -> str:
    return "4" if prompt == "ask 2" else f"{HOSTILE} so the answer is 5 {HOSTILE}"


def strings(value: Any) -> list[str]:
    """Every string in a parsed JSON value, keys included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def assert_clean(stdout: str, xml: str, report: str) -> None:
    for name, text in (("stdout", stdout), ("junit xml", xml), ("json-report", report)):
        assert not UNSAFE.search(text), f"{name}: {UNSAFE.search(text)!r}"
    # what pytest's XML escaping makes of a raw ESC: it should never see one
    assert "#x1B" not in xml
    hidden = [s for s in strings(json.loads(report)) if UNSAFE.search(s)]
    assert not hidden, hidden[:3]


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("TEST_OPENAI_KEY", "sk-test-hostile-0000")
    with FakeOpenAI(answer=answer) as fake:
        # The "bad" item's request is refused with an error text as hostile as the outputs.
        fake.fault_for = lambda body: (
            ("error", (400, {"message": HOSTILE, "code": "bad\x1b[0m"}, {}))
            if body["messages"][-1]["content"] == "ask 3"
            else None
        )
        yield fake


def test_hostile_text_is_escaped_everywhere_but_kept_in_the_results(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeOpenAI
) -> None:
    write_dataset(pytester)
    make_spec(pytester, hostile_spec(server))
    result, _, rows = sweep.run(*report_args(pytester))
    result.assert_outcomes(passed=1, failed=3)
    stdout = result.stdout.str()
    assert_clean(stdout, *reports(pytester))
    # the -v line, escaped and readable
    assert f"demo.yaml::{escape_id(ODD_ID)}[gpt] FAILED" in stdout
    assert "\\x1b[2J" in stdout and "\\u202e" in stdout  # failure texts show what was there
    by_id = {r["task_id"]: r for r in rows}
    assert set(by_id) == set(IDS)  # ODD_ID and LOOKALIKE stayed two items
    assert (
        by_id[ODD_ID]["output"] == answer("ask 0") and by_id[ODD_ID]["target"] == "4\x1b[5m\u202e"
    )
    # exactly as received
    assert HOSTILE in by_id["bad"]["detail"] and by_id["bad"]["status"] == "error"
    entries = {t["nodeid"] for t in json.loads(reports(pytester)[1])["tests"]}
    assert (
        f"demo.yaml::{escape_id(ODD_ID)}[gpt]" in entries
        and f"demo.yaml::{escape_id(LOOKALIKE)}[gpt]" in entries
    )


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_resume_finds_odd_ids_by_their_key(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeOpenAI, workers: tuple[str, ...]
) -> None:
    write_dataset(pytester)
    make_spec(pytester, hostile_spec(server))
    sweep.run("--bench-cache", "off")
    lines = sweep.out.read_bytes().splitlines(keepends=True)
    kept = [line for line in lines if b'"task_id":"plain"' not in line.replace(b" ", b"")]
    assert len(kept) == len(lines) - 1
    sweep.out.write_bytes(b"".join(kept))  # as if the run had stopped before "plain"
    served = len(server.requests)
    result, _, rows = sweep.run("--bench-resume", str(sweep.out), "--bench-cache", "off", *workers,
                                *report_args(pytester))
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*resuming*: 3 recorded, 1 to run*"])
    assert len(server.requests) == served + 1  # only "plain" was asked again
    assert sorted(r["task_id"] for r in rows) == sorted(IDS)
    assert_clean(result.stdout.str(), *reports(pytester))


def test_a_stop_message_from_a_server_is_escaped(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeOpenAI
) -> None:
    write_dataset(pytester)
    make_spec(pytester, hostile_spec(server))
    server.fault_for = lambda body: (
        "error",
        (429, {"message": HOSTILE, "code": "insufficient_quota"}, {}),
    )
    result, _, rows = sweep.run(*report_args(pytester))
    assert result.ret == 2 and rows == []
    result.stdout.fnmatch_lines(["*stopped early (exhausted:*resume with:*"])
    assert_clean(result.stdout.str(), *reports(pytester))
    marker = json.loads((pytester.path / "results.jsonl.stop.json").read_text())
    assert HOSTILE in marker["message"]  # the marker is a file for programs: exact


@pytest.mark.parametrize(
    "text", [ODD_ID, LOOKALIKE, "\\", "\\\\x1b", "a\ud800b", HOSTILE, "plain/1", ""]
)
def test_escape_id_is_reversible_and_printable(text: str) -> None:
    name = escape_id(text)
    assert unescape_id(name) == text and not UNSAFE.search(name)


def test_distinct_ids_never_share_a_node_name() -> None:
    ids = [ODD_ID, LOOKALIKE, "\\", "\\\\", "\x1b", "\\x1b", "\\\\x1b"]
    assert len({escape_id(i) for i in ids}) == len(ids)


def test_shown_keeps_lines_and_escapes_the_rest() -> None:
    assert shown("a\r\nb\tc\rd\x1be") == "a\nb\tc\\x0dd\\x1be"
    assert shown("a\nb", newlines=False) == "a\\x0ab"
    assert shown("plain text") == "plain text"


def test_redact_hides_every_key_and_leaves_short_values() -> None:
    key = "sk-proj-PLANTED7c1e0f9a4b2d"
    text = redact(f"Bearer {key} and x-api-key {key}; abc", [key, "abc", key + "\n"])
    assert key not in text and text.count("sk-…[redacted]") == 2 and text.endswith("; abc")
