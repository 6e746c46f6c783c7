"""The baseline of ``report_scale``: the report's core figures of a results file in DuckDB.

Per arm: n, correct, the pass rate and its Wilson interval, the cluster-robust standard error over
subtasks, cost, tokens, wall mean, p50 and p95; per arm and subtask: n and correct; per pair of
arms of a benchmark: the discordant counts b and c, the exact McNemar p and Holm's adjustment.
The statistics of the counts are the project's own (``analysis.stats``: microseconds), the reading
and counting DuckDB's. It takes one row per key, as the benchmark's files hold (the report keeps
a key's newest row).

DuckDB's typed reader casts what it can: ``"0.5"`` reads as the cost 0.5, ``1`` as ``passed``,
``1e400`` as an infinite time, ``-3`` as a cost. The report refuses each of those as its reader
does (``store.checks``: a figure that is not a finite number in [0, 1e12] is unknown, only ``true``
passes, a token count is an integer). With ``--checked`` this script reads each value as JSON and
keeps it only where the report would, by those rules, so that its figures are the report's on any
file: what the same reading costs DuckDB when it checks what it reads. ``--report-columns`` reads
every column the report reads, so checked, and computes nothing: the least any engine that reads
as the report does must spend.

DuckDB is a benchmark-only dependency: ``pip install duckdb``. Without it this prints why and
exits 0; ``report_scale`` then leaves the baseline's row out.

Usage: python benchmarks/report_duckdb.py RESULTS.jsonl [--checked | --report-columns]
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


# --checked: each column read as JSON, each value kept where the report's reader keeps it
AS_JSON = "{" + ", ".join(f"{name}: 'JSON'" for name in (
    "_meta", "benchmark", "task_id", "arm", "passed", "status", "subtask", "wall_seconds",
    "cost_usd", "usage")) + "}"
NUMBER = "('DOUBLE', 'UBIGINT', 'BIGINT')"


def _figure(name: str) -> str:
    """``store.checks.figure``: a finite number in [0, 1e12], else NULL (unknown)."""
    return (f"CASE WHEN json_type({name}) IN {NUMBER} AND TRY_CAST({name} AS DOUBLE) BETWEEN 0 "
            f"AND 1e12 THEN TRY_CAST({name} AS DOUBLE) END")


def _count(value: str) -> str:
    """``store.checks.count``: an integer figure."""
    number = f"TRY_CAST({value} AS DOUBLE)"
    return (f"(json_type({value}) IN {NUMBER} AND {number} BETWEEN 0 AND 1e12 "
            f"AND {number} = floor({number}))")


def _text(name: str) -> str:
    return f"CASE WHEN json_type({name}) = 'VARCHAR' THEN {name}->>'$' END"


# ``store.rows._usage``: an object whose every non-null value is a count, else no usage at all
USAGE_OK = (f"json_type(usage) = 'OBJECT' AND coalesce(list_bool_and(list_transform(map_values("
            f"json_transform(usage, '\"MAP(VARCHAR, JSON)\"')), "
            f"lambda v: json_type(v) = 'NULL' OR {_count('v')})), true)")  # {}: no count, 0
CHECKED = f"""SELECT _text_benchmark AS benchmark, task_id, arm, passed, status, subtask,
  wall_seconds, cost_usd, {{'prompt_tokens': CASE WHEN ok THEN pt END,
  'completion_tokens': CASE WHEN ok THEN ct END}} AS usage FROM (
  SELECT {_text('benchmark')} AS _text_benchmark, {_text('task_id')} AS task_id,
    {_text('arm')} AS arm,
    coalesce(json_type(passed) = 'BOOLEAN' AND TRY_CAST(passed AS BOOLEAN), false) AS passed,
    {_text('status')} AS status, nullif({_text('subtask')}, '') AS subtask,
    {_figure('wall_seconds')} AS wall_seconds, {_figure('cost_usd')} AS cost_usd,
    usage IS NOT NULL AND json_type(usage) <> 'NULL' AND {USAGE_OK} AS ok,
    coalesce(TRY_CAST(TRY_CAST(usage->>'$.prompt_tokens' AS DOUBLE) AS BIGINT), 0) AS pt,
    coalesce(TRY_CAST(TRY_CAST(usage->>'$.completion_tokens' AS DOUBLE) AS BIGINT), 0) AS ct
  FROM read_json('{{path}}', format='newline_delimited', columns={AS_JSON})
  WHERE _meta IS NULL OR json_type(_meta) = 'NULL' OR TRY_CAST(_meta AS BOOLEAN) IS NOT TRUE)"""


# ``--report-columns``: every column the report reads of a row (``store.columns.ReportRow``), each
# checked as above, and nothing computed: what any engine that checks as the report does must
# spend before its first figure.
TEXTS = ("benchmark", "task_id", "arm", "status", "detail", "subtask", "answer", "output",
         "item_sha256", "served_model", "run_id", "started_at", "finished_at")
FIGURES = ("wall_seconds", "sub_calls", "cost_usd", "cost_units", "judge_cost_usd")
EVERY = f"""SELECT {", ".join([f"{_text(n)} AS {n}" for n in TEXTS]
                             + [f"{_figure(n)} AS {n}" for n in FIGURES])},
  coalesce(json_type(passed) = 'BOOLEAN' AND TRY_CAST(passed AS BOOLEAN), false) AS passed,
  usage IS NOT NULL AND json_type(usage) <> 'NULL' AND {USAGE_OK} AS usage_ok,
  usage->>'$.prompt_tokens' AS prompt_tokens, usage->>'$.completion_tokens' AS completion_tokens,
  CASE WHEN {_count('cache_hits')} THEN TRY_CAST(cache_hits AS DOUBLE) END AS cache_hits,
  CASE WHEN json_type(epoch) IN ('UBIGINT', 'BIGINT') THEN TRY_CAST(epoch AS BIGINT) END AS epoch,
  CASE WHEN json_type(extra) = 'OBJECT' THEN extra->>'$.escalated' END AS escalated,
  CASE WHEN json_type(extra) = 'OBJECT' THEN extra->>'$.random_guess' END AS random_guess,
  CASE WHEN json_type(score) IN {NUMBER} THEN TRY_CAST(score AS DOUBLE) END AS score,
  json_type(judgments) AS judgments
  FROM read_json('{{path}}', format='newline_delimited', columns={{{", ".join(
      f"{n}: 'JSON'" for n in ("_meta", "passed", "usage", "cache_hits", "epoch", "extra",
                               "score", "judgments", *TEXTS, *FIGURES))}}})
  WHERE _meta IS NULL OR json_type(_meta) = 'NULL' OR TRY_CAST(_meta AS BOOLEAN) IS NOT TRUE"""


def report_columns(path: str) -> int:
    """Read every column the report reads, checked; the rows read."""
    import duckdb

    db = duckdb.connect()
    db.execute(f"CREATE TEMP TABLE r AS {EVERY.replace('{path}', path)}")
    return db.execute("SELECT count(*) FROM r").fetchone()[0]  # type: ignore[index]


def figures(path: str, checked: bool = False) -> dict[str, list[tuple[object, ...]]]:
    """The figures of ``path``, as lists of tuples per kind; ``checked``: each value read as the
    report's reader reads it (the module's docstring)."""
    import duckdb

    db = duckdb.connect()
    if checked:
        db.execute(f"CREATE TEMP TABLE r AS {CHECKED.replace('{path}', path)}")
    else:
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
    if "--report-columns" in sys.argv[2:]:
        print(f"rows read: {report_columns(sys.argv[1])}")
        return 0
    found = figures(sys.argv[1], checked="--checked" in sys.argv[2:])
    for kind, rows in found.items():
        print(f"{kind}: {len(rows)}")
        for row in rows[:3]:
            print("  ", row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
