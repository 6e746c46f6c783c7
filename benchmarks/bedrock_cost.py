"""The bedrock provider's CPU per call (the lean client, each request signed with SigV4 by
botocore) against the openai provider's, and the signing alone.

Starts the loopback OpenAI and Bedrock servers (tests/openai_server.py, tests/bedrock_server.py,
which checks every signature) in processes of their own, then makes the calls one after another
on one keep-alive connection each, through each provider's ``complete``, in alternating rounds so
a busy machine weighs on both alike. The calling thread's user and system time is what bounds
calls in flight; medians over the rounds.

Usage: python benchmarks/bedrock_cost.py [CALLS_PER_ROUND] [ROUNDS]   (needs botocore)
"""

from __future__ import annotations

import contextlib
import resource
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))

from bedrock_server import ACCESS_KEY, MODEL, REGION, SECRET_KEY  # noqa: E402 - tests' helpers
from botocore.credentials import Credentials  # noqa: E402

from pytest_echo_bench.providers import bedrock, openai_chat  # noqa: E402
from pytest_echo_bench.providers.base import Request  # noqa: E402
from pytest_echo_bench.providers.http_json import JSONClient  # noqa: E402
from pytest_echo_bench.providers.wire import Target  # noqa: E402

REQUEST = Request(None, "arm", "2+2=?")  # type: ignore[arg-type]
SERVE = ("import sys, time; sys.path.insert(0, sys.argv[1])\n"
         "from openai_server import FakeOpenAI; from bedrock_server import FakeBedrock\n"
         "with {'openai': FakeOpenAI, 'bedrock': FakeBedrock}[sys.argv[2]]() as s:\n"
         "    print(s.base_url, flush=True)\n    time.sleep(3600)\n")


def _thread_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_utime + usage.ru_stime


def per_call(call: Callable[[], Any], calls: int) -> float:
    """CPU s per call of this thread."""
    call()  # the connection opened outside the measurement
    cpu = _thread_cpu()
    for _ in range(calls):
        call()
    return (_thread_cpu() - cpu) / calls


@contextlib.contextmanager
def server_process(kind: str) -> Iterator[str]:
    """A loopback server in a process of its own: its threads must not share this one's GIL."""
    proc = subprocess.Popen([sys.executable, "-c", SERVE, str(TESTS), kind],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.kill()
        proc.wait(10)


def providers(openai_url: str, bedrock_url: str) -> dict[str, Callable[[], Any]]:
    url = f"{bedrock_url}/model/{quote(MODEL, safe='')}/converse"
    signer = bedrock.Signer(Credentials(ACCESS_KEY, SECRET_KEY), REGION, url,
                            Target.parse(url).host_header)
    signed = bedrock.BedrockProvider(JSONClient(url, {}, 10.0, sign=signer), MODEL, None,
                                     {"maxTokens": 64})
    plain = openai_chat.OpenAIProvider(openai_chat.HTTPTransport(openai_url, "sk-test", 10.0),
                                       "m", None, {"max_tokens": 64})
    body = b'{"messages": [{"role": "user", "content": [{"text": "2+2=?"}]}]}'
    headers = {"content-type": "application/json", "accept-encoding": "identity"}
    return {"openai, client: http": lambda: plain.complete(REQUEST),
            "bedrock (signed)": lambda: signed.complete(REQUEST),
            "SigV4 signing alone": lambda: signer(body, headers)}


def main(calls: int, rounds: int) -> None:
    with server_process("openai") as openai_url, server_process("bedrock") as bedrock_url:
        made = providers(openai_url + "/v1", bedrock_url)
        results: dict[str, list[float]] = {name: [] for name in made}
        for _ in range(rounds):
            for name, call in made.items():
                results[name].append(per_call(call, calls))
    for name, runs in results.items():
        print(f"{name:>22}: {statistics.median(runs) * 1e6:7.1f} us CPU per call")
    print(f"({rounds} rounds of {calls} calls, medians)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 500,
         int(sys.argv[2]) if len(sys.argv) > 2 else 5)
