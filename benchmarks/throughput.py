"""Throughput at the limit: sweeps against a local OpenAI-compatible
server, beside the machine's ceiling.

One server process (``tests/openai_server.py``, answering after 0.2 s, on 127.0.0.1) serves every
run of a scenario, side by side and interleaved per repeat, so the figures are comparable as ratios
even on a shared machine:

- ``default``: an ``openai`` arm with only ``model``, ``base_url`` and
  ``api_key_env`` (what users write);
- ``http`` / ``sdk``: the same with ``client: http`` / ``client: sdk``;
- ``sim``: the offline ``sim`` provider with the same latency: the harness alone, no network;
- ``paced``: the default with ``rate_limit: {requests_per_minute: 60 x the
  server's rate}`` (rate scenario only);
- ``baseline``: ``baseline_client.py``, a minimal asyncio HTTP/1.1 keep-alive client making the same
  requests over as many connections: the ceiling this machine allows,
  since the server shares its cores;
- ``pytest``: as many no-op tests run by pytest alone (this plugin disabled): pytest's own floor for
  that many items, before any call is made.

The items come from a ``loader: jsonl`` file, as a real benchmark's do. Python may write its
bytecode caches (``PYTHONDONTWRITEBYTECODE`` is unset for the runs, after one warm-up run), as on a
user's machine: otherwise every pytest start compiles the plugin's modules again (about 0.2 s).

Scenarios: ``1k32`` (1,000 items, 32 in flight), ``4k256`` (4,000 items, 256 in flight) and ``rate``
(1,000 items, 32 in flight, the server admitting 50 requests a second and answering 429 with
retry-after beyond). Printed per run: wall and CPU seconds (user + system of the client processes,
not the server's), the ratio to the ideal and to the baseline of the same repeat, the server's most
requests in flight at once, and how many requests it answered 429.

Usage: python benchmarks/throughput.py [--scenarios 1k32,4k256,rate]
       [--clients default,sdk,sim,pytest,baseline] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from overhead import run

ROOT = Path(__file__).resolve().parents[1]
LATENCY = 0.2
RATE = 50  # requests a second the rate scenario's server admits
SCENARIOS = {"1k32": (1000, 32, 0), "4k256": (4000, 256, 0), "rate": (1000, 32, RATE)}

SERVER = f"""
import json, sys, time
sys.path.insert(0, {str(ROOT / "tests")!r})
from fake_server import RateWindow
from openai_server import FakeOpenAI
server = FakeOpenAI(lambda prompt: (time.sleep({LATENCY}), "4")[1])
with server:
    print(server.base_url, flush=True)
    for line in sys.stdin:
        command, _, arg = line.strip().partition(" ")
        if command == "rate":
            server.rate = RateWindow(int(arg)) if int(arg) else None
        elif command == "stats":
            with server.lock:
                stats = {{"served": server.served,
                         "refused": server.rate.refused if server.rate else 0,
                         "max_in_flight": server.max_in_flight}}
                server.served, server.max_in_flight = 0, 0
                if server.rate:
                    server.rate.refused = 0
            print(json.dumps(stats), flush=True)
