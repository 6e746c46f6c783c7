"""Task ids, targets and outputs with any code point (lone surrogates, controls, bidi characters
included) go through a real sweep, serial and under xdist: the rows read back equal, ``echo-bench
report`` names the same ids, a resume deselects every recorded key, and nothing pytest or
echo-bench prints holds a raw control or bidi character."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai_server import FakeOpenAI

from conftest import make_spec, read_rows
from pytest_echo_bench.cli.main import main
from pytest_echo_bench.store.safe_text import escape_id, shown, unescape_id

# Every character that must never reach a terminal raw (line feeds and tabs may).
UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
ANY = st.characters(exclude_categories=())  # Hypothesis leaves out surrogates unless told
# Odd characters often, so each batch has every kind: lone surrogates, C0/C1 controls, bidi marks.
ODD = st.sampled_from(
    [
        "\ud800",
        "\udfff",
        "\udcff",
        "\x1b",
        "\x07",
        "\x00",
        "\r",
        "\n",
        "\x9b",
        "\u202e",
        "\u2066",
        "\\",
        "[",
        "]",
        "::",
        "/",
        " ",
        "-e2",
        "\u0663",
        "\U0001f600",
    ]
)
TEXT = st.lists(st.one_of(ANY, ODD), max_size=8).map("".join)
TASK_IDS = st.lists(TEXT.filter(bool), min_size=12, max_size=12, unique=True)
SPEC = ("benchmark: demo\ndataset:\n  loader: jsonl\n  path: items.jsonl\nscorer: exact\narms:\n"
        "  ref: {provider: reference}\n  sim: {provider: sim, accuracy: 0.5}\n")
SETTINGS = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
RUNS = itertools.count()


def sweep(pytester: pytest.Pytester, out: Path, *args: str) -> pytest.RunResult:
    flag = "--bench-resume" if out.exists() else "--bench-out"
    return pytester.runpytest(
        "-p", "no:cacheprovider", "-v", "-rA", flag, str(out), "--bench-cache", "off", *args
    )


def write_items(pytester: pytest.Pytester, ids: list[str], targets: list[str]) -> None:
    items = [
        {"id": task, "input": f"ask {task}", "target": target}
        for task, target in zip(ids, targets, strict=True)
    ]
    # json.dumps writes a lone surrogate as the escape "\ud800", which
    # JSON allows and UTF-8 does not.
    (pytester.path / "items.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))


def check_sweep(
    pytester: pytest.Pytester,
    capsys: pytest.CaptureFixture[str],
    ids: list[str],
    targets: list[str],
    workers: tuple[str, ...],
) -> None:
    write_items(pytester, ids, targets)
    out = pytester.path / f"run{next(RUNS)}.jsonl"
    result = sweep(pytester, out, *workers)
    # wrong answers are results: the sweep completed
    assert result.ret == 0, result.stdout.str()[-3000:]
    printed = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in printed and not UNSAFE.search(printed), UNSAFE.search(printed)
    _, rows = read_rows(out)
    assert sorted((r["task_id"], r["arm"]) for r in rows) == sorted(
        (t, a) for t in ids for a in ("ref", "sim")
    )
    target_of = dict(zip(ids, targets, strict=True))
    for row in rows:
        assert row["target"] == target_of[row["task_id"]] and row["status"] in (
            "correct",
            "wrong",
            "unparseable",
        )
        if row["arm"] == "ref":
            # the exact text, every code point kept
            assert row["output"] == target_of[row["task_id"]]
    again = sweep(pytester, out, *workers)
    assert again.ret == 0, again.stdout.str()[-3000:]
    again.stdout.fnmatch_lines([f"*resuming*: {2 * len(ids)} recorded, 0 to run*"])
    assert not UNSAFE.search(again.stdout.str())
    capsys.readouterr()
    assert main(["report", str(out), "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)["disagreements"].get("demo", {}).get("shown", [])
    assert {d["task_id"] for d in shown} <= set(ids)  # the ids themselves, as JSON escapes


@pytest.mark.parametrize("workers, examples", [((), 4), (("-n", "2"), 1)], ids=["serial", "xdist"])
def test_any_code_point_survives_a_sweep_and_its_resume(
    pytester: pytest.Pytester,
    capsys: pytest.CaptureFixture[str],
    workers: tuple[str, ...],
    examples: int,
) -> None:
    make_spec(pytester, SPEC)

    @settings(SETTINGS, max_examples=examples)
    @given(ids=TASK_IDS, targets=st.lists(TEXT, min_size=12, max_size=12))
    def prop(ids: list[str], targets: list[str]) -> None:
        check_sweep(pytester, capsys, ids, targets, workers)

    prop()


# -- examples that found bugs, kept as plain tests -----------------------------------------------
@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_a_lone_surrogate_in_an_id_is_recorded_and_resumed(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str], workers: tuple[str, ...]
) -> None:
    """Was an ``UnicodeEncodeError`` row for ``sim`` (its seed hash) and, under
    xdist, an INTERNALERROR (execnet refuses to send a string UTF-8 cannot
    encode) even for the reference arm."""
    make_spec(pytester, SPEC)
    check_sweep(
        pytester, capsys, ["q\ud800", "\udfffa", "plain"], ["4\ud800", "4", "\udcff"], workers
    )


def test_a_model_answer_with_a_lone_surrogate_is_recorded_exactly(
    pytester: pytest.Pytester,
) -> None:
    """A JSON reply may hold the escape "\\ud800": the response cache (SQLite, UTF-8) cannot store
    it, which failed the item with a traceback and no row; now the row
    keeps it and the cache skips it."""
    answer = "4\ud800 so \x1b[2J\u202e 4 \udfff"
    with FakeOpenAI(answer=lambda prompt: answer) as server:
        make_spec(
            pytester,
            "benchmark: demo\ndataset:\n  loader: inline\n  items:\n    - {id: q1, input: a, "
            "target: '4'}\n"
            "scorer: exact\narms:\n  gpt:\n    provider: openai\n    model: m\n    "
            f"base_url: {server.base_url}\n"
            "    api_key_env: null\n    client: http\n",
        )
        out = pytester.path / "r.jsonl"
        result = pytester.runpytest("-p", "no:cacheprovider", "-v", "--bench-out", str(out))
        again = pytester.runpytest(
            "-p", "no:cacheprovider", "--bench-out", str(pytester.path / "again.jsonl")
        )
    assert result.ret == 0 and again.ret == 0  # a wrong answer is a result
    assert not UNSAFE.search(result.stdout.str()) and "Traceback" not in result.stdout.str()
    assert (
        [r["output"] for r in read_rows(out)[1]]
        == [answer]
        == [r["output"] for r in read_rows(pytester.path / "again.jsonl")[1]]
    )
    assert len(server.requests) == 2  # not cached, asked again


def test_shards_split_ids_with_lone_surrogates(pytester: pytest.Pytester) -> None:
    """The shard hash took UTF-8 bytes of the key: an id with a lone
    surrogate raised in collection."""
    ids = ["q\ud800", "\udfff", "a\udcff\x1b", "plain", "\u202e"]
    write_items(pytester, ids, ["4"] * len(ids))
    make_spec(pytester, SPEC)
    rows = []
    for shard in ("1/2", "2/2"):
        out = pytester.path / f"shard{shard[0]}.jsonl"
        result = sweep(pytester, out, "--bench-shard", shard)
        assert result.ret == 0 and not UNSAFE.search(result.stdout.str()), result.stdout.str()[
            -2000:
        ]
        rows += read_rows(out)[1]
    assert sorted((r["task_id"], r["arm"]) for r in rows) == sorted(
        (t, a) for t in ids for a in ("ref", "sim")
    )


@settings(SETTINGS, max_examples=200)
@given(text=st.lists(st.one_of(ANY, ODD), max_size=30).map("".join))
def test_shown_and_escape_id_take_any_code_point(text: str) -> None:
    for newlines in (True, False):
        out = shown(text, newlines)
        out.encode("utf-8")  # a terminal can take it
        assert not UNSAFE.search(out) and (newlines or "\n" not in out)
        touched = (
            UNSAFE.search(text) or "\r\n" in text or not newlines and re.search("[\n\t]", text)
        )
        assert out == text or touched  # nothing safe is changed
    assert (
        unescape_id(escape_id(text)) == text
        and not UNSAFE.search(escape_id(text))
        and "\n" not in escape_id(text)
    )


def test_a_yaml_id_with_a_lone_surrogate_is_refused_naming_the_line(
    pytester: pytest.Pytester,
) -> None:
    """libyaml (the loader specs use when present) refuses the escape "\\ud800" in a YAML string: a
    spec error naming file and line, not a crash (a JSON Lines dataset takes such ids)."""
    if not getattr(yaml, "__with_libyaml__", False):
        pytest.skip("PyYAML without libyaml reads the escape as a lone surrogate")
    make_spec(
        pytester,
        'benchmark: demo\ndataset:\n  loader: inline\n  items:\n    - {id: "q\\ud800", '
        'input: a, target: "4"}\n'
        "scorer: exact\narms:\n  ref: {provider: reference}\n",
    )
    result = sweep(pytester, pytester.path / "r.jsonl")
    assert result.ret == pytest.ExitCode.INTERRUPTED and "Traceback" not in result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*invalid benchmark spec: *demo.yaml:5: malformed YAML: found invalid Unicode "
            "character escape*"
        ]
    )


FLAKY = """
    from pathlib import Path
    from pytest_echo_bench import arm

    @arm("flaky")
    def flaky(ctx):
        # An error row while fail.txt says so, then the right answer ("plain", the first item,
        # always: an arm whose first calls all fail is taken for misconfigured).
        if Path("fail.txt").read_text() == "fail" and ctx.example.id != "plain":
            raise ValueError("prompt rejected")
        return ctx.example.target
"""


def test_retried_error_rows_of_odd_ids_replace_their_old_rows_in_the_counts(
    pytester: pytest.Pytester,
) -> None:
    """The payload carries the id escaped; the live counts look the old row up by the id itself."""
    pytester.makeconftest(FLAKY)
    ids = ["plain", "q\ud800", "a\\x1b", "a\x1b", "\u202e[x]"]
    write_items(pytester, ids, ["4"] * len(ids))
    make_spec(
        pytester,
        SPEC.replace(
            "  sim: {provider: sim, accuracy: 0.5}\n",
            "  flaky: {provider: python, function: flaky}\n",
        ),
    )
    out = pytester.path / "r.jsonl"
    (pytester.path / "fail.txt").write_text("fail")
    assert sweep(pytester, out).ret == 0
    (pytester.path / "fail.txt").write_text("pass")
    result = sweep(pytester, out, "--bench-retry-errors")
    assert result.ret == 0 and not UNSAFE.search(result.stdout.str())
    result.stdout.fnmatch_lines(["*resuming*: 6 recorded, 4 to run*"])
    summary = json.loads(Path(f"{out}.summary.json").read_text())["arms"]["flaky"]
    assert (summary["n"], summary["correct"], summary["errors"]) == (5, 5, 0)
