"""What the installed plugin costs an ordinary test suite (no benchmark specs anywhere).

Generates a plain suite: FILES test modules of TESTS trivial tests each, spread over a directory
tree, plus non-spec YAML files (small configs and a few large fixtures), some with a top-level
``benchmark:`` or ``arms:`` key, and plain data files; spec discovery walks all of it, since it
looks under pytest's arguments. Then times REPEAT pairs of runs, in fresh subprocesses and
alternating (so drift of a shared machine hits both alike), of ``pytest -q -p no:cacheprovider
DIR`` with the plugin and with ``-p no:echo_bench``, and prints the median and minimum wall and
CPU seconds and their ratios. A 2% difference is below the noise of a shared machine's wall time, so
it also measures the plugin's two costs on their own, each in a new interpreter as a pytest run pays
them: its import (``-X importtime`` after pytest is imported, so only what our import adds counts;
and inside a pytest run) and the spec sniff over the whole tree.

Usage: python benchmarks/inert.py [--files 200] [--tests 10] [--yaml 60] [--repeat 8]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from overhead import machine

TARGET = 0.02  # of the suite's run time
DEFAULT_NORECURSE = [
    "*.egg",
    ".*",
    "_darcs",
    "build",
    "CVS",
    "dist",
    "node_modules",
    "venv",
    "{arch}",
]
# pytest first: in a pytest run it is imported before ours, and what it imports is not our cost.
IMPORT_PROBE = ["-c", "import pytest; import pytest_echo_bench.plugin"]
# "import time:      self [us] |  cumulative | imported package"
_IMPORT_LINE = re.compile(r"import time:\s+(\d+)\s+\|\s+(\d+)\s+\|( *)(\S+)")


# -- the suite -------------------------------------------------------------------------------
def module_source(index: int, tests: int) -> str:
    body = "".join(
        f"def test_{index}_{t}():\n    assert {t} + 1 == {t + 1}\n\n\n" for t in range(tests)
    )
    return f'"""Generated module {index}."""\n\n\n{body}'


def config_yaml(index: int) -> str:
    # Top-level keys starting with a or b make the sniff try its patterns; none has both keys.
    first = (
        "benchmark: nightly-{0}\n",
        "arms: [x86, arm64]\n",
        "build:\n  image: python:3.11\n",
        "name: job-{0}\n",
    )
    return first[index % len(first)].format(index) + "steps:\n" + "".join(
        f"  - run: make target-{index}-{s}\n    env: {{LEVEL: {s}}}\n" for s in range(20))


def fixture_yaml(index: int, records: int) -> str:
    # A large data fixture: nested keys only, as test fixtures and recorded API responses are.
    return f"fixture: {index}\nrecords:\n" + "".join(
        f'  - id: r{r}\n    benchmark: b{r % 7}\n    arms: [a{r % 3}]\n    payload: "{"x" * 40}"\n'
        for r in range(records)
    )


def write_suite(root: Path, files: int, tests: int, configs: int) -> dict[str, int]:
    """Write the suite under ``root``; counts of what was written, and the YAML bytes."""
    for i in range(files):
        module = (
            root / "tests" / f"area{i % 5}" / f"part{i % 4}" / f"unit{i % 3}" / f"test_m{i:04d}.py"
        )
        module.parent.mkdir(parents=True, exist_ok=True)
        module.write_text(module_source(i, tests))
    yaml_bytes = 0
    for i in range(configs):
        path = (
            root
            / "config"
            / f"env{i % 4}"
            / f"region{i % 3}"
            / f"zone{i % 2}"
            / f"svc{i % 5}"
            / f"c{i:03d}.yaml"
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        yaml_bytes += path.write_text(config_yaml(i))
    fixtures = max(1, configs // 20)
    for i in range(fixtures):
        path = root / "tests" / "fixtures" / f"recorded{i}.yml"
        path.parent.mkdir(parents=True, exist_ok=True)
        yaml_bytes += path.write_text(fixture_yaml(i, 5000))
    data = root / "tests" / "data"
    data.mkdir(parents=True, exist_ok=True)
    for i in range(files):  # plain files the walk lists but does not open
        (data / f"sample{i:04d}.txt").write_text(f"sample {i}\n")
    return {
        "yaml": configs + fixtures,
        "fixtures": fixtures,
        "data": files,
        "yaml_bytes": yaml_bytes,
    }


# -- the runs --------------------------------------------------------------------------------
def clean_env() -> dict[str, str]:
    # No PYTEST_ADDOPTS or ECHO_BENCH_* setting of the caller's shell may change what is measured.
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "ECHO_BENCH_"))}


def run(root: Path, plugin: bool, expected: int) -> tuple[float, float]:
    """(wall s, CPU s) of one pytest run of the suite in a new process."""
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        *([] if plugin else ["-p", "no:echo_bench"]),
        str(root),
    ]
    env = clean_env()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0 or f"{expected} passed" not in proc.stdout:
        raise SystemExit(
            f"{' '.join(cmd)} ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def alternate(root: Path, repeat: int, expected: int) -> dict[bool, list[tuple[float, float]]]:
    """REPEAT runs of each, alternating which goes first; one discarded warm-up run of each."""
    for plugin in (True, False):  # compile the modules, fill the page cache
        run(root, plugin, expected)
    runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for n in range(repeat):
        for plugin in ((True, False) if n % 2 == 0 else (False, True)):
            runs[plugin].append(run(root, plugin, expected))
    return runs


# -- the plugin's own costs ------------------------------------------------------------------
def ours(name: str) -> bool:
    return name == "pytest_echo_bench" or name.startswith("pytest_echo_bench.")


def import_cost(cmd: list[str]) -> tuple[float, list[str]]:
    """(ms, names) of our imports in ``python -X importtime CMD``: the cumulative time of each
    outermost import of one of our modules, which includes anything else it imported."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *cmd], env=clean_env(), capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} ({proc.returncode}):\n{proc.stderr[-2000:]}")
    lines = [
        (len(m.group(3)), m.group(4), int(m.group(2)))
        for m in map(_IMPORT_LINE.match, proc.stderr.splitlines())
        if m
    ]
    # inside: the indent of the outermost import of ours being read
    total_us, names, inside = 0, [], -1
    # The lines are in post-order (a module after what it imported): read backwards, parents first.
    for indent, name, cumulative in reversed(lines):
        if inside >= 0 and indent > inside:
            names.append(name)  # imported by one of ours: already in its cumulative time
            continue
        inside = -1
        if ours(name):
            inside, total_us = indent, total_us + cumulative
            names.append(name)
    return total_us / 1000, sorted(names)


