"""The lean client's CPU per call through a forward proxy against the same calls made directly.

Starts the loopback OpenAI server (tests/openai_server.py) and proxy.py on 127.0.0.1, then makes
the calls one after another on one keep-alive connection each way, in alternating rounds so a
busy machine weighs on both alike. The server runs in a process of its own; the client's CPU
(its calling thread's) is what bounds calls in flight; the wall time adds the proxy's own hop
and is shown for information.

Usage: python benchmarks/proxy_cost.py [CALLS_PER_ROUND] [ROUNDS]
       (needs proxy.py: pip install proxy.py)
"""

from __future__ import annotations

import contextlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))

from netparts import forward_proxy  # noqa: E402 - the tests' helpers, found through the path above

from pytest_echo_bench.providers.http_json import JSONClient  # noqa: E402
from pytest_echo_bench.providers.network import Network  # noqa: E402

SLOW_S = 0.004  # about what proxy.py adds to a call here
PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": "2+2=?"}]}


def per_call(client: JSONClient, calls: int) -> tuple[float, float]:
    """(CPU s, wall s) per call of this thread."""
    client.post(PAYLOAD)  # the connection opened outside the measurement
    cpu, wall = _thread_cpu(), time.perf_counter()
    for _ in range(calls):
        client.post(PAYLOAD)
    return (_thread_cpu() - cpu) / calls, (time.perf_counter() - wall) / calls


def _thread_cpu() -> float:
    # user and system time, as the kernel counts them
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_utime + usage.ru_stime


SERVE = ("import sys, time; sys.path.insert(0, sys.argv[1]); from openai_server import FakeOpenAI\n"
         "delay = float(sys.argv[2])\n"
         "with FakeOpenAI(lambda prompt: time.sleep(delay) or '42') as s:\n"
         "    print(s.base_url, flush=True)\n    time.sleep(3600)\n")


@contextlib.contextmanager
def server_process(delay_s: float = 0.0) -> Iterator[str]:
    """The loopback server in a process of its own: its threads must not share this one's GIL."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE, str(TESTS), str(delay_s)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.kill()
        proc.wait(10)


def main(calls: int, rounds: int) -> None:
    with (
        server_process() as base_url,
        server_process(SLOW_S) as slow_url,
        tempfile.TemporaryDirectory() as work,
        forward_proxy(Path(work)) as proxy,
    ):
        clients = {
            "direct": JSONClient(base_url + "/chat/completions", {}, 10.0, Network(proxy="none")),
            "proxy": JSONClient(base_url + "/chat/completions", {}, 10.0, Network(proxy=proxy.url)),
            # The control: direct, but waiting about as long
            # per call as the proxied calls do.
            "direct, slow server": JSONClient(
                slow_url + "/chat/completions", {}, 10.0, Network(proxy="none")
            ),
        }
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in clients}
        for _ in range(rounds):
            for name, client in clients.items():
                results[name].append(per_call(client, calls))
    cpu = {name: statistics.median(c for c, _ in runs) for name, runs in results.items()}
    wall = {name: statistics.median(w for _, w in runs) for name, runs in results.items()}
    for name in clients:
        print(
            f"{name:>20}: {cpu[name] * 1e6:7.1f} us CPU per call, {wall[name] * 1e3:6.2f} ms "
            "wall per call"
        )
    print(
        f"proxy / direct, client CPU per call: {cpu['proxy'] / cpu['direct']:.2f}; proxy / "
        "direct with a server as slow: "
        f"{cpu['proxy'] / cpu['direct, slow server']:.2f} ({rounds} rounds of {calls} calls, "
        "medians)"
    )


if __name__ == "__main__":
    main(
        int(sys.argv[1]) if len(sys.argv) > 1 else 500, int(sys.argv[2]) if len(sys.argv) > 2 else 5
    )
