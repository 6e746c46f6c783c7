"""The loopback OpenAI server made to bill the most each request allows: what a budget must survive.

Every reply reports as many completion tokens as the request it answers permits: the larger of its
``max_tokens`` and ``max_completion_tokens`` (a server keeps one), times its ``n``; ``UNBOUNDED``
when the request carries no bound. Prompt tokens are the UTF-8 bytes of the messages' contents
(no tokenizer gives more). ``over`` adds tokens beyond the bound: a server that breaks its own.
"""

from __future__ import annotations

import json
from typing import Any

from openai_server import FakeOpenAI

UNBOUNDED = 100_000  # what a request without a bound is billed: a long reply
ANSWER = "4"


def allowed(body: dict[str, Any]) -> int:
    """The most completion tokens ``body`` lets a server bill."""
    caps = [
        v
        for k in ("max_tokens", "max_completion_tokens")
        if isinstance(v := body.get(k), int) and v > 0
    ]
    n = body.get("n", 1)
    return (max(caps) if caps else UNBOUNDED) * (n if isinstance(n, int) and n > 0 else 1)


def prompt_bytes(body: dict[str, Any]) -> int:
    texts = [m.get("content") for m in body.get("messages", []) if isinstance(m, dict)]
    return sum(len(t.encode()) for t in texts if isinstance(t, str))


def bill_the_most(server: FakeOpenAI, over: int = 0) -> list[int]:
    """Make ``server`` bill the most; the completion tokens it billed, one per reply, are appended
    to the list returned."""
    billed: list[int] = []

    def reply(body: dict[str, Any]) -> tuple[str, Any]:
        tokens = allowed(body) + over
        billed.append(tokens)
        usage = {"prompt_tokens": prompt_bytes(body), "completion_tokens": tokens,
                 "total_tokens": prompt_bytes(body) + tokens}
        choices = [
            {
                "index": i,
                "finish_reason": "length",
                "message": {"role": "assistant", "content": ANSWER},
            }
            for i in range(max(1, allowed(body) // max(1, allowed({**body, "n": 1}))))
        ]
        data = {
            "id": "chatcmpl-most",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "m"),
            "choices": choices,
            "usage": usage,
        }
        return ("raw", (200, "application/json", json.dumps(data).encode(), {}))

    server.fault_for = reply
    return billed
