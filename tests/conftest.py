"""Fixtures that drive the plugin the way pytest drives itself: through ``pytester``."""

from __future__ import annotations

import contextlib
import gzip
import importlib
import json
import os
import pkgutil
import subprocess
import textwrap
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import background_builds
import first_time
import pytest
from openai_server import FakeOpenAI

import pytest_echo_bench


def _import_the_whole_package() -> None:
    """Import every module of the plugin once, before any in-process run.

    The plugin imports most of itself only once a run has specs, and pytester's in-process runs
    drop every module imported during a run. Each run would then import (and assertion-rewrite)
    the package again, deep inside the outer session's stack, where CPython 3.11.7's AST
    recursion-depth check fails at random ("AST constructor recursion depth mismatch"); imported
    here, the modules outlive every run, as a real process keeps them.
    """
    for module in pkgutil.walk_packages(pytest_echo_bench.__path__, "pytest_echo_bench."):
        importlib.import_module(module.name)


_import_the_whole_package()


_background = background_builds.Background()
_started: list[str] = []  # what the header says of the builds started in the background


def pytest_configure(config: pytest.Config) -> None:
    first_time.remember(config)  # the builds some tests make once say so past the output capture
    # The controller, or a serial run: an xdist worker would start the same builds again.
    if not hasattr(config, "workerinput") and not (
        config.option.collectonly or config.option.help or config.option.version
    ):
        builds = background_builds.wanted(list(config.args), config.invocation_params.dir)
        _started[:] = _background.start(builds)
        os.environ[background_builds.STARTED] = ",".join(build.name for build in builds)


def pytest_unconfigure(config: pytest.Config) -> None:
    _background.finish()  # whatever the terminal summary did not see (a session that ended early)


