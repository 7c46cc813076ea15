"""The paired frame: one row per case present, unedited, in both runs; and its flips."""

from __future__ import annotations

from typing import NamedTuple

import polars as pl

from evalkit.compare.verdicts import CASE_META, USAGE_COLUMNS, strictly_increasing


def case_changes(base_cases: pl.DataFrame, cand_cases: pl.DataFrame) -> pl.DataFrame:
    """Cases that cannot be paired: ``edited`` (hash differs), ``added`` or ``removed``.

    Examples:
        >>> b = pl.DataFrame({"case_id": ["a", "b"], "case_hash": ["1", "2"], "source": ["x", "y"]})
        >>> c = pl.DataFrame({"case_id": ["b", "c"], "case_hash": ["9", "3"], "source": ["y", "z"]})
        >>> case_changes(b, c).select("case_id", "change").rows()
        [('a', 'removed'), ('b', 'edited'), ('c', 'added')]
    """
    if same_cases(base_cases, cand_cases):  # none changed: no join over a million ids
        base_cases, cand_cases = base_cases.head(0), cand_cases.head(0)
    b = base_cases.select("case_id", pl.col("case_hash").alias("base_hash"), _source(base_cases))
    c = cand_cases.select("case_id", pl.col("case_hash").alias("cand_hash"), _source(cand_cases))
    both = b.join(c, on="case_id", how="full", coalesce=True, suffix="_cand")
    bh, ch = pl.col("base_hash"), pl.col("cand_hash")
    one_side = (
        pl.when(bh.is_null()).then(pl.lit("added")).when(ch.is_null()).then(pl.lit("removed"))
    )
    change = one_side.when(bh != ch).then(pl.lit("edited")).alias("change")
    return (
        both.with_columns(change, pl.coalesce("source_cand", "source").alias("source"))
        .filter(pl.col("change").is_not_null())
        .select("case_id", "change", "base_hash", "cand_hash", "source")
        .sort("case_id")
    )


def same_cases(base_cases: pl.DataFrame, cand_cases: pl.DataFrame) -> bool:
    """Whether both runs hold the same cases with the same hashes, row by row (the usual pair:
    then nothing was edited, added or removed, and no join needs to say so).

    Examples:
        >>> b = pl.DataFrame({"case_id": ["a", "b"], "case_hash": ["1", "2"]})
        >>> same_cases(b, b), same_cases(b, b.with_columns(case_hash=pl.lit("9")))
        (True, False)
    """
    if base_cases.height != cand_cases.height or base_cases.is_empty():
        return False
    columns = ("case_id", "case_hash")
    if any(cases[c].null_count() for cases in (base_cases, cand_cases) for c in columns):
        return False  # a null id or hash never pairs, and is a change: the joins say so
    return all(base_cases[c].equals(cand_cases[c]) for c in columns)