SNIFF = """
import sys, time
from pathlib import Path
import pytest
from pytest_echo_bench.plugin import find_specs
root = Path(sys.argv[1])
start = time.perf_counter()
found = find_specs([str(root)], root, sys.argv[2:])
print(time.perf_counter() - start, len(found))
"""


def sniff_cost(root: Path, repeat: int) -> tuple[list[float], int]:
    """(seconds of each run, specs found) of the plugin's spec discovery over the suite, as its
    ``pytest_configure`` runs it: once, in a new process (its first
    fnmatch and regex use included)."""
    times, found = [], 0
    for _ in range(repeat):
        proc = subprocess.run([sys.executable, "-c", SNIFF, str(root), *DEFAULT_NORECURSE],
                              env=clean_env(), capture_output=True, text=True, check=True)
        seconds, count = proc.stdout.split()
        times.append(float(seconds))
        found = max(found, int(count))
    return times, found


def import_costs(root: Path, repeat: int) -> tuple[list[float], list[float], list[str]]:
    """ms of our import alone (after pytest), ms of it inside a real
    pytest run, and what it imports."""
    import_cost(IMPORT_PROBE)  # a warm-up: the first import may write our bytecode
    alone = [import_cost(IMPORT_PROBE) for _ in range(repeat)]
    # A real run imports us through pytest's entry-point loading and its assertion-rewriting
    # import hook (pytest marks plugins' modules for rewriting); one small directory of the
    # suite keeps each run short.
    small = [
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--collect-only",
        str(root / "tests" / "area0" / "part0"),
    ]
    in_pytest = [import_cost(small)[0] for _ in range(repeat)]
    return [ms for ms, _ in alone], in_pytest, alone[-1][1]


