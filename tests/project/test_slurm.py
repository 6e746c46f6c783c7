"""A real Slurm cluster of one node runs ``docs/slurm-array.sh`` as written: a 4-task job array,
``--bench-shard auto`` in each task, merged, and the same verdicts as one unsharded run.

The cluster comes up as ``../shared/SCALE-FACTS.md`` says (munged, slurmctld and slurmd started by
hand, no systemd), only as root, and slurm-wlm is installed with apt only when ``CI=true``. The
daemons this module starts are stopped at its end, by their own pids; a cluster already running
(another configuration) is used as it is, and a ``slurm.conf`` this module did not write is never
overwritten. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from processes import stop

from conftest import read_rows, sim_spec

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docs" / "slurm-array.sh"
CONF = Path("/etc/slurm/slurm.conf")
MARK = "# written by pytest-echo-bench tests/project/test_slurm.py"
OURS = "# written by pytest-echo-bench "  # any version of this test, wherever it lived, wrote it
SHARDS = 4
UP_S = 30.0  # slurmctld and slurmd register the node within a few seconds here
JOB_S = 100.0  # four tasks of a 30-item sweep take ~15 s; the bound only stops a hang
ARMS = "  good: {provider: sim, accuracy: 0.9}\n  weak: {provider: sim, accuracy: 0.4}"


def _run(
    *argv: str, timeout: float = 30.0, check: bool = True, **kw: object
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # type: ignore[call-overload]
        list(argv), capture_output=True, text=True, timeout=timeout, check=check, **kw
    )


def _installed() -> bool:
    return all(shutil.which(p) for p in ("slurmctld", "slurmd", "munged", "sbatch"))


def _install() -> None:
    if _installed():
        return
    if os.environ.get("CI") != "true" or shutil.which("apt-get") is None:
        pytest.skip(
            "slurm-wlm and munge are not installed (with CI=true this test installs them with apt)"
        )
    try:
        _run("apt-get", "install", "-y", "-qq", "slurm-wlm", "munge", timeout=300.0,
             env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"slurm-wlm could not be installed with apt: {exc}")


def _conf() -> str:
    host = socket.gethostname().split(".")[0]
    mem = max(512, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20 - 2048)
    return f"""{MARK}
ClusterName=local
SlurmctldHost={host}
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ReturnToService=2
NodeName={host} CPUs={os.cpu_count() or 1} RealMemory={mem} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""


def _prepare() -> None:
    for d in (
        "/etc/munge",
        "/var/log/munge",
        "/run/munge",
        "/var/lib/munge",
        "/var/spool/slurmctld",
        "/var/spool/slurmd",
        "/var/log/slurm",
    ):
        Path(d).mkdir(parents=True, exist_ok=True)
    key = Path("/etc/munge/munge.key")
    if not key.exists():
        key.write_bytes(os.urandom(1024))
    for d in ("/etc/munge", "/var/log/munge", "/run/munge", "/var/lib/munge"):
        shutil.chown(d, "munge", "munge")
    shutil.chown(key, "munge", "munge")
    key.chmod(0o400)
    if not CONF.exists() or CONF.read_text().startswith(OURS):
        CONF.write_text(_conf())
    elif _run("pgrep", "-x", "slurmctld", check=False).returncode != 0:
        pytest.skip(f"{CONF} is someone else's configuration and no slurmctld runs: not touched")


def _idle() -> bool:
    try:
        shown = _run("sinfo", "-h", "-o", "%t", timeout=5.0, check=False).stdout.split()
    except subprocess.TimeoutExpired:
        return False
    return "idle" in shown or "mix" in shown


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("starting slurmctld, slurmd and munged needs root on Linux")
    _install()
    _prepare()
    started: list[subprocess.Popen[bytes]] = []
    # Foreground daemons (-F, -D): their pids are these processes', and only they are stopped below.
    for name, argv in (("munged", ["munged", "-F", "--force"]), ("slurmctld", ["slurmctld", "-D"]),
                       ("slurmd", ["slurmd", "-D"])):
        if _run("pgrep", "-x", name, check=False).returncode != 0:
            started.append(
                subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )
            # slurmctld authenticates through munge at start
            time.sleep(0.5 if name == "munged" else 0.0)
    try:
        deadline = time.monotonic() + UP_S
        while not _idle() and time.monotonic() < deadline:
            time.sleep(0.5)
        if not _idle():
            pytest.skip(f"the one-node Slurm cluster did not come up within {UP_S:.0f} s "
                        "(see /var/log/slurm/slurmctld.log)")
        yield
    finally:
        for proc in reversed(started):
            stop(proc)