def _source(cases: pl.DataFrame) -> pl.Expr:
    """The cases' ``source``, null when they were read without it (a thin load's: read back
    for the changed cases alone, `evalkit.compare.analysis.compare`)."""
    if "source" in cases.columns:
        return pl.col("source")
    return pl.lit(None, pl.String).alias("source")


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
    usage means ``base_latency_ms ... cand_cost_usd``, and ``origin`` ("paired"). Edited cases
    never pair (`case_changes`) unless the baseline configuration was run on them.

    Examples:
        >>> cases = pl.DataFrame({"case_id": ["a"], "case_hash": ["h"], "tags": [["billing"]],
        ...     "criticality": ["normal"], "sealed": [False]})
        >>> v = pl.DataFrame({"case_id": ["a"], "passed": [True], "score": [1.0],
        ...     "error": [False], "unstable": [False]})
        >>> p = paired_frame(v, v.with_columns(passed=False), cases, cases)
        >>> p.select("base", "cand").row(0)
        (True, False)
    """
    group = pl.col("case_group") if "case_group" in cand_cases.columns else pl.lit(None)
    meta: list[str | pl.Expr] = [*CASE_META, group.cast(pl.String).alias("case_group")]
    frame = cand_cases.select("case_id", *meta)
    aligned = _aligned(base_verdicts, cand_verdicts, base_cases, cand_cases)
    if not aligned:
        base_hashes = base_cases.select("case_id", pl.col("case_hash").alias("_bh"))
        frame = frame.join(base_hashes, on="case_id")
        frame = frame.filter(pl.col("case_hash") == pl.col("_bh")).drop("_bh")
    for side, v in (("base", base_verdicts), ("cand", cand_verdicts)):
        usage = [pl.col(c).alias(f"{side}_{c}") for c in USAGE_COLUMNS if c in v.columns]
        named = [pl.col(c).alias(f"{side}_{c}") for c in ("score", "error", "unstable")]
        side_cols = v.select("case_id", pl.col("passed").alias(side), *named, *usage)
        if aligned:  # row by row the same cases: the verdicts' columns themselves, not a copy
            frame = frame.hstack(side_cols.drop("case_id").get_columns())
        else:
            frame = frame.join(side_cols, on="case_id", how="left")
        filled = {f"{side}_error": True, f"{side}_unstable": False}
        frame = frame.with_columns(
            pl.col(c).fill_null(value) for c, value in filled.items() if frame[c].has_nulls()
        )
    first = ["case_id", "tags", "criticality", "sealed", "base", "cand"]
    frame = frame.select(*first, pl.exclude(*first, "case_hash"))
    frame = frame if aligned else frame.sort("case_id")
    return frame.with_columns(origin=pl.lit("paired"))  # "rebaselined": `corpus_delta` cases


def _aligned(
    base_verdicts: pl.DataFrame,
    cand_verdicts: pl.DataFrame,
    base_cases: pl.DataFrame,
    cand_cases: pl.DataFrame,
) -> bool:
    """Whether both runs hold the same cases, unedited, in the same order of strictly
    increasing ids, and each side's verdicts have one row per case in that order: then the
    paired frame is their columns side by side, with no join over a million string ids (nor
    a copy of every column it would make).

    Examples:
        >>> cases = pl.DataFrame({"case_id": ["a", "b"], "case_hash": ["1", "2"]})
        >>> v = cases.select("case_id")
        >>> _aligned(v, v, cases, cases), _aligned(v, v, cases, cases.reverse())
        (True, False)
    """
    ids = cand_cases["case_id"]
    frames = (base_verdicts, cand_verdicts, base_cases)
    if ids.is_empty() or any(frame.height != ids.len() for frame in frames):
        return False
    if not strictly_increasing(ids):
        return False
    if not all(frame["case_id"].equals(ids) for frame in frames[:2]):
        return False
    return same_cases(base_cases, cand_cases)


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


def corpus_delta(
    changes: pl.DataFrame,
    base_cases: pl.DataFrame,
    cand_cases: pl.DataFrame,
    base_verdicts: pl.DataFrame,
    cand_verdicts: pl.DataFrame,
    rebaselined: frozenset[str] = frozenset(),
) -> pl.DataFrame:
    """What a pull request changed in the corpus, per case, with the evidence on each side.

    One row per edited, added or removed unsealed case: ``case_id, change, tags`` (the union of
    both versions' tags, so a case edited out of a critical tag still counts for it),
    ``criticality`` (``must_pass`` when either version is: demoting a case is an edit like any
    other), ``old`` (the baseline's verdict of the old version; null when added or errored),
    ``cand`` and ``cand_error`` (the candidate's; null / True when removed), and
    ``rebaselined`` (the baseline configuration was run on the new version, so the case is in
    the paired frame too).

    Examples:
        >>> cases = lambda ids, h, crit: pl.DataFrame({"case_id": ids, "case_hash": h,
        ...     "tags": [["billing"]] * len(ids), "criticality": crit,
        ...     "sealed": [False] * len(ids), "source": ["x"] * len(ids)})
        >>> b = cases(["a", "b"], ["1", "2"], ["must_pass", "normal"])
        >>> c = cases(["a", "c"], ["9", "3"], ["normal", "normal"])
        >>> v = lambda ids, ok: pl.DataFrame({"case_id": ids, "passed": ok, "error": [False] * 2})
        >>> d = corpus_delta(case_changes(b, c), b, c, v(["a", "b"], [False, True]),
        ...     v(["a", "c"], [False, True]))
        >>> for row in d.select("case_id", "change", "criticality", "old", "cand").rows():
        ...     print(row)
        ('a', 'edited', 'must_pass', False, False)
        ('b', 'removed', 'normal', True, None)
        ('c', 'added', 'normal', None, True)
    """
    if changes.is_empty():  # nothing to account for: no join over a million ids, same columns
        sides = (base_cases, cand_cases, base_verdicts, cand_verdicts)
        base_cases, cand_cases, base_verdicts, cand_verdicts = (f.head(0) for f in sides)
    live = pl.col("sealed").fill_null(False).not_()
    meta = ["case_id", "tags", "criticality"]
    b = base_cases.filter(live).select(meta).rename({"tags": "_bt", "criticality": "_bc"})
    c = cand_cases.filter(live).select(meta).rename({"tags": "_ct", "criticality": "_cc"})
    ids = pl.concat([b["case_id"], c["case_id"]]).unique().implode()
    frame = changes.filter(pl.col("case_id").is_in(ids)).select("case_id", "change")
    frame = frame.join(b, on="case_id", how="left").join(c, on="case_id", how="left")
    old = base_verdicts.select("case_id", pl.col("passed").alias("old"))
    new = cand_verdicts.select(
        "case_id", pl.col("passed").alias("cand"), pl.col("error").alias("cand_error")
    )
    frame = frame.join(old, on="case_id", how="left").join(new, on="case_id", how="left")
    empty = pl.lit([], pl.List(pl.String))
    tags = pl.concat_list(pl.col("_bt").fill_null(empty), pl.col("_ct").fill_null(empty))
    must = (pl.col("_bc") == "must_pass").fill_null(False) | (
        pl.col("_cc") == "must_pass"
    ).fill_null(False)
    return frame.select(
        "case_id",
        "change",
        tags.list.unique(maintain_order=True).alias("tags"),
        pl.when(must).then(pl.lit("must_pass")).otherwise(pl.lit("normal")).alias("criticality"),
        pl.col("old").cast(pl.Boolean),
        pl.col("cand").cast(pl.Boolean),
        pl.col("cand_error").cast(pl.Boolean).fill_null(True),
        pl.col("case_id").is_in(list(rebaselined)).alias("rebaselined"),
    ).sort("case_id")