# -- the report ------------------------------------------------------------------------------
def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(runs: dict[bool, list[tuple[float, float]]]) -> tuple[float, float]:
    """Print the end-to-end table; (median, min) wall seconds of the baseline.

    Both the median and the minimum: on a shared machine the minimum is the least disturbed run.
    """
    def figures(plugin: bool) -> tuple[float, float, float, float]:
        walls, cpus = [w for w, _ in runs[plugin]], [c for _, c in runs[plugin]]
        return median(walls), min(walls), median(cpus), min(cpus)

    base = figures(False)
    print(
        f"{'run':28} {'wall s med':>10} {'min':>6} {'CPU s med':>9} {'min':>6} "
        f"{'wall x med':>10} {'min':>6} "
        f"{'CPU x med':>9} {'min':>6}"
    )
    for plugin, label in ((False, "-p no:echo_bench (baseline)"), (True, "plugin installed")):
        own = figures(plugin)
        ratios = [mine / theirs for mine, theirs in zip(own, base, strict=True)]
        print(f"{label:28} {own[0]:10.3f} {own[1]:6.3f} {own[2]:9.3f} {own[3]:6.3f} "
              f"{ratios[0]:10.3f} {ratios[1]:6.3f} {ratios[2]:9.3f} {ratios[3]:6.3f}")
    paired = [on[0] / off[0] for on, off in zip(runs[True], runs[False], strict=True)]
    print(
        "paired wall ratios (each plugin run / the baseline run next to it): median "
        f"{median(paired):.3f}, "
        f"range {min(paired):.3f}-{max(paired):.3f}"
    )
    paired_cpu = [on[1] - off[1] for on, off in zip(runs[True], runs[False], strict=True)]
    print(
        f"paired CPU differences (plugin - baseline): median {1000 * median(paired_cpu):+.0f} ms, "
        f"range {1000 * min(paired_cpu):+.0f} to {1000 * max(paired_cpu):+.0f} ms"
    )
    return base[0], base[1]


def report_costs(alone: list[float], in_pytest: list[float], names: list[str], sniff: list[float],
                 base: tuple[float, float]) -> None:
    print(f"{'the plugin alone':44} {'median ms':>9} {'min ms':>7}")
    print(f"{'import, -X importtime -c (after pytest)':44} {median(alone):9.2f} {min(alone):7.2f}")
    print(
        f"{'import, -X importtime inside a pytest run':44} {median(in_pytest):9.2f} "
        f"{min(in_pytest):7.2f}"
    )
    print(
        f"{'spec sniff over the whole suite':44} {1000 * median(sniff):9.2f} "
        f"{1000 * min(sniff):7.2f}"
    )
    print(f"modules the import adds: {', '.join(names)}")
    own_s = (median(in_pytest) + 1000 * median(sniff)) / 1000
    share_fast, share_median = own_s / base[1], own_s / base[0]
    print(
        f"import + sniff (medians): {1000 * own_s:.1f} ms = {100 * share_fast:.2f}% of the "
        "baseline's fastest run, "
        f"{100 * share_median:.2f}% of its median (target < {100 * TARGET:.0f}%: "
        f"{'met' if share_fast < TARGET else 'not met'})"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=200, help="test modules")
    parser.add_argument("--tests", type=int, default=10, help="trivial tests per module")
    parser.add_argument(
        "--yaml",
        type=int,
        default=60,
        help="small non-spec YAML configs (plus one large fixture per 20)",
    )
    parser.add_argument("--repeat", type=int, default=8, help="runs of each, alternating")
    args = parser.parse_args()
    print(machine())
    expected = args.files * args.tests
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "suite"
        counts = write_suite(root, args.files, args.tests, args.yaml)
        print(
            f"suite: {args.files} test modules x {args.tests} tests = {expected} tests, "
            f"{counts['yaml']} YAML files "
            f"({counts['fixtures']} large fixtures; {counts['yaml_bytes'] / 1e6:.1f} MB in "
            f"all), {counts['data']} data files; "
            f"{args.repeat} runs of each, alternating"
        )
        base = report(alternate(root, args.repeat, expected))
        sniff, found = sniff_cost(root, 2 * args.repeat)
        if found:
            raise SystemExit(f"the sniff took {found} non-spec files for specs")
        alone, in_pytest, names = import_costs(root, args.repeat)
    report_costs(alone, in_pytest, names, sniff, base)


if __name__ == "__main__":
    main()
