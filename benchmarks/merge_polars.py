"""The baseline of ``merge_scale``: a merge of results files over their raw lines in polars.

Each file's lines read as one text column, each row keyed by (benchmark, task_id, arm, epoch)
decoded from its JSON (the benchmark a row leaves out is its file's meta line's, a missing epoch
1), the newest row of each key kept in the place where the key first appeared, and those lines
written byte for byte: what ``echo-bench merge`` does to the rows, without its checks (no
fingerprint, coverage or conflict, no meta line written).

polars is a benchmark-only dependency: ``pip install polars``. Without it this prints why and
exits 0; ``merge_scale`` then leaves the baseline's row out.

Usage: python benchmarks/merge_polars.py OUT.jsonl FILE.jsonl...
"""

from __future__ import annotations

import sys
from pathlib import Path

KEY = ("benchmark", "task_id", "arm", "epoch")


def merge_lines(paths: list[Path], out: Path) -> int:
    """Write the merged rows of ``paths`` to ``out``; the number of rows written."""
    import polars as pl

    shape = pl.Struct({"_meta": pl.Boolean, "benchmark": pl.String, "task_id": pl.String,
                       "arm": pl.String, "epoch": pl.Int64})
    frames = []
    for path in paths:
        # one column of whole lines: our writer escapes every control character, \x1f included
        lines = pl.read_csv(path, has_header=False, separator="\x1f", quote_char=None,
                            new_columns=["line"], infer_schema=False)
        rows = lines.with_columns(pl.col("line").str.json_decode(shape).alias("k")).unnest("k")
        meta = rows.filter(pl.col("_meta").fill_null(False))
        default = meta["benchmark"][0] if meta.height else ""
        rows = rows.filter(~pl.col("_meta").fill_null(False))
        frames.append(rows.with_columns(
            pl.when(pl.col("benchmark").fill_null("") == "").then(pl.lit(default))
            .otherwise(pl.col("benchmark")).alias("benchmark"),
            pl.col("epoch").fill_null(1).clip(lower_bound=1),
        ).select(*KEY, "line"))
    kept = pl.concat(frames).group_by(KEY, maintain_order=True).agg(pl.col("line").last())
    with open(out, "w", encoding="utf-8", newline="") as f:
        f.write("\n".join(kept["line"].to_list()) + "\n")
    return kept.height


def main() -> int:
    try:
        import polars  # noqa: F401
    except ImportError:
        print("polars is not installed (pip install polars): no baseline", file=sys.stderr)
        return 0
    out, *paths = map(Path, sys.argv[1:])
    print(merge_lines(paths, out), "rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
