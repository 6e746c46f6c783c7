"""How every output shows a decide plan's figures: the one set of names, cells, sentences and notes
that the report's formats (text, markdown, JSON, CSV, HTML), the run's summary and end lines and the
progress page all draw from ``analysis.decide.monitor.Sequential``, so no two
of them can say it differently.

The figures themselves are computed in one place only, ``analysis.decide.monitor.Monitor.figures``;
this module formats, it never computes.
"""

from __future__ import annotations

from typing import Any

from pytest_echo_bench.analysis.decide.monitor import (
    RAN_TO_END,
    RUNNING,
    STOPPED_EARLY,
    STOPPED_OTHER,
    PairFigures,
    Sequential,
)
from pytest_echo_bench.analysis.gates import percent

NOTES = {
    STOPPED_EARLY: "this sweep stopped once these comparisons were decided, looking after every "
    "item: only these "
    "anytime-valid p-values and intervals are valid for them; the fixed-n p-values "
    "and intervals of the "
    "paired comparison (McNemar, Newcombe) are not (optional stopping)",
    RAN_TO_END: "this sweep ran to the end: the fixed-n paired comparison is valid, and so are "
    "these anytime-valid "
    "figures (wider: they hold at every look)",
    STOPPED_OTHER: "this sweep stopped before its end ({stop}), not on its decision: the fixed-n "
    "paired comparison is "
    "valid for the items it holds, and so are these anytime-valid figures",
    RUNNING: "this sweep is running: these anytime-valid figures hold at every look; the "
    "fixed-n ones are valid only "
    "once it has run to the end",
}
MERGED_PARTS = (
    "parts of this merged file stopped early ({why}): neither the fixed-n comparison nor these "
    "anytime-valid figures of the merged rows are valid (each part stopped on its own rows, "
    "not the merged "
    "ones); each part's own figures are: echo-bench report PART"
)
EARLIER = (
    "this file stopped once when its comparisons were decided ({earlier}), and a resume then "
    "{then}: the "
    "fixed-n p-values and intervals of the paired comparison (McNemar, Newcombe) are not "
    "valid (optional "
    "stopping); these anytime-valid figures are, at every look"
)
HINT = (
    "p anytime: Ville's inequality on betting wealth (Waudby-Smith & Ramdas 2024), "
    "two-sided; p holm: Holm over "
    "the planned pairs; interval: the confidence sequence of a - b at that level"
)
LEFT = 3  # leading text columns of the table: benchmark, a, b
# the cells of ``cells`` that are words, not figures (left-aligned in HTML)
TEXT_CELLS = (0, 1, 2, 3, 10)
CSV_FIELDS = [
    "kind",
    "benchmark",
    "a",
    "b",
    "state",
    "direction",
    "n",
    "decided_at",
    "diff",
    "anytime_ci_lo",
    "anytime_ci_hi",
    "p_anytime",
    "p_holm",
    "alpha",
    "margin",
    "collection",
    "fixed_n_valid",
    "verdict",
    "note",
]


def note(seq: Sequential) -> str:
    """What the figures are worth, for how the sweep was collected (or why there are none)."""
    if seq.problem:
        return f"anytime-valid comparison left out: {seq.problem}"
    if seq.merged_parts:
        return MERGED_PARTS.format(why=seq.merged_parts)
    if seq.earlier:
        then = {RAN_TO_END: "ran to the end", RUNNING: "is running"}.get(seq.collection) or \
            f"stopped before its end ({seq.stop or 'stopped'})"
        return EARLIER.format(earlier=seq.earlier, then=then)
    return NOTES[seq.collection].format(stop=seq.stop or "stopped")


def title(seq: Sequential) -> str:
    if seq.plan is None:
        return "anytime-valid comparison (stop when decided)"
    margin = f", margin {seq.plan.margin:g}" if seq.plan.margin else ""
    return f"anytime-valid comparison (stop when decided, alpha {seq.plan.alpha:g}{margin})"


