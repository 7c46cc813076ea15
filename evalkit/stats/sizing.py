"""How many cases (and replays) a comparison needs, and what a given n can detect.

d = the change to detect; z_a = z_{1-alpha} one-sided or z_{1-alpha/2} two-sided; z_b = z_power.

- paired, Connor (1987), `required_n_paired`: n = [z_a sqrt(psi) + z_b sqrt(psi - d^2)]^2 / d^2,
  psi = the fraction of cases that flip either way (null variance psi, alternative psi - d^2);
- paired, Wald (discordance), `required_n_paired_wald`: n = (z_a + z_b)^2 (psi - d^2) / d^2, the
  Wald test's variance under both hypotheses (a little smaller than Connor's);
- unpaired, equal rates, `required_n_unpaired` (alias `required_n`): per arm at pass rate p,
  n = (z_a + z_b)^2 2 p (1 - p) / d^2;
- unpaired, two rates p1 -> p2, `required_n_two_rates`: per arm, pooled variance under the null
  and each arm's own under the alternative (as statsmodels' samplesize_proportions_2indep_onetail);
- with replays, `required_n_replays` (Miller 2024, eq. 9): cases when each is run K times,
  n = (z_a + z_b)^2 (omega^2 + sigma_a^2 / K_a + sigma_b^2 / K_b) / d^2.

Pairing pays when few cases flip:

>>> required_n_unpaired(0.9, 0.05), required_n_paired(psi=0.06, delta=0.05)
(566, 186)
"""

from __future__ import annotations

import math

import numpy as np

from evalkit.stats._base import Sides
from evalkit.stats._dist import binom_pmf, binom_sf, half_critical, norm_isf, norm_ppf


def _z(alpha: float, power: float, alternative: Sides) -> tuple[float, float]:
    if not (0 < alpha < 1 and 0 < power < 1):
        raise ValueError(f"alpha and power must be in (0, 1), got {alpha}, {power}")
    if alternative not in ("one-sided", "two-sided"):
        raise ValueError(f"alternative must be one-sided or two-sided, got {alternative!r}")
    return norm_isf(alpha if alternative == "one-sided" else alpha / 2), norm_ppf(power)


def _connor(psi: float, delta: float, za: float, zb: float) -> float:
    return (za * math.sqrt(psi) + zb * math.sqrt(psi - delta * delta)) ** 2 / (delta * delta)


def _ceil(x: float) -> int:
    return math.ceil(x * (1 - 1e-12))  # an exact integer must not round up through float noise


def _paired_args(psi: float, delta: float) -> None:
    if not 0 < abs(delta) <= psi <= 1:
        raise ValueError(f"need 0 < |delta| <= psi <= 1, got psi={psi}, delta={delta}")


def required_n_paired(
    psi: float,
    delta: float,
    alpha: float = 0.05,
    power: float = 0.8,
    alternative: Sides = "two-sided",
) -> int:
    """Paired cases for McNemar to detect a net change ``delta``, Connor's (1987) form, rounded up.

    ``psi`` = P(broken) + P(fixed), the flip rate; ``delta`` = P(broken) - P(fixed), sign ignored.
    Compare `required_n_paired_wald` and `required_n_unpaired` (module docstring). Edge cases:
    needs 0 < |delta| <= psi <= 1, else ValueError; psi = |delta| (every flip one way) is allowed.

    Examples:
        >>> required_n_paired(0.10, 0.05), required_n_paired(0.10, 0.05, alternative="one-sided")
        (312, 246)
    """
    _paired_args(psi, delta)
    return _ceil(_connor(psi, delta, *_z(alpha, power, alternative)))


def required_n_paired_wald(
    psi: float,
    delta: float,
    alpha: float = 0.05,
    power: float = 0.8,
    alternative: Sides = "two-sided",
) -> int:
    """Paired cases for the Wald (discordance) test of a net change ``delta``, rounded up.

    n = (z_a + z_b)^2 (psi - delta^2) / delta^2: the variance of the mean paired difference,
    (psi - delta^2) / n, under both hypotheses. Never more than Connor's form, which uses the
    larger null variance psi; the two agree as delta^2 / psi -> 0. Edge cases: as
    `required_n_paired`.

    Examples:
        >>> required_n_paired_wald(0.10, 0.05), required_n_paired(0.10, 0.05)
        (307, 312)
    """
    _paired_args(psi, delta)
    za, zb = _z(alpha, power, alternative)
    return max(1, _ceil((za + zb) ** 2 * (psi - delta * delta) / (delta * delta)))


