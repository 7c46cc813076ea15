"""Bootstrap intervals of a mean difference (percentile or BCa), by case or by cluster, and the
cluster-robust standard error. Graded scores (judge 1-5 levels, similarity) use these; pass/fail
slices use `evalkit.stats.paired_diff_interval`, which holds at small n."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import special

from evalkit.stats._base import (
    CHUNK_ELEMS,
    INDEX_CHUNK_ELEMS,
    Array,
    Seed,
    check,
    resample,
    rng_from,
    vector,
)
from evalkit.stats._dist import t_cdf, t_ppf, t_sf

BootMethod = Literal["percentile", "bca"]
_MAX_LEVELS = 64  # at most this many distinct per-case differences -> multinomial resampling


@dataclass(frozen=True, slots=True)
class BootstrapResult:
    """Bootstrap CI of a mean; ``diff`` is the point estimate, ``seed`` replays it, ``method``
    says how the bounds were read ("percentile" or "bca")."""

    diff: float
    lo: float
    hi: float
    iters: int
    seed: int
    n: int
    level: float
    n_clusters: int | None = None
    method: BootMethod = "percentile"


def _bca_bounds(boot: np.ndarray, theta: float, d: np.ndarray, level: float) -> tuple[float, float]:
    """BCa bounds (Efron 1987) for the mean of ``d`` from its bootstrap means ``boot``.

    Bias correction z0 from the share of resamples below ``theta`` (ties count half, as scipy);
    acceleration from the jackknife, which for a mean is closed-form: a = sum(e^3) / (6 (sum
    e^2)^1.5), e = d - mean(d). nan bounds when z0 is infinite (all resamples on one side).
    """
    z0 = special.ndtri(((boot < theta).sum() + (boot <= theta).sum()) / (2 * boot.size))
    e = d - d.mean()
    ss = float(e @ e)
    a = float((e**3).sum() / (6 * ss**1.5)) if ss > 0 else 0.0
    out = []
    for q in ((1 - level) / 2, (1 + level) / 2):
        zq = special.ndtri(q)
        adj = special.ndtr(z0 + (z0 + zq) / (1 - a * (z0 + zq)))
        out.append(float(np.quantile(boot, adj)) if np.isfinite(adj) else math.nan)
    return out[0], out[1]


def _bounds(
    means: np.ndarray, theta: float, d: np.ndarray, level: float, method: BootMethod
) -> tuple[float, float]:
    if method == "bca":
        if np.ptp(d) == 0:
            return math.nan, math.nan
        return _bca_bounds(means, theta, d, level)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def _method(method: str) -> BootMethod:
    if method not in ("percentile", "bca"):
        raise ValueError(f"method must be 'percentile' or 'bca', got {method!r}")
    return method  # type: ignore[return-value]


def paired_bootstrap(
    base: Array,
    cand: Array,
    iters: int = 10_000,
    level: float = 0.95,
    seed: Seed = 0,
    chunk_size: int | None = None,
    method: BootMethod = "percentile",
) -> BootstrapResult:
    """Bootstrap CI of mean(cand - base), resampling cases; vectorized in chunks.

    ``method`` "percentile" reads the resampled means' quantiles; "bca" corrects them for bias
    and skew (Efron 1987; as ``scipy.stats.bootstrap(method="BCa")``), better for skewed graded
    scores. If the differences take <= 64 distinct values (pass/fail, 1-5 judge levels) each
    resample is multinomial counts over them (same distribution as resampling indices, O(values)
    not O(n)); else indices are drawn ``chunk_size`` resamples at a time (memory O(chunk_size *
    n)). Results do not depend on ``chunk_size``. Edge cases: n < 2 -> ValueError (one case has
    no interval; scipy refuses too); all differences equal -> "percentile" gives lo = hi = diff,
    "bca" gives nan bounds (its bias correction is infinite: undefined, as in scipy); unequal
    lengths, NaN -> ValueError.

    Examples:
        >>> base = np.r_[np.ones(90), np.zeros(10)]
        >>> cand = base.copy(); cand[:8] = 0  # 8 of the 90 passes break
        >>> r = paired_bootstrap(base, cand, seed=1)
        >>> r.diff, r.hi < -0.02
        (-0.08, True)
        >>> paired_bootstrap([3, 4, 5, 2], [4, 5, 5, 5], method="bca", seed=0).method
        'bca'
    """
    b, c = vector(base, "base"), vector(cand, "cand")
    if b.shape != c.shape:
        raise ValueError(f"base and cand differ in length: {b.size} vs {c.size} cases")
    if b.size < 2:
        raise ValueError(f"{b.size} case(s): a bootstrap interval needs at least two cases")
    check(level, iters)
    method = _method(method)
    rng, seed_used = rng_from(seed)
    d, n = c - b, b.size
    values, counts = np.unique(d, return_counts=True)
    if values.size <= _MAX_LEVELS:
        probs = counts / n
        chunk = chunk_size or max(1, CHUNK_ELEMS // values.size)
        means = resample(lambda m: rng.multinomial(n, probs, size=m) @ values / n, iters, chunk)
    else:  # int32 indices: a quarter faster to draw and to gather than int64
        chunk = chunk_size or max(1, INDEX_CHUNK_ELEMS // n)
        index = np.int32 if n < 2**31 else np.int64
        means = resample(
            lambda m: np.take(d, rng.integers(0, n, size=(m, n), dtype=index)).mean(1), iters, chunk
        )
    theta = float(d.mean())
    lo, hi = _bounds(means, theta, d, level, method)
    return BootstrapResult(theta, lo, hi, iters, seed_used, n, level, None, method)


def _groups(values: Array, clusters: Array) -> tuple[np.ndarray, np.ndarray]:
    x, g = vector(values, "values"), np.asarray(clusters)
    if g.shape != x.shape:
        raise ValueError(f"values and clusters differ in shape: {x.shape} vs {g.shape}")
    if x.size == 0:
        raise ValueError("no cases: values is empty")
    return x, np.unique(g, return_inverse=True)[1]


def cluster_bootstrap(
    values: Array,
    clusters: Array,
    iters: int = 10_000,
    level: float = 0.95,
    seed: Seed = 0,
    chunk_size: int | None = None,
) -> BootstrapResult:
    """Percentile CI of the mean of per-case ``values`` (e.g. paired differences), resampling
    whole clusters with replacement. Edge cases: n = 0 or a single cluster -> ValueError (one
    cluster has no interval); clusters of size 1 -> the ordinary case bootstrap.

    Examples:
        >>> r = cluster_bootstrap([1, 1, 0, 0, 1, 0], ["a", "a", "b", "b", "c", "c"], seed=0)
        >>> r.diff, r.n_clusters, r.lo, r.hi
        (0.5, 3, 0.0, 1.0)
    """
    x, inv = _groups(values, clusters)
    check(level, iters)
    sums, sizes = np.bincount(inv, weights=x), np.bincount(inv).astype(float)
    k = sums.size
    if k < 2:
        raise ValueError("one cluster: a cluster bootstrap interval needs at least two clusters")
    rng, seed_used = rng_from(seed)
    chunk = chunk_size or max(1, CHUNK_ELEMS // k)

    def draw(m: int) -> np.ndarray:
        idx = rng.integers(0, k, size=(m, k))
        means: np.ndarray = sums[idx].sum(1) / sizes[idx].sum(1)
        return means

    lo, hi = np.quantile(resample(draw, iters, chunk), [(1 - level) / 2, (1 + level) / 2])
    diff = float(sums.sum() / x.size)
    return BootstrapResult(diff, float(lo), float(hi), iters, seed_used, x.size, level, k)


def clustered_se(values: Array, clusters: Array, use_correction: bool = True) -> float:
    """Cluster-robust standard error of the mean (Miller 2024, arXiv:2411.00640).

    sqrt(sum_c (sum_{i in c} (x_i - mean))^2) / n (Miller's formula), times sqrt(G / (G - 1))
    for G clusters if ``use_correction``: then it equals statsmodels OLS on a constant with
    ``cov_type="cluster"``. Edge cases: clusters of size 1 give the naive SE, std(ddof=1) /
    sqrt(n) corrected, std(ddof=0) / sqrt(n) not; < 2 clusters -> nan; n = 0 -> ValueError.

    Examples:
        >>> round(clustered_se([1, 1, 0, 0, 1, 0], [0, 0, 1, 1, 2, 2]), 4)
        0.2887
    """
    x, inv = _groups(values, clusters)
    resid = np.bincount(inv, weights=x - x.mean())
    g = resid.size
    if g < 2:
        return math.nan
    factor = g / (g - 1) if use_correction else 1.0
    return float(math.sqrt(factor * (resid @ resid)) / x.size)


@dataclass(frozen=True, slots=True)
class ClusteredMean:
    """The mean of per-case values with a cluster-robust t interval and one-sided p-values."""

    diff: float
    lo: float
    hi: float
    se: float
    level: float
    n: int
    n_clusters: int
    p_less: float  # H1: mean < 0 (for paired differences cand - base: a regression)
    p_greater: float  # H1: mean > 0


def clustered_interval(values: Array, clusters: Array, level: float = 0.95) -> ClusteredMean:
    """t interval of the mean over clusters: mean ± t_{G-1} `clustered_se` (corrected), and the
    one-sided t-test p-values, with G - 1 degrees of freedom for G clusters.

    The same numbers as statsmodels ``OLS(values, ones).fit(cov_type="cluster",
    cov_kwds={"groups": clusters}, use_t=True)`` (Miller 2024's clustered standard error).
    Edge cases: < 2 clusters -> nan bounds, se and p-values (one cluster has no interval);
    se = 0 (every cluster's residuals sum to 0, e.g. all values equal) -> lo = hi = mean and
    p-values 0 or 1 by the mean's sign (1 at mean 0); n = 0 -> ValueError.

    Examples:
        >>> r = clustered_interval([-1, -1, 0, 0, -1, 0, 0, 0], [0, 0, 1, 1, 2, 2, 3, 3])
        >>> r.n_clusters, round(r.hi, 3), round(r.p_less, 3)
        (4, 0.387, 0.108)
    """
    x, inv = _groups(values, clusters)
    check(level)
    g, mean = int(inv.max()) + 1, float(x.mean())
    se = clustered_se(x, inv)
    if g < 2:
        return ClusteredMean(mean, math.nan, math.nan, math.nan, level, x.size, g, math.nan,
                             math.nan)  # fmt: skip
    if se == 0:
        less, greater = float(mean >= 0), float(mean <= 0)
        return ClusteredMean(mean, mean, mean, 0.0, level, x.size, g, less, greater)
    t_crit = t_ppf((1 + level) / 2, g - 1)
    t = mean / se
    return ClusteredMean(
        mean, mean - t_crit * se, mean + t_crit * se, se, level, x.size, g,
        t_cdf(t, g - 1), t_sf(t, g - 1),
    )  # fmt: skip
