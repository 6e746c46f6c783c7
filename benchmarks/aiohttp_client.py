"""A plain aiohttp client: N chat completions with C in flight, and nothing else.

What a user would write instead of a sweep: one ``aiohttp.ClientSession`` with a connection pool
of C, C tasks taking the next request until none is left, each reply's JSON parsed. No grading, no
file, no pytest. ``throughput.py`` runs it beside a sweep of the same items against the same
server and divides by its wall and CPU seconds.

aiohttp is needed by this benchmark only: ``pip install aiohttp``.

Usage: python benchmarks/aiohttp_client.py BASE_URL REQUESTS IN_FLIGHT
       (prints JSON: wall_s, cpu_s, answered)
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time

try:
    import aiohttp
except ImportError:  # a benchmark-only dependency: say how to get it
    raise SystemExit("aiohttp_client.py needs aiohttp: pip install aiohttp") from None


async def worker(session: aiohttp.ClientSession, url: str, todo: list[int]) -> int:
    answered = 0
    while todo:
        i = todo.pop()
        body = {"model": "m", "messages": [{"role": "user", "content": f"2+2=? ({i})"}]}
        async with session.post(url, json=body) as response:
            response.raise_for_status()
            reply = await response.json()
        answered += bool(reply["choices"][0]["message"]["content"])
    return answered


async def main(base_url: str, requests: int, in_flight: int) -> int:
    url = base_url.rstrip("/") + "/chat/completions"
    todo = list(range(requests))
    connector = aiohttp.TCPConnector(limit=in_flight)
    async with aiohttp.ClientSession(connector=connector) as session:
        counts = await asyncio.gather(*(worker(session, url, todo) for _ in range(in_flight)))
    return sum(counts)


if __name__ == "__main__":
    start = time.perf_counter()
    answered = asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(
        json.dumps(
            {
                "wall_s": time.perf_counter() - start,
                "cpu_s": usage.ru_utime + usage.ru_stime,
                "answered": answered,
            }
        )
    )