def required_n_unpaired(
    p: float,
    delta: float,
    alpha: float = 0.05,
    power: float = 0.8,
    alternative: Sides = "two-sided",
) -> int:
    """Cases per arm for two independent samples to detect a change ``delta`` in pass rate ``p``.

    The equal-rate form: n = (z_a + z_b)^2 * 2 p (1 - p) / delta^2 rounded up; 2 (z_a + z_b)^2 is
    the rule of thumb's "15.7". For two different rates use `required_n_two_rates`. Edge cases:
    needs 0 < p < 1 and 0 < |delta| < 1, else ValueError.

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


def required_n_two_rates(
    p1: float,
    p2: float,
    alpha: float = 0.05,
    power: float = 0.8,
    alternative: Sides = "two-sided",
) -> int:
    """Cases per arm for two independent samples to tell pass rate ``p1`` from ``p2``.

    n = [z_a sqrt(2 pbar (1 - pbar)) + z_b sqrt(p1 (1 - p1) + p2 (1 - p2))]^2 / (p1 - p2)^2,
    pbar = (p1 + p2) / 2: the pooled z-test's variance under the null, each arm's own under the
    alternative (Fleiss, without continuity correction; statsmodels'
    ``samplesize_proportions_2indep_onetail``). Edge cases: p1 = p2 or a rate outside [0, 1]
    -> ValueError; a rate of 0 or 1 is allowed when the other is not.

    Examples:
        >>> required_n_two_rates(0.9, 0.85), required_n_unpaired(0.875, 0.05)
        (686, 687)
    """
    if not (0 <= p1 <= 1 and 0 <= p2 <= 1) or p1 == p2:
        raise ValueError(f"need two different rates in [0, 1], got p1={p1}, p2={p2}")
    za, zb = _z(alpha, power, alternative)
    pbar = (p1 + p2) / 2
    root = za * math.sqrt(2 * pbar * (1 - pbar)) + zb * math.sqrt(p1 * (1 - p1) + p2 * (1 - p2))
    return _ceil(root**2 / (p1 - p2) ** 2)


def required_n_replays(
    delta: float,
    omega2: float,
    sigma2: float | tuple[float, float] = 0.0,
    replays: int | tuple[int, int] = 1,
    alpha: float = 0.05,
    power: float = 0.8,
    alternative: Sides = "two-sided",
) -> int:
    """Paired cases when each case is run ``replays`` times (Miller 2024, "Adding Error Bars to
    Evals", eq. 9), rounded up: n = (z_a + z_b)^2 (omega2 + sigma_a^2 / K_a + sigma_b^2 / K_b)
    / delta^2.

    ``omega2`` is the variance across cases of the difference in per-case *expected* scores;
    ``sigma2`` the mean within-case variance of one replay's score (for pass/fail, the mean of
    p_i (1 - p_i)), one value for both systems or (baseline, candidate); ``replays`` K likewise.
    More replays shrink only the within-case term: past K where sigma^2 / K << omega2 they buy
    nothing, and the answer is more cases. Edge cases: delta = 0, negative variances or K < 1
    -> ValueError; omega2 = sigma2 = 0 -> 1.

    Examples:
        >>> required_n_replays(0.05, omega2=0.04, sigma2=0.1, replays=1)
        754
        >>> required_n_replays(0.05, omega2=0.04, sigma2=0.1, replays=5)
        252
    """
    s_a, s_b = sigma2 if isinstance(sigma2, tuple) else (sigma2, sigma2)
    k_a, k_b = replays if isinstance(replays, tuple) else (replays, replays)
    if delta == 0 or min(omega2, s_a, s_b) < 0 or min(k_a, k_b) < 1:
        raise ValueError(
            f"need delta != 0, variances >= 0 and replays >= 1; got {delta}, {omega2}, "
            f"{sigma2}, {replays}"
        )
    za, zb = _z(alpha, power, alternative)
    var = omega2 + s_a / k_a + s_b / k_b
    return max(1, _ceil((za + zb) ** 2 * var / (delta * delta)))


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
    from scipy import optimize  # here: the sample sizes never load it

    gap = lambda d: _connor(psi, d, za, zb) - n  # noqa: E731  (decreasing in d)
    return float(optimize.brentq(gap, psi * 1e-9, psi, xtol=1e-15, rtol=1e-15))


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
    crit = np.array(half_critical(n, alpha))  # fewest broken of m where mcnemar_exact <= alpha
    q = (psi + delta) / (2 * psi)  # P(broken | discordant)
    return float(binom_pmf(m, n, psi) @ binom_sf(crit - 1, m, q))
