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
- ``aiohttp``: ``aiohttp_client.py``, a plain aiohttp client (one session, a pool of as many
  connections, as many tasks taking the next request): what a user would write instead of a sweep,
  the reference of the ``x ref`` columns when it runs (aiohttp is a benchmark-only dependency:
  ``pip install aiohttp``);
- ``pytest``: as many no-op tests run by pytest alone (this plugin disabled): pytest's own floor for
  that many items, before any call is made;
- ``instant``: the ``sim`` provider with no latency (no thread, no wait: the plugin's cost per item
  beside ``pytest``'s, the reference of the ``instant`` scenario).

The items come from a ``loader: jsonl`` file, as a real benchmark's do. Python may write its
bytecode caches (``PYTHONDONTWRITEBYTECODE`` is unset for the runs, after one warm-up run), as on a
user's machine: otherwise every pytest start compiles the plugin's modules again (about 0.2 s).

Scenarios: ``1k32`` (1,000 items, 32 in flight), ``4k256`` (4,000 items, 256 in flight), ``rate``
(1,000 items, 32 in flight, the server admitting 50 requests a second and answering 429 with
retry-after beyond) and ``instant`` (10,000 ``instant`` items against 10,000 ``pytest`` no-op tests,
no server). Printed per run: the load average when it started, wall and CPU seconds (user + system
of the client processes, not the server's), the ratio to the ideal, the wall and CPU ratios to the
reference of the same repeat (``aiohttp`` if it runs, else ``baseline``; ``pytest`` for
``instant``), the server's most requests in flight at once, and how many it answered 429.

Usage: python benchmarks/throughput.py [--scenarios 1k32,4k256,rate,instant]
       [--clients default,sdk,sim,pytest,baseline,aiohttp] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from overhead import machine, run

ROOT = Path(__file__).resolve().parents[1]
LATENCY = 0.2
RATE = 50  # requests a second the rate scenario's server admits
SCENARIOS = {
    "1k32": (1000, 32, 0),
    "4k256": (4000, 256, 0),
    "rate": (1000, 32, RATE),
    "instant": (10000, 8, 0),
}

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
    if client == "instant":  # nothing to wait for: the items run on pytest's own thread
        return "  gpt: {provider: sim, accuracy: 1.0}"
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


def client_script(script: str, base_url: str, items: int, concurrency: int) -> tuple[float, float]:
    """(wall s, CPU s) of a client script printing its JSON figures (``baseline``, ``aiohttp``)."""
    cmd = [sys.executable, str(Path(__file__).with_name(script)), base_url]
    start = time.perf_counter()
    proc = subprocess.run(cmd + [str(items), str(concurrency)], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"{script} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return wall, float(json.loads(proc.stdout)["cpu_s"])


SCRIPTS = {"baseline": "baseline_client.py", "aiohttp": "aiohttp_client.py"}


def measure(
    workdir: Path, client: str, base_url: str, items: int, concurrency: int
) -> tuple[float, float]:
    if client in SCRIPTS:
        return client_script(SCRIPTS[client], base_url, items, concurrency)
    return sweep(workdir, client, base_url, items, concurrency)


def clients_of(name: str, asked: list[str]) -> list[str]:
    """The clients a scenario runs, its reference first."""
    if name == "instant":
        return ["pytest", "instant"]
    rate = SCENARIOS[name][2]
    clients = [c for c in asked if c != "instant"]
    if rate:  # the ceiling and the harness alone say nothing about a rate limit
        clients = [c for c in clients if c not in ("baseline", "aiohttp", "sim", "pytest", "paced")]
        clients.append("paced")
    order = ["aiohttp", "baseline"]
    return sorted(clients, key=lambda c: order.index(c) if c in order else len(order))


HEADER = (
    f"{'scenario':8} {'rep':>3} {'load':>5} {'client':9} {'wall s':>7} {'cpu s':>6} "
    f"{'x ideal':>7} {'wall x ref':>10} {'cpu x ref':>9} {'max in flight':>13} {'429s':>5}"
)


def run_scenario(server: Server, workdir: Path, name: str, clients: list[str], rep: int) -> None:
    items, concurrency, rate = SCENARIOS[name]
    server.send(f"rate {rate}")
    ideal = items / rate if rate else items * LATENCY / concurrency
    ref: tuple[float, float] | None = None
    for client in clients:
        load = os.getloadavg()[0]
        server.stats()
        wall, cpu = measure(workdir, client, server.base_url, items, concurrency)
        stats = server.stats()
        ref = ref or ((wall, cpu) if client in ("aiohttp", "baseline", "pytest") else None)
        ratios = f"{wall / ref[0]:10.2f} {cpu / ref[1]:9.2f}" if ref else f"{'-':>10} {'-':>9}"
        x_ideal = f"{wall / ideal:7.2f}" if name != "instant" else f"{'-':>7}"
        print(
            f"{name:8} {rep:3d} {load:5.1f} {client:9} {wall:7.2f} {cpu:6.2f} {x_ideal} "
            f"{ratios} {stats['max_in_flight']:13d} {stats['refused']:5d}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenarios", default="1k32,4k256,rate,instant")
    parser.add_argument("--clients", default="default,sdk,sim,pytest,baseline,aiohttp")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    asked = args.clients.split(",")
    if "aiohttp" in asked:
        try:
            import aiohttp  # noqa: F401
        except ImportError:
            raise SystemExit(
                "the aiohttp client needs aiohttp: pip install aiohttp "
                "(or leave it out: --clients default,sim,pytest,baseline)"
            ) from None
    print(machine())
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} at start")
    print(HEADER)
    server = Server()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sweep(Path(tmp), "sim", server.base_url, 10, 1)  # the warm-up: bytecode caches written
            for name in args.scenarios.split(","):
                for rep in range(args.repeat):
                    run_scenario(server, Path(tmp), name, clients_of(name, asked), rep)
    finally:
        server.close()


if __name__ == "__main__":
    main()
