"""Intervals for proportions and for the paired difference of two pass rates, valid at small n.

A pass/fail slice is summarised by its counts: ``n`` cases, ``broken`` (pass -> fail) and
``fixed`` (fail -> pass); the paired difference is ``diff = (fixed - broken) / n`` (candidate
minus baseline). `paired_diff_interval` gives it an interval with close to nominal coverage at
small n (Tango's score interval) that never claims more than the exact McNemar test does: where
the one-sided exact test at (1 - level) / 2 finds no evidence, the interval reaches 0.

The percentile bootstrap does not do this on small slices: 4 broken, 0 fixed of 8 cases (exact
one-sided p = 0.0625) gets a bootstrap upper bound of -12.5 points, and no flips at all get the
point interval [0, 0]:

>>> r = paired_diff_interval(broken=4, fixed=0, n=8)
>>> r.diff, round(r.lo, 3), r.hi, r.method
(-0.5, -0.785, 0.0, 'tango-exact')
>>> lo, hi = paired_diff_interval(0, 0, 8)
>>> round(lo, 3), round(hi, 3)
(-0.324, 0.324)
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from evalkit.stats._base import Interval, check
from evalkit.stats._dist import beta_isf, beta_ppf, norm_isf
from evalkit.stats.exact import mcnemar_exact

PairedMethod = Literal["tango", "tango-exact"]
_EPS = 1e-12


@dataclass(frozen=True, slots=True)
class PairedInterval:
    """An interval for ``diff = (fixed - broken) / n``, named by ``method``; unpacks as lo, hi."""

    diff: float
    lo: float
    hi: float
    level: float
    n: int
    broken: int
    fixed: int
    method: str

    def __iter__(self) -> Iterator[float]:
        return iter((self.lo, self.hi))


def wilson_interval(k: int, n: int, level: float = 0.95) -> Interval:
    """Wilson score interval for a proportion of ``k`` successes in ``n`` trials.

    Edge cases: k = 0 -> lo = 0; k = n -> hi = 1; n = 1 is allowed; n = 0 -> ValueError.

    Examples:
        >>> lo, hi = wilson_interval(8, 10)
        >>> round(lo, 4), round(hi, 4)
        (0.4902, 0.9433)
    """
    check(level, k=k, n=n)
    z = norm_isf((1 - level) / 2)
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
    check(level, k=k, n=n)
    a = (1 - level) / 2
    lo = 0.0 if k == 0 else beta_ppf(a, k, n - k + 1)
    return Interval(lo, 1.0 if k == n else beta_isf(a, k + 1, n - k), level)


def tango_score(fixed: int, broken: int, n: int, delta: float) -> float:
    """Tango's (1998) score statistic for H0: P(fixed) - P(broken) = ``delta``.

    (fixed - broken - n delta) / sqrt(n (2 q + delta (1 - delta))), with q the maximum-likelihood
    P(broken) under H0 (the root of a quadratic). At delta = 0 it is McNemar's asymptotic
    statistic (fixed - broken) / sqrt(fixed + broken). Decreasing in delta.

    Examples:
        >>> tango_score(0, 4, 8, 0.0)
        -2.0
    """
    w = -fixed - broken + (2 * n - fixed + broken) * delta
    q = (math.sqrt(max(w * w + 8 * n * broken * delta * (1 - delta), 0.0)) - w) / (4 * n)
    num, var = fixed - broken - n * delta, n * (2 * q + delta * (1 - delta))
    if var <= 0:
        return 0.0 if num == 0 else math.copysign(math.inf, num)
    return num / math.sqrt(var)


def _tango(broken: int, fixed: int, n: int, level: float) -> tuple[float, float]:
    from scipy import optimize  # here: the proportion intervals never load it

    z = norm_isf((1 - level) / 2)

    def score(d: float) -> float:
        return tango_score(fixed, broken, n, d)

    a, b = -1 + _EPS, 1 - _EPS
    lo = optimize.brentq(lambda d: score(d) - z, a, b, xtol=1e-13) if score(a) > z else -1.0
    hi = optimize.brentq(lambda d: score(d) + z, a, b, xtol=1e-13) if score(b) < -z else 1.0
    return float(lo), float(hi)


def paired_diff_interval(
    broken: int, fixed: int, n: int, level: float = 0.95, method: PairedMethod = "tango-exact"
) -> PairedInterval:
    """Interval for the paired difference of pass rates, (fixed - broken) / n.

    "tango" is Tango's asymptotic score interval (Tango 1998; recommended for small samples by
    Fagerland, Lydersen & Laake 2014): {delta : |tango_score(delta)| < z}. "tango-exact" (the
    default, what slices and the gate use) is the same interval, reaching 0 on a side where the
    one-sided exact McNemar test at (1 - level) / 2 does not reject: ``hi < 0`` only when
    `mcnemar_exact` (broken, fixed, "greater") <= (1 - level) / 2, ``lo > 0`` only when the
    "less" p is; widening only adds coverage. So an interval block (hi < -tolerance) never fires
    where the exact test at alpha >= (1 - level) / 2 sees no evidence.

    Edge cases: n = 0, negative counts or broken + fixed > n -> ValueError; no flips -> an
    interval around 0 whose width shrinks with n (never the bootstrap's point [0, 0]); all
    cases broken -> lo = -1.

    Examples:
        >>> r = paired_diff_interval(8, 0, 100)  # seed 000: 8 of 100 billing cases broken
        >>> round(r.hi, 4), round(paired_diff_interval(5, 0, 8).hi, 4)
        (-0.04, 0.0)
        >>> lo, hi = paired_diff_interval(7, 1, 21, method="tango")  # Fagerland et al.'s example
        >>> round(lo, 3), round(hi, 3)
        (-0.517, -0.026)
    """
    if broken < 0 or fixed < 0 or broken + fixed > n:
        raise ValueError(f"need 0 <= broken, fixed and broken + fixed <= n; got {broken}, {fixed}")
    check(level, n=n)
    if method not in ("tango", "tango-exact"):
        raise ValueError(f"method must be 'tango' or 'tango-exact', got {method!r}")
    lo, hi = _tango(broken, fixed, n, level)
    if method == "tango-exact":
        side = (1 - level) / 2
        if hi < 0 and mcnemar_exact(broken, fixed, "greater") > side:
            hi = 0.0
        if lo > 0 and mcnemar_exact(broken, fixed, "less") > side:
            lo = 0.0
    return PairedInterval((fixed - broken) / n, lo, hi, level, n, broken, fixed, method)
