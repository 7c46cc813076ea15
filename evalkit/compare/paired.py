"""The paired frame: one row per case present, unedited, in both runs; and its flips."""

from __future__ import annotations

from typing import NamedTuple

import polars as pl

from evalkit.compare.verdicts import CASE_META, USAGE_COLUMNS


def case_changes(base_cases: pl.DataFrame, cand_cases: pl.DataFrame) -> pl.DataFrame:
    """Cases that cannot be paired: ``edited`` (hash differs), ``added`` or ``removed``.

    Examples:
        >>> b = pl.DataFrame({"case_id": ["a", "b"], "case_hash": ["1", "2"], "source": ["x", "y"]})
        >>> c = pl.DataFrame({"case_id": ["b", "c"], "case_hash": ["9", "3"], "source": ["y", "z"]})
        >>> case_changes(b, c).select("case_id", "change").rows()
        [('a', 'removed'), ('b', 'edited'), ('c', 'added')]
    """
    b = base_cases.select("case_id", pl.col("case_hash").alias("base_hash"), "source")
    c = cand_cases.select("case_id", pl.col("case_hash").alias("cand_hash"), "source")
    both = b.join(c, on="case_id", how="full", coalesce=True, suffix="_cand")
    bh, ch = pl.col("base_hash"), pl.col("cand_hash")
    change = pl.when(bh.is_null()).then(pl.lit("added")).when(ch.is_null()).then(pl.lit("removed"))
    change = change.when(bh != ch).then(pl.lit("edited")).alias("change")
    return (
        both.with_columns(change, pl.coalesce("source_cand", "source").alias("source"))
        .filter(pl.col("change").is_not_null())
        .select("case_id", "change", "base_hash", "cand_hash", "source")
        .sort("case_id")
    )


def paired_frame(
    base_verdicts: pl.DataFrame,
    cand_verdicts: pl.DataFrame,
    base_cases: pl.DataFrame,
    cand_cases: pl.DataFrame,
) -> pl.DataFrame:
    """The gate's input: one row per case present, unedited, in both runs.

    Columns: ``case_id, tags, criticality, sealed, base, cand`` (null when that side errored),
    ``case_group`` (the case's ``group:``, null when it has none; slices cluster over groups),
    ``base_score, cand_score, base_error, cand_error, base_unstable, cand_unstable`` and the
    usage means ``base_latency_ms ... cand_cost_usd``. Edited cases never pair (`case_changes`).

    Examples:
        >>> cases = pl.DataFrame({"case_id": ["a"], "case_hash": ["h"], "tags": [["billing"]],
        ...     "criticality": ["normal"], "sealed": [False]})
        >>> v = pl.DataFrame({"case_id": ["a"], "passed": [True], "score": [1.0],
        ...     "error": [False], "unstable": [False]})
        >>> p = paired_frame(v, v.with_columns(passed=False), cases, cases)
        >>> p.select("base", "cand").row(0)
        (True, False)
    """
    base_hashes = base_cases.select("case_id", pl.col("case_hash").alias("_bh"))
    group = pl.col("case_group") if "case_group" in cand_cases.columns else pl.lit(None)
    meta = [*CASE_META, group.cast(pl.String).alias("case_group")]
    frame = cand_cases.select("case_id", *meta).join(base_hashes, on="case_id")
    frame = frame.filter(pl.col("case_hash") == pl.col("_bh")).drop("_bh")
    for side, v in (("base", base_verdicts), ("cand", cand_verdicts)):
        usage = [pl.col(c).alias(f"{side}_{c}") for c in USAGE_COLUMNS if c in v.columns]
        named = [pl.col(c).alias(f"{side}_{c}") for c in ("score", "error", "unstable")]
        side_cols = v.select("case_id", pl.col("passed").alias(side), *named, *usage)
        frame = frame.join(side_cols, on="case_id", how="left").with_columns(
            pl.col(f"{side}_error").fill_null(True), pl.col(f"{side}_unstable").fill_null(False)
        )
    first = ["case_id", "tags", "criticality", "sealed", "base", "cand"]
    return frame.select(*first, pl.exclude(*first, "case_hash")).sort("case_id")


class Flips(NamedTuple):
    """Cases that changed verdict: ``broken`` (pass -> fail) and ``fixed`` (fail -> pass)."""

    broken: pl.DataFrame
    fixed: pl.DataFrame


def flips(paired: pl.DataFrame) -> Flips:
    """Split the paired frame's flips; errored sides are never flips.

    Examples:
        >>> p = pl.DataFrame({"case_id": ["a", "b", "c"], "base": [True, False, None],
        ...     "cand": [False, True, False]})
        >>> broken, fixed = flips(p)
        >>> broken["case_id"].to_list(), fixed["case_id"].to_list()
        (['a'], ['b'])
    """
    return Flips(
        paired.filter(pl.col("base") & ~pl.col("cand")),
        paired.filter(~pl.col("base") & pl.col("cand")),
    )
