"""A trend test over a short series: is a quantity (unstable cases per run) growing?

`mann_kendall` is the Mann–Kendall test: ``S`` = the number of later-greater pairs minus the
number of later-smaller pairs of the series, against its null distribution when the series is
in random order. It assumes no distribution and no linear form, so a handful of runs whose
noise is far from normal (counts of unstable cases) is tested honestly, and one outlying run
moves ``S`` by at most ``2(n - 1)`` (its n - 1 pairs each change sign). Kendall's tau between
the run index and the values is the same test; ``tau`` here is tau-b (ties in the values
corrected), as `scipy.stats.kendalltau` reports it.

The p-value is exact (the permutation distribution of ``S``, Mahonian numbers) when the values
have no ties and ``n <= EXACT_MAX_N``; otherwise the normal approximation with the tie-corrected
variance ``[n(n-1)(2n+5) - sum t(t-1)(2t+5)] / 18`` and no continuity correction, which is what
`scipy.stats.kendalltau` computes (a test checks both against it).

>>> r = mann_kendall([1, 2, 3, 5, 8, 13])
>>> r.s, r.tau, round(r.p_value, 5), r.method
(15, 1.0, 0.00139, 'exact')
>>> mann_kendall([3, 3, 3, 3]).p_value
1.0
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from evalkit.stats._base import Alternative, Array, vector
from evalkit.stats._dist import norm_cdf, norm_sf

#: Longest series whose exact null distribution is computed (its table has n(n-1)/2 + 1 terms).
EXACT_MAX_N = 60


@dataclass(frozen=True, slots=True, kw_only=True)
class TrendResult:
    """A Mann–Kendall test: ``s`` (concordant minus discordant pairs), ``tau`` (tau-b),
    ``p_value`` for ``alternative``, the series length ``n`` and ``method`` ("exact",
    "normal", or "none" when the series cannot show a trend: fewer than 3 values, or constant)."""

    s: int
    tau: float
    p_value: float
    n: int
    alternative: str
    method: str


def mann_kendall(values: Array, alternative: Alternative = "greater") -> TrendResult:
    """Mann–Kendall trend test of ``values`` in their order; "greater" = an increasing trend.

    Edge cases: fewer than 3 values or all values equal -> p = 1.0, ``method`` "none" (no
    ordering carries evidence); ties use the normal approximation; NaN or inf -> ValueError.

    Examples:
        >>> r = mann_kendall([5, 4, 4, 2, 1], alternative="less")
        >>> r.s, r.method, r.p_value < 0.05
        (-9, 'normal', True)
    """
    if alternative not in ("greater", "less", "two-sided"):
        raise ValueError(f"alternative must be greater, less or two-sided, got {alternative!r}")
    y = vector(values, "values")
    n = len(y)
    if n < 3 or np.all(y == y[0]):
        return TrendResult(s=0, tau=0.0, p_value=1.0, n=n, alternative=alternative, method="none")
    i, j = np.triu_indices(n, k=1)
    s = int(np.sign(y[j] - y[i]).sum())
    pairs = n * (n - 1) // 2
    _, counts = np.unique(y, return_counts=True)
    tied = int((counts * (counts - 1) // 2).sum())
    tau = s / math.sqrt(pairs * (pairs - tied))
    if tied == 0 and n <= EXACT_MAX_N:
        p = _exact_p(n, s, alternative)
        return TrendResult(s=s, tau=tau, p_value=p, n=n, alternative=alternative, method="exact")
    t = counts.astype(float)
    var = (n * (n - 1) * (2 * n + 5) - float((t * (t - 1) * (2 * t + 5)).sum())) / 18
    z = s / math.sqrt(var)
    if alternative == "greater":
        p = float(norm_sf(z))
    elif alternative == "less":
        p = float(norm_cdf(z))
    else:
        p = min(1.0, 2 * float(norm_sf(abs(z))))
    return TrendResult(s=s, tau=tau, p_value=p, n=n, alternative=alternative, method="normal")


@functools.cache
def _inversions(n: int) -> tuple[int, ...]:
    """How many permutations of n items have k inversions, for k = 0 .. n(n-1)/2 (exact ints).

    Inserting item m adds 0 .. m-1 inversions, so the new row is a sliding sum of width m over
    the old one: kept as a running window, O(n^3) in all (the direct double loop is O(n^4),
    about a second at n = 60).
    """
    row = [1]
    for m in range(2, n + 1):
        wider, window = [], 0
        for k in range(len(row) + m - 1):
            window += row[k] if k < len(row) else 0
            window -= row[k - m] if 0 <= k - m < len(row) else 0
            wider.append(window)
        row = wider
    return tuple(row)


def _exact_p(n: int, s: int, alternative: str) -> float:
    """P(S >= s), P(S <= s) or the two-sided p under random order; S = pairs - 2 * inversions."""
    table = _inversions(n)
    total = math.factorial(n)
    inv = ((n * (n - 1)) // 2 - s) // 2  # the series' inversions (discordant pairs)
    upper = sum(table[: inv + 1]) / total  # S >= s  <=>  inversions <= inv
    lower = sum(table[inv:]) / total
    if alternative == "greater":
        return upper
    if alternative == "less":
        return lower
    return min(1.0, 2 * min(upper, lower))


def mann_kendall_permutation(
    values: Array, iters: int = 2_000, seed: int = 0, alternative: Alternative = "greater"
) -> TrendResult:
    """Mann–Kendall with the p-value of a seeded Monte-Carlo permutation test: (1 + the
    permutations with S at least as extreme) / (1 + ``iters``). Valid at any n and with ties
    (the normal approximation `mann_kendall` falls back to with ties is not, at a handful of
    runs and a small alpha); without ties, `mann_kendall` is exact and preferred.

    Examples:
        >>> r = mann_kendall_permutation([0, 0, 1, 2, 3, 4])   # 1 ordering in 360 reaches S=14
        >>> r.s, r.method, r.p_value < 0.01
        (14, 'permutation', True)
    """
    base = mann_kendall(values, alternative)
    if base.method == "none":
        return base
    y = vector(values, "values")
    n = y.size
    rng = np.random.default_rng(seed)
    perms = y[np.argsort(rng.random((iters, n)), axis=1)]
    i, j = np.triu_indices(n, k=1)
    s = (perms[:, j] > perms[:, i]).sum(1, dtype=np.int64) - (perms[:, j] < perms[:, i]).sum(1)
    if alternative == "greater":
        extreme = s >= base.s
    elif alternative == "less":
        extreme = s <= base.s
    else:
        extreme = np.abs(s) >= abs(base.s)
    p = (1 + int(extreme.sum())) / (1 + iters)
    return TrendResult(
        s=base.s, tau=base.tau, p_value=p, n=n, alternative=alternative, method="permutation"
    )
