"""Per-slice statistics of a paired frame: pass rates, paired difference with an interval of
nominal coverage at its n, and the one-sided exact McNemar p-value, one row per tag. A slice
whose cases carry ``group:`` (cases from one incident, document or conversation) is not n
independent cases: its interval and p-value then also account for the groups (``clustered-se``)."""

from __future__ import annotations

from typing import Any, Final

import polars as pl

from evalkit import stats

_RATES = ["base_pass", "base_lo", "base_hi", "cand_pass", "cand_lo", "cand_hi"]
_DIFFS = ["diff", "diff_lo", "diff_hi", "p_value"]
_SLICE_SCHEMA: dict[str, Any] = {"slice": pl.String, "n": pl.Int64, "n_error": pl.Int64}
_SLICE_SCHEMA |= dict.fromkeys(_RATES, pl.Float64) | {"broken": pl.Int64, "fixed": pl.Int64}
_SLICE_SCHEMA |= dict.fromkeys(_DIFFS, pl.Float64) | {"interval_method": pl.String}
_SLICE_SCHEMA |= {"n_groups": pl.Int64}  # clusters behind a clustered-se row, else null
#: How ``diff_lo, diff_hi`` are computed for pass/fail verdicts (`stats.paired_diff_interval`):
#: Tango's score interval, reaching 0 where the exact McNemar test finds no evidence.
INTERVAL_METHOD: Final = "tango-exact"
#: A slice with case groups: the union of that interval and the cluster-robust t interval over
#: groups (`stats.clustered_interval`); p is the larger of the two one-sided tests' p-values.
CLUSTERED_METHOD = "clustered-se"
#: How each interval method is named to a reader (reports state it beside every interval).
INTERVAL_NAMES = {
    "tango-exact": "Tango score interval, consistent with the exact McNemar test",
    "clustered-se": (
        "clustered standard error over case groups (t, groups − 1 df), never narrower than the "
        "Tango interval consistent with the exact McNemar test"
    ),
}


def interval_name(method: str | None) -> str:
    """The reader-facing name of an ``interval_method`` value.

    Examples:
        >>> interval_name("tango-exact")
        'Tango score interval, consistent with the exact McNemar test'
    """
    return INTERVAL_NAMES.get(method or "", method or "no interval")


def _per_slice(paired: pl.DataFrame) -> pl.DataFrame:
    # tags as codes while exploded and grouped, and ALL counted over the rows themselves: a
    # million cases' tags exploded as strings, and the cases again under "ALL", were the
    # report's largest frame
    rows = paired.select(
        pl.col("tags").cast(pl.List(pl.Categorical)).alias("slice"),
        (pl.col("base_error") | pl.col("cand_error")).alias("err"),
        pl.col("base").fill_null(False).alias("b"),
        pl.col("cand").fill_null(False).alias("c"),
    )
    per_tag = rows.explode("slice").drop_nulls("slice").group_by("slice").agg(*_COUNTS)
    every = rows.select(pl.lit("ALL").alias("slice"), *_COUNTS).head(rows.height)  # none: no row
    return pl.concat([per_tag.with_columns(pl.col("slice").cast(pl.String)), every])


_OK = ~pl.col("err")
#: A slice's counts over its rows (``err``, ``b``, ``c``: `_per_slice`).
_COUNTS = (
    _OK.sum().cast(pl.Int64).alias("n"),
    pl.col("err").sum().cast(pl.Int64).alias("n_error"),
    (pl.col("b") & _OK).sum().cast(pl.Int64).alias("base_k"),
    (pl.col("c") & _OK).sum().cast(pl.Int64).alias("cand_k"),
    (pl.col("b") & ~pl.col("c") & _OK).sum().cast(pl.Int64).alias("broken"),
    (~pl.col("b") & pl.col("c") & _OK).sum().cast(pl.Int64).alias("fixed"),
)


