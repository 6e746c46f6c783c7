"""``echo-bench estimate``: the items a run selects, their calls and their
cost, before anything is sent.

Selection is checked against pytest's own (-k, --bench-shard) on the same spec; costs against
sums written out here; history against a real sweep through a local OpenAI-compatible server.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from _pytest.mark.expression import Expression
from hypothesis import given, settings
from hypothesis import strategies as st
from openai_server import FakeOpenAI

from conftest import Sweep
from pytest_echo_bench.budget.estimate import estimate_arm, prompt_tokens, worst_case_usd
from pytest_echo_bench.cli.estimate import item_name, mark_names
from pytest_echo_bench.cli.keyword import parse_keyword
from pytest_echo_bench.cli.main import main
from pytest_echo_bench.datasets.registry import load_benchmark
from pytest_echo_bench.plugin import collect

ITEMS = """\
    - {id: q1, input: "What is 2+2?", target: "4", subtask: add}
    - {id: q2, input: "What is 3+3? Say it.", target: "6", subtask: add}
    - {id: q3, input: "Twice three?", target: "6", subtask: "mul ti"}
"""


def spec_text(arms: str, extra: str = "", benchmark: str = "demo") -> str:
    return (
        f"benchmark: {benchmark}\ndataset:\n  loader: inline\n  items:\n{ITEMS}scorer: "
        f"numeric\narms:\n{arms}\n{extra}"
    )


PRICED = spec_text(
    "  small: {provider: openai, model: m, base_url: 'http://127.0.0.1:9/v1', max_tokens: "
    "100, system: 'Be brief.'}\n"
    "  big: {provider: anthropic, model: c, base_url: 'http://127.0.0.1:9'}\n"
    "  esc: {provider: cascade, cheap: small, n: 2, strong: big}\n",
    "pricing:\n  small: {input: 1.0, output: 2.0}\n  big: {input: 3.0, output: 15.0}\n",
)


def run_json(*argv: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["estimate", *argv, "--format", "json", "--cache", "off"]) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


@pytest.mark.parametrize(
    ("text", "tokens"), [("", 0), ("a", 1), ("abcd", 1), ("abcde", 2), ("x" * 4001, 1001)]
)
def test_prompt_tokens_are_characters_over_four_rounded_up(text: str, tokens: int) -> None:
    assert prompt_tokens(text) == tokens


@settings(max_examples=100, derandomize=True, database=None, deadline=None)
@given(st.text(max_size=300))
def test_prompt_tokens_is_the_ceiling(text: str) -> None:
    tokens = prompt_tokens(text)
    assert tokens == math.ceil(len(text) / 4) and 4 * tokens >= len(text) > 4 * (tokens - 1) - 1


def test_costs_are_the_sums_written_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "demo.yaml"
    spec.write_text(PRICED)
    data = run_json(str(spec), capsys=capsys)
    prompts = ["What is 2+2?", "What is 3+3? Say it.", "Twice three?"]
    small_in = [math.ceil(len(p) / 4) + math.ceil(len("Be brief.") / 4) for p in prompts]
    big_in = [math.ceil(len(p) / 4) for p in prompts]
    small_high = sum(t * 1.0 + 100 * 2.0 for t in small_in) / 1e6
    # the anthropic arm's default max_tokens
    big_high = sum(t * 3.0 + 1024 * 15.0 for t in big_in) / 1e6
    assert data["arms"]["small"]["cost_usd"] == {
        "low": round(sum(small_in) / 1e6, 6),
        "high": round(small_high, 6),
    }
    assert data["arms"]["big"]["cost_usd"]["high"] == round(big_high, 6)
    esc = data["arms"]["esc"]
    # Two cheap calls always; the strong one only when they disagree: at worst every item escalates.
    assert (esc["calls_min"], esc["calls_max"]) == (6, 9)
    assert esc["cost_usd"]["high"] == round(2 * small_high + big_high, 6)
    assert esc["cost_usd"]["low"] == round(2 * sum(small_in) / 1e6, 6)
    assert data["items"] == 9 and data["calls_max"] == 3 + 3 + 9
    assert data["cost_usd"]["high"] == round(3 * small_high + 2 * big_high, 6)


def test_an_arm_without_prices_is_unknown_not_free(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "demo.yaml"
    spec.write_text(
        spec_text(
            "  a: {provider: openai, model: m, base_url: 'http://127.0.0.1:9/v1', max_tokens: 5}\n"
            "  free: {provider: sim, accuracy: 1.0}\n"
            "  j: {provider: cascade, cheap: a, strong: free}\n",
            "pricing:\n  a: {input: 1, output: 1}\n",
        )
    )
    data = run_json(str(spec), capsys=capsys)
    assert (
        data["arms"]["free"]["cost_usd"] == {"low": None, "high": None}
        and not data["arms"]["free"]["priced"]
    )
    # it may call the unpriced arm
    assert data["arms"]["j"]["cost_usd"] == {"low": None, "high": None}
    assert data["cost_usd"] == {"low": None, "high": None}
    # "a" alone is in "demo.yaml": every item
    only_priced = run_json(str(spec), "-k", "arm_a", capsys=capsys)
    assert only_priced["cost_usd"]["high"] is not None and only_priced["items"] == 3
    capsys.readouterr()
    assert main(["estimate", str(spec), "--cache", "off"]) == 0
    assert "unknown" in capsys.readouterr().out


def test_a_python_arm_s_calls_are_unknown_not_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Python arm calls what its code calls: its one call is a
    floor, never a maximum or a price."""
    spec = tmp_path / "demo.yaml"
    spec.write_text(
        spec_text(
            "  a: {provider: openai, model: m, base_url: 'http://127.0.0.1:9/v1', max_tokens: 5}\n"
            "  py: {provider: python, function: 'nowhere:fn'}\n"
            "  r: {provider: cascade, cheap: a, strong: py}\n",
            "pricing:\n  a: {input: 1, output: 1}\n  py: {input: 1, output: 1}\n",
        )
    )
    data = run_json(str(spec), capsys=capsys)
    assert (data["arms"]["py"]["calls_min"], data["arms"]["py"]["calls_max"]) == (3, None)
    assert data["arms"]["r"]["calls_max"] is None and data["arms"]["r"]["cost_usd"]["high"] is None
    assert data["calls_max"] is None and data["cost_usd"] == {"low": None, "high": None}
    assert run_json(str(spec), "-k", "arm_a", capsys=capsys)["calls_max"] == 3