def header(seq: Sequential) -> list[str]:
    level = "" if seq.plan is None else f"{percent(1 - seq.plan.alpha)} "
    return [
        "benchmark",
        "a",
        "b",
        "state",
        "n",
        "decided at",
        "diff",
        f"{level}anytime CI",
        "p anytime",
        "p holm",
        "verdict",
    ]


def interval_text(f: PairFigures) -> str:
    return f"[{f.ci[0]:+.3f}, {f.ci[1]:+.3f}]"


def cells(f: PairFigures) -> list[str]:
    """One pair's row, as text: the terminal, markdown, the HTML report
    and the page show these strings."""
    return [
        f.benchmark,
        f.a,
        f.b,
        f.state,
        str(f.n),
        "-" if f.decided_at is None else str(f.decided_at),
        "-" if f.diff is None else f"{f.diff:+.3f}",
        interval_text(f),
        f"{f.p_anytime:#.4g}",
        f"{f.p_holm:#.4g}",
        f.verdict + (f" ({f.note})" if f.note else ""),
    ]


def sentence(f: PairFigures) -> str:
    """One pair in a line: which way, at how many items, with the anytime-valid figures."""
    at = f", decided at {f.decided_at} items" if f.decided_at is not None else ""
    return (
        f"decide {f.a} vs {f.b}: {f.verdict}{at}; at {f.n} items anytime-valid p {f.p_anytime:.3g} "
        f"(Holm {f.p_holm:.3g}), {percent(f.level)} interval of {f.a} - {f.b} {interval_text(f)}"
        + (f"; {f.note}" if f.note else "")
    )


def to_json(seq: Sequential) -> dict[str, Any]:
    """The report's ``sequential`` and the summary's ``decide``: one shape."""
    return {
        "collection": seq.collection,
        "fixed_n_valid": seq.fixed_n_valid,
        "alpha": None if seq.plan is None else seq.plan.alpha,
        "margin": None if seq.plan is None else seq.plan.margin,
        "pairs": [f.to_json() for f in seq.pairs],
        **({"stop": seq.stop} if seq.stop else {}),
        **({"merged_parts": seq.merged_parts} if seq.merged_parts else {}),
        **({"decided_before": seq.earlier} if seq.earlier else {}),
        **({"problem": seq.problem} if seq.problem else {}),
    }


def why_not_valid(seq: Sequential) -> str:
    """Why the fixed-n figures are not valid, in a few words (the report's
    note, an interval gate's refusal)."""
    if seq.merged_parts:
        return f"parts of the merged file stopped early ({seq.merged_parts})"
    if seq.earlier:
        return f"the sweep once stopped when its comparisons were decided ({seq.earlier})"
    return "the sweep stopped once its comparisons were decided"


def csv_rows(seq: Sequential) -> list[dict[str, Any]]:
    """The CSV's ``decide`` lines: one per pair, numbers left numbers; a plan that cannot
    be used is one line saying why."""
    if seq.problem:
        return [
            {
                "kind": "decide",
                "collection": seq.collection,
                "fixed_n_valid": seq.fixed_n_valid,
                "note": note(seq),
            }
        ]
    return [
        {
            "kind": "decide",
            "benchmark": f.benchmark,
            "a": f.a,
            "b": f.b,
            "state": f.state,
            "direction": f.direction,
            "n": f.n,
            "decided_at": f.decided_at,
            "diff": f.diff,
            "anytime_ci_lo": f.ci[0],
            "anytime_ci_hi": f.ci[1],
            "p_anytime": f.p_anytime,
            "p_holm": f.p_holm,
            "alpha": f.alpha,
            "margin": f.margin,
            "collection": seq.collection,
            "fixed_n_valid": seq.fixed_n_valid,
            "verdict": f.verdict,
            "note": f.note,
        }
        for f in seq.pairs
    ]


def not_valid_for(seq: Sequential | None) -> set[tuple[str, str, str]]:
    """The (benchmark, a, b) pairs whose fixed-n figures a report must
    mark as not valid (either order)."""
    if seq is None or seq.fixed_n_valid:
        return set()
    return {k for f in seq.pairs for k in ((f.benchmark, f.a, f.b), (f.benchmark, f.b, f.a))}
