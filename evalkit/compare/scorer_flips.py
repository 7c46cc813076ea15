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

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import polars as pl

from evalkit import stats

if TYPE_CHECKING:
    from evalkit.compare.analysis import RunData
    from evalkit.store import Store

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
    base_scores: pl.DataFrame, cand_scores: pl.DataFrame, case_ids: Sequence[str] | pl.Series
) -> pl.DataFrame:
    """One row per scorer over ``case_ids`` (the paired, unsealed cases): ``n`` cases decided by
    it on both sides, each side's pass rate, broken, fixed and the one-sided exact p."""
    ids = pl.Series("case_id", case_ids, pl.String)
    base, cand = _per_case(base_scores, ids), _per_case(cand_scores, ids)
    both = base.join(cand, on=["scorer", "case_id"], suffix="_cand")
    if both.is_empty():
        return pl.DataFrame(schema=_SCHEMA)
    table = both.group_by("scorer").agg(
        pl.col("tier").min().cast(pl.Int64),
        pl.len().cast(pl.Int64).alias("n"),
        pl.col("passed").mean().alias("base_pass"),
        pl.col("passed_cand").mean().alias("cand_pass"),
        (pl.col("passed") & ~pl.col("passed_cand")).sum().cast(pl.Int64).alias("broken"),
        (~pl.col("passed") & pl.col("passed_cand")).sum().cast(pl.Int64).alias("fixed"),
    )
    return _with_p(table)


def _with_p(table: pl.DataFrame) -> pl.DataFrame:
    """The table sorted (deterministic checks first) with each scorer's one-sided exact p."""
    table = table.sort(["tier", "scorer"])
    p = [stats.mcnemar_exact(b, f) for b, f in table.select("broken", "fixed").iter_rows()]
    return table.with_columns(pl.Series("p_broken", p, pl.Float64)).select(list(_SCHEMA))


#: `scorer_flips` in the store, over one range of case ids: each (scorer, case)'s verdict on
#: both sides in one grouping, counted per scorer over the cases both sides decided.
_STORED = """
WITH per_case AS (
    SELECT scorer, case_id, min(tier) FILTER (WHERE run_id = $1) AS tier,
           count_if(run_id = $1) > 0 AS in_base, count_if(run_id = $3) > 0 AS in_cand,
           count_if(run_id = $1 AND passed) > count_if(run_id = $1 AND NOT passed) AS base,
           count_if(run_id = $3 AND passed) > count_if(run_id = $3 AND NOT passed) AS cand
    FROM scores
    WHERE ((run_id = $1 AND scoring_id = $2) OR (run_id = $3 AND scoring_id = $4))
      AND NOT coalesce(error, false) AND passed IS NOT NULL
      AND ($5 IS NULL OR case_id >= $5) AND ($6 IS NULL OR case_id < $6)
      AND case_id IN (SELECT case_id FROM _flip_ids
                      WHERE ($5 IS NULL OR case_id >= $5) AND ($6 IS NULL OR case_id < $6))
    GROUP BY scorer, case_id
)
SELECT scorer, min(tier)::BIGINT AS tier, count(*)::BIGINT AS n,
       count_if(base)::BIGINT AS base_n, count_if(cand)::BIGINT AS cand_n,
       count_if(base AND NOT cand)::BIGINT AS broken, count_if(NOT base AND cand)::BIGINT AS fixed
FROM per_case WHERE in_base AND in_cand
GROUP BY scorer
"""