def test_an_arm_without_max_tokens_has_no_high(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "demo.yaml"
    spec.write_text(
        spec_text(
            "  a: {provider: openai, model: m, base_url: 'http://127.0.0.1:9/v1'}\n",
            "pricing:\n  a: {input: 1, output: 1}\n",
        )
    )
    data = run_json(str(spec), capsys=capsys)
    assert data["cost_usd"]["high"] is None and data["cost_usd"]["low"] is not None


def test_the_worst_case_of_remaining_items_is_the_high_of_their_arms(tmp_path: Path) -> None:
    path = tmp_path / "demo.yaml"
    path.write_text(PRICED)
    spec, examples = load_benchmark(path)
    rest = [(examples[1], "esc", 1), (examples[2], "small", 1)]
    esc = estimate_arm(spec, "esc", [(examples[1], 1)]).cost_high
    small = estimate_arm(spec, "small", [(examples[2], 1)]).cost_high
    assert esc is not None and small is not None
    assert worst_case_usd(spec, rest) == pytest.approx(esc + small)
    assert worst_case_usd(spec, []) == 0.0


NESTED = spec_text(
    "  a: {provider: openai, model: m, base_url: 'http://127.0.0.1:9/v1', max_tokens: 10}\n"
    "  b: {provider: openai, model: n, base_url: 'http://127.0.0.1:9/v1', max_tokens: 20}\n"
    "  inner: {provider: cascade, cheap: a, n: 2, agreement: judge, judge: b, strong: b}\n"
    "  outer: {provider: oracle, cheap: [inner, a], strong: b}\n",
    "pricing:\n  a: {input: 1, output: 1}\n  b: {input: 1, output: 1}\n")


def test_routing_arms_nest_their_worst_cases(tmp_path: Path) -> None:
    path = tmp_path / "demo.yaml"
    path.write_text(NESTED)
    spec, examples = load_benchmark(path)
    inner = estimate_arm(spec, "inner", [(examples[0], 1)])
    # two cheap and the judge; then the strong one
    assert (inner.calls_min, inner.calls_max) == (3, 4)
    outer = estimate_arm(spec, "outer", [(examples[0], 1)])
    assert (outer.calls_min, outer.calls_max) == (3 + 1, 4 + 1 + 1)
    # The judge reads both cheap answers: at worst 2 x a's max_tokens more prompt than its template.
    p = prompt_tokens("What is 2+2?")
    judge_tokens = prompt_tokens(
        "Question:\nWhat is 2+2?\n\n\n\nDo these answers reach the same final answer? "
        "Reply with exactly one word: yes or no."
    ) + 2 * prompt_tokens("Answer 1:\n\n\n")
    high = 2 * (p + 10) + (judge_tokens + 2 * 10 + 20) + (p + 20)
    assert inner.cost_high == pytest.approx(high / 1e6)


@pytest.fixture
def layout(pytester: pytest.Pytester) -> Path:
    """A spec in a folder below the rootdir, with epochs, subtasks and an arm name holding '-'."""
    folder = pytester.mkdir("suite")
    spec = folder / "demo.yaml"
    spec.write_text(
        spec_text(
            "  small-x: {provider: sim, accuracy: 1.0}\n  big: {provider: sim, accuracy: 0.0}\n",
            "epochs: 2\n",
        )
    )
    pytester.makeini("[pytest]\n")
    return spec


def pytest_selects(pytester: pytest.Pytester, *args: str) -> set[str]:
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider", "suite", *args)
    return {line.split("::", 1)[1] for line in result.outlines if "::" in line}


def estimate_selects(pytester: pytest.Pytester, spec: Path, *args: str) -> set[str]:
    spec_obj, examples = load_benchmark(spec)
    from pytest_echo_bench.cli.estimate import select

    keyword = args[1] if args[:1] == ("-k",) else None
    shard = tuple(map(int, args[1].split("/"))) if args[:1] == ("--bench-shard",) else None
    keywords = parse_keyword(keyword)
    chosen = select(spec_obj, examples, pytester.path, keywords, shard)  # type: ignore[arg-type]
    return {item_name(ex.id, arm, epoch, spec_obj.epochs) for ex, arm, epoch in chosen}


KEYWORDS = [
    "small",
    "not small",
    "small and e2",
    "suite",
    "demo.yaml",
    "q1[",
    "(big or q3) and not e1",
    "SMALL-X",
    "arm_small_x",
    "bench_subtask and not add",
    "subtask_mul_ti",
    "x-e",
    "yaml and big",
    "nothing",
    "e",
    "not (q1 or q2)",
]


@pytest.mark.parametrize("expr", KEYWORDS)
def test_k_selects_what_pytest_selects(pytester: pytest.Pytester, layout: Path, expr: str) -> None:
    expected = pytest_selects(pytester, "-k", expr)
    assert estimate_selects(pytester, layout, "-k", expr) == expected
    assert expr not in ("small", "nothing") or (
        len(expected) == 6 if expr == "small" else not expected
    )


def test_a_shard_is_the_share_the_run_collects(pytester: pytest.Pytester, layout: Path) -> None:
    shares = []
    for k in (1, 2, 3):
        share = estimate_selects(pytester, layout, "--bench-shard", f"{k}/3")
        assert share == pytest_selects(pytester, "--bench-shard", f"{k}/3")
        shares.append(share)
    assert sum(map(len, shares)) == 12 and len(set().union(*shares)) == 12


SCHEDULERS = (
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_MAX",
    "SLURM_ARRAY_TASK_STEP",
    "JOB_COMPLETION_INDEX",
    "ECHO_BENCH_SHARD_COUNT",
    "ECHO_BENCH_SHARD",
)


def estimated_items(
    capsys: pytest.CaptureFixture[str], spec: Path, *argv: str
) -> tuple[int, dict[str, Any]]:
    """The estimate's status and JSON; on a refusal, its message as ``{"error": ...}``."""
    capsys.readouterr()
    status = main(["estimate", str(spec), "--format", "json", "--cache", "off", *argv])
    printed = capsys.readouterr()
    return status, json.loads(printed.out) if status == 0 else {"error": printed.err}


@pytest.mark.parametrize(
    "env",
    [
        {"JOB_COMPLETION_INDEX": "1", "ECHO_BENCH_SHARD_COUNT": "3"},
        {
            "SLURM_ARRAY_TASK_ID": "5",
            "SLURM_ARRAY_TASK_MIN": "4",
            "SLURM_ARRAY_TASK_COUNT": "3",
            "SLURM_ARRAY_TASK_MAX": "6",
            "SLURM_ARRAY_TASK_STEP": "1",
        },
    ],
)
def test_estimate_takes_bench_shard_auto_as_the_run_does(
    pytester: pytest.Pytester,
    layout: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    env: dict[str, str],
) -> None:
    for name in SCHEDULERS:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    status, auto = estimated_items(capsys, layout, "--bench-shard", "auto")
    assert status == 0 and auto["shard"] == "2/3"
    assert auto["items"] == estimated_items(capsys, layout, "--bench-shard", "2/3")[1]["items"]
    assert auto["items"] == len(pytest_selects(pytester, "--bench-shard", "auto")) > 0
    monkeypatch.setenv(
        "SLURM_ARRAY_TASK_STEP" if "SLURM_ARRAY_TASK_ID" in env else "JOB_COMPLETION_INDEX", "7"
    )
    status, refused = estimated_items(capsys, layout, "--bench-shard", "auto")
    assert status == 2 and "--bench-shard auto:" in refused["error"], refused


def test_estimate_help_names_the_default_cache_the_run_uses(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["estimate", "--help"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "bench_results/cache/cache.sqlite" in said and "K/N|auto" in said


# marks made outside a run's registration
@pytest.mark.filterwarnings("ignore::pytest.PytestUnknownMarkWarning")
def test_node_names_and_marks_match_collection() -> None:
    for args in [("q1", "a", 1, 1), ("q1", "a-b", 2, 3), ("x", "arm.1", 3, 3)]:
        assert item_name(*args) == collect.item_name(*args)
    for arm, subtask in [("a.b-c", "ß x"), ("a", None)]:
        assert mark_names(arm, subtask) == tuple(m.name for m in collect.item_marks(arm, subtask))


_WORDS = st.sampled_from(
    ["a", "b", "Ab", "q1[x]", "e2", "x-y", "and", "or", "not", "(", ")", "::", "ä", "/", "@"]
)


@settings(max_examples=200, derandomize=True, database=None, deadline=None)
@given(
    st.lists(_WORDS, max_size=8),
    st.sets(st.sampled_from(["ab", "q1[x]", "x-y", "e2", "ää"]), max_size=3),
)
def test_k_grammar_agrees_with_pytests(words: list[str], names: set[str]) -> None:
    text = " ".join(words)
    try:
        theirs: bool | None = (
            Expression.compile(text).evaluate(
                lambda sub, **kw: any(sub.lower() in n.lower() for n in names)
            )
            if text.strip()
            else True
        )
    except SyntaxError:
        theirs = None
    try:
        ours: bool | None = parse_keyword(text)(frozenset(n.lower() for n in names))
    except ValueError:
        ours = None
    assert ours == theirs


@pytest.mark.parametrize("expr", ["a and", "(a", "a)", "a b", "f(x=1)", "a @"])
def test_a_bad_k_is_refused_with_status_2(
    tmp_path: Path, expr: str, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "demo.yaml"
    spec.write_text(PRICED)
    assert main(["estimate", str(spec), "-k", expr]) == 2
    assert "-k" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["--bench-shard", "0/2"],
        ["--bench-shard", "3/2"],
        ["--bench-shard", "x"],
        ["--bench-shard", ""],
        ["--bench-shard=auto"],
        ["--workers", "0"],
        ["--format", "yaml"],
    ],
)
def test_bad_options_are_refused_as_argparse_does(tmp_path: Path, argv: list[str]) -> None:
    spec = tmp_path / "demo.yaml"
    spec.write_text(PRICED)
    assert main(["estimate", str(spec), *argv]) == 2


def test_n_is_the_runs_xdist_workers_and_an_unknown_option_shows_the_estimate_usage(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "demo.yaml"
    spec.write_text(PRICED)
    assert main(["estimate", str(spec), "--format", "json", "--workers", "2"]) == 0
    workers = capsys.readouterr().out
    assert main(["estimate", str(spec), "--format", "json", "-n", "2"]) == 0
    assert capsys.readouterr().out == workers  # -n N as pytest-xdist spells it
    assert main(["estimate", str(spec), "--bench-concurrency", "4"]) == 2
    err = capsys.readouterr().err  # this command's usage, not the list of commands
    assert (
        "usage: echo-bench estimate" in err
        and "unrecognized arguments: --bench-concurrency 4" in err
    )


def test_a_bad_spec_names_its_line_with_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "demo.yaml"
    spec.write_text(spec_text("  a: {provider: cascade, cheap: nobody, strong: nobody}\n"))
    assert main(["estimate", str(spec)]) == 2
    assert "demo.yaml" in capsys.readouterr().err
    assert main(["estimate", str(tmp_path / "missing.yaml")]) == 2


def test_a_real_sweep_teaches_lengths_latency_and_the_cache(
    pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]
) -> None:
    # five tokens a reply
    with FakeOpenAI(answer=lambda p: f"the answer is {4 if '2+2' in p else 6} ok") as server:
        arms = (
            f"  small: {{provider: openai, model: m, base_url: '{server.base_url}', "
            "api_key_env: NOKEY, "
            "max_tokens: 50}\n  sim: {provider: sim, accuracy: 1.0, latency_s: 0.01}\n"
        )
        spec = pytester.path / "demo.yaml"
        spec.write_text(
            spec_text(
                arms,
                "pricing:\n  small: {input: 1.0, output: 10.0}\n  sim: {input: 0, output: 0}\n",
            )
        )
        pytester.makeini("[pytest]\n")
        before = run_json(str(spec), capsys=capsys)
        assert (
            before["arms"]["small"]["completion_tokens"]["low"] == 0 and before["seconds"] is None
        )
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("NOKEY", "k")
            result, _, rows = sweep.run(str(spec))
        assert result.ret == 0 and len(rows) == 6 and len(server.requests) == 3
    capsys.readouterr()
    argv = [
        "estimate",
        str(spec),
        "--format",
        "json",
        "--results",
        str(sweep.out),
        "--rootdir",
        str(pytester.path),
    ]
    assert main([*argv, "--cache", "off"]) == 0
    seen = json.loads(capsys.readouterr().out)
    small = seen["arms"]["small"]
    assert small["completion_tokens"]["low"] == 3 * 5 and small["seconds_per_item"] is not None
    prompt_in = sum(
        math.ceil(len(p) / 4) for p in ["What is 2+2?", "What is 3+3? Say it.", "Twice three?"]
    )
    assert small["cost_usd"]["low"] == round((prompt_in * 1.0 + 15 * 10.0) / 1e6, 6)
    assert seen["seconds"] is not None and seen["seconds"] > 0
    # The run's cache (bench_results/cache.sqlite under the rootdir)
    # answers every call of small now.
    before = sorted(p.name for p in pytester.path.glob("bench_results/cache/*"))
    assert main(argv) == 0
    cached = json.loads(capsys.readouterr().out)["arms"]["small"]
    assert (
        cached["cached_calls"],
        cached["calls_min"],
        cached["calls_max"],
        cached["cost_usd"]["high"],
    ) == (3, 0, 0, 0.0)
    # nothing created beside it
    assert set(p.name for p in pytester.path.glob("bench_results/cache/*")) <= set(before)
    assert not (pytester.path / "elsewhere").exists()
    # missing: nothing cached
    assert main([*argv, "--cache", str(pytester.path / "elsewhere" / "c.sqlite")]) == 0
    assert json.loads(capsys.readouterr().out)["arms"]["small"]["cached_calls"] == 0
    assert not (pytester.path / "elsewhere").exists()  # and nothing created


def test_a_cache_from_elsewhere_is_read_only_and_its_bad_usage_is_dropped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import sqlite3

    from pytest_echo_bench.engine.fingerprint import cache_descriptor
    from pytest_echo_bench.store.cache import cache_key

    path = tmp_path / "demo.yaml"
    path.write_text(
        spec_text(
            "  a: {provider: openai, model: m, base_url: 'http://127.0.0.1:9/v1', "
            "max_tokens: 50}\n",
            "pricing:\n  a: {input: 0, output: 1}\n",
        )
    )
    spec, examples = load_benchmark(path)
    cache = tmp_path / "cache.sqlite"
    db = sqlite3.connect(cache)
    # as the run's cache is: opened read-only, SQLite makes -shm and -wal
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE responses (key TEXT PRIMARY KEY, text TEXT NOT NULL, usage TEXT)")
    usages = [
        '{"completion_tokens": -5}',
        '{"completion_tokens": "9", "prompt_tokens": 1e400}',
        "[not json",
    ]
    for ex, usage in zip(examples, usages, strict=True):
        db.execute(
            "INSERT INTO responses VALUES (?, ?, ?)",
            (cache_key(cache_descriptor(spec, "a"), ex.input, 0), "x", usage),
        )
    db.commit()
    db.close()
    before = cache.read_bytes()
    capsys.readouterr()
    assert main(["estimate", str(path), "--format", "json", "--cache", str(cache)]) == 0
    arm = json.loads(capsys.readouterr().out)["arms"]["a"]
    # cached, but no usable usage
    assert arm["cached_calls"] == 3 and arm["completion_tokens"]["low"] == 0
    assert (
        not (tmp_path / "cache.sqlite-wal").exists()
        and not (tmp_path / "cache.sqlite-shm").exists()
    )
    assert cache.read_bytes() == before
    cache.write_bytes(b"\x00garbage" * 100)  # not SQLite at all: holds nothing
    assert main(["estimate", str(path), "--format", "json", "--cache", str(cache)]) == 0
    assert json.loads(capsys.readouterr().out)["arms"]["a"]["cached_calls"] == 0


def test_wall_time_spreads_the_work_over_the_slots_and_waits_for_the_slowest_arm(
    tmp_path: Path,
) -> None:
    from pytest_echo_bench.budget.estimate import ArmEstimate, wall_seconds

    path = tmp_path / "demo.yaml"
    path.write_text(
        spec_text(
            "  a: {provider: sim, accuracy: 1.0}\n  b: {provider: sim, accuracy: 1.0, "
            "concurrency: 1}\n"
        )
    )
    spec, _ = load_benchmark(path)
    a = ArmEstimate("a", items=100, calls_max=100, seconds_per_item=2.0)
    b = ArmEstimate("b", items=10, calls_max=10, seconds_per_item=3.0)
    # 230 s of work over 4 x 2 slots is 28.75 s, but b runs one at a time a process: 30 s / 2.
    assert wall_seconds([a, b], spec, 4, 2) == pytest.approx(max(230 / 8, 30 / 2))
    assert wall_seconds([a, b], spec, 64, 1) == pytest.approx(30.0)  # b alone, one call at a time
    # b's latency unseen
    assert wall_seconds([a, ArmEstimate("b", items=1, calls_max=1)], spec, 4, 1) is None
    assert wall_seconds(
        [a, ArmEstimate("b", items=5, calls_max=0, cached=5)], spec, 4, 1
    ) == pytest.approx(50.0)


def test_several_benchmarks_are_keyed_benchmark_slash_arm_and_summed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one, two = tmp_path / "one.yaml", tmp_path / "two.yaml"
    one.write_text(PRICED)
    two.write_text(PRICED.replace("benchmark: demo", "benchmark: other"))
    both = run_json(str(one), str(two), capsys=capsys)
    alone = run_json(str(one), capsys=capsys)
    assert set(both["arms"]) == {
        f"{b}/{a}" for b in ("demo", "other") for a in ("small", "big", "esc")
    }
    assert both["items"] == 2 * alone["items"] and both["calls_max"] == 2 * alone["calls_max"]
    assert both["cost_usd"]["high"] == pytest.approx(2 * alone["cost_usd"]["high"])
    assert both["benchmarks"]["other"]["items"] == alone["items"]


def test_a_results_file_that_is_not_one_or_of_another_benchmark_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "demo.yaml"
    spec.write_text(spec_text("  a: {provider: sim, accuracy: 1.0}\n"))
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b"\x00\x01\xff garbage\n" * 3)
    capsys.readouterr()
    assert main(["estimate", str(spec), "--results", str(binary), "--cache", "off"]) == 2
    err = capsys.readouterr().err
    assert f"{binary}:1" in err and len(err.strip().splitlines()) == 1
    other = tmp_path / "other.jsonl"
    other.write_text(
        json.dumps({"_meta": True, "benchmark": "mmlu", "benchmarks": {"mmlu": {}}})
        + "\n"
        + json.dumps({"task_id": "t", "arm": "a", "passed": True, "detail": "passed"})
        + "\n"
    )
    assert main(["estimate", str(spec), "--results", str(other), "--cache", "off"]) == 2
    assert "a results file of benchmark mmlu, not of demo" in capsys.readouterr().err


def test_the_estimate_refuses_what_the_run_refuses_and_counts_a_spec_named_twice_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "demo.yaml"
    spec.write_text(spec_text("  a: {provider: sim, accuracy: 1.0, max_tokens: 5}\n"))
    capsys.readouterr()
    assert main(["estimate", str(spec), "--cache", "off"]) == 2
    assert "unknown sim option 'max_tokens'" in capsys.readouterr().err
    spec.write_text(spec_text("  a: {provider: sim, accuracy: 1.0}\n"))
    once = run_json(str(spec), capsys=capsys)["items"]
    assert run_json(str(spec), str(tmp_path / "." / "demo.yaml"), capsys=capsys)["items"] == once


def test_small_costs_are_fixed_point_and_a_short_wall_time_shows_its_seconds(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_echo_bench.cli.estimate import text_lines

    data = {
        "arms": {
            "a": {
                "items": 1,
                "calls_min": 1,
                "calls_max": 1,
                "cached_calls": 0,
                "cost_usd": {"low": 0.000055, "high": 0.000055},
                "seconds_per_item": 0.36,
            }
        },
        "cost_usd": {"low": 0.000055, "high": 0.000055},
        "shard": None,
        "calls_max": 1,
        "items": 1,
        "seconds": 0.36,
        "prompt_tokens": "ceil(characters / 4)",
    }
    text = "\n".join(text_lines(data))
    assert "$0.000055" in text and "e-05" not in text
    assert "wall time 0.36 s" in text
