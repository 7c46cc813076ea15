"""Paired totals: how much more a candidate costs in all, with a bootstrap interval over cases.

A team pays for the total, so a cost, token or step regression is a change in the *total* over
the same cases: the ratio of totals sum(cand) / sum(base), and the mean per-case difference
mean(cand - base) (the natural scale for counts such as steps and tool calls, and the only one
when the baseline total is 0). Every case counts, cases whose baseline is 0 included: they are
where a zero-inflated regression (0 steps -> 3) lives, and a median or a per-case ratio drops
them. A heavy tail counts too: 10 % of cases at 10x the tokens is 1.9x the total whatever the
median says.

The interval is the paired percentile bootstrap over cases: each resample draws n cases with
replacement and takes both sides of each drawn case, so the pairing (and any correlation between
a case's baseline and candidate usage) is kept. Seeded; the seed is recorded.

>>> import numpy as np
>>> base = np.full(100, 100.0)
>>> cand = base.copy(); cand[:10] *= 10        # 10 % of cases at 10x the tokens
>>> r = paired_totals(base, cand, iters=2000, seed=0)
>>> round(r.ratio, 2), r.lo > 1.25, float(np.median(cand / base))
(1.9, True, 1.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from evalkit.stats._base import INDEX_CHUNK_ELEMS, Array, Seed, check, rng_from, vector


@dataclass(frozen=True, slots=True, kw_only=True)
class TotalsResult:
    """Paired totals of one metric: ``ratio`` = cand_total / base_total (inf when only the
    baseline total is 0, nan when both are) with its percentile interval ``[lo, hi]``; ``diff``
    = the mean per-case difference with ``[diff_lo, diff_hi]``; ``zero_base`` cases had a
    baseline of 0 (kept in both statistics)."""

    n: int
    base_total: float
    cand_total: float
    ratio: float
    lo: float
    hi: float
    diff: float
    diff_lo: float
    diff_hi: float
    zero_base: int
    level: float
    iters: int
    seed: int


def _ratio(cand: np.ndarray, base: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        r = cand / base
    r = np.where((base == 0) & (cand > 0), np.inf, r)
    return np.where((base == 0) & (cand == 0), 1.0, r)  # nothing either side: no growth


def paired_totals(
    base: Array, cand: Array, iters: int = 10_000, level: float = 0.95, seed: Seed = 0
) -> TotalsResult:
    """Ratio of totals and mean per-case difference of paired usage, with bootstrap intervals.

    ``base[i]`` and ``cand[i]`` are one case's usage in each run. A resample with both totals
    0 counts as ratio 1.0 (no growth); with only the baseline total 0, as inf.

    Edge cases: fewer than 2 cases, arrays of different length, negative, NaN or inf values
    -> ValueError.

    Examples:
        >>> r = paired_totals([0.0] * 60, [3.0] * 60, iters=500)   # steps 0 -> 3
        >>> r.ratio, r.diff, (r.diff_lo, r.diff_hi), r.zero_base
        (inf, 3.0, (3.0, 3.0), 60)
    """
    b, c = vector(base, "base"), vector(cand, "cand")
    if b.size != c.size or b.size < 2:
        raise ValueError(f"need two paired arrays of >= 2 cases, got {b.size} and {c.size}")
    if (b < 0).any() or (c < 0).any():
        raise ValueError("usage values must be >= 0")
    check(level, iters)
    rng, s = rng_from(seed)
    n = b.size
    sums_b, sums_c = np.empty(iters), np.empty(iters)
    step = max(1, INDEX_CHUNK_ELEMS // n)
    for start in range(0, iters, step):
        stop = min(iters, start + step)
        idx = rng.integers(0, n, (stop - start, n))
        sums_b[start:stop], sums_c[start:stop] = b[idx].sum(1), c[idx].sum(1)
    tail = (1 - level) / 2
    ratios = _ratio(sums_c, sums_b)
    lo, hi = (float(q) for q in np.quantile(ratios, [tail, 1 - tail], method="inverted_cdf"))
    diffs = (sums_c - sums_b) / n
    d_lo, d_hi = (float(q) for q in np.quantile(diffs, [tail, 1 - tail], method="inverted_cdf"))
    bt, ct = float(b.sum()), float(c.sum())
    return TotalsResult(
        n=n,
        base_total=bt,
        cand_total=ct,
        ratio=float(_ratio(np.array(ct), np.array(bt))),
        lo=lo,
        hi=hi,
        diff=(ct - bt) / n,
        diff_lo=d_lo,
        diff_hi=d_hi,
        zero_base=int((b == 0).sum()),
        level=level,
        iters=iters,
        seed=s,
    )


def exceeds_ratio(result: TotalsResult, limit: float) -> bool:
    """Whether the total grew beyond ``limit`` (a ratio, 1.25 = +25 %) beyond the noise: the
    interval's lower bound is above it. A baseline total of 0 makes any ratio infinite, so
    there the mean difference must be above 0 beyond the noise.

    Examples:
        >>> r = paired_totals([0.0] * 60, [3.0] * 60, iters=200)
        >>> exceeds_ratio(r, 1.25)
        True
    """
    if result.base_total == 0:
        return result.cand_total > 0 and result.diff_lo > 0
    return (math.isfinite(result.lo) and result.lo > limit) or result.lo == math.inf
