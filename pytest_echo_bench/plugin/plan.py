"""What a sweep records in its meta line about what it looks at: the decide plan.

Decided once, on the controller, for a new sweep; a resume takes it from the meta line, so a sweep
keeps one plan however often it is resumed, sharded or spread by xdist (the order and the other run
options it records: ``plugin.recorded``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from pytest_echo_bench.analysis.decide.monitor import Plan, resolve_pair
from pytest_echo_bench.plugin.options import BenchOptions
from pytest_echo_bench.plugin.order import RANDOM
from pytest_echo_bench.spec.load import Spec


def decide_plan(
    opts: BenchOptions,
    specs: Mapping[str, Spec],
    arms: Mapping[str, Sequence[str]],
    found: Mapping[str, Any] | None,
    order: Mapping[str, Any],
) -> tuple[dict[str, Any], list[str]]:
    """The stop-when-decided plan as the meta line records it ({} for none), and a note when a
    resume is asked for pairs; a UsageError when the plan is wrong.

    A resume keeps the plan of its meta line (the printed resume command names no pairs): the
    pairs a sweep looks at are fixed before its first look.
    """
    if found is not None:
        kept = dict(found.get("decide") or {})
        if not opts.decide:
            return kept, []
        said = ", ".join(" vs ".join(p[1:]) for p in kept.get("pairs", [])) or "none"
        return kept, [
            "echo-bench: --bench-stop-when-decided ignored: a resume keeps the pairs its "
            f"meta line records ({said})"
        ]
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
        raise pytest.UsageError(
            "--bench-stop-when-decided needs the random order (--bench-order random): "
            "a sweep stopped early in file order holds only the first subtasks"
        )
    return Plan(tuple(dict.fromkeys(pairs)), alpha, margin).to_json(), []
