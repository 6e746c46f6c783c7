"""The baseline of ``report_scale``: the report's core figures of a results file in DuckDB.

Per arm: n, correct, the pass rate and its Wilson interval, the cluster-robust standard error over
subtasks, cost, tokens, wall mean, p50 and p95; per arm and subtask: n and correct; per pair of
arms of a benchmark: the discordant counts b and c, the exact McNemar p and Holm's adjustment.
The statistics of the counts are the project's own (``analysis.stats``: microseconds), the reading
and counting DuckDB's. It takes one row per key, as the benchmark's files hold (the report keeps
a key's newest row).

DuckDB is a benchmark-only dependency: ``pip install duckdb``. Without it this prints why and
exits 0; ``report_scale`` then leaves the baseline's row out.

Usage: python benchmarks/report_duckdb.py RESULTS.jsonl
"""

from __future__ import annotations

import sys

from pytest_echo_bench.analysis.stats import cluster_interval, holm, mcnemar_exact, wilson

COLUMNS = (
    "{_meta: 'BOOLEAN', benchmark: 'VARCHAR', task_id: 'VARCHAR', arm: 'VARCHAR', "
    "passed: 'BOOLEAN', status: 'VARCHAR', subtask: 'VARCHAR', wall_seconds: 'DOUBLE', "
    "cost_usd: 'DOUBLE', usage: 'STRUCT(prompt_tokens BIGINT, completion_tokens BIGINT)'}"
)
ARMS = """SELECT benchmark, arm, count(*), count(*) FILTER (passed), sum(cost_usd),
  sum(usage.prompt_tokens), sum(usage.completion_tokens), avg(wall_seconds),
  quantile_cont(wall_seconds, 0.5), quantile_cont(wall_seconds, 0.95)
  FROM r GROUP BY ALL ORDER BY ALL"""
SUBTASKS = """SELECT benchmark, arm, subtask, count(*), count(*) FILTER (passed)
  FROM r GROUP BY ALL ORDER BY ALL"""
PAIRS = """SELECT x.benchmark, x.arm, y.arm, count(*) FILTER (x.passed AND NOT y.passed),
  count(*) FILTER (y.passed AND NOT x.passed), count(*)
  FROM r x JOIN r y ON x.benchmark = y.benchmark AND x.task_id = y.task_id AND x.arm < y.arm
  GROUP BY ALL ORDER BY ALL"""


def figures(path: str) -> dict[str, list[tuple[object, ...]]]:
    """The figures of ``path``, as lists of tuples per kind."""
    import duckdb

    db = duckdb.connect()
    db.execute(
        f"CREATE TEMP TABLE r AS SELECT * EXCLUDE (_meta) FROM read_json('{path}', "
        f"format='newline_delimited', columns={COLUMNS}) WHERE _meta IS NULL"
    )
    db.execute("UPDATE r SET passed = coalesce(passed, false) AND status IS DISTINCT FROM "
               "'unjudged'")
    arms = db.execute(ARMS).fetchall()
    subtasks = db.execute(SUBTASKS).fetchall()
    clusters: dict[tuple[str, str], list[tuple[float, int]]] = {}
    for bench, arm, _, n, correct in subtasks:
        clusters.setdefault((bench, arm), []).append((float(correct), n))
    out_arms = [(*row[:4], wilson(row[3], row[2]), cluster_interval(clusters[row[0], row[1]]),
                 *row[4:]) for row in arms]
    pairs = db.execute(PAIRS).fetchall()
    p = [mcnemar_exact(b, c) for _, _, _, b, c, _ in pairs]
    adjusted = holm(p)
    out_pairs = [(*row, pv, ph) for row, pv, ph in zip(pairs, p, adjusted, strict=True)]
    return {"arms": out_arms, "subtasks": subtasks, "pairs": out_pairs}


def main() -> int:
    try:
        import duckdb  # noqa: F401
    except ImportError:
        print("report_duckdb: duckdb is not installed (pip install duckdb): no baseline")
        return 0
    found = figures(sys.argv[1])
    for kind, rows in found.items():
        print(f"{kind}: {len(rows)}")
        for row in rows[:3]:
            print("  ", row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
