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
a case's baseline and candidate usage) is kept. Seeded; the seed is recorded. `paired_totals_many`
gives several metrics of the same cases the same resamples (one draw of case indices, each
metric's result the one `paired_totals` gives it alone). `paired_totals_t` is the cheap
interval for a row nothing is decided on: the t interval of the mean per-case difference and
the delta-method (linearised ratio estimator) interval of the ratio of totals, no resampling.

>>> import numpy as np
>>> base = np.full(100, 100.0)
>>> cand = base.copy(); cand[:10] *= 10        # 10 % of cases at 10x the tokens
>>> r = paired_totals(base, cand, iters=2000, seed=0)
>>> round(r.ratio, 2), r.lo > 1.25, float(np.median(cand / base))
(1.9, True, 1.0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from evalkit.stats._base import INDEX_CHUNK_ELEMS, Array, Seed, check, rng_from, vector
from evalkit.stats._dist import t_ppf


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
    method: str = "paired bootstrap"


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
    return paired_totals_many([(base, cand)], iters, level, seed)[0]


def paired_totals_many(
    pairs: Sequence[tuple[Array, Array]], iters: int = 10_000, level: float = 0.95, seed: Seed = 0
) -> list[TotalsResult]:
    """`paired_totals` of several metrics of the same cases from the same resamples: the case
    indices are drawn once per number of cases and gathered for each metric, so result ``i``
    equals ``paired_totals(*pairs[i], iters, level, seed)`` (with an int seed) for a fraction
    of the drawing.

    Examples:
        >>> tokens = ([100.0, 120.0, 90.0, 110.0], [150.0, 130.0, 95.0, 200.0])
        >>> steps = ([2.0, 2.0, 4.0, 0.0], [6.0, 5.0, 8.0, 3.0])
        >>> both = paired_totals_many([tokens, steps], iters=500, seed=3)
        >>> both[1] == paired_totals(*steps, iters=500, seed=3)
        True
    """
    checked = [_pair(base, cand) for base, cand in pairs]
    check(level, iters)
    _, s = rng_from(seed)
    by_n: dict[int, list[int]] = {}
    for i, (b, _) in enumerate(checked):
        by_n.setdefault(b.size, []).append(i)
    sums: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for n, members in by_n.items():
        rng = np.random.default_rng(s)  # what paired_totals(seed=s) draws for n cases
        got = {i: (np.empty(iters), np.empty(iters)) for i in members}
        step = max(1, INDEX_CHUNK_ELEMS // n)
        for start in range(0, iters, step):
            stop = min(iters, start + step)
            idx = rng.integers(0, n, (stop - start, n))
            for i in members:
                b, c = checked[i]
                got[i][0][start:stop], got[i][1][start:stop] = b[idx].sum(1), c[idx].sum(1)
        sums |= got
    tail = (1 - level) / 2
    out = []
    for i, (b, c) in enumerate(checked):
        sums_b, sums_c = sums[i]
        ratios = _ratio(sums_c, sums_b)
        lo, hi = (float(q) for q in np.quantile(ratios, [tail, 1 - tail], method="inverted_cdf"))
        diffs = (sums_c - sums_b) / b.size
        d_lo, d_hi = (float(q) for q in np.quantile(diffs, [tail, 1 - tail], method="inverted_cdf"))
        out.append(_result(b, c, (lo, hi), (d_lo, d_hi), level, iters, s, "paired bootstrap"))
    return out


def paired_totals_t(base: Array, cand: Array, level: float = 0.95) -> TotalsResult:
    """The ratio of totals and the mean per-case difference with t intervals, no resampling.

    The mean difference d = cand - base: mean(d) +- t(n-1) sd(d) / sqrt(n). The ratio of
    totals R = sum(cand) / sum(base) is a ratio estimator; linearised (the delta method), its
    standard error is sd(cand - R base) / (sqrt(n) mean(base)), and the interval R +- t(n-1) se,
    cut at 0 (a ratio of usage is never negative). Both are asymptotic (the central limit
    theorem on the cases): for a few dozen cases with a heavy tail, `paired_totals`' bootstrap
    is the better guess, and it is what a budget decides on. A baseline total of 0 gives the
    ratio inf (1.0 when the candidate's is 0 too) as a point interval.

    Examples:
        >>> r = paired_totals_t([100.0, 120.0, 90.0, 110.0], [150.0, 130.0, 95.0, 200.0])
        >>> round(r.ratio, 3), round(r.diff, 2), round(r.diff_lo, 2), round(r.diff_hi, 2)
        (1.369, 38.75, -24.36, 101.86)
    """
    b, c = _pair(base, cand)
    check(level)
    n = b.size
    t = t_ppf(1 - (1 - level) / 2, n - 1)
    d = c - b
    bt, ct = float(b.sum()), float(c.sum())
    diff, diff_half = (ct - bt) / n, t * float(d.std(ddof=1)) / math.sqrt(n)
    if bt == 0:
        ratio = float(_ratio(np.array(ct), np.array(bt)))
        lo, hi = ratio, ratio
    else:
        r = ct / bt
        half = t * float((c - r * b).std(ddof=1)) / (math.sqrt(n) * (bt / n))
        lo, hi = max(0.0, r - half), r + half
    return _result(b, c, (lo, hi), (diff - diff_half, diff + diff_half), level, 0, 0, "t")


def _pair(base: Array, cand: Array) -> tuple[np.ndarray, np.ndarray]:
    b, c = vector(base, "base"), vector(cand, "cand")
    if b.size != c.size or b.size < 2:
        raise ValueError(f"need two paired arrays of >= 2 cases, got {b.size} and {c.size}")
    if (b < 0).any() or (c < 0).any():
        raise ValueError("usage values must be >= 0")
    return b, c


def _result(
    b: np.ndarray, c: np.ndarray, ratio_ci: tuple[float, float], diff_ci: tuple[float, float],
    level: float, iters: int, seed: int, method: str,
) -> TotalsResult:  # fmt: skip
    bt, ct, n = float(b.sum()), float(c.sum()), b.size
    return TotalsResult(
        n=n,
        base_total=bt,
        cand_total=ct,
        ratio=float(_ratio(np.array(ct), np.array(bt))),
        lo=ratio_ci[0],
        hi=ratio_ci[1],
        diff=(ct - bt) / n,
        diff_lo=diff_ci[0],
        diff_hi=diff_ci[1],
        zero_base=int((b == 0).sum()),
        level=level,
        iters=iters,
        seed=seed,
        method=method,
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