"""


class Server:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.base_url = self._line()

    def _line(self) -> str:
        return self.proc.stdout.readline().strip()  # type: ignore[union-attr]

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]

    def stats(self) -> dict[str, int]:
        self.send("stats")
        return json.loads(self._line())  # type: ignore[no-any-return]

    def close(self) -> None:
        self.proc.kill()


def arm(client: str, base_url: str) -> str:
    if client == "sim":  # the harness alone: the same waits, no network
        return f"  gpt: {{provider: sim, accuracy: 1.0, latency_s: {LATENCY}}}"
    lines = [
        "  gpt:",
        "    provider: openai",
        "    model: m",
        f"    base_url: {base_url}",
        "    api_key_env: null",
    ]
    if client in ("http", "sdk"):
        lines.append(f"    client: {client}")
    if client == "paced":
        lines.append(f"    rate_limit: {{requests_per_minute: {RATE * 60}}}")
    return "\n".join(lines)


ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def spec(items: int, arm_text: str, workdir: Path) -> str:
    with open(workdir / f"items{items}.jsonl", "w", encoding="utf-8") as f:
        for i in range(items):
            f.write(json.dumps({"id": f"q{i}", "input": f"2+2=? ({i})", "target": "4"}) + "\n")
    return (
        f"benchmark: perf\ndataset: {{loader: jsonl, path: items{items}.jsonl}}\nscorer: "
        f"exact\narms:\n{arm_text}\n"
    )


def sweep(
    workdir: Path, client: str, base_url: str, items: int, concurrency: int
) -> tuple[float, float]:
    if client == "pytest":
        (workdir / "test_floor.py").write_text(
            f"import pytest\n\n\n@pytest.mark.parametrize('i', range({items}))\n"
            "def test_noop(i):\n    pass\n"
        )
        return run(workdir, ["test_floor.py", "-p", "no:echo_bench"], 0, ENV)
    (workdir / "perf.yaml").write_text(spec(items, arm(client, base_url), workdir))
    out = workdir / f"r{time.monotonic_ns()}.jsonl"
    wall, cpu = run(
        workdir,
        [
            "perf.yaml",
            "--bench-out",
            str(out),
            "--bench-concurrency",
            str(concurrency),
            "--bench-cache",
            "off",
        ],
        0,
        ENV,
    )
    rows = out.read_text().count("\n") - 1
    if rows != items:
        raise SystemExit(f"{client}: {rows} rows of {items}")
    return wall, cpu


def baseline(base_url: str, items: int, concurrency: int) -> tuple[float, float]:
    cmd = [
        sys.executable,
        str(Path(__file__).with_name("baseline_client.py")),
        base_url,
        str(items),
        str(concurrency),
    ]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    return wall, float(json.loads(proc.stdout)["cpu_s"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenarios", default="1k32,4k256,rate")
    parser.add_argument("--clients", default="default,sdk,sim,pytest,baseline")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    print(
        f"machine: {platform.platform()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, "
        f"load average {os.getloadavg()[0]:.1f} at start"
    )
    print(
        f"{'scenario':8} {'rep':>3} {'client':9} {'wall s':>7} {'x ideal':>7} {'x base':>7} "
        f"{'cpu s':>6} "
        f"{'max in flight':>13} {'429s':>5} {'429 %':>6}"
    )
    server = Server()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sweep(Path(tmp), "sim", server.base_url, 10, 1)  # the warm-up: bytecode caches written
            for name in args.scenarios.split(","):
                items, concurrency, rate = SCENARIOS[name]
                server.send(f"rate {rate}")
                clients = [
                    c
                    for c in args.clients.split(",")
                    if not (rate and c in ("baseline", "sim", "pytest"))
                ]
                if rate and "paced" not in clients:
                    clients.append("paced")
                ideal = items / rate if rate else items * LATENCY / concurrency
                for rep in range(args.repeat):
                    base_wall = None
                    # the baseline first
                    for client in sorted(clients, key=lambda c: c != "baseline"):
                        server.stats()
                        if client == "baseline":
                            wall, cpu = baseline(server.base_url, items, concurrency)
                            base_wall = wall
                        else:
                            wall, cpu = sweep(
                                Path(tmp), client, server.base_url, items, concurrency
                            )
                        stats = server.stats()
                        ratio = f"{wall / base_wall:7.2f}" if base_wall else f"{'-':>7}"
                        total = stats["served"] + stats["refused"]
                        print(
                            f"{name:8} {rep:3d} {client:9} {wall:7.2f} {wall / ideal:7.2f} "
                            f"{ratio} {cpu:6.2f} "
                            f"{stats['max_in_flight']:13d} {stats['refused']:5d} "
                            f"{100 * stats['refused'] / max(1, total):6.1f}",
                            flush=True,
                        )
    finally:
        server.close()


if __name__ == "__main__":
    main()