def _env(project: Path) -> dict[str, str]:
    """The tasks run this checkout's plugin with this interpreter
    (sbatch exports the environment)."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "PYTHON": sys.executable,
        "SPECS": "demo.yaml",
        "RESULTS": str(project / "results"),
        "WORKERS": "1",
    }


def _finished(job: str, deadline: float) -> list[str]:
    """The array's task states once none is pending or running; ``sbatch --wait`` polls with a
    growing sleep (it returned ~30 s after the last task ended here), so ask every 0.2 s instead.
    Finished jobs stay in slurmctld's memory for MinJobAge (300 s):
    no accounting store is needed."""
    while True:
        shown = _run(
            "scontrol", "-o", "show", "job", job, check=False, timeout=10.0
        ).stdout.splitlines()
        states = sorted(
            w.split("=", 1)[1] for line in shown for w in line.split() if w.startswith("JobState=")
        )
        if (
            len(states) == SHARDS
            and not {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING"} & set(states)
        ) or time.monotonic() > deadline:
            return states
        time.sleep(0.2)


def _verdicts(path: Path) -> dict[tuple[str, str], str]:
    _, rows = read_rows(path)
    return {(r["task_id"], r["arm"]): r["status"] for r in rows}


def test_a_slurm_array_of_four_shards_gives_the_unsharded_verdicts(
    cluster: None, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "demo.yaml").write_text(sim_spec(30, arms=ARMS))
    env = _env(project)
    started = time.monotonic()
    submitted = _run("sbatch", "--parsable", f"--array=0-{SHARDS - 1}", f"--chdir={project}",
                     f"--time={int(JOB_S // 60) + 1}", str(SCRIPT), env=env, cwd=project)
    job = submitted.stdout.strip().split(";")[0]
    states = _finished(job, started + JOB_S)
    logs = "\n".join(
        p.read_text(errors="replace")[-2000:] for p in sorted(project.glob("slurm-*.out"))
    )
    assert states == ["COMPLETED"] * SHARDS, f"{states}\n{logs}"
    shards = sorted((project / "results").glob("shard-*.jsonl"))
    assert [p.name for p in shards] == [f"shard-{i}.jsonl" for i in range(SHARDS)], logs
    # One response cache per task, beside its shard (SQLite on a shared filesystem takes
    # one writer); the simulated arms cache nothing, so the supervisor's log of each
    # task's command is what shows it.
    full = "\n".join(p.read_text(errors="replace") for p in sorted(project.glob("slurm-*.out")))
    assert all(
        f"--bench-cache={project / 'results'}/cache-{i}.sqlite" in full for i in range(SHARDS)
    ), logs
    assert not (project / "bench_results").exists(), logs
    merged = project / "merged.jsonl"
    cli = [sys.executable, "-m", "pytest_echo_bench.cli.main"]
    _run(*cli, "merge", *map(str, shards), "-o", str(merged), env=env)
    elapsed = time.monotonic() - started
    report = json.loads(_run(*cli, "report", str(merged), "--format", "json", env=env).stdout)
    meta, _ = read_rows(merged)
    assert meta is not None and meta.get("complete") is True, meta
    for shard in shards:  # each task took its own K/N from Slurm's environment
        shard_meta, _ = read_rows(shard)
        assert (
            shard_meta is not None
            and shard_meta["selection"]["shard"] == f"{int(shard.stem[6:]) + 1}/{SHARDS}"
        )
    alone = project / "alone.jsonl"
    whole = _run(
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "demo.yaml",
        f"--bench-out={alone}",
        env=env,
        cwd=project,
        check=False,
        timeout=60.0,
    )
    assert whole.returncode == 0, whole.stdout[-2000:]
    assert _verdicts(merged) == _verdicts(alone) and len(_verdicts(alone)) == 60
    assert {a: (v["n"], v["correct"]) for a, v in report["arms"].items()} == {
        arm: (30, sum(1 for (_, a), s in _verdicts(alone).items() if a == arm and s == "correct"))
        for arm in ("good", "weak")
    }
    written = max(p.stat().st_mtime for p in shards) - (time.time() - (time.monotonic() - started))
    print(f"slurm: submit to merged {elapsed:.1f} s for {SHARDS} shards of 60 items "
          f"(last shard row written at {written:.1f} s)")  # shown with -s
    # A requeued task finds its file and resumes it: nothing left to run, the file unchanged.
    before = shards[0].read_bytes()
    again = _run(
        "bash",
        str(SCRIPT),
        env={
            **env,
            "SLURM_ARRAY_TASK_ID": "0",
            "SLURM_ARRAY_TASK_MIN": "0",
            "SLURM_ARRAY_TASK_COUNT": str(SHARDS),
        },
        cwd=project,
        check=False,
        timeout=60.0,
    )
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "sweep complete" in again.stdout and shards[0].read_bytes() == before