def stored_scorer_flips(
    store: Store,
    base_run: str,
    cand_run: str,
    case_ids: Sequence[str] | pl.Series,
    scorings: tuple[str | None, str | None] = (None, None),
    held: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """`scorer_flips` of two stored runs' ``scorings`` (None: the newest), counted in the
    store a range of :data:`~evalkit.compare.verdicts.VERDICT_CASES` case ids at a time: the
    same table, and
    what is held at once is bounded by the range (grouping a million cases' score rows at
    once, in Polars or in DuckDB, held several times those rows).

    ``held``: the per-scorer counts (``scorer, tier, n, base_n, cand_n, broken, fixed``) of
    more cases, counted elsewhere (`run_scorer_flips`: a candidate's overlaid cases), added."""
    from evalkit.compare.verdicts import VERDICT_CASES, strictly_increasing

    ids = pl.Series("case_id", case_ids, pl.String)
    # a pair's ids as paired, each once in order: no hashing and sorting of a copy of them
    ids = ids if strictly_increasing(ids) else ids.unique().sort()
    base_scoring = scorings[0] or store.latest_scoring(base_run)
    cand_scoring = scorings[1] or store.latest_scoring(cand_run)
    runs = [base_run, base_scoring, cand_run, cand_scoring]
    bounds: list[str | None] = [None, *ids.gather_every(VERDICT_CASES).to_list()[1:], None]
    # each range's own ids alone (sorted and unique: its slice), not a scan of all of them
    shares = list(ids.to_frame().iter_slices(VERDICT_CASES)) or [ids.to_frame()]
    parts = []
    for (low, high), share in zip(itertools.pairwise(bounds), shares, strict=True):
        parts.append(
            store.query_with(_STORED, [*runs, low, high], one_thread=True, _flip_ids=share)
        )
        if store.read_only:  # the blocks DuckDB read for this range go before the next's
            store.release()
    if held is not None and held.height:
        parts.append(held.select(parts[0].columns).cast(parts[0].schema))
    counts = (
        pl.concat(parts)
        .group_by("scorer")
        .agg(pl.col("tier").min(), pl.col("n", "base_n", "cand_n", "broken", "fixed").sum())
    )
    if counts.is_empty():
        return pl.DataFrame(schema=_SCHEMA)
    # a boolean's mean is its count over n: the same float as `scorer_flips`' mean
    return _with_p(
        counts.with_columns(
            (pl.col("base_n") / pl.col("n")).alias("base_pass"),
            (pl.col("cand_n") / pl.col("n")).alias("cand_pass"),
        )
    )


def run_scorer_flips(
    base: RunData, cand: RunData, case_ids: Sequence[str] | pl.Series
) -> pl.DataFrame:
    """`scorer_flips` of two runs: counted in their store when both were read thin from one
    (`evalkit.compare.analysis.load_run`; the gate's), of the scorings they were loaded with,
    else from their score frames."""
    if base.details_db is None or base.details_db != cand.details_db:
        return scorer_flips(base.scores, cand.scores, case_ids)
    from evalkit.store import open_store

    held = None
    if cand.overlay is not None:  # its overlaid cases' rows are its own, not the store's
        from evalkit.compare.analysis import score_details

        ids = pl.Series("case_id", case_ids, pl.String)
        mine = ids.is_in(cand.overlay.cases["case_id"].implode())
        case_ids, overlaid = ids.filter(~mine), ids.filter(mine)
        held = _counts(score_details(base, overlaid.to_list()), cand.overlay.scores, overlaid)
    with open_store(base.details_db, read_only=True) as store:
        scorings = (base.scoring_id, cand.scoring_id)
        return stored_scorer_flips(store, base.run_id, cand.run_id, case_ids, scorings, held)


def _counts(base_scores: pl.DataFrame, cand_scores: pl.DataFrame, ids: pl.Series) -> pl.DataFrame:
    """`scorer_flips`' counts per scorer, as `stored_scorer_flips` sums them."""
    base, cand = _per_case(base_scores, ids), _per_case(cand_scores, ids)
    both = base.join(cand, on=["scorer", "case_id"], suffix="_cand")
    return both.group_by("scorer").agg(
        pl.col("tier").min().cast(pl.Int64),
        pl.len().cast(pl.Int64).alias("n"),
        pl.col("passed").sum().cast(pl.Int64).alias("base_n"),
        pl.col("passed_cand").sum().cast(pl.Int64).alias("cand_n"),
        (pl.col("passed") & ~pl.col("passed_cand")).sum().cast(pl.Int64).alias("broken"),
        (~pl.col("passed") & pl.col("passed_cand")).sum().cast(pl.Int64).alias("fixed"),
    )
