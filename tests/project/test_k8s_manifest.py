"""docs/k8s-indexed-job.yaml is a Kubernetes Indexed Job the API server accepts, whose pods run the
sweep they say and whose merge job merges what they wrote.

Nothing here can start a cluster (no container runtime): the manifest is validated offline against
the Kubernetes schemas (``kubernetes-validate --strict``, which bundles them), and its two scripts
run here as an Indexed Job runs them: the shard script once per ``JOB_COMPLETION_INDEX``, then the
merge script over the shared directory.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import read_rows, sim_spec
from pytest_echo_bench.cli.main import parser

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "docs" / "k8s-indexed-job.yaml"
TIMEOUT_S = 60.0


def _docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(MANIFEST.read_text(encoding="utf-8")) if d]


def _job(name: str) -> dict[str, Any]:
    (job,) = [d for d in _docs() if d["kind"] == "Job" and d["metadata"]["name"] == name]
    return job


def _script(job: dict[str, Any]) -> str:
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["bash", "-c"]
    script: str = container["args"][0]
    return script


def validate(path: Path) -> subprocess.CompletedProcess[str]:
    """``kubernetes-validate --strict``; as root, in a network
    namespace of its own: offline for sure."""
    pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate (the test extra) is not installed"
    )
    offline = ["unshare", "--net"] if os.geteuid() == 0 and shutil.which("unshare") else []
    return subprocess.run(
        [*offline, sys.executable, "-m", "kubernetes_validate", "--strict", "--quiet", str(path)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def test_the_manifest_passes_the_kubernetes_schemas() -> None:
    result = validate(MANIFEST)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        (
            "  completions: 4\n",
            '  completions: "4"\n',
            "spec.completions: '4' is not of type 'integer'",
        ),
        ("  parallelism: 4\n", "  paralelism: 4\n", "paralelism"),
    ],
)
def test_the_validator_finds_a_broken_manifest(
    tmp_path: Path, old: str, new: str, said: str
) -> None:
    """It really checks: a string where an integer belongs, and a
    misspelt field, fail with their path."""
    text = MANIFEST.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{MANIFEST} changed: update this test's edit of {old!r}"
    broken = tmp_path / "broken.yaml"
    broken.write_text(text.replace(old, new), encoding="utf-8")
    result = validate(broken)
    assert result.returncode == 1 and "job/echo-bench-shards" in result.stdout, (
        result.stdout + result.stderr
    )
    assert said in result.stdout, result.stdout


def test_the_indexed_job_tells_its_pods_the_count_it_runs() -> None:
    """Kubernetes gives a pod its index, never the count:
    ECHO_BENCH_SHARD_COUNT must say completions."""
    spec = _job("echo-bench-shards")["spec"]
    assert spec["completionMode"] == "Indexed" and spec["activeDeadlineSeconds"] > 0
    (container,) = spec["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["ECHO_BENCH_SHARD_COUNT"] == str(spec["completions"]) == str(spec["parallelism"])
    assert "--bench-shard auto" in _script(_job("echo-bench-shards"))
    claims = {
        j: [
            v["persistentVolumeClaim"]["claimName"]
            for v in _job(j)["spec"]["template"]["spec"]["volumes"]
        ]
        for j in ("echo-bench-shards", "echo-bench-merge")
    }
    (pvc,) = [d for d in _docs() if d["kind"] == "PersistentVolumeClaim"]
    assert claims == {j: [pvc["metadata"]["name"]] for j in claims} and pvc["spec"][
        "accessModes"
    ] == ["ReadWriteMany"]
    (wait,) = _job("echo-bench-merge")["spec"]["template"]["spec"]["initContainers"]
    assert wait["command"] == ["sh", "-c"] and "job/echo-bench-shards" in wait["args"][0]


FAKE_KUBECTL = """#!/bin/sh
# The Job's conditions, one answer per call, from the lines of $KUBECTL_ANSWERS; the last one
# repeats.
echo "$*" >> "$KUBECTL_CALLS"
n=$(wc -l < "$KUBECTL_CALLS")
[ "$n" -le "$(wc -l < "$KUBECTL_ANSWERS")" ] || n=$(wc -l < "$KUBECTL_ANSWERS")
line=$(sed -n "${n}p" "$KUBECTL_ANSWERS")
[ "$line" = "ERROR" ] && { echo "connection refused" >&2; exit 1; }
printf '%s' "$line"
"""


def _wait(
    tmp_path: Path, answers: list[str], tries: int | None = None
) -> tuple[subprocess.CompletedProcess[str], int]:
    """The merge's init container script, run with a fake kubectl answering ``answers`` in turn and
    no sleep between looks (``tries``: a smaller bound than the script's, to reach it quickly)."""
    (wait,) = _job("echo-bench-merge")["spec"]["template"]["spec"]["initContainers"]
    script: str = wait["args"][0]
    assert script.count("sleep 10") == 1 and script.count("-lt 2160") == 1
    script = script.replace("sleep 10", "sleep 0").replace("-lt 2160", f"-lt {tries or 2160}")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(FAKE_KUBECTL)
    kubectl.chmod(0o755)
    (tmp_path / "answers").write_text("\n".join(answers) + "\n")
    calls = tmp_path / "calls"
    calls.touch()
    env = {
        "PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin",
        "KUBECTL_ANSWERS": str(tmp_path / "answers"),
        "KUBECTL_CALLS": str(calls),
    }
    done = subprocess.run(
        ["sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
        env=env,
    )
    looks = calls.read_text().splitlines()
    assert all("get job/echo-bench-shards" in look for look in looks), looks
    return done, len(looks)


@pytest.mark.parametrize(("answers", "looks", "said"), [
    (["", "", "Complete "], 3, "Complete"),
    # backoffLimitPerIndex: one index failed for good, the Job is Failed and never Complete
    (["", "FailureTarget ", "FailureTarget Failed "], 3, "Failed"),
    (["ERROR", "SuccessCriteriaMet Complete "], 2, "Complete"),  # a failed look is looked again
    (["Suspended "], 5, "did not finish"),  # the bound: the merge runs and names what is missing
])
def test_the_merge_waits_for_the_shards_to_finish_complete_or_failed(
        tmp_path: Path, answers: list[str], looks: int, said: str) -> None:
    done, calls = _wait(tmp_path, answers, tries=5)
    assert done.returncode == 0 and said in done.stdout and calls == looks, (
        done.stdout,
        done.stderr,
        calls,
    )


def test_the_merge_job_commands_exist() -> None:
    for line in _script(_job("echo-bench-merge")).splitlines():
        words = shlex.split(line)
        if words[:1] == ["echo-bench"]:
            cut = next((i for i, w in enumerate(words) if w in (">", "|")), len(words))
            # SystemExit (a failed test) for anything the CLI lacks
            parser().parse_args(words[1:cut])


def _local(script: str, results: Path, specs: Path) -> str:
    """The pod's script with this machine's paths for the volume and the image's
    specs, in one process (a pod has two CPUs to itself; four pods' xdist workers on
    this machine would only queue)."""
    assert script.count(" -n 2 ") <= 1
    return (
        script.replace("/results", str(results))
        .replace("bench_specs", str(specs))
        .replace(" -n 2 ", " -n 0 ")
    )


def test_the_pods_scripts_run_the_sweep_and_the_merge_as_an_indexed_job_would(
    tmp_path: Path,
) -> None:
    spec = tmp_path / "demo.yaml"  # the benchmark and arm names the merge job's gates name
    spec.write_text(sim_spec(12, arms="  strong: {provider: sim, accuracy: 1.0}\n"
                                      "  vote_escalate: {provider: sim, accuracy: 1.0}"))
    results = tmp_path / "results"
    results.mkdir()
    shards = _job("echo-bench-shards")
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "ECHO_BENCH_SHARD_COUNT": str(shards["spec"]["completions"])}
    env.pop("PYTEST_XDIST_WORKER", None)
    pods = [
        subprocess.Popen(
            ["bash", "-c", _local(_script(shards), results, spec)],
            cwd=tmp_path,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**env, "JOB_COMPLETION_INDEX": str(i)},
        )
        for i in range(shards["spec"]["completions"])
    ]  # in parallel, as the Job's pods run
    try:
        for pod in pods:
            output, _ = pod.communicate(timeout=TIMEOUT_S)
            assert pod.returncode == 0, output[-2000:]
    finally:
        for pod in pods:
            if pod.poll() is None:
                pod.kill()
                pod.wait(timeout=10)
    merge = subprocess.run(
        ["bash", "-c", _local(_script(_job("echo-bench-merge")), results, spec)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
        env=env,
    )
    assert merge.returncode == 0, merge.stdout[-2000:] + merge.stderr[-2000:]
    meta, rows = read_rows(results / "merged.jsonl")
    assert meta is not None and meta["complete"] is True and len(rows) == 24
    # an index that never completed: the merge says so and the gates fail
    (results / "shard-2.jsonl").unlink()
    merge = subprocess.run(
        ["bash", "-c", _local(_script(_job("echo-bench-merge")), results, spec)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
        env=env,
    )
    assert merge.returncode == 1 and "3/4" in merge.stderr, (
        merge.stdout[-2000:] + merge.stderr[-2000:]
    )
