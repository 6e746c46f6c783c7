"""The other readers at scale: estimate, the decide replay, merge, export and
import of a 1,000,000-row file.

Writes the report benchmark's file of realistic rows (``report_scale.write_results``: ARMS arms,
correlated verdicts), then in a temporary directory: the same rows under a meta line recording a
decide plan of PAIRS pairs (what ``echo-bench report`` replays), the rows split into 4 shard files
by the run's own partition (``shards.partition.shard_of``) for ``echo-bench merge``, a spec of
the same arms for ``echo-bench estimate SPEC --results FILE``, and an Inspect log of SAMPLES
samples as ``.json`` and as a deflated ``.eval`` for ``echo-bench import``. Each command runs in
a fresh interpreter (``report_scale``'s measurement: wall and CPU time, and the peak resident
memory, from ``VmHWM``), beside ``echo-bench report --format json`` of the
same rows: the reference ratio.

Usage: python benchmarks/readers_scale.py [--rows 1000000] [--arms 15]
       [--pairs 4] [--samples 200000]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

from overhead import machine
from report_scale import RUN, write_results

from pytest_echo_bench.shards.partition import shard_of

SHARDS = 4
FINGERPRINT = "0123456789abcdef"
# report_scale's measurement, with the peak read from /proc/self/status (VmHWM) where there is one:
# Linux keeps ``ru_maxrss`` across exec, so a child of this process, which held the generated rows,
# would report at least this process's own peak.
MEASURE = RUN.replace("usage.ru_maxrss / 1024", "_peak_mb(usage)").replace(
    "start = time.perf_counter()",
    """
def _peak_mb(usage):
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        return usage.ru_maxrss / 1024
start = time.perf_counter()""",
    1,
)


def run(args: list[str]) -> tuple[float, float, float, int]:
    """(wall seconds, CPU seconds, peak MB, exit status) of one command in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, *args], capture_output=True, text=True, check=True
    )
    wall, cpu, peak, status = done.stderr.strip().splitlines()[-1].split()
    return float(wall), float(cpu), float(peak), int(status)


def meta_line(arms: int, **fields: object) -> bytes:
    meta = {
        "_meta": True,
        "benchmark": "scale",
        "arms": {"scale": [f"a{k}" for k in range(arms)]},
        "benchmarks": {"scale": {"spec": "scale.yaml", "fingerprint": FINGERPRINT}},
        "run_id": "0123456789ab",
        "selection": {"args": ["scale.yaml"], "keyword": "", "markexpr": "", "shard": ""},
        "schema": 1,
        **fields,
    }
    return json.dumps(meta).encode() + b"\n"


