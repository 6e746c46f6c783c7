"""``echo-bench trend`` as text, markdown, JSON and CSV: one line per arm and run, the run's pass
rate with its Wilson interval and its paired test against the run before."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from typing import Any

from pytest_echo_bench.report.formats.csv import neutralise
from pytest_echo_bench.report.trend import ALPHA, ArmTrend, Point, Step, Trend
from pytest_echo_bench.store.safe_text import shown

HEADER = ("arm", "run", "run_id", "created_at", "n", "pass_rate", "ci95_lo", "ci95_hi",
          "paired", "right_to_wrong", "wrong_to_right", "item_changed", "p", "p_holm", "changed")
HINT = (f"changed: the run differs from the one before on the items both graded (exact McNemar, "
        f"Holm across the arms of that step, p_holm < {ALPHA:g}); right_to_wrong counts items "
        "right in the run before and wrong in this one; item_changed counts items not paired "
        "because their recorded digest differs between the two runs (they asked something else)")


def _cells(arm: ArmTrend, index: int, trend: Trend) -> dict[str, Any]:
    """One arm's figures in run ``index`` (1-based in ``run``), as plain values."""
    run = trend.runs[index]
    point: Point | None = arm.points[index]
    step: Step | None = arm.steps[index - 1] if index else None
    return {
        "arm": arm.label, "run": index + 1, "run_id": run.run_id, "created_at": run.created_at,
        "n": point.n if point else 0, "pass_rate": point.rate if point else None,
        "ci95_lo": point.ci95[0] if point else None, "ci95_hi": point.ci95[1] if point else None,
        "paired": step.pairs.n if step else None,
        "right_to_wrong": step.pairs.regressed if step else None,
        "wrong_to_right": step.pairs.fixed if step else None,
        "item_changed": len(step.pairs.changed) if step else None,
        "p": step.p_value if step else None, "p_holm": step.p_holm if step else None,
        "changed": (step.direction if step.changed else "no") if step else None,
    }


def trend_lines(trend: Trend) -> list[dict[str, Any]]:
    return [_cells(arm, i, trend) for arm in trend.arms for i in range(len(trend.runs))]


def _shown(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if value >= 0.001 or value == 0 else f"{value:.1e}"
    # an arm or run id from a file, escaped line feeds too: a cell holding one would start a
    # forged line of the table
    return shown(str(value), newlines=False)


def _table(trend: Trend) -> list[list[str]]:
    head = ["arm", "run", "run id", "created at", "n", "pass rate", "95% CI", "paired",
            "right->wrong", "wrong->right", "item changed", "p", "p holm", "changed"]
    body = []
    for line in trend_lines(trend):
        ci = "-" if line["pass_rate"] is None else (
            f"[{line['ci95_lo']:.3f}, {line['ci95_hi']:.3f}]")
        body.append([_shown(line[k]) for k in ("arm", "run", "run_id", "created_at", "n",
                                                "pass_rate")]
                    + [ci] + [_shown(line[k]) for k in HEADER[8:]])
    return [head, *body]


def render_text(trend: Trend) -> str:
    rows = _table(trend)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in rows]
    return "\n".join([_title(trend), *_partial(trend), "", *lines, "", HINT])


def render_markdown(trend: Trend) -> str:
    rows = _table(trend)
    md = [_md(rows[0]), "|" + "---|" * len(rows[0]), *map(_md, rows[1:])]
    return "\n".join([f"## {_title(trend)}", *_partial(trend), "", *md, "", HINT])


def _partial(trend: Trend) -> list[str]:
    """A line per run that holds only some shards of its sweep: its rates are of those only."""
    return [shown(f"run {i + 1} ({r.run_id}) is partial: {r.partial}", newlines=False)
            + "; merge each run's shards first (echo-bench merge)"
            for i, r in enumerate(trend.runs) if r.partial]


def _md(cells: Sequence[str]) -> str:
    # a cell from a file must not end the cell or the row
    return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def _title(trend: Trend) -> str:
    changed = sum(1 for a in trend.arms for s in a.steps if s is not None and s.changed)
    return (f"echo-bench trend: {len(trend.runs)} run(s), {len(trend.arms)} arm(s), "
            f"{changed} changed step(s)")


def render_json(trend: Trend) -> str:
    return json.dumps({
        "runs": [{"run_id": r.run_id, "created_at": r.created_at, "files": list(r.files),
                  "partial": r.partial} for r in trend.runs],
        "arms": {arm.label: {"benchmark": arm.benchmark, "arm": arm.arm,
                             "runs": [_cells(arm, i, trend) for i in range(len(trend.runs))]}
                 for arm in trend.arms},
        "alpha": ALPHA,
    }, indent=2)


def render_csv(trend: Trend) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(HEADER), lineterminator="\r\n")
    writer.writeheader()
    for line in trend_lines(trend):
        writer.writerow({k: neutralise(shown(v, newlines=False)) if isinstance(v, str) else v
                         for k, v in line.items()})
    return out.getvalue()
