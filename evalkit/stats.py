"""Statistics for paired regression gates: exact McNemar, bootstraps, intervals, power, agreement.

Pure functions (numpy + scipy only): arrays or counts in, floats or frozen dataclasses out.
Resampling functions take ``seed`` (an int or a ``np.random.Generator``, from which one int is
drawn) and record the int seed; passing ``result.seed`` back reproduces the result exactly. The
global numpy RNG is never used.

Sample size, two designs side by side (d = the change to detect; z_a = z_{1-alpha} one-sided or
z_{1-alpha/2} two-sided; z_b = z_{power}):

- paired (McNemar, Connor 1987), ``required_n_paired(psi, d)``: cases in total, where psi is the
  fraction of cases that flip either way: n = [z_a sqrt(psi) + z_b sqrt(psi - d^2)]^2 / d^2.
- unpaired (two independent arms), ``required_n_unpaired(p, d)``, alias ``required_n``: cases per
  arm at pass rate p: n = (z_a + z_b)^2 * 2 p (1 - p) / d^2.

Both default to two-sided so they compare like for like (the gate's test is the one-sided exact
McNemar; ``exact_power_paired`` gives its power exactly). Pairing pays when few cases flip:

>>> required_n_unpaired(0.9, 0.05), required_n_paired(psi=0.06, delta=0.05)
(566, 186)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
from scipy import optimize, stats

Alternative = Literal["greater", "less", "two-sided"]
Sides = Literal["one-sided", "two-sided"]
Weights = Literal["linear", "quadratic"] | None
Seed = int | np.random.Generator
Array = npt.ArrayLike
_CHUNK_ELEMS = 1 << 22  # resampled values held at once (~32 MB of float64)
#: Case indices drawn at once by the index bootstrap: 4 MB of int32, reused by the allocator
#: chunk after chunk (at 1 << 22 each chunk was mapped and unmapped, a third of the time in
#: page faults) and kept in cache while gathered.
_INDEX_CHUNK_ELEMS = 1 << 20
_MAX_LEVELS = 64  # at most this many distinct per-case differences -> multinomial resampling


@dataclass(frozen=True, slots=True)
class McNemarResult:
    """Exact McNemar test on the discordant pairs (see `mcnemar_exact`)."""

    broken: int
    fixed: int
    n_discordant: int
    p_value: float
    alternative: Alternative
    mid_p: bool


@dataclass(frozen=True, slots=True)
class BootstrapResult:
    """Percentile bootstrap CI of a mean; ``diff`` is the point estimate, ``seed`` replays it."""

    diff: float
    lo: float
    hi: float
    iters: int
    seed: int
    n: int
    level: float
    n_clusters: int | None = None


@dataclass(frozen=True, slots=True)
class Interval:
    """A confidence interval; unpacks as ``lo, hi = interval``."""

    lo: float
    hi: float
    level: float

    def __iter__(self) -> Iterator[float]:
        return iter((self.lo, self.hi))


@dataclass(frozen=True, slots=True)
class KappaResult:
    """Cohen's kappa with a CI; ``seed``/``iters`` are None for the asymptotic method."""

    kappa: float
    lo: float
    hi: float
    se: float
    n: int
    level: float
    method: Literal["bootstrap", "asymptotic"]
    iters: int | None = None
    seed: int | None = None


def _rng(seed: Seed) -> tuple[np.random.Generator, int]:
    if isinstance(seed, np.random.Generator):
        seed = int(seed.integers(2**63))
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be a non-negative int or a np.random.Generator, got {seed!r}")
    return np.random.default_rng(int(seed)), int(seed)


def _vector(x: Array, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or inf; drop or score those cases first")
    return arr


def _check(level: float, iters: int = 1, k: int = 0, n: int = 1) -> None:
    if not 0 < level < 1 or iters < 1:
        raise ValueError(f"need 0 < level < 1 and iters >= 1, got {level}, {iters}")
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"need n >= 1 and 0 <= k <= n, got k={k}, n={n}")


