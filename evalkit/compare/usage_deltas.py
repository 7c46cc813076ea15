"""Paired cost, latency and trajectory changes: each case's candidate against its own baseline.

A candidate that answers every case right with eleven tool calls instead of four, or twice the
tokens, has regressed in cost and latency although no verdict flipped. Budgets on the
candidate's mean cannot see that against a baseline; this module pairs it. Per slice and metric,
over the cases with evidence on both sides:

* ``total_tokens``, ``cost_usd`` and ``steps`` (agent steps: model turns with tool calls): the
  **median of the per-case ratios** cand / base (cases whose baseline value is 0 are left out);
* ``latency_p50_s``: the **median of the per-case differences** in seconds (cand − base); cached
  outputs carry the latency first measured, so a cache-served candidate is not faster than it was;
* each with the **exact distribution-free interval** for a median, from order statistics: the
  number of cases below the true median is Binomial(n, 1/2), so ``[x(j), x(n-1-j)]`` covers it
  with probability 1 − 2·P(B ≤ j), at least ``level`` (a deliberate choice over a bootstrap of
  the median: exact at any n, no resampling, O(n log n) at 100k cases; too few cases give none);
* the exact **sign test**: cases that grew against cases that shrank (ties left out), one-sided
  for "the candidate grew", the McNemar computation on those counts.

``gate.relative_budgets`` (``{total_tokens: 1.25, steps: 1.5, latency_p50_s: 1.0}``: ratios, or
seconds for the latency) blocks a critical tag whose interval lies wholly above the allowed
increase *and* whose sign test is significant at ``alpha``.

Examples:
    >>> import polars as pl
    >>> p = pl.DataFrame({"case_id": ["a", "b", "c", "d"], "tags": [["x"]] * 4,
    ...     "base_error": [False] * 4, "cand_error": [False] * 4,
    ...     "base_steps": [2.0, 2.0, 4.0, 1.0], "cand_steps": [6.0, 5.0, 8.0, 3.0]})
    >>> row = usage_deltas(p, ["x"], ["steps"]).row(0, named=True)
    >>> row["slice"], row["metric"], row["estimate"], row["grew"], row["shrank"]
    ('x', 'steps', 2.75, 4, 0)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from evalkit import stats

#: Relative budget name -> (paired column, how it compares: "ratio" or "seconds").
METRICS: dict[str, tuple[str, str]] = {
    "total_tokens": ("total_tokens", "ratio"),
    "cost_usd": ("cost_usd", "ratio"),
    "steps": ("steps", "ratio"),
    "latency_p50_s": ("latency_ms", "seconds"),
}

_SCHEMA = {
    "slice": pl.String, "metric": pl.String, "kind": pl.String, "n": pl.Int64,
    "estimate": pl.Float64, "lo": pl.Float64, "hi": pl.Float64, "grew": pl.Int64,
    "shrank": pl.Int64, "p_grew": pl.Float64,
}  # fmt: skip


def usage_deltas(
    paired: pl.DataFrame,
    tags: Sequence[str],
    metrics: Sequence[str] = tuple(METRICS),
    level: float = 0.95,
) -> pl.DataFrame:
    """One row per (slice, metric) for ``tags`` and ``ALL``: the median ratio (or difference in
    seconds), its exact interval, the cases that grew and shrank, and the sign test's p."""
    ok = ~pl.col("base_error") & ~pl.col("cand_error")
    if "sealed" in paired.columns:
        ok = ok & ~pl.col("sealed").fill_null(False)
    live = paired.filter(ok)
    rows = []
    for name in [*tags, "ALL"]:
        part = live if name == "ALL" else live.filter(pl.col("tags").list.contains(name))
        for metric in metrics:
            column, kind = METRICS[metric]
            row = _one(part, column, kind, level)
            if row is not None:
                rows.append({"slice": name, "metric": metric, "kind": kind, **row})
    return pl.DataFrame(rows, schema=_SCHEMA) if rows else pl.DataFrame(schema=_SCHEMA)


def median_interval(values: np.ndarray, level: float = 0.95) -> tuple[float | None, float | None]:
    """The exact distribution-free interval for the median of ``values`` (order statistics), or
    ``(None, None)`` when even the extremes cover it with less than ``level``.

    Examples:
        >>> median_interval(np.arange(1.0, 11.0))   # n = 10: the 2nd and 9th values, 97.9%
        (2.0, 9.0)
        >>> median_interval(np.array([1.0, 2.0, 3.0]))
        (None, None)
    """
    from evalkit.stats._dist import half_lower, half_ppf

    n, tail = values.size, (1 - level) / 2
    j = half_ppf(tail, n)  # then the largest j with P[X <= j] <= tail, X ~ Bin(n, 1/2)
    if half_lower(j, n) > tail:
        j -= 1
    if j < 0:
        return None, None
    ordered = np.sort(values)
    return float(ordered[j]), float(ordered[n - 1 - j])


def _one(
    part: pl.DataFrame, column: str, kind: str, level: float
) -> dict[str, float | int | None] | None:
    base_col, cand_col = f"base_{column}", f"cand_{column}"
    if base_col not in part.columns or cand_col not in part.columns:
        return None
    both = part.select(pl.col(base_col).cast(pl.Float64), pl.col(cand_col).cast(pl.Float64))
    both = both.drop_nulls()
    base, cand = both[base_col].to_numpy(), both[cand_col].to_numpy()
    if kind == "ratio":
        keep = base > 0
        values = cand[keep] / base[keep]
    else:
        values = (cand - base) / 1000.0  # milliseconds stored, seconds budgeted
    if values.size < 2:
        return None
    grew, shrank = int((cand > base).sum()), int((cand < base).sum())
    lo, hi = median_interval(values, level)
    return {
        "n": int(values.size), "estimate": float(np.median(values)), "lo": lo, "hi": hi,
        "grew": grew, "shrank": shrank, "p_grew": stats.mcnemar_exact(grew, shrank),
    }  # fmt: skip


def exceeds(row: dict[str, object], limit: float, alpha: float) -> bool:
    """Whether a slice's change lies wholly above the allowed increase, with the sign test at
    ``alpha`` agreeing that cases grew (an interval alone can sit above 1.0 on a few cases)."""
    lo = row["lo"]
    return lo is not None and float(lo) > limit and float(row["p_grew"]) <= alpha  # type: ignore[arg-type]


def grew_most(
    paired: pl.DataFrame, column: str = "steps", k: int = 5
) -> list[tuple[str, float, float]]:
    """The ``k`` cases whose ``column`` grew most (by ratio, then by size): case, base, cand."""
    base_col, cand_col = f"base_{column}", f"cand_{column}"
    if base_col not in paired.columns:
        return []
    frame = paired.filter(
        ~pl.col("base_error") & ~pl.col("cand_error") & (pl.col(cand_col) > pl.col(base_col))
    ).with_columns(
        (pl.col(cand_col) / pl.when(pl.col(base_col) > 0).then(pl.col(base_col))).alias("_r")
    )
    frame = frame.sort(["_r", cand_col, "case_id"], descending=[True, True, False], nulls_last=True)
    return [
        (str(c), float(b), float(a))
        for c, b, a in frame.head(k).select("case_id", base_col, cand_col).iter_rows()
    ]
