"""The ceiling: a minimal asyncio HTTP/1.1 keep-alive client, N requests over C connections.

It makes the requests a sweep makes (the same JSON body shape, one chat completion each) and
does nothing else: no parsing beyond the status line and content-length, no grading, no file.
Whatever it takes is what this machine and the server allow; ``throughput.py`` divides by it.

Usage: python benchmarks/baseline_client.py BASE_URL REQUESTS
       CONNECTIONS (prints JSON: wall_s, cpu_s)
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
from urllib.parse import urlsplit


async def connection(host: str, port: int, path: str, todo: list[int]) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    while todo:
        i = todo.pop()
        body = json.dumps(
            {"model": "m", "messages": [{"role": "user", "content": f"2+2=? ({i})"}]}
        ).encode()
        writer.write(
            b"POST %s HTTP/1.1\r\nhost: %s\r\ncontent-type: "
            b"application/json\r\ncontent-length: %d\r\n\r\n"
            % (path.encode(), host.encode(), len(body))
            + body
        )
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        json.loads(await reader.readexactly(length))
    writer.close()


async def main(base_url: str, requests: int, connections: int) -> None:
    parts = urlsplit(base_url.rstrip("/") + "/chat/completions")
    todo = list(range(requests))
    await asyncio.gather(
        *(
            connection(parts.hostname or "127.0.0.1", parts.port or 80, parts.path, todo)
            for _ in range(connections)
        )
    )


if __name__ == "__main__":
    start = time.perf_counter()
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(
        json.dumps(
            {"wall_s": time.perf_counter() - start, "cpu_s": usage.ru_utime + usage.ru_stime}
        )
    )