def rows_of(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as f:
        next(f)  # the meta line
        yield from f


def with_meta(source: Path, target: Path, meta: bytes) -> None:
    with open(target, "wb") as f:
        f.write(meta)
        for line in rows_of(source):
            f.write(line)


def write_shards(source: Path, workdir: Path, arms: int) -> list[Path]:
    """The rows of ``source`` split as ``--bench-shard K/4`` runs would have written them."""
    paths = [workdir / f"shard{k}.jsonl" for k in range(1, SHARDS + 1)]
    files = [open(p, "wb") for p in paths]  # noqa: SIM115 - closed below, all four at once
    try:
        for k, f in enumerate(files, 1):
            f.write(
                meta_line(
                    arms,
                    selection={
                        "args": ["scale.yaml"],
                        "keyword": "",
                        "markexpr": "",
                        "shard": f"{k}/{SHARDS}",
                    },
                    shard_scheme=2,
                )
            )
        for line in rows_of(source):
            task = line.split(b'"', 4)[3].decode()  # Row.to_line writes task_id first
            files[shard_of(("scale", task, "", 1), SHARDS) - 1].write(line)
    finally:
        for f in files:
            f.close()
    return paths


def write_spec(workdir: Path, arms: int, items: int) -> Path:
    with open(workdir / "data.jsonl", "w", encoding="utf-8") as f:
        for i in range(items):
            f.write(
                json.dumps(
                    {"id": f"t{i}", "input": f"What is {i} + 1? Think step by step.", "target": "4"}
                )
                + "\n"
            )
    arm_lines = "".join(
        f"  a{k}: {{provider: sim, accuracy: 0.7, max_tokens: 256}}\n" for k in range(arms)
    )
    prices = "".join(f"  a{k}: {{input: 0.5, output: 1.5}}\n" for k in range(arms))
    spec = workdir / "scale.yaml"
    spec.write_text(
        f"benchmark: scale\ndataset: {{loader: jsonl, path: data.jsonl}}\nscorer: exact\n"
        f"arms:\n{arm_lines}pricing:\n{prices}"
    )
    return spec


def sample(n: int, rng: random.Random) -> dict[str, object]:
    """One Inspect sample as ``inspect eval`` logs it (its fields of
    ``EvalSample``, ``log/_log.py``)."""
    words = ["the", "answer", "is", "so", "therefore", "let's", "think", "step", "by", "x"]
    output = " ".join(rng.choice(words) for _ in range(rng.randint(10, 40)))
    correct = rng.random() < 0.7
    prompt = f"What is {n} + 1? Think step by step."
    return {
        "id": f"s{n}",
        "epoch": 1,
        "input": prompt,
        "target": str(n + 1),
        "messages": [
            {"role": "user", "content": prompt, "source": "input"},
            {"role": "assistant", "content": output, "source": "generate", "model": "m"},
        ],
        "output": {
            "model": "m",
            "choices": [
                {"message": {"role": "assistant", "content": output}, "stop_reason": "stop"}
            ],
            "completion": output,
            "usage": {"input_tokens": 40, "output_tokens": 12, "total_tokens": 52},
        },
        "scores": {
            "match": {
                "value": "C" if correct else "I",
                "answer": str(n + 1) if correct else "0",
                "explanation": output[:40],
            }
        },
        "metadata": {"subtask": f"sub{n % 27:02d}"},
        "model_usage": {"m": {"input_tokens": 40, "output_tokens": 12}},
        "started_at": "2026-11-30T00:00:00+00:00",
        "completed_at": "2026-11-30T00:00:01+00:00",
        "total_time": 1.0,
    }


def log_header(samples: int) -> dict[str, object]:
    return {
        "version": 2,
        "status": "success",
        "eval": {
            "eval_id": "e1",
            "run_id": "r1",
            "created": "2026-11-30T00:00:00+00:00",
            "task": "imported",
            "task_version": 0,
            "model": "m",
            "config": {"epochs": 1},
            "dataset": {"name": "imported", "samples": samples},
        },
        "results": {
            "total_samples": samples,
            "completed_samples": samples,
            "scores": [{"name": "match", "scorer": "match", "metrics": {}}],
        },
    }


def write_logs(workdir: Path, samples: int) -> tuple[Path, Path]:
    """An Inspect log of ``samples`` samples as ``.json`` (written a
    sample at a time) and as ``.eval``."""
    header = log_header(samples)
    as_json, as_eval = workdir / "log.json", workdir / "log.eval"
    rng = random.Random(1)
    with (
        open(as_json, "w", encoding="utf-8") as f,
        zipfile.ZipFile(as_eval, "w", zipfile.ZIP_DEFLATED) as z,
    ):
        f.write(json.dumps(header)[:-1] + ', "samples": [')
        z.writestr("header.json", json.dumps(header))
        for n in range(samples):
            text = json.dumps(sample(n, rng))
            f.write(("," if n else "") + text)
            z.writestr(f"samples/s{n}_epoch_1.json", text)
        f.write("]}")
    return as_json, as_eval


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--arms", type=int, default=15)
    parser.add_argument(
        "--pairs", type=int, default=4, help="pairs of the decide plan: (a1, a0), (a2, a1), ..."
    )
    parser.add_argument(
        "--samples", type=int, default=200_000, help="samples of the Inspect log imported"
    )
    parser.add_argument(
        "--items", type=int, default=1000, help="dataset items of the spec estimated"
    )
    parser.add_argument(
        "--only", default="", help="comma-separated case names to run (default: all)"
    )
    args = parser.parse_args()
    print(machine())
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        start = time.perf_counter()
        plain = work / "scale.jsonl"
        write_results(plain, args.rows, args.arms)
        decide = work / "decide.jsonl"
        plan = {
            "pairs": [["scale", f"a{k}", f"a{k - 1}"] for k in range(1, args.pairs + 1)],
            "alpha": 0.05,
            "margin": 0.0,
        }
        with_meta(plain, decide, meta_line(args.arms, decide=plan))
        shards = write_shards(plain, work, args.arms)
        spec = write_spec(work, args.arms, args.items)
        as_json, as_eval = write_logs(work, args.samples)
        print(
            f"{args.rows:,} rows, {args.arms} arms, {plain.stat().st_size / 1e6:.0f} MB; shards "
            f"{', '.join(f'{sum(1 for _ in rows_of(p)):,}' for p in shards)} rows; Inspect "
            f"log of {args.samples:,} "
            f"samples: .json {as_json.stat().st_size / 1e6:.0f} MB, .eval "
            f"{as_eval.stat().st_size / 1e6:.0f} MB "
            f"(files written in {time.perf_counter() - start:.0f} s)"
        )
        imported = [work / "imported-json.jsonl", work / "imported-eval.jsonl"]
        cases = [
            (
                "report",
                f"report --format json ({args.rows:,} rows)",
                ["report", str(plain), "--format", "json"],
                args.rows,
            ),
            (
                "decide",
                f"report --format json, meta with a decide plan of {args.pairs} pairs",
                ["report", str(decide), "--format", "json"],
                args.rows,
            ),
            (
                "estimate",
                f"estimate SPEC ({args.items} items x {args.arms} arms) --results FILE",
                [
                    "estimate",
                    str(spec),
                    "--results",
                    str(plain),
                    "--cache",
                    "off",
                    "--format",
                    "json",
                ],
                args.rows,
            ),
            (
                "merge",
                f"merge of {SHARDS} shard files",
                ["merge", *map(str, shards), "-o", str(work / "merged.jsonl")],
                args.rows,
            ),
            (
                "export",
                "export --format inspect",
                ["export", str(plain), "--format", "inspect", "-o", str(work / "logs")],
                args.rows,
            ),
            (
                "import",
                f"import of a .json log ({args.samples:,} samples)",
                ["import", str(as_json), "-o", str(imported[0])],
                args.samples,
            ),
            (
                "import",
                f"import of a .eval log ({args.samples:,} samples)",
                ["import", str(as_eval), "-o", str(imported[1])],
                args.samples,
            ),
            (
                "import",
                f"  reference: report --format json of the import ({args.samples:,} rows)",
                ["report", str(imported[0]), "--format", "json"],
                args.samples,
            ),
        ]
        only = set(filter(None, args.only.split(",")))
        done: list[tuple[str, str, tuple[float, float, float, int], int]] = []
        for name, label, argv, rows in cases:
            if not only or name in only or name == "report":
                done.append((name, label, run(argv), rows))
                print(f"  {label}: {done[-1][2][0]:.1f} s", file=sys.stderr, flush=True)
        # The reference of each size: report of the same rows (the import's: of the file it wrote).
        reference = {rows: (wall, cpu) for name, label, (wall, cpu, *_), rows in done
                     if name == "report" or "reference" in label}
        print(
            f"| {'run':62} | wall s | CPU s | rows/s | peak MB | x report (wall / CPU) | status |\n"
            "|---|---|---|---|---|---|---|"
        )
        for _, label, (wall, cpu, peak, status), rows in done:
            base = reference.get(rows)
            ratio = f"{wall / base[0]:.2f} / {cpu / base[1]:.2f}" if base else "-"
            print(
                f"| {label:62} | {wall:6.1f} | {cpu:5.1f} | {rows / wall:8,.0f} | "
                f"{peak:7.0f} | {ratio:>20} | {status} |"
            )

if __name__ == "__main__":
    main()
