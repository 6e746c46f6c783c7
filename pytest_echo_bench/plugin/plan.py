"""What a sweep records in its meta line about what it looks at: the decide plan.

Decided once, on the controller, for a new sweep; a resume takes it from the meta line, so a sweep
keeps one plan however often it is resumed, sharded or spread by xdist (the order and the other run
options it records: ``plugin.recorded``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from pytest_echo_bench.analysis.decide.monitor import ALPHA, MARGIN, PairKey, Plan, resolve_pair
from pytest_echo_bench.plugin.options import BenchOptions
from pytest_echo_bench.spec.load import Spec
from pytest_echo_bench.store.meta import DecideRecord, OrderRecord
from pytest_echo_bench.store.records import Meta


def decide_plan(opts: BenchOptions, specs: Mapping[str, Spec], arms: Mapping[str, Sequence[str]],
                found: Meta | None, order: OrderRecord) -> tuple[Plan | None, list[str]]:
    """The stop-when-decided plan (None for none), and a note when a resume is asked for pairs; a
    UsageError when the plan is wrong.

    A resume keeps the plan of its meta line (the printed resume command names no pairs): the
    pairs a sweep looks at are fixed before its first look.
    """
    if found is not None:
        return _kept_plan(opts, found.decide)
    pairs = _spec_pairs(specs)
    alpha, margin = _level(specs)
    try:
        pairs += [resolve_pair(text, arms) for text in opts.decide]
    except ValueError as exc:
        raise pytest.UsageError(f"--bench-stop-when-decided: {exc}") from exc
    if not pairs:
        return None, []
    if not order.random:
        raise pytest.UsageError(
            "--bench-stop-when-decided needs the random order (--bench-order random): "
            "a sweep stopped early in file order holds only the first subtasks"
        )
    return Plan(tuple(dict.fromkeys(pairs)), alpha, margin), []


def _kept_plan(opts: BenchOptions, kept: DecideRecord | None) -> tuple[Plan | None, list[str]]:
    """A resume's plan: the one its meta line records (None when it records none, or one no report
    could use), and a note when the command line asks for pairs."""
    plan = Plan.read(kept) if kept is not None else None
    if not opts.decide:
        return (plan if isinstance(plan, Plan) else None), []
    pairs = (kept.pairs if kept is not None else None) or []
    said = ", ".join(" vs ".join(p[1:]) for p in pairs) or "none"
    note = ("echo-bench: --bench-stop-when-decided ignored: a resume keeps the pairs its meta line "
            f"records ({said})")
    return (plan if isinstance(plan, Plan) else None), [note]


def _level(specs: Mapping[str, Spec]) -> tuple[float, float]:
    """The alpha and margin the specs' decide sections give (one Holm family: one alpha)."""
    levels = {(s.decide.alpha, s.decide.margin) for s in specs.values() if s.decide is not None}
    if len(levels) > 1:
        raise pytest.UsageError("the specs' decide sections give different alpha or margin: "
                                f"{sorted(levels)}; give them one, or run them as separate sweeps")
    return levels.pop() if levels else (ALPHA, MARGIN)


def _spec_pairs(specs: Mapping[str, Spec]) -> list[PairKey]:
    """The pairs the specs' decide sections name, benchmark by benchmark."""
    return [(name, a, b) for name, spec in sorted(specs.items()) if spec.decide is not None
            for a, b in spec.decide.pairs]
