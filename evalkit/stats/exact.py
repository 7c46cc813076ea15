"""Exact tests on discordant pairs: McNemar (with mid-p), the fewest flips that can gate, Holm."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evalkit.stats._base import Alternative, Array


@dataclass(frozen=True, slots=True, kw_only=True)
class McNemarResult:
    """Exact McNemar test on the discordant pairs (see `mcnemar_exact`)."""

    broken: int
    fixed: int
    n_discordant: int
    p_value: float
    alternative: Alternative
    mid_p: bool


def mcnemar_exact(
    broken: int, fixed: int, alternative: Alternative = "greater", mid_p: bool = False
) -> float:
    """Exact McNemar p-value: a binomial test of ``broken`` among ``broken + fixed`` at 1/2.

    "greater" (the candidate breaks more than it fixes) is P[X >= broken], X ~ Bin(broken + fixed,
    1/2); "less" is P[X <= broken]; "two-sided" is min(1, 2 * min tail), as scipy's binomtest.
    ``mid_p`` counts the observed outcome at half weight: one-sided, minus P(X = broken) / 2;
    two-sided, P(|X - m/2| > |broken - m/2|) + P(|X - m/2| = |broken - m/2|) / 2 (Fagerland,
    Lydersen & Laake 2013), i.e. the exact p minus P(X = b) when b != c, and 1 - P(X = b) / 2 when
    b = c (there only one outcome is as extreme). Edge cases: no discordant pairs -> 1.0 (with or
    without mid_p); negative counts -> ValueError.

    Examples:
        >>> mcnemar_exact(4, 0), mcnemar_exact(5, 0), mcnemar_exact(0, 0)
        (0.0625, 0.03125, 1.0)
        >>> round(mcnemar_exact(8, 2, alternative="two-sided"), 4)
        0.1094
        >>> mcnemar_exact(1, 1, alternative="two-sided", mid_p=True)
        0.75
    """
    if broken < 0 or fixed < 0:
        raise ValueError(f"counts must be non-negative, got broken={broken}, fixed={fixed}")
    if alternative not in ("greater", "less", "two-sided"):
        raise ValueError(f"alternative must be greater, less or two-sided, got {alternative!r}")
    n = broken + fixed
    if n == 0:
        return 1.0
    from evalkit.stats import _dist  # here: exact_min_flips and holm never load scipy

    half = 0.5 * _dist.half_point(broken, n) if mid_p else 0.0
    upper = _dist.half_upper(broken, n) - half
    lower = _dist.half_lower(broken, n) - half
    if alternative == "two-sided" and mid_p and broken == fixed:
        return 1.0 - half
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
    return McNemarResult(
        broken=broken,
        fixed=fixed,
        n_discordant=broken + fixed,
        p_value=p,
        alternative=alternative,
        mid_p=mid_p,
    )


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
