"""Each chat provider's CPU per call, its request built and its reply read: openai and gemini, the
lean client and the official SDK.

The loopback servers (tests/openai_server.py, tests/gemini_server.py) run in processes of their own
(their threads must not share this one's GIL); each provider's ``complete`` is called one call
after another on one keep-alive connection, in alternating rounds so a busy machine weighs on each
alike. The calling thread's user and system time is what bounds the calls one process keeps in
flight; the wall time is shown for information.

Usage: python benchmarks/client_cost.py [CALLS_PER_ROUND] [ROUNDS]
       (the SDK rows need openai and google-genai: pip install -e '.[test]')
"""

from __future__ import annotations

import contextlib
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent.parent / "tests"

from pytest_echo_bench.providers import gemini, openai_chat  # noqa: E402
from pytest_echo_bench.providers.base import Provider, Request  # noqa: E402

REQUEST = Request(None, "arm", "2+2=? Answer with the number alone.")  # type: ignore[arg-type]
SERVE = ("import sys, time; sys.path.insert(0, sys.argv[1])\n"
         "from openai_server import FakeOpenAI; from gemini_server import FakeGemini\n"
         "with (FakeOpenAI if sys.argv[2] == 'openai' else FakeGemini)() as s:\n"
         "    print(s.base_url, flush=True)\n    time.sleep(3600)\n")


@contextlib.contextmanager
def server_process(kind: str) -> Iterator[str]:
    proc = subprocess.Popen([sys.executable, "-c", SERVE, str(TESTS), kind],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.kill()
        proc.wait(10)


def _thread_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_utime + usage.ru_stime


def per_call(provider: Provider, calls: int) -> tuple[float, float]:
    """(CPU s, wall s) per call of this thread."""
    provider.complete(REQUEST)  # the connection opened outside the measurement
    cpu, wall = _thread_cpu(), time.perf_counter()
    for _ in range(calls):
        provider.complete(REQUEST)
    return (_thread_cpu() - cpu) / calls, (time.perf_counter() - wall) / calls


def providers(openai_url: str, gemini_url: str) -> dict[str, Callable[[], Any]]:
    """Each measured provider, made as its ``build`` makes it."""
    made: dict[str, Callable[[], Any]] = {
        "openai, client: http": lambda: openai_chat.OpenAIProvider(
            openai_chat.HTTPTransport(openai_url, "k", 10.0), "m", None, {"temperature": 0}),
        "gemini, client: http": lambda: gemini.GeminiProvider(
            gemini.HTTPTransport(gemini_url, "gemini-2.5-flash", "k", 10.0), "gemini-2.5-flash",
            None, {"generationConfig": {"temperature": 0}}),
    }
    with contextlib.suppress(ImportError):
        import openai

        made["openai, official SDK"] = lambda: openai_chat.OpenAIProvider(openai_chat.SDKTransport(
            openai.OpenAI(api_key="k", base_url=openai_url, max_retries=0), openai, openai_url),
            "m", None, {"temperature": 0})
    with contextlib.suppress(ImportError):
        from google import genai

        made["gemini, google-genai SDK"] = lambda: gemini.GeminiProvider(gemini.SDKTransport(
            genai.Client(api_key="k", http_options=genai.types.HttpOptions(
                base_url=gemini_url.removesuffix("/v1beta") + "/", api_version="v1beta")),
            genai, "gemini-2.5-flash", gemini_url), "gemini-2.5-flash", None,
            {"generationConfig": {"temperature": 0}})
    return made


def main(calls: int, rounds: int) -> None:
    with server_process("openai") as openai_url, server_process("gemini") as gemini_url:
        made = {name: make() for name, make in providers(openai_url, gemini_url).items()}
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in made}
        for _ in range(rounds):
            for name, provider in made.items():
                results[name].append(per_call(provider, calls))
        for provider in made.values():
            provider.close()
    for name, runs in results.items():
        cpu = statistics.median(c for c, _ in runs)
        wall = statistics.median(w for _, w in runs)
        print(f"{name:>26}: {cpu * 1e6:7.1f} us CPU per call, {wall * 1e3:6.2f} ms wall per call")
    print(f"({rounds} rounds of {calls} calls, medians)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300,
         int(sys.argv[2]) if len(sys.argv) > 2 else 5)
