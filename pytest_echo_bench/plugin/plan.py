"""What a sweep records in its meta line about how it collects: the item order and the decide plan.

Both are decided once, on the controller, for a new sweep; a resume takes them from the meta line,
so a sweep keeps one order (and one plan) however often it is resumed, sharded or spread by xdist.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from pytest_echo_bench.ops.decide import Plan, resolve_pair
from pytest_echo_bench.plugin.options import BenchOptions
from pytest_echo_bench.plugin.order import DEFAULT_SEED, FILE, RANDOM, order_meta
from pytest_echo_bench.spec.load import Spec


def run_order(opts: BenchOptions, found: Mapping[str, Any] | None) -> tuple[dict[str, Any], list[str]]:
    """The meta line's ``order`` for this run, and a note when a resume overrides what was asked."""
    if found is None:
        return order_meta(opts.order or RANDOM, DEFAULT_SEED if opts.seed is None else opts.seed), []
    # Files written before the order existed ran in file order: a resume keeps that too.
    recorded = dict(found.get("order") or {"order": FILE})
    asked = order_meta(opts.order or str(recorded["order"]), recorded.get("seed", DEFAULT_SEED)
                       if opts.seed is None else opts.seed)
    if (opts.order is not None or opts.seed is not None) and asked != recorded:
        given = " and ".join(f for f, v in (("--bench-order", opts.order), ("--bench-seed", opts.seed)) if v is not None)
        return recorded, [f"echo-bench: {given} ignored: the sweep keeps the order its meta line records "
                          f"({_said(recorded)}), not {_said(asked)}: a resume never reorders what is left"]
    return recorded, []


def _said(order: Mapping[str, Any]) -> str:
    return "file order" if order.get("order") == FILE else f"random, seed {order.get('seed')}"


def decide_plan(opts: BenchOptions, specs: Mapping[str, Spec], arms: Mapping[str, Sequence[str]],
                found: Mapping[str, Any] | None, order: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The stop-when-decided plan as the meta line records it ({} for none), and a note when a resume
    is asked for pairs; a UsageError when the plan is wrong.

    A resume keeps the plan of its meta line (the printed resume command names no pairs): the
    pairs a sweep looks at are fixed before its first look.
    """
    if found is not None:
        kept = dict(found.get("decide") or {})
        if not opts.decide:
            return kept, []
        said = ", ".join(" vs ".join(p[1:]) for p in kept.get("pairs", [])) or "none"
        return kept, [f"echo-bench: --bench-stop-when-decided ignored: a resume keeps the pairs its meta line records ({said})"]
    pairs: list[tuple[str, str, str]] = []
    levels = {(s.decide.alpha, s.decide.margin) for s in specs.values() if s.decide is not None}
    if len(levels) > 1:  # one Holm family, one alpha: a sweep cannot hold two
        raise pytest.UsageError("the specs' decide sections give different alpha or margin: "
                                f"{sorted(levels)}; give them one, or run them as separate sweeps")
    alpha, margin = levels.pop() if levels else (0.05, 0.0)
    for name, spec in sorted(specs.items()):
        if spec.decide is not None:
            pairs += [(name, a, b) for a, b in spec.decide.pairs]
    try:
        pairs += [resolve_pair(text, arms) for text in opts.decide]
    except ValueError as exc:
        raise pytest.UsageError(f"--bench-stop-when-decided: {exc}") from exc
    if not pairs:
        return {}, []
    if order.get("order") != RANDOM:
        raise pytest.UsageError("--bench-stop-when-decided needs the random order (--bench-order random): "
                                "a sweep stopped early in file order holds only the first subtasks")
    return Plan(tuple(dict.fromkeys(pairs)), alpha, margin).to_json(), []
