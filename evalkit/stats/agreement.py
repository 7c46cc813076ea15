"""Agreement between raters: Cohen's kappa (weighted, with a CI on the declared scale),
Krippendorff's alpha and Fleiss' kappa."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from evalkit.stats._base import CHUNK_ELEMS, Array, Seed, check, resample, rng_from
from evalkit.stats._dist import norm_isf

Weights = Literal["linear", "quadratic"] | None


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
    scaled: np.ndarray = d / max(d.max(), 1.0)
    return scaled


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
    labels: Array | None = None,
) -> KappaResult:
    """Cohen's kappa with a percentile-bootstrap or asymptotic (normal) confidence interval.

    "asymptotic" uses the Fleiss, Cohen & Everitt (1969) standard error (weighted or not, as in
    ``statsmodels.stats.inter_rater.cohens_kappa``); "bootstrap" resamples items (as multinomial
    counts over the table's cells), drops resamples where kappa is undefined and reports their
    SD as ``se``. The asymptotic interval is not clipped to [-1, 1] (as statsmodels); prefer the
    bootstrap for small n. ``labels`` declares the scale (default: the labels seen): a weighted
    kappa on a 1-5 scale where the raters used only 1, 2 and 5 must weigh 2 vs 5 as three steps,
    so pass the full scale; the interval uses it too. Edge cases: kappa nan (no variation) or a
    single item (no interval from one item) -> lo = hi = se = nan; else as `cohen_kappa`.

    Examples:
        >>> a, b = [0, 1, 1, 0, 1, 1, 0, 1], [0, 1, 1, 0, 1, 0, 0, 1]
        >>> r = cohen_kappa_ci(a, b, method="asymptotic")
        >>> round(r.kappa, 4), round(r.lo, 4), round(r.hi, 4)
        (0.75, 0.3062, 1.1938)
        >>> h, j = [5, 5, 2, 1, 1, 2], [5, 2, 5, 1, 1, 2]  # a 1-5 scale; only 1, 2, 5 used
        >>> r = cohen_kappa_ci(h, j, weights="quadratic", labels=[1, 2, 3, 4, 5], iters=200)
        >>> round(r.kappa, 2), round(cohen_kappa(h, j, weights="quadratic"), 2)
        (0.48, 0.75)
    """
    check(level, iters)
    if method not in ("bootstrap", "asymptotic"):
        raise ValueError(f"method must be 'bootstrap' or 'asymptotic', got {method!r}")
    table = _table(a, b, labels)
    n, d = int(table.sum()), _disagreement(table.shape[0], weights)
    kappa = float(_kappa(table, d))
    z = norm_isf((1 - level) / 2)
    if method == "asymptotic":
        w, p = 1 - d, table / n
        r, c = p.sum(1), p.sum(0)
        pe = r @ w @ c
        wbar = (w @ c)[:, None] + (r @ w)[None, :]
        var = ((p * (w - wbar * (1 - kappa)) ** 2).sum() - (kappa - pe * (1 - kappa)) ** 2) / (
            n * (1 - pe) ** 2
        )
        se = math.sqrt(max(var, 0.0)) if not math.isnan(kappa) else math.nan
        if n < 2:
            return KappaResult(kappa, math.nan, math.nan, math.nan, n, level, method)
        return KappaResult(kappa, kappa - z * se, kappa + z * se, se, n, level, method)
    rng, seed_used = rng_from(seed)
    cells = table.ravel() / n
    k = table.shape[0]

    def draw(m: int) -> np.ndarray:
        return _kappa(rng.multinomial(n, cells, size=m).reshape(m, k, k).astype(float), d)

    boot = resample(draw, iters, max(1, CHUNK_ELEMS // cells.size))
    boot = boot[~np.isnan(boot)]
    if math.isnan(kappa) or boot.size == 0 or n < 2:
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
