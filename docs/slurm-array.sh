#!/usr/bin/env bash
# A benchmark sweep as a Slurm job array: each array task runs one shard, chosen by
# `--bench-shard auto` from SLURM_ARRAY_TASK_ID/MIN/COUNT, into a file of its own.
#
#   sbatch --array=0-3 docs/slurm-array.sh                  # four shards (any --array=A-B works)
#   sbatch --dependency=afterany:JOBID --wrap \
#       'echo-bench merge results/shard-*.jsonl -o results/merged.jsonl'   # says which shards are missing
#
# Submit from the project's directory (the tasks start there). RESULTS must be a directory every
# node can write: a shared filesystem, not a node's /tmp. tests/project/test_slurm.py runs this file as written.
#SBATCH --job-name=echo-bench
#SBATCH --output=slurm-%A_%a.out
#SBATCH --cpus-per-task=2
#SBATCH --time=06:00:00
# The supervisor may wait for a provider's quota to reset: --time bounds it, and a task Slurm
# ends gets SIGTERM first, which stops the sweep cleanly (exit 2, resumable), rows kept.
set -euo pipefail

SPECS=${SPECS:-bench_specs}          # spec files or folders, relative to the submit directory
RESULTS=${RESULTS:-results}          # where the shard files go (shared by every task)
PYTHON=${PYTHON:-python3}            # the interpreter pytest-echo-bench is installed into
WORKERS=${WORKERS:-${SLURM_CPUS_PER_TASK:-1}}

mkdir -p "$RESULTS"
index=$((SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN))
out="$RESULTS/shard-$index.jsonl"
# A response cache per task: RESULTS is shared by every node, and SQLite over NFS is not safe with
# several writers (a requeued task reuses its own cache).
cache="--bench-cache=$RESULTS/cache-$index.sqlite"
if [ -s "$out" ]; then
  # A requeued task (node failure, preemption) continues its own file: the meta line holds the shard.
  sweep=("--bench-resume=$out")
else
  # shellcheck disable=SC2086  # SPECS may name several paths
  sweep=($SPECS --bench-shard auto "--bench-out=$out")
fi
# Exit 2 is "stopped early, resumable" (quota, SIGTERM): the supervisor resumes after the backoff.
exec "$PYTHON" -m pytest_echo_bench.cli.main run --max-retries 2 --backoff 300 -- \
  "$PYTHON" -m pytest -p no:cacheprovider -q -n "$WORKERS" "${sweep[@]}" "$cache"
