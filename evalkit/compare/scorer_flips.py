"""Per-scorer flips: each check diffed on its own, beside the per-tag slices.

A case's verdict is every scorer at once, so "the judge says worse but every deterministic check
is unchanged" hides inside one broken count. Here each scorer gets its own paired table over the
cases both runs scored (unedited, both sides decided by that scorer): its verdict per case is the
majority over replays and over the case's instances of that scorer (ties fail, as for the case),
then broken (pass → fail) and fixed with the exact McNemar test, one-sided for "the candidate
breaks more than it fixes" as the gate reads it. Reported, never gated by itself.

Examples:
    >>> import polars as pl
    >>> rows = lambda run, ok: pl.DataFrame({"run_id": [run] * 3, "case_id": ["a", "b", "c"],
    ...     "replay": [0] * 3, "scorer": ["contains"] * 3, "tier": [0] * 3,
    ...     "passed": ok, "error": [False] * 3})
    >>> t = scorer_flips(rows("b", [True, True, False]), rows("c", [False, False, False]),
    ...                  ["a", "b", "c"])
    >>> t.select("scorer", "n", "broken", "fixed", "p_broken").row(0)
    ('contains', 3, 2, 0, 0.25)
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from evalkit import stats

_SCHEMA = {
    "scorer": pl.String, "tier": pl.Int64, "n": pl.Int64, "base_pass": pl.Float64,
    "cand_pass": pl.Float64, "broken": pl.Int64, "fixed": pl.Int64, "p_broken": pl.Float64,
}  # fmt: skip


def _per_case(scores: pl.DataFrame, case_ids: pl.Series) -> pl.DataFrame:
    """Each (scorer, case)'s verdict: lazily, from the five columns it reads (a filter of the
    whole frame would copy every column of every score row first)."""
    if scores.is_empty() or not {"scorer", "case_id", "passed"} <= set(scores.columns):
        schema = {"scorer": pl.String, "case_id": pl.String, "passed": pl.Boolean}
        return pl.DataFrame(schema=schema | {"tier": pl.Int64})  # a run with nothing scored
    error = pl.col("error").fill_null(False) if "error" in scores.columns else pl.lit(False)
    tier = pl.col("tier").min() if "tier" in scores.columns else pl.lit(None, pl.Int64)
    return (
        scores.lazy()
        .filter(
            pl.col("case_id").is_in(case_ids.implode()) & ~error & pl.col("passed").is_not_null()
        )
        .group_by("scorer", "case_id")
        .agg(
            (pl.col("passed").sum() > (~pl.col("passed")).sum()).alias("passed"),
            tier.alias("tier"),
        )
        .collect(engine="streaming")
    )


def scorer_flips(
    base_scores: pl.DataFrame, cand_scores: pl.DataFrame, case_ids: Sequence[str]
) -> pl.DataFrame:
    """One row per scorer over ``case_ids`` (the paired, unsealed cases): ``n`` cases decided by
    it on both sides, each side's pass rate, broken, fixed and the one-sided exact p."""
    ids = pl.Series("case_id", case_ids, pl.String)
    base, cand = _per_case(base_scores, ids), _per_case(cand_scores, ids)
    both = base.join(cand, on=["scorer", "case_id"], suffix="_cand")
    if both.is_empty():
        return pl.DataFrame(schema=_SCHEMA)
    table = (
        both.group_by("scorer")
        .agg(
            pl.col("tier").min().cast(pl.Int64),
            pl.len().cast(pl.Int64).alias("n"),
            pl.col("passed").mean().alias("base_pass"),
            pl.col("passed_cand").mean().alias("cand_pass"),
            (pl.col("passed") & ~pl.col("passed_cand")).sum().cast(pl.Int64).alias("broken"),
            (~pl.col("passed") & pl.col("passed_cand")).sum().cast(pl.Int64).alias("fixed"),
        )
        .sort(["tier", "scorer"])
    )
    p = [stats.mcnemar_exact(b, f) for b, f in table.select("broken", "fixed").iter_rows()]
    return table.with_columns(pl.Series("p_broken", p, pl.Float64)).select(list(_SCHEMA))