def _resample(draw: Callable[[int], np.ndarray], iters: int, chunk: int) -> np.ndarray:
    return np.concatenate([draw(min(chunk, iters - s)) for s in range(0, iters, chunk)])


def mcnemar_exact(
    broken: int, fixed: int, alternative: Alternative = "greater", mid_p: bool = False
) -> float:
    """Exact McNemar p-value: a binomial test of ``broken`` among ``broken + fixed`` at 1/2.

    "greater" (the candidate breaks more than it fixes) is P[X >= broken], X ~ Bin(broken + fixed,
    1/2); "less" is P[X <= broken]; "two-sided" is min(1, 2 * min tail), as scipy's binomtest.
    ``mid_p`` subtracts half the point probability. Edge cases: no discordant pairs -> 1.0 (with
    or without mid_p); negative counts -> ValueError.

    Examples:
        >>> mcnemar_exact(4, 0), mcnemar_exact(5, 0), mcnemar_exact(0, 0)
        (0.0625, 0.03125, 1.0)
        >>> round(mcnemar_exact(8, 2, alternative="two-sided"), 4)
        0.1094
    """
    if broken < 0 or fixed < 0:
        raise ValueError(f"counts must be non-negative, got broken={broken}, fixed={fixed}")
    if alternative not in ("greater", "less", "two-sided"):
        raise ValueError(f"alternative must be greater, less or two-sided, got {alternative!r}")
    n = broken + fixed
    if n == 0:
        return 1.0
    half = 0.5 * stats.binom.pmf(broken, n, 0.5) if mid_p else 0.0
    upper = float(stats.binom.sf(broken - 1, n, 0.5) - half)
    lower = float(stats.binom.cdf(broken, n, 0.5) - half)
    p = {"greater": upper, "less": lower, "two-sided": 2 * min(upper, lower)}[alternative]
    return min(1.0, p)


def mcnemar(
    broken: int, fixed: int, alternative: Alternative = "greater", mid_p: bool = False
) -> McNemarResult:
    """`mcnemar_exact` with its inputs, as a `McNemarResult`; same edge cases.

    Examples:
        >>> mcnemar(8, 0).p_value
        0.00390625
    """
    p = mcnemar_exact(broken, fixed, alternative, mid_p)
    return McNemarResult(broken, fixed, broken + fixed, p, alternative, mid_p)


