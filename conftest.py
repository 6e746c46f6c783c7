"""Routing arms for the specs in bench_specs/, written in Python.

``vote_escalate`` is the classic cost-saving router: two cheap calls, and a call to the
strong model only when the cheap answers disagree (or either is unparseable).
"""

from __future__ import annotations

from pytest_echo_bench import ArmContext, arm


@arm("vote_escalate")
def vote_escalate(ctx: ArmContext) -> str:
    first, second = ctx.call("cheap_a"), ctx.call("cheap_b")
    agreed = ctx.answer(first)
    if agreed is not None and agreed == ctx.answer(second):
        ctx.extra["escalated"] = False
        return first
    ctx.extra["escalated"] = True
    return ctx.call("strong")