def pytest_report_header(config: pytest.Config) -> list[str]:
    return first_time.header() + _started


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for line in _background.finish():
        terminalreporter.write_line(line)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The few tests that take a minute or more (``long_running``) run first, those that need a
    one-time build last, the rest in their order.

    Under ``-n 2`` a worker that picks one up last runs it alone after the other has finished (the
    gateway's minute windows alone are two minutes): started first, it runs beside the others. A
    fresh clone's builds run in the background from the start (``background_builds``): last, their
    tests find them built instead of holding a worker while they finish.
    """
    builds = {
        background_builds.ROOT / test
        for build in background_builds.BUILDS.values()
        for test in build.tests
    }
    items.sort(key=lambda item: _rank(item, builds))  # stable: the rest keep their order


def _rank(item: pytest.Item, builds: set[Path]) -> int:
    if item.get_closest_marker("long_running") is not None:
        return 0
    return 2 if item.path in builds else 1

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
# The first three items of every BBH task (see data/README.md), so a clone without ../shared still
# runs the BBH loader, scorer and spec paths on real items.
BBH_FIXTURE = Path(__file__).parent / "data" / "bbh"


def bbh_data() -> Path:
    """The full BBH task files beside the project when present, else the fixture."""
    shared = SHARED_DATA / "bbh"
    return shared if shared.is_dir() else BBH_FIXTURE


def bbh_examples(task: str, data: Path | None = None) -> list[dict[str, Any]]:
    """The items of one BBH task file, in file order (the order their ids count)."""
    examples: list[dict[str, Any]] = json.loads(
        ((data or bbh_data()) / f"{task}.json").read_text(encoding="utf-8")
    )["examples"]
    return examples


def paper_recordings() -> Path | None:
    """The paper's recorded outputs, when they are beside the project with
    the task files they line up with."""
    codex = SHARED_DATA / "bbh-codex-cot"
    return codex if codex.is_dir() and bbh_data() == SHARED_DATA / "bbh" else None


def write_stand_in_recording(root: Path, tasks: Iterable[str], data: Path | None = None) -> Path:
    """Outputs for every item of ``tasks`` in the paper's recording layout: the target on
    even items, no answer on odd ones.

    The paper's outputs are not copied into the project; these drive the replay arm on the fixture.
    """
    root.mkdir(parents=True, exist_ok=True)
    for task in tasks:
        outputs = [
            {
                "input": rec["input"],
                "target": rec["target"],
                "prediction": f"So the answer is {rec['target']}."
                if i % 2 == 0
                else "I cannot tell.",
            }
            for i, rec in enumerate(bbh_examples(task, data))
        ]
        with gzip.open(root / f"{task}.json.gz", "wt", encoding="utf-8") as f:
            json.dump({"outputs": outputs}, f)
    return root


def read_rows(path: Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """(meta, rows) of a results file; fails the test on any line that is not JSON."""
    lines = path.read_bytes().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    meta = records[0] if records and records[0].get("_meta") else None
    return meta, [r for r in records if not r.get("_meta")]


def make_spec(pytester: pytest.Pytester, body: str, name: str = "demo") -> Path:
    pytester.makefile(".yaml", **{name: textwrap.dedent(body)})
    return pytester.path / f"{name}.yaml"


def inline_items(n: int, target: str = "4") -> str:
    return "\n".join(
        f'    - {{id: q{i}, input: "2+2=? ({i})", target: "{target}"}}' for i in range(n)
    )


def sim_spec(
    n: int = 6,
    arms: str = "  good: {provider: sim, accuracy: 1.0}\n  bad: {provider: sim, accuracy: 0.0}",
    extra: str = "",
    benchmark: str = "demo",
) -> str:
    return (f"benchmark: {benchmark}\ndataset:\n  loader: inline\n  items:\n{inline_items(n)}\n"
            f"scorer: exact\narms:\n{arms}\n{extra}")


def held_sweep(pytester: pytest.Pytester, items: int) -> Path:
    """A spec whose first four items answer at once and whose others wait (up to 60 s) until the
    file ``release`` exists: a live run that owns its results file while a test acts on it."""
    pytester.makeconftest(f"""
        import time
        from pathlib import Path
        from pytest_echo_bench import arm

        @arm("held")
        def held(ctx):
            deadline = time.monotonic() + 60
            while int(ctx.example.id[1:]) >= 4 and time.monotonic() < deadline:
                if Path({str(pytester.path / "release")!r}).exists():
                    break
                time.sleep(0.02)
            return "4"
    """)
    make_spec(pytester, sim_spec(items, arms="  a: {provider: python, function: held}"))
    pytester.makeini("[pytest]\nbench_order = file\n")  # the items that answer at once come first
    return pytester.path / "r.jsonl"


# The variables a Slurm array task or an Indexed Job sets: `--bench-shard auto` reads them.
SCHEDULER_VARIABLES = (
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_MAX",
    "JOB_COMPLETION_INDEX",
    "ECHO_BENCH_SHARD_COUNT",
    "ECHO_BENCH_SHARD",
)


@pytest.fixture
def no_scheduler(monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine running the tests may itself be a Slurm task: each test sets what it means."""
    for name in SCHEDULER_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def reports(pytester: pytest.Pytester) -> tuple[str, str]:
    """The JUnit XML and json-report files of the last run, as text."""
    return ((pytester.path / "junit.xml").read_text(encoding="utf-8"),
            (pytester.path / "report.json").read_text(encoding="utf-8"))


def report_args(pytester: pytest.Pytester) -> tuple[str, ...]:
    return ("-v", "-rA", f"--junitxml={pytester.path / 'junit.xml'}", "--json-report",
            f"--json-report-file={pytester.path / 'report.json'}")


class Sweep:
    """Runs a sweep in a pytester dir and returns (result, meta, rows)."""

    def __init__(self, pytester: pytest.Pytester) -> None:
        self.pytester = pytester
        self.out = pytester.path / "results.jsonl"

    def run(
        self, *args: str, subprocess: bool = False
    ) -> tuple[pytest.RunResult, dict[str, Any] | None, list[dict[str, Any]]]:
        argv = ["-p", "no:cacheprovider", "-W", "ignore::pytest.PytestAssertRewriteWarning", *args]
        if not any(a.startswith("--bench-out") or a.startswith("--bench-resume") for a in args):
            argv += ["--bench-out", str(self.out)]
        runner = self.pytester.runpytest_subprocess if subprocess else self.pytester.runpytest
        result = runner(*argv)
        meta, rows = read_rows(self.out) if self.out.exists() else (None, [])
        return result, meta, rows


# Planted secrets: what the fake servers' arms send (``api_key_env: TEST_OPENAI_KEY`` or
# ``TEST_ANTHROPIC_KEY``), and what a test then looks for where no secret may be (results, output).
OPENAI_KEY = "sk-test-planted-secret-4f1d2c"
ANTHROPIC_KEY = "sk-ant-test-planted-secret-9b3e7a"  # the prefix of Anthropic's keys


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test keys under the names the arms read, and no budget from the machine's environment
    (``ECHO_BENCH_BUDGET_USD``): a sweep against a fake server spends only what its spec says."""
    monkeypatch.setenv("TEST_OPENAI_KEY", OPENAI_KEY)
    monkeypatch.setenv("TEST_ANTHROPIC_KEY", ANTHROPIC_KEY)
    monkeypatch.delenv("ECHO_BENCH_BUDGET_USD", raising=False)


# What would send a test's calls elsewhere or make it trust other certificates than its own.
NETWORK_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
)


@pytest.fixture
def no_network_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy and no certificate file from the machine's environment: each test sets its own."""
    for name in NETWORK_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def sweep(pytester: pytest.Pytester) -> Sweep:
    return Sweep(pytester)


@pytest.fixture
def openai_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@contextlib.contextmanager
def tmpfs(disk: Path, options: str) -> Iterator[Path]:
    """A tmpfs mounted at ``disk`` (root only; the test skips
    elsewhere), unmounted whatever happens."""
    disk.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(disk)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(
            f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {done.stderr.strip()}"
        )
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
