"""The report as CSV: one line per arm, per subtask of an arm, per oracle, per planned decide pair
and per shard file, safe to open in a spreadsheet."""

from __future__ import annotations

import csv
import io
from dataclasses import asdict
from typing import Any

from pytest_echo_bench.report import decision
from pytest_echo_bench.report.figures import ArmStats, Oracle, Report
from pytest_echo_bench.report.formats.judging import CSV_FIELDS as JUDGING_FIELDS
from pytest_echo_bench.report.formats.judging import judging_csv_rows
from pytest_echo_bench.report.formats.token_classes import CSV_FIELDS as CLASS_FIELDS
from pytest_echo_bench.report.formats.token_classes import class_csv_rows

# ``kind`` tells the lines apart, so an arm that happens to be called "oracle" is never mistaken
# for the oracle line (whose arm cell is the reserved "(oracle)" and whose arms are listed apart).
CSV_FIELDS = [
    "kind",
    "benchmark",
    "arm",
    "subtask",
    "oracle_arms",
    "n",
    "correct",
    "pass_rate",
    "ci95_lo",
    "ci95_hi",
    "clusters",
    "cluster_se",
    "cluster_ci95_lo",
    "cluster_ci95_hi",
    "unparseable",
    "errors",
    "unjudged",
    "not_completed",
    "wall_mean",
    "wall_p50",
    "wall_p95",
    "sub_calls_mean",
    "escalation_rate",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "cost_per_correct",
    "cost_units",
    "cost_units_per_correct",
    "spend_usd",
    "spend_unknown",
]
ORACLE_NAME = "(oracle)"
# OWASP's CSV-injection guidance: a cell a spreadsheet would read as a formula starts with one of
# these; a leading single quote makes it text. Only text cells are touched: numbers stay numbers.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def render_csv(report: Report) -> str:
    out = io.StringIO()
    # RFC 4180 line ends: the writer quotes a cell holding a CR or LF only when
    # both are terminator characters.
    fields = (
        CSV_FIELDS
        + _epoch_fields(report)
        + _coverage_fields(report)
        + _decide_fields(report)
        + _part_fields(report)
        + _judging_fields(report)
        + _class_fields(report)
    )
    writer = csv.DictWriter(out, fields, restval="", lineterminator="\r\n")
    writer.writeheader()
    mark = _coverage(report)
    for bench in report.benchmarks:
        for s in (s for s in report.arms if s.benchmark == bench.name):
            writer.writerow(_safe({**_flat(s, "arm"), **mark}))
            writer.writerows(_safe({**_flat(t, "subtask"), **mark}) for t in report.subtasks
                             if (t.benchmark, t.arm) == (s.benchmark, s.arm))
        for o in (o for o in report.oracles if o.benchmark == bench.name):
            writer.writerow(_safe({**_oracle(o), **mark}))
    # How each shard file ended: a "part" line each, its shard as words ("shard
    # 3/4"), never a bare date-like "3/4".
    writer.writerows(
        _safe(
            {
                "kind": "part",
                "part_shard": f"shard {e.shard}",
                "part_file": e.file,
                "part_ended": e.ended(),
                "part_items": e.held,
                "part_expected": e.expected,
                **mark,
            }
        )
        for e in report.coverage.ends
    )
    if report.sequential is not None:  # the same figures as every other format: report.decision
        writer.writerows(_safe({k: v for k, v in row.items() if v is not None})
                         for row in decision.csv_rows(report.sequential))
    writer.writerows(_judging_lines(report))
    writer.writerows(_class_lines(report))
    return out.getvalue()


def _class_fields(report: Report) -> list[str]:
    """With rows that keep a token class apart only: the class's name and tokens."""
    return CLASS_FIELDS if report.token_classes else []


def _class_lines(report: Report) -> list[dict[str, Any]]:
    """Each arm's spend per token class: a "token_class" line per arm and class."""
    return [_safe({k: v for k, v in row.items() if v is not None})
            for row in class_csv_rows(report.token_classes)]


def _judging_fields(report: Report) -> list[str]:
    """With judged rows only (the columns are what they were without): a figure's name, judge,
    value and interval."""
    return [f for f in JUDGING_FIELDS if f not in CSV_FIELDS] if report.judging else []


def _judging_lines(report: Report) -> list[dict[str, Any]]:
    """What the judges did: a "judging" line per figure (none without judged rows)."""
    if report.judging is None:
        return []
    return [_safe({k: v for k, v in row.items() if v is not None})
            for row in judging_csv_rows(report.judging)]


def _decide_fields(report: Report) -> list[str]:
    """With a decide plan only (the columns are what they were without): its figures' columns."""
    if report.sequential is None:
        return []
    return [f for f in decision.CSV_FIELDS if f not in CSV_FIELDS]


def _part_fields(report: Report) -> list[str]:
    """With shard files only (the columns are what they were without): how each
    ended, its items and its shard's."""
    return (
        ["part_shard", "part_file", "part_ended", "part_items", "part_expected"]
        if report.coverage.ends
        else []
    )


def _coverage_fields(report: Report) -> list[str]:
    """With a merge missing shards only (the columns are what they were for a whole sweep)."""
    return [] if report.coverage.complete else ["complete", "shards"]


def _coverage(report: Report) -> dict[str, Any]:
    """On every line, so a sheet filtered to one arm still says its figures are of
    part of the sweep. The shards as the report's sentence, never a bare "3/4", which
    a spreadsheet reads as a date."""
    cover = report.coverage
    return {} if cover.complete else {"complete": "false", "shards": cover.describe()}


def _epoch_fields(report: Report) -> list[str]:
    """With repeats only (the columns are what they were without): score (the sum of the items'
    scores, at most n), samples, correct_samples, epochs, reduce, pass_at_<k>."""
    stats = [s for s in (*report.arms, *report.subtasks) if s.epochs is not None]
    if not stats:
        return []
    ks = sorted({int(k) for s in stats for k in (s.pass_at or {})})
    return ["score", "samples", "correct_samples", "epochs", "reduce"] + [
        f"pass_at_{k}" for k in ks
    ]


def neutralise(text: str) -> str:
    """``text`` as a spreadsheet shows it but never evaluates it."""
    return "'" + text if text.startswith(FORMULA_START) else text


def _safe(row: dict[str, Any]) -> dict[str, Any]:
    return {k: neutralise(v) if isinstance(v, str) else v for k, v in row.items()}


def _flat(s: ArmStats, kind: str) -> dict[str, Any]:
    data = asdict(s)
    data["kind"] = kind
    data["ci95_lo"], data["ci95_hi"] = data.pop("ci95")
    cluster = data.pop("cluster_ci95")
    data["cluster_ci95_lo"], data["cluster_ci95_hi"] = (
        cluster if cluster is not None else (None, None)
    )
    data.update({f"pass_at_{k}": v for k, v in (data.pop("pass_at") or {}).items()})
    # csv writes None as "", as it wrote before
    return {k: v for k, v in data.items() if v is not None}


def _oracle(o: Oracle) -> dict[str, Any]:
    return {
        "kind": "oracle",
        "benchmark": o.benchmark,
        "arm": ORACLE_NAME,
        "oracle_arms": ",".join(o.arms),
        "n": o.n,
        "correct": o.correct,
        "pass_rate": o.pass_rate,
        "ci95_lo": o.ci95[0],
        "ci95_hi": o.ci95[1],
    }
