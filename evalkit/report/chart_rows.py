"""The rows the slice charts draw, from a slices frame (`evalkit.compare.slices.slices`): one
row per slice with its label, order and flipped case ids, and the axis both renderers share.
Polars only: `evalkit.report.charts` (Altair, interactive) and `evalkit.report.svg` (static SVG,
written directly) draw the same rows.

Examples:
    >>> rows = slice_rows(pl.DataFrame({"slice": ["billing", "ALL"], "n": [8, 20]}))
    >>> labelled(rows, ("billing",))["label"].to_list()
    ['★ billing (n=8)', 'ALL (aggregate) (n=20)']
"""

from __future__ import annotations

import polars as pl

SHOWN_IDS = 12  # case ids a tooltip lists before "… +k more"

#: Okabe–Ito colours: distinguishable with every common colour-vision deficiency.
BROKEN, FIXED, NEUTRAL, BASELINE, CANDIDATE = "#D55E00", "#0072B2", "#7f7f7f", "#E69F00", "#56B4E9"
AGGREGATE = "ALL (aggregate)"


def slice_rows(slices: pl.DataFrame) -> pl.DataFrame:
    return slices.filter(pl.col("n") > 0).with_columns(
        pl.when(pl.col("slice") == "ALL").then(pl.lit(AGGREGATE)).otherwise("slice").alias("slice")
    )


def listed(ids: list[str]) -> str:
    more = f" … +{len(ids) - SHOWN_IDS} more" if len(ids) > SHOWN_IDS else ""
    return ", ".join(ids[:SHOWN_IDS]) + more if ids else "none"


def case_ids(paired: pl.DataFrame | None) -> pl.DataFrame:
    """Per slice (the aggregate as ``ALL (aggregate)``): its broken and fixed case ids as
    tooltip text, counted as `evalkit.compare.slices.slices` counts them (an errored side is
    no flip). Without ``paired``, no rows: `with_ids` then says how to get them."""
    schema = {"slice": pl.String, "broken_ids": pl.String, "fixed_ids": pl.String}
    if paired is None:
        return pl.DataFrame(schema=schema)
    ok = ~(pl.col("base_error").fill_null(False) | pl.col("cand_error").fill_null(False))
    b, c = pl.col("base").fill_null(False), pl.col("cand").fill_null(False)
    rows = paired.filter(ok & (b != c)).select(
        "case_id", pl.col("tags").cast(pl.List(pl.String)).alias("slice"), (b & ~c).alias("broke")
    )
    long = pl.concat(
        [rows.explode("slice").drop_nulls("slice"), rows.with_columns(slice=pl.lit(AGGREGATE))]
    ).sort("case_id")
    per = long.group_by("slice").agg(
        pl.col("case_id").filter("broke").alias("broken"),
        pl.col("case_id").filter(~pl.col("broke")).alias("fixed"),
    )
    ids = [(r["slice"], listed(r["broken"]), listed(r["fixed"])) for r in per.to_dicts()]
    return pl.DataFrame(ids, schema=schema, orient="row")


def with_ids(rows: pl.DataFrame, paired: pl.DataFrame | None) -> pl.DataFrame:
    missing = "none" if paired is not None else "(pass paired= to list them)"
    return rows.join(case_ids(paired), on="slice", how="left").with_columns(
        pl.col("broken_ids", "fixed_ids").fill_null(missing)
    )


def labelled(data: pl.DataFrame, critical: tuple[str, ...]) -> pl.DataFrame:
    """Adds ``label`` ("★ billing (n=100)"), ``critical`` and ``order`` (critical tags first in
    their policy order, then the other slices, the aggregate last)."""
    crit = pl.col("slice").is_in(list(critical))
    rank = pl.col("slice").replace_strict(
        {t: i for i, t in enumerate(critical)}, default=len(critical), return_dtype=pl.Int64
    )
    star = pl.when(crit).then(pl.lit("★ ")).otherwise(pl.lit(""))
    return (
        data.with_columns(
            crit.alias("critical"),
            pl.format("{}{} (n={})", star, "slice", "n").alias("label"),
            pl.when(pl.col("slice") == AGGREGATE)
            .then(len(critical) + 1)
            .otherwise(rank)
            .alias("_g"),
        )
        .sort("_g", "slice")
        .with_row_index("order")
        .drop("_g")
    )


def axis_limit(data: pl.DataFrame, tolerance: float) -> float:
    """Half-width of the forest plot's axis: wide enough for most intervals and the tolerance,
    so one huge interval does not squash the rest (it is clipped with an arrow)."""
    ends = pl.concat([data["diff_lo"].abs(), data["diff_hi"].abs()]).drop_nulls()
    q = float(ends.quantile(0.8) or 0.0) if ends.len() else 0.0
    return min(1.0, max(0.1, 2.5 * tolerance, (q * 1.15 * 20 // 1 + 1) / 20))


def count_ticks(top: int) -> list[int]:
    """Whole-number ticks within ``-top`` to ``top``, about five a side, evenly spaced.

    Examples:
        >>> count_ticks(1), count_ticks(17)
        ([-1, 0, 1], [-16, -12, -8, -4, 0, 4, 8, 12, 16])
    """
    step = max(1, -(-top // 5))
    side = list(range(step, top + 1, step))
    return [-v for v in reversed(side)] + [0] + side
