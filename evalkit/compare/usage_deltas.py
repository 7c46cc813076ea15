"""Paired cost, latency and trajectory changes: the candidate's totals against the baseline's.

A candidate that answers every case right with eleven tool calls instead of four, or twice the
tokens, has regressed in cost and latency although no verdict flipped. Budgets on the
candidate's mean cannot see that against a baseline; this module pairs it. What a team pays is
the total, so per slice and metric, over the cases with evidence on both sides
(`evalkit.stats.totals.paired_totals`):

* ``total_tokens``, ``cost_usd`` and ``steps`` (agent steps: model turns with tool calls): the
  **ratio of totals** sum(cand) / sum(base), and the **mean per-case difference** (the scale
  for counts such as steps and tool calls; the only one when the baseline total is 0), each
  with a **paired bootstrap interval over cases** (seeded, at the gate's interval level) on
  the rows a budget decides (``bootstrap``: the budgeted metrics of the critical tags; one
  draw of resamples per slice serves all its metrics), and the **t interval** (the delta
  method for the ratio, `evalkit.stats.totals.paired_totals_t`) on the rows only shown, the
  ALL row among them; ``interval`` names which.
  Cases whose baseline is 0 are kept: 0 -> 3 steps is growth, not a case to drop. A tail of
  cases that grew a lot moves the total, whatever the median does;
* ``latency_s``: the mean per-case difference in seconds (cand − base), with the same interval;
  ``latency_p50_s``: the **median** per-case difference in seconds with the exact
  distribution-free interval from order statistics (the number of cases below the true median
  is Binomial(n, 1/2)), for a budget on the typical case rather than the total. Cached outputs
  carry the latency first measured, so a cache-served candidate is not faster than it was;
* beside each, the cases that grew and shrank and the exact **sign test** (one-sided, "the
  candidate grew", the McNemar computation on those counts): reported, not part of the rule.

``gate.relative_budgets`` (``{total_tokens: 1.25, steps: 1.5, latency_s: 1.0}``: ratios of
totals, or seconds per case for the latencies) blocks a critical tag whose interval lies wholly
above the allowed increase (with a baseline total of 0, whose mean difference lies above 0).
`usage_tail` names the cases whose usage grew most and their share of the growth.

Examples:
    >>> import polars as pl
    >>> p = pl.DataFrame({"case_id": ["a", "b", "c", "d"], "tags": [["x"]] * 4,
    ...     "base_error": [False] * 4, "cand_error": [False] * 4,
    ...     "base_steps": [2.0, 2.0, 4.0, 0.0], "cand_steps": [6.0, 5.0, 8.0, 3.0]})
    >>> row = usage_deltas(p, ["x"], ["steps"]).row(0, named=True)
    >>> row["slice"], row["metric"], row["estimate"], row["mean_diff"], row["zero_base"]
    ('x', 'steps', 2.75, 3.5, 1)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import polars as pl

from evalkit import stats

if TYPE_CHECKING:  # arrays come from the frames; a report read back from a file needs no numpy
    import numpy as np

    from evalkit.stats.totals import TotalsResult

#: Relative budget name -> (paired column, how it compares: "ratio" or "seconds").
METRICS: dict[str, tuple[str, str]] = {
    "total_tokens": ("total_tokens", "ratio"),
    "cost_usd": ("cost_usd", "ratio"),
    "steps": ("steps", "ratio"),
    "latency_s": ("latency_ms", "seconds"),
    "latency_p50_s": ("latency_ms", "median seconds"),
}

_SCHEMA = {
    "slice": pl.String, "metric": pl.String, "kind": pl.String, "n": pl.Int64,
    "estimate": pl.Float64, "lo": pl.Float64, "hi": pl.Float64, "mean_diff": pl.Float64,
    "diff_lo": pl.Float64, "diff_hi": pl.Float64, "base_total": pl.Float64,
    "cand_total": pl.Float64, "zero_base": pl.Int64, "grew": pl.Int64, "shrank": pl.Int64,
    "p_grew": pl.Float64, "interval": pl.String,
}  # fmt: skip


def usage_deltas(
    paired: pl.DataFrame,
    tags: Sequence[str],
    metrics: Sequence[str] = tuple(METRICS),
    level: float = 0.95,
    iters: int = 2_000,
    seed: int = 0,
    bootstrap: Sequence[str] | None = None,
) -> pl.DataFrame:
    """One row per (slice, metric) for ``tags`` and ``ALL``: ``estimate`` (the ratio of totals;
    seconds per case for the latencies) with ``[lo, hi]``, ``mean_diff`` with ``[diff_lo,
    diff_hi]``, both totals, the cases with a zero baseline, the cases that grew and shrank, the
    sign test's p and the ``interval``'s method. ``iters`` and ``seed``: the paired bootstrap's,
    run for the ``bootstrap`` metrics of ``tags`` (the budgeted ones: ``gate.relative_budgets``
    never reads ALL); every other row gets the t interval. ``None``: every row, ALL too."""
    ok = ~pl.col("base_error") & ~pl.col("cand_error")
    if "sealed" in paired.columns:
        ok = ok & ~pl.col("sealed").fill_null(False)
    live = paired.filter(ok)
    rows = []
    for name in [*tags, "ALL"]:
        part = live if name == "ALL" else live.filter(pl.col("tags").list.contains(name))
        if bootstrap is None:
            boot = set(metrics)
        else:
            boot = set() if name == "ALL" else set(bootstrap) & set(metrics)
        rows += [{"slice": name, **row} for row in _slice(part, metrics, boot, level, iters, seed)]
    return pl.DataFrame(rows, schema=_SCHEMA) if rows else pl.DataFrame(schema=_SCHEMA)


def _slice(
    part: pl.DataFrame, metrics: Sequence[str], boot: set[str], level: float, iters: int,
    seed: int,
) -> list[dict[str, object]]:  # fmt: skip
    """The rows of one slice: each column's usage read once, and one draw of resamples for
    every bootstrapped column (a column is bootstrapped when any of its metrics is)."""
    from evalkit.stats.totals import paired_totals_many, paired_totals_t

    values = {}
    for metric in metrics:
        column, _ = METRICS[metric]
        if column not in values and (pair := _values(part, column)) is not None:
            values[column] = pair
    booted = sorted({METRICS[m][0] for m in boot} & set(values))
    drawn = paired_totals_many([values[c] for c in booted], iters, level, seed)
    totals = dict(zip(booted, drawn, strict=True))
    rows: list[dict[str, object]] = []
    for metric in metrics:
        column, kind = METRICS[metric]
        if column not in values:
            continue
        base, cand = values[column]
        if column not in totals:
            totals[column] = paired_totals_t(base, cand, level)
        rows.append({"metric": metric, "kind": kind, **_row(base, cand, kind, totals[column])})
    return rows


def _values(part: pl.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray] | None:
    """One column's paired usage (seconds for the latencies), or None with < 2 cases."""
    base_col, cand_col = f"base_{column}", f"cand_{column}"
    if base_col not in part.columns or cand_col not in part.columns:
        return None
    both = part.select(pl.col(base_col).cast(pl.Float64), pl.col(cand_col).cast(pl.Float64))
    both = both.drop_nulls()
    base, cand = both[base_col].to_numpy(), both[cand_col].to_numpy()
    if base.size < 2:
        return None
    if column == "latency_ms":
        base, cand = base / 1000.0, cand / 1000.0  # milliseconds stored, seconds budgeted
    return base, cand