def slice_stats(
    n: int, base_k: int, cand_k: int, broken: int, fixed: int, iters: int = 10_000, **kw: Any
) -> dict[str, Any]:
    """Pass rates with Wilson intervals, an interval for the paired difference, one-sided McNemar.

    The difference's interval is `stats.paired_diff_interval` ("tango-exact", named in
    ``interval_method``): nominal coverage at small n, and ``diff_hi < 0`` only where the exact
    one-sided McNemar p <= (1 - level) / 2, so an interval block never fires where the exact test
    sees no evidence (the percentile bootstrap gave 4 broken of 8 an upper bound of -12.5 points
    at p = 0.0625, and no flips the point [0, 0]). ``kw``: ``level`` (default 0.95); ``iters``
    and ``seed`` are accepted for callers that still pass them (pass/fail needs no resampling);
    ``diffs`` (each case's cand - base, -1/0/1) with ``clusters`` (its group, or its own id):
    the slice's cases come in groups, so the interval is widened to the union with the
    clustered t interval over groups and p is the larger of the exact and the clustered test's
    ("clustered-se", ``n_groups``): groups only ever add uncertainty. n = 0 gives None
    statistics.

    Examples:
        >>> s = slice_stats(100, 92, 84, broken=8, fixed=0)
        >>> round(s["diff"], 2), round(s["p_value"], 4), round(s["diff_hi"], 3)
        (-0.08, 0.0039, -0.04)
        >>> s["interval_method"]
        'tango-exact'
        >>> slice_stats(8, 8, 4, broken=4, fixed=0)["diff_hi"]  # p = 0.0625: no evidence
        0.0
        >>> g = slice_stats(20, 20, 14, broken=6, fixed=0, diffs=[-1] * 6 + [0] * 14,
        ...                 clusters=["inc-1"] * 6 + list(range(14)))  # 6 broken, one incident
        >>> g["interval_method"], g["n_groups"], g["p_value"] > 0.05
        ('clustered-se', 15, True)
    """
    out: dict[str, Any] = dict.fromkeys(_RATES + _DIFFS) | {"broken": broken, "fixed": fixed}
    out |= {"interval_method": None, "n_groups": None}
    if n == 0:
        return out
    level = kw.get("level", 0.95)
    for side, k in (("base", base_k), ("cand", cand_k)):
        lo, hi = stats.wilson_interval(k, n, level)
        out |= {f"{side}_pass": k / n, f"{side}_lo": lo, f"{side}_hi": hi}
    diff = stats.paired_diff_interval(broken, fixed, n, level, INTERVAL_METHOD)
    p = stats.mcnemar_exact(broken, fixed, "greater")
    out["interval_method"] = diff.method
    lo, hi = diff.lo, diff.hi
    if kw.get("clusters") is not None:
        lo, hi, p = _clustered(kw["diffs"], kw["clusters"], level, lo, hi, p, out)
    return out | dict(zip(_DIFFS, (diff.diff, lo, hi, p), strict=True))


def _clustered(
    diffs: Any, clusters: Any, level: float, lo: float, hi: float, p: float, out: dict[str, Any]
) -> tuple[float, float, float]:
    """Widen a slice's interval and p-value for case groups: the union with the clustered t
    interval, the larger p. One group is one observation: no interval ([-1, 1]) and p = 1."""
    cl = stats.clustered_interval(diffs, clusters, level)
    out |= {"interval_method": CLUSTERED_METHOD, "n_groups": cl.n_clusters}
    if cl.n_clusters < 2:
        return -1.0, 1.0, 1.0
    return min(lo, max(cl.lo, -1.0)), max(hi, min(cl.hi, 1.0)), max(p, cl.p_less)


def slices(
    paired: pl.DataFrame, iters: int = 10_000, seed: int = 0, level: float = 0.95
) -> pl.DataFrame:
    """Per-tag statistics plus an ``ALL`` row (last); cases errored on either side are excluded
    from ``n`` and counted in ``n_error``. ``p_value`` is one-sided (candidate breaks more);
    ``diff_lo, diff_hi`` are `slice_stats`' small-n interval, its method in ``interval_method``.

    Examples:
        >>> p = pl.DataFrame({"case_id": list("abcd"), "tags": [["x"]] * 4,
        ...     "base": [True] * 4, "cand": [False] * 4, "base_error": [False] * 4,
        ...     "cand_error": [False] * 4})
        >>> slices(p).select("slice", "n", "broken", "p_value", "diff_hi").rows()
        [('x', 4, 4, 0.0625, 0.0), ('ALL', 4, 4, 0.0625, 0.0)]
    """
    counts = _per_slice(paired).sort(pl.col("slice") == "ALL", "slice")
    grouped = _grouped_cases(paired)
    rows = []
    for r in counts.iter_rows(named=True):  # one iteration per slice, not per case
        k = (r["n"], r["base_k"], r["cand_k"], r["broken"], r["fixed"])
        s = slice_stats(*k, iters, seed=seed, level=level, **grouped.get(r["slice"], {}))
        rows.append({"slice": r["slice"], "n": r["n"], "n_error": r["n_error"], **s})
    return pl.DataFrame(rows, schema=_SLICE_SCHEMA)


def _grouped_cases(paired: pl.DataFrame) -> dict[str, dict[str, Any]]:
    """Per slice with at least one grouped case: its decided cases' ``diffs`` (cand - base) and
    ``clusters`` (the group, or the case's own id when it has none)."""
    if "case_group" not in paired.columns or paired["case_group"].is_null().all():
        return {}
    ok = ~(pl.col("base_error") | pl.col("cand_error"))
    rows = paired.filter(ok).select(
        pl.col("tags").cast(pl.List(pl.String)).alias("slice"),
        (pl.col("cand").fill_null(False).cast(pl.Int8) - pl.col("base").fill_null(False)
         .cast(pl.Int8)).alias("d"),
        pl.col("case_group").is_not_null().alias("has_group"),
        pl.coalesce(pl.lit("group:") + pl.col("case_group"), pl.lit("case:") + pl.col("case_id"))
        .alias("cluster"),
    )  # fmt: skip
    long = pl.concat(
        [rows.explode("slice").drop_nulls("slice"), rows.with_columns(slice=pl.lit("ALL"))]
    )
    per = long.group_by("slice").agg("d", "cluster", pl.col("has_group").any())
    return {
        r["slice"]: {"diffs": r["d"], "clusters": r["cluster"]}
        for r in per.filter("has_group").iter_rows(named=True)
    }