def paired_bootstrap(
    base: Array,
    cand: Array,
    iters: int = 10_000,
    level: float = 0.95,
    seed: Seed = 0,
    chunk_size: int | None = None,
) -> BootstrapResult:
    """Percentile bootstrap CI of mean(cand - base), resampling cases; vectorized in chunks.

    If the differences take <= 64 distinct values (pass/fail, 1-5 judge levels) each resample is
    multinomial counts over them (same distribution as resampling indices, O(values) not O(n));
    else indices are drawn ``chunk_size`` resamples at a time (memory O(chunk_size * n)). Results
    do not depend on ``chunk_size``. Edge cases: n = 0 -> ValueError (no difference to
    estimate); n = 1 or constant differences -> lo = hi = diff; unequal lengths, NaN -> ValueError.

    Examples:
        >>> base = np.r_[np.ones(90), np.zeros(10)]
        >>> cand = base.copy(); cand[:8] = 0  # 8 of the 90 passes break
        >>> r = paired_bootstrap(base, cand, seed=1)
        >>> r.diff, r.hi < -0.02
        (-0.08, True)
    """
    b, c = _vector(base, "base"), _vector(cand, "cand")
    if b.shape != c.shape:
        raise ValueError(f"base and cand differ in length: {b.size} vs {c.size} cases")
    if b.size == 0:
        raise ValueError("no cases: the paired bootstrap needs at least one case")
    _check(level, iters)
    rng, seed_used = _rng(seed)
    d, n = c - b, b.size
    values, counts = np.unique(d, return_counts=True)
    if values.size <= _MAX_LEVELS:
        probs = counts / n
        chunk = chunk_size or max(1, _CHUNK_ELEMS // values.size)
        means = _resample(lambda m: rng.multinomial(n, probs, size=m) @ values / n, iters, chunk)
    else:  # int32 indices: a quarter faster to draw and to gather than int64
        chunk = chunk_size or max(1, _INDEX_CHUNK_ELEMS // n)
        index = np.int32 if n < 2**31 else np.int64
        means = _resample(
            lambda m: np.take(d, rng.integers(0, n, size=(m, n), dtype=index)).mean(1), iters, chunk
        )
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return BootstrapResult(float(d.mean()), float(lo), float(hi), iters, seed_used, n, level)


def _groups(values: Array, clusters: Array) -> tuple[np.ndarray, np.ndarray]:
    x, g = _vector(values, "values"), np.asarray(clusters)
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
    whole clusters with replacement. Edge cases: n = 0 -> ValueError; one cluster -> lo = hi =
    diff; clusters of size 1 -> the ordinary case bootstrap.

    Examples:
        >>> r = cluster_bootstrap([1, 1, 0, 0, 1, 0], ["a", "a", "b", "b", "c", "c"], seed=0)
        >>> r.diff, r.n_clusters, r.lo, r.hi
        (0.5, 3, 0.0, 1.0)
    """
    x, inv = _groups(values, clusters)
    _check(level, iters)
    rng, seed_used = _rng(seed)
    sums, sizes = np.bincount(inv, weights=x), np.bincount(inv).astype(float)
    k = sums.size
    chunk = chunk_size or max(1, _CHUNK_ELEMS // k)

    def draw(m: int) -> np.ndarray:
        idx = rng.integers(0, k, size=(m, k))
        return sums[idx].sum(1) / sizes[idx].sum(1)

    lo, hi = np.quantile(_resample(draw, iters, chunk), [(1 - level) / 2, (1 + level) / 2])
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


def wilson_interval(k: int, n: int, level: float = 0.95) -> Interval:
    """Wilson score interval for a proportion of ``k`` successes in ``n`` trials.

    Edge cases: k = 0 -> lo = 0; k = n -> hi = 1; n = 1 is allowed; n = 0 -> ValueError.

    Examples:
        >>> lo, hi = wilson_interval(8, 10)
        >>> round(lo, 4), round(hi, 4)
        (0.4902, 0.9433)
    """
    _check(level, k=k, n=n)
    z = float(stats.norm.isf((1 - level) / 2))
    center = (k + z * z / 2) / (n + z * z)
    half = z * math.sqrt(k * (n - k) / n + z * z / 4) / (n + z * z)
    lo = 0.0 if k == 0 else max(0.0, center - half)
    return Interval(lo, 1.0 if k == n else min(1.0, center + half), level)


def clopper_pearson_interval(k: int, n: int, level: float = 0.95) -> Interval:
    """Exact (Clopper-Pearson) interval for a proportion, from beta quantiles.

    Edge cases: k = 0 -> lo = 0; k = n -> hi = 1; n = 1 is allowed; n = 0 -> ValueError.

    Examples:
        >>> lo, hi = clopper_pearson_interval(0, 10)
        >>> lo, round(hi, 4)
        (0.0, 0.3085)
    """
    _check(level, k=k, n=n)
    a = (1 - level) / 2
    lo = 0.0 if k == 0 else float(stats.beta.ppf(a, k, n - k + 1))
    return Interval(lo, 1.0 if k == n else float(stats.beta.isf(a, k + 1, n - k)), level)


def _z(alpha: float, power: float, alternative: Sides) -> tuple[float, float]:
    if not (0 < alpha < 1 and 0 < power < 1):
        raise ValueError(f"alpha and power must be in (0, 1), got {alpha}, {power}")
    if alternative not in ("one-sided", "two-sided"):
        raise ValueError(f"alternative must be one-sided or two-sided, got {alternative!r}")
    za = stats.norm.isf(alpha if alternative == "one-sided" else alpha / 2)
    return float(za), float(stats.norm.ppf(power))


def _connor(psi: float, delta: float, za: float, zb: float) -> float:
    return (za * math.sqrt(psi) + zb * math.sqrt(psi - delta * delta)) ** 2 / (delta * delta)


def _ceil(x: float) -> int:
    return math.ceil(x * (1 - 1e-12))  # an exact integer must not round up through float noise


def required_n_paired(
    psi: float,
    delta: float,
    alpha: float = 0.05,
    power: float = 0.8,
    alternative: Sides = "two-sided",
) -> int:
    """Paired cases for McNemar to detect a net change ``delta`` (Connor 1987), rounded up.

    ``psi`` = P(broken) + P(fixed), the flip rate; ``delta`` = P(broken) - P(fixed), sign ignored.
    Compare `required_n_unpaired` (module docstring). Edge cases: needs 0 < |delta| <= psi <= 1,
    else ValueError; psi = |delta| (every flip one way) is allowed.

    Examples:
        >>> required_n_paired(0.10, 0.05), required_n_paired(0.10, 0.05, alternative="one-sided")
        (312, 246)
    """
    if not 0 < abs(delta) <= psi <= 1:
        raise ValueError(f"need 0 < |delta| <= psi <= 1, got psi={psi}, delta={delta}")
    return _ceil(_connor(psi, delta, *_z(alpha, power, alternative)))


def required_n_unpaired(
    p: float,
    delta: float,
    alpha: float = 0.05,
    power: float = 0.8,
    alternative: Sides = "two-sided",
) -> int:
    """Cases per arm for two independent samples to detect a change ``delta`` in pass rate ``p``.

    n = (z_a + z_b)^2 * 2 p (1 - p) / delta^2 rounded up; 2 (z_a + z_b)^2 is the rule of thumb's
    "15.7". Edge cases: needs 0 < p < 1 and 0 < |delta| < 1, else ValueError.

    Examples:
        >>> required_n_unpaired(0.9, 0.05), required_n_unpaired(0.9, 0.01)
        (566, 14128)
    """
    if not (0 < p < 1 and 0 < abs(delta) < 1):
        raise ValueError(f"need 0 < p < 1 and 0 < |delta| < 1, got p={p}, delta={delta}")
    za, zb = _z(alpha, power, alternative)
    return _ceil((za + zb) ** 2 * 2 * p * (1 - p) / (delta * delta))


def required_n(p: float, delta: float, alpha: float = 0.05, power: float = 0.8) -> int:
    """Alias of `required_n_unpaired` (two-sided), under the name DESIGN.md gives it.

    Examples:
        >>> required_n(0.9, 0.05)
        566
    """
    return required_n_unpaired(p, delta, alpha, power)


def min_detectable_drop_paired(
    n: int, psi: float, alpha: float = 0.05, power: float = 0.8, alternative: Sides = "two-sided"
) -> float:
    """Smallest net drop ``delta`` that ``n`` paired cases detect: Connor's formula inverted.

    Edge cases: nan when even ``delta = psi`` (all flips one way) needs more than ``n`` cases;
    n < 1 or psi outside (0, 1] -> ValueError.

    Examples:
        >>> round(min_detectable_drop_paired(312, 0.10), 3)
        0.05
    """
    if n < 1 or not 0 < psi <= 1:
        raise ValueError(f"need n >= 1 and 0 < psi <= 1, got n={n}, psi={psi}")
    za, zb = _z(alpha, power, alternative)
    if _connor(psi, psi, za, zb) > n:
        return math.nan
    gap = lambda d: _connor(psi, d, za, zb) - n  # noqa: E731  (decreasing in d)
    return float(optimize.brentq(gap, psi * 1e-9, psi, xtol=1e-15, rtol=1e-15))


def exact_min_flips(alpha: float = 0.05) -> int:
    """Fewest flips, all in one direction, for which the one-sided exact McNemar p <= alpha.

    k flips one way give p = 0.5 ** k, so a slice with fewer discordant pairs can never gate.

    Examples:
        >>> exact_min_flips(0.05), exact_min_flips(0.0625), exact_min_flips(0.01)
        (5, 4, 7)
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    k = 1
    while 0.5**k > alpha:
        k += 1
    return k


def exact_power_paired(n: int, psi: float, delta: float, alpha: float = 0.05) -> float:
    """Power of the one-sided exact McNemar test ("greater") on ``n`` paired cases.

    Cases flip with probability ``psi``; ``delta`` = P(broken) - P(fixed) > 0 is a drop. Sums,
    over the discordant count m ~ Bin(n, psi), the chance that the broken count reaches the
    critical value where `mcnemar_exact` <= alpha. Edge cases: delta = 0 gives the test's size
    (<= alpha); n = 0 -> 0.0; needs |delta| <= psi, 0 < psi <= 1, else ValueError.

    Examples:
        >>> round(exact_power_paired(100, 0.08, 0.08), 3)  # 8% of cases break, none fixed
        0.91
    """
    if n < 0 or not abs(delta) <= psi <= 1 or psi <= 0 or not 0 < alpha < 1:
        raise ValueError(f"need n >= 0, |delta| <= psi in (0, 1], alpha in (0, 1); got {n}, {psi}")
    m = np.arange(n + 1)
    crit = stats.binom.ppf(1 - alpha, m, 0.5) + 1  # smallest k with P[X >= k] <= alpha
    q = (psi + delta) / (2 * psi)  # P(broken | discordant)
    return float(stats.binom.pmf(m, n, psi) @ stats.binom.sf(crit - 1, m, q))


def holm(pvalues: Array) -> np.ndarray:
    """Holm step-down adjusted p-values, in the input order.

    Edge cases: empty input -> empty array; ties are order-independent; values outside [0, 1]
    or NaN -> ValueError.

    Examples:
        >>> holm([0.01, 0.04, 0.03]).tolist()
        [0.03, 0.06, 0.06]
    """
    p = np.asarray(pvalues, dtype=float)
    if p.ndim != 1 or not ((p >= 0) & (p <= 1)).all():
        raise ValueError("pvalues must be a one-dimensional array of numbers in [0, 1]")
    order = np.argsort(p, kind="stable")
    adj = np.minimum(1.0, np.maximum.accumulate((p.size - np.arange(p.size)) * p[order]))
    out = np.empty_like(p)
    out[order] = adj
    return out


def _table(a: Array, b: Array, labels: Array | None) -> np.ndarray:
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim != 1 or a.shape != b.shape or a.size == 0:
        raise ValueError(
            f"a and b must be non-empty 1-d arrays of equal length: {a.shape}, {b.shape}"
        )
    labels = np.unique(np.concatenate([a, b])) if labels is None else np.asarray(labels)
    if np.unique(labels).size != labels.size or not np.isin(np.concatenate([a, b]), labels).all():
        raise ValueError("labels must be distinct and include every label in a and b")
    sorter = np.argsort(labels)
    ia, ib = (sorter[np.searchsorted(labels, x, sorter=sorter)] for x in (a, b))
    k = labels.size
    return np.bincount(ia * k + ib, minlength=k * k).reshape(k, k).astype(float)


def _disagreement(k: int, weights: Weights) -> np.ndarray:
    if weights not in (None, "linear", "quadratic"):
        raise ValueError(f"weights must be None, 'linear' or 'quadratic', got {weights!r}")
    dist = np.abs(np.subtract.outer(np.arange(k), np.arange(k))).astype(float)
    d = {None: dist > 0, "linear": dist, "quadratic": dist**2}[weights].astype(float)
    return d / max(d.max(), 1.0)


def _kappa(tables: np.ndarray, d: np.ndarray) -> np.ndarray:
    p = tables / tables.sum((-2, -1), keepdims=True)
    expected = p.sum(-1)[..., :, None] * p.sum(-2)[..., None, :]
    den = (d * expected).sum((-2, -1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, 1 - (d * p).sum((-2, -1)) / den, np.nan)


def cohen_kappa(a: Array, b: Array, weights: Weights = None, labels: Array | None = None) -> float:
    """Cohen's kappa between two raters, as ``sklearn.metrics.cohen_kappa_score``.

    ``labels`` fixes the category order for weighted kappa (default: sorted labels seen).
    Edge cases: nan when chance disagreement is zero, i.e. both raters give one and the same
    label to every item (agreement is perfect but kappa is 0/0; sklearn also returns nan); a
    class only one rater uses is fine; a single item gives nan if the two agree, else 0.0;
    n = 0, mismatched lengths or labels missing from ``labels`` -> ValueError.

    Examples:
        >>> cohen_kappa(["neg", "pos", "neg", "neu", "pos"], ["neg", "pos", "neg", "neu", "neg"])
        0.6875
    """
    table = _table(a, b, labels)
    return float(_kappa(table, _disagreement(table.shape[0], weights)))


def cohen_kappa_ci(
    a: Array,
    b: Array,
    level: float = 0.95,
    weights: Weights = None,
    method: Literal["bootstrap", "asymptotic"] = "bootstrap",
    iters: int = 2000,
    seed: Seed = 0,
) -> KappaResult:
    """Cohen's kappa with a percentile-bootstrap or asymptotic (normal) confidence interval.

    "asymptotic" uses the Fleiss, Cohen & Everitt (1969) standard error (weighted or not, as in
    ``statsmodels.stats.inter_rater.cohens_kappa``); "bootstrap" resamples items (as multinomial
    counts over the table's cells), drops resamples where kappa is undefined and reports their
    SD as ``se``. The asymptotic interval is not clipped to [-1, 1] (as statsmodels); prefer the
    bootstrap for small n. Edge cases: kappa nan (no variation) -> lo = hi = se = nan; else as
    `cohen_kappa`.

    Examples:
        >>> a, b = [0, 1, 1, 0, 1, 1, 0, 1], [0, 1, 1, 0, 1, 0, 0, 1]
        >>> r = cohen_kappa_ci(a, b, method="asymptotic")
        >>> round(r.kappa, 4), round(r.lo, 4), round(r.hi, 4)
        (0.75, 0.3062, 1.1938)
    """
    _check(level, iters)
    table = _table(a, b, None)
    n, d = int(table.sum()), _disagreement(table.shape[0], weights)
    kappa = float(_kappa(table, d))
    z = float(stats.norm.isf((1 - level) / 2))
    if method == "asymptotic":
        w, p = 1 - d, table / n
        r, c = p.sum(1), p.sum(0)
        pe = r @ w @ c
        wbar = (w @ c)[:, None] + (r @ w)[None, :]
        var = ((p * (w - wbar * (1 - kappa)) ** 2).sum() - (kappa - pe * (1 - kappa)) ** 2) / (
            n * (1 - pe) ** 2
        )
        se = math.sqrt(max(var, 0.0)) if not math.isnan(kappa) else math.nan
        return KappaResult(kappa, kappa - z * se, kappa + z * se, se, n, level, method)
    if method != "bootstrap":
        raise ValueError(f"method must be 'bootstrap' or 'asymptotic', got {method!r}")
    rng, seed_used = _rng(seed)
    cells = table.ravel() / n
    k = table.shape[0]

    def draw(m: int) -> np.ndarray:
        return _kappa(rng.multinomial(n, cells, size=m).reshape(m, k, k).astype(float), d)

    boot = _resample(draw, iters, max(1, _CHUNK_ELEMS // cells.size))
    boot = boot[~np.isnan(boot)]
    if math.isnan(kappa) or boot.size == 0:
        return KappaResult(kappa, math.nan, math.nan, math.nan, n, level, method, iters, seed_used)
    lo, hi = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2])
    sd = float(boot.std(ddof=1)) if boot.size > 1 else 0.0
    return KappaResult(kappa, float(lo), float(hi), sd, n, level, method, iters, seed_used)


def krippendorff_alpha(
    reliability_data: Array, level: Literal["nominal", "ordinal", "interval"] = "nominal"
) -> float:
    """Krippendorff's alpha for numeric ratings shaped (raters, items), NaN where missing.

    Agrees with ``krippendorff.alpha(reliability_data=..., level_of_measurement=level)``.
    Edge cases: an item rated by fewer than two raters is not pairable and is ignored; nan when
    all pairable values are identical (no expected disagreement: 0/0, where the krippendorff
    package raises); ValueError when no item has two ratings, on inf, or if the data is not 2-d.

    Examples:
        >>> round(krippendorff_alpha([[1, 2, 3, 3, np.nan], [1, 2, 3, 4, 4]]), 4)
        0.6957
    """
    x = np.asarray(reliability_data, dtype=float)
    if x.ndim != 2 or np.isinf(x).any():
        raise ValueError(f"reliability_data must be finite (raters, items), got shape {x.shape}")
    seen = ~np.isnan(x)
    values = np.unique(x[seen])
    v = values.size
    item = np.broadcast_to(np.arange(x.shape[1]), x.shape)[seen]
    counts = np.bincount(item * v + np.searchsorted(values, x[seen]), minlength=x.shape[1] * v)
    counts = counts.reshape(x.shape[1], v).astype(float)
    m = counts.sum(1)
    counts, m = counts[m >= 2], m[m >= 2]
    if m.size == 0:
        raise ValueError("no item has ratings from two raters, so nothing can be compared")
    scaled = counts / (m - 1)[:, None]
    o = scaled.T @ counts - np.diag(scaled.sum(0))  # coincidence matrix
    n_v = o.sum(0)
    if level == "nominal":
        delta = 1.0 - np.eye(v)
    elif level == "interval":
        delta = np.subtract.outer(values, values) ** 2
    elif level == "ordinal":
        mid = np.cumsum(n_v) - n_v / 2
        delta = np.subtract.outer(mid, mid) ** 2
    else:
        raise ValueError(f"level must be nominal, ordinal or interval, got {level!r}")
    expected = (np.outer(n_v, n_v) - np.diag(n_v)) / (n_v.sum() - 1)
    den = (expected * delta).sum()
    return float(1 - (o * delta).sum() / den) if den > 0 else math.nan


def fleiss_kappa(table: Array) -> float:
    """Fleiss' kappa from an (items, categories) table of rating counts, equal raters per item.

    Edge cases: nan when every rating falls in one category; rows with unequal totals or fewer
    than two raters -> ValueError.

    Examples:
        >>> round(fleiss_kappa([[3, 0], [0, 3], [2, 1]]), 4)
        0.55
    """
    t = np.asarray(table, dtype=float)
    r = t.sum(1) if t.ndim == 2 else np.array([])
    if r.size == 0 or (r != r[0]).any() or r[0] < 2:
        raise ValueError("table must be (items, categories) with the same number (>= 2) of raters")
    p_cat = t.sum(0) / t.sum()
    p_bar = (((t * t).sum(1) - r) / (r * (r - 1))).mean()
    pe = float(p_cat @ p_cat)
    return float((p_bar - pe) / (1 - pe)) if pe < 1 else math.nan