def median_interval(values: np.ndarray, level: float = 0.95) -> tuple[float | None, float | None]:
    """The exact distribution-free interval for the median of ``values`` (order statistics), or
    ``(None, None)`` when even the extremes cover it with less than ``level``.

    Examples:
        >>> import numpy as np
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
    ordered = _sorted(values)
    return float(ordered[j]), float(ordered[n - 1 - j])


def _sorted(values: np.ndarray) -> Sequence[float] | np.ndarray:
    """``values`` in ascending order: numpy's sort of the floats themselves (a million cases as
    a Python list of floats held 40 MiB more), Python's where a NaN makes the order its own.

    Examples:
        >>> import numpy as np
        >>> list(_sorted(np.array([3.0, -1.0, 2.0]))) == sorted([3.0, -1.0, 2.0])
        True
    """
    import numpy as np

    if np.isnan(values).any():
        return sorted(values.tolist())
    return np.sort(values, kind="stable")  # equal values keep their order, as in sorted()


def _median(values: np.ndarray) -> float:
    """`statistics.median` of ``values``, from their numpy sort (`_sorted`): the middle value,
    or the mean of the two middle values as `statistics.median` computes it.

    Examples:
        >>> import numpy as np, statistics
        >>> all(_median(np.array(v)) == statistics.median(v)
        ...     for v in ([1.0], [2.0, 1.0], [0.1, 0.2, 0.7, 0.3]))
        True
    """
    ordered = _sorted(values)
    n = len(ordered)
    if n % 2:
        return float(ordered[n // 2])
    return float((float(ordered[n // 2 - 1]) + float(ordered[n // 2])) / 2)


def _row(
    base: np.ndarray, cand: np.ndarray, kind: str, totals: TotalsResult
) -> dict[str, float | int | str | None]:
    grew, shrank = int((cand > base).sum()), int((cand < base).sum())
    row: dict[str, float | int | str | None] = {
        "n": int(base.size), "estimate": totals.ratio, "lo": totals.lo, "hi": totals.hi,
        "mean_diff": totals.diff, "diff_lo": totals.diff_lo, "diff_hi": totals.diff_hi,
        "base_total": totals.base_total, "cand_total": totals.cand_total,
        "zero_base": totals.zero_base, "grew": grew, "shrank": shrank,
        "p_grew": stats.mcnemar_exact(grew, shrank), "interval": totals.method,
    }  # fmt: skip
    if kind == "seconds":
        row |= {"estimate": totals.diff, "lo": totals.diff_lo, "hi": totals.diff_hi}
    elif kind == "median seconds":
        lo, hi = median_interval(cand - base, level=totals.level)
        row |= {"estimate": _median(cand - base), "lo": lo, "hi": hi,
                "interval": "order statistics"}  # fmt: skip
    return row


def exceeds(row: dict[str, object], limit: float) -> bool:
    """Whether a slice's usage grew beyond the allowed increase beyond the noise: the interval
    of the ratio of totals (seconds per case for the latencies) lies wholly above ``limit``;
    with a baseline total of 0 (any growth is an infinite ratio), the mean difference's does
    above 0.

    Examples:
        >>> exceeds({"kind": "ratio", "base_total": 0.0, "diff_lo": 3.0, "lo": None}, 1.25)
        True
        >>> exceeds({"kind": "ratio", "base_total": 90.0, "diff_lo": 0.1, "lo": 1.1}, 1.25)
        False
    """
    if row["kind"] == "ratio" and row["base_total"] == 0:
        return float(row["diff_lo"]) > 0  # type: ignore[arg-type]
    lo = row["lo"]
    return lo is not None and float(lo) > limit  # type: ignore[arg-type]


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


def usage_tail(
    paired: pl.DataFrame, column: str = "total_tokens", k: int = 5
) -> list[tuple[str, float, float, float]]:
    """The ``k`` cases whose ``column`` grew most in absolute terms, with their share of the
    slice's total growth: case, base, cand, share (of the sum of positive growth).

    Examples:
        >>> p = pl.DataFrame({"case_id": ["a", "b", "c"], "base_error": [False] * 3,
        ...     "cand_error": [False] * 3, "base_total_tokens": [100, 100, 100],
        ...     "cand_total_tokens": [1000, 100, 110]})
        >>> usage_tail(p, k=2)
        [('a', 100.0, 1000.0, 0.989), ('c', 100.0, 110.0, 0.011)]
    """
    base_col, cand_col = f"base_{column}", f"cand_{column}"
    if base_col not in paired.columns or cand_col not in paired.columns:
        return []
    frame = (
        paired.filter(~pl.col("base_error") & ~pl.col("cand_error"))
        .select("case_id", pl.col(base_col).cast(pl.Float64), pl.col(cand_col).cast(pl.Float64))
        .drop_nulls()
        .with_columns(_g=pl.col(cand_col) - pl.col(base_col))
        .filter(pl.col("_g") > 0)
    )
    total = float(frame["_g"].sum()) if frame.height else 0.0
    frame = frame.sort(["_g", "case_id"], descending=[True, False]).head(k)
    return [
        (str(c), float(b), float(a), round(g / total, 3))
        for c, b, a, g in frame.select("case_id", base_col, cand_col, "_g").iter_rows()
    ]
