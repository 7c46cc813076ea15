"""Power and sample size for the test the gate runs: the one-sided exact McNemar test on each
case's verdict, collapsed from its replays by majority, over cases that may come in groups.

The model, per case (independent cases, or groups of correlated ones):

* the truth: a case breaks with probability ``(psi + delta) / 2`` and is fixed with probability
  ``(psi - delta) / 2`` (``psi`` the flip fraction, ``delta`` the net drop); the baseline passes
  with probability ``pass_rate``;
* each replay's verdict is the truth seen through run-to-run noise: a replay is wrong with
  probability ``e`` such that two runs of an unchanged system disagree on a case with
  probability ``flake`` (2 e (1 - e) = flake); a case's verdict is the majority of its
  ``replays`` (ties fail, as the ``majority`` pass rule): `majority_error`;
* so the *observed* verdicts flip with `observed_flips` (psi', delta'), and the exact power at
  n cases is the enumeration over discordant counts (`evalkit.stats.sizing.exact_power_paired`)
  at those rates;
* declared case groups: the variance of the mean paired difference grows by the design effect
  ``1 + (m - 1) icc`` (Kish; m = sum m_g^2 / sum m_g, the size-weighted group size), so the
  power at n grouped cases is taken at the effective n = n / deff (`design_effect`, `icc_oneway`).

`required_n_exact` is the smallest n from which that exact power stays at or above the target
(the exact power is a saw-tooth in n: a single n past the target can fall back under it).

The majority is not always more stable than one replay's mean: for a case whose per-replay
pass rate is near 0.5 the majority of K replays is a coin toss whatever K (variance 1/4), while
the mean of K replays has variance 1/(4K). The majority only pays when replays mostly agree
(small ``e``); this model assumes that (one ``e`` for every case).

>>> n = required_n_exact(0.10, 0.05, flake=0.05)
>>> n, exact_power_gate(n, 0.10, 0.05, flake=0.05) >= 0.8
(413, True)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from evalkit.stats._base import Array, vector


def replay_error(flake: float) -> float:
    """Per-replay error e with 2 e (1 - e) = ``flake`` (two runs disagree with probability flake).

    Examples:
        >>> round(replay_error(0.05), 4), replay_error(0.0)
        (0.0257, 0.0)
    """
    if not 0 <= flake <= 0.5:
        raise ValueError(f"flake rate must be in [0, 0.5], got {flake}")
    return (1 - math.sqrt(1 - 2 * flake)) / 2


def majority_error(e: float, replays: int) -> tuple[float, float]:
    """(P(verdict fails | the case truly passes), P(verdict passes | it truly fails)) for the
    majority of ``replays`` replays, each wrong with probability ``e``; a tie fails.

    Examples:
        >>> [round(x, 4) for x in majority_error(0.1, 5)]
        [0.0086, 0.0086]
        >>> [round(x, 4) for x in majority_error(0.1, 2)]   # a 1-1 tie fails a true pass
        [0.19, 0.01]
    """
    if not 0 <= e <= 1 or replays < 1:
        raise ValueError(f"need 0 <= e <= 1 and replays >= 1, got {e}, {replays}")
    k = np.arange(replays + 1)
    pmf = np.array([math.comb(replays, int(j)) for j in k]) * e**k * (1 - e) ** (replays - k)
    wrong_pass = float(pmf[2 * k >= replays].sum())  # >= half wrong: not a strict majority pass
    wrong_fail = float(pmf[2 * k > replays].sum())  # > half wrong: a strict majority passes
    return wrong_pass, wrong_fail


def observed_flips(
    psi: float, delta: float, pass_rate: float = 0.85, error: tuple[float, float] = (0.0, 0.0)
) -> tuple[float, float]:
    """(psi', delta'): the flip fraction and net drop of the *observed* verdicts when each side's
    verdict is wrong with probabilities ``error`` = (fails a true pass, passes a true fail).

    Examples:
        >>> [round(x, 4) for x in observed_flips(0.10, 0.05)]
        [0.1, 0.05]
        >>> [round(x, 4) for x in observed_flips(0.10, 0.05, 0.85, (0.05, 0.05))]
        [0.176, 0.045]
    """
    if error == (0.0, 0.0):
        return psi, delta  # verdicts seen as they are: nothing to mix
    broken, fixed = (psi + delta) / 2, (psi - delta) / 2
    both_pass, both_fail = pass_rate - broken, 1 - pass_rate - fixed
    if min(broken, fixed, both_pass, both_fail) < -1e-12:
        raise ValueError(
            f"psi={psi}, delta={delta} do not fit a pass rate of {pass_rate}: need "
            "(psi + delta) / 2 <= pass_rate and (psi - delta) / 2 <= 1 - pass_rate"
        )
    e1, e0 = error
    seen_pass = {True: 1 - e1, False: e0}  # P(observed pass | true verdict)
    cats = ((True, False, broken), (False, True, fixed), (True, True, both_pass),
            (False, False, both_fail))  # fmt: skip
    ob = sum(p * seen_pass[b] * (1 - seen_pass[c]) for b, c, p in cats)
    of = sum(p * (1 - seen_pass[b]) * seen_pass[c] for b, c, p in cats)
    return ob + of, ob - of


def design_effect(group_sizes: Sequence[int] | Array, icc: float) -> float:
    """Kish's design effect 1 + (m - 1) icc, m = sum m_g^2 / sum m_g over the groups' sizes
    (an ungrouped case is a group of 1). icc < 0 is taken as 0 (groups never help here).

    Examples:
        >>> design_effect([50] * 8, 0.1), design_effect([1] * 400, 0.5)
        (5.9, 1.0)
    """
    m = np.asarray(group_sizes, dtype=float)
    if m.size == 0 or (m < 1).any():
        raise ValueError("need at least one group, each of size >= 1")
    mbar = float((m * m).sum() / m.sum())
    return 1.0 + (mbar - 1.0) * max(0.0, icc)


def icc_oneway(values: Array, groups: Sequence[str] | Array) -> float:
    """The one-way ANOVA estimator of the intra-group correlation of ``values``:
    (MSB - MSW) / (MSB + (m0 - 1) MSW), m0 = (N - sum m_g^2 / N) / (k - 1); clipped to [0, 1].
    nan with fewer than 2 groups or no group of 2 or more; 0 when the values do not vary.

    Examples:
        >>> icc_oneway([1, 1, 0, 0, 1, 1, 0, 0], ["a", "a", "b", "b", "c", "c", "d", "d"])
        1.0
    """
    y = vector(values, "values")
    labels = np.asarray(groups)
    if labels.size != y.size:
        raise ValueError(f"values and groups differ in length: {y.size} and {labels.size}")
    _, inverse, sizes = np.unique(labels, return_inverse=True, return_counts=True)
    k, big_n = sizes.size, y.size
    if k < 2 or sizes.max() < 2 or big_n <= k:
        return math.nan
    if np.all(y == y[0]):
        return 0.0
    means = np.bincount(inverse, y) / sizes
    ssb = float((sizes * (means - y.mean()) ** 2).sum())
    ssw = float(((y - means[inverse]) ** 2).sum())
    msb, msw = ssb / (k - 1), ssw / (big_n - k)
    m0 = (big_n - float((sizes**2).sum()) / big_n) / (k - 1)
    denom = msb + (m0 - 1) * msw
    return float(min(1.0, max(0.0, (msb - msw) / denom))) if denom > 0 else 0.0


def _flips(
    psi: float, delta: float, replays: int, flake: float, pass_rate: float
) -> tuple[float, float]:
    return observed_flips(psi, delta, pass_rate, majority_error(replay_error(flake), replays))


def exact_power_gate(
    n: int,
    psi: float,
    delta: float,
    alpha: float = 0.05,
    *,
    replays: int = 1,
    flake: float = 0.0,
    pass_rate: float = 0.85,
    deff: float = 1.0,
) -> float:
    """Exact power of the gate's one-sided exact McNemar test on ``n`` cases (module docstring):
    replays collapsed by majority, verdict noise ``flake``, design effect ``deff`` (power at
    floor(n / deff) cases).

    Examples:
        >>> round(exact_power_gate(365, 0.10, 0.05, flake=0.05), 3)   # "365 cases" at 1 replay
        0.751
    """
    from evalkit.stats.sizing import exact_power_paired

    if deff < 1:
        raise ValueError(f"design effect must be >= 1, got {deff}")
    psi_o, delta_o = _flips(psi, delta, replays, flake, pass_rate)
    return exact_power_paired(int(n / deff), psi_o, delta_o, alpha)


class _PowerCurve:
    """Exact power of the one-sided exact McNemar test at many n for one (psi, delta, alpha):
    the critical count of each discordant total m and the chance of reaching it do not depend on
    n, so they are computed once (up to the largest n asked, doubling) and each n costs one
    binomial pmf."""

    def __init__(self, psi: float, delta: float, alpha: float) -> None:
        self.psi, self.q, self.alpha = psi, (psi + delta) / (2 * psi), alpha
        self.tail = np.zeros(0)

    def _grow(self, n: int) -> None:
        from evalkit.stats._dist import binom_sf, half_critical

        size = max(2 * len(self.tail), n + 1, 256)
        crit = np.array(half_critical(size - 1, self.alpha))
        self.tail = binom_sf(crit - 1, np.arange(size), self.q)

    def __call__(self, n: int) -> float:
        from evalkit.stats._dist import binom_pmf

        if n + 1 > len(self.tail):
            self._grow(n)
        return float(binom_pmf(np.arange(n + 1), n, self.psi) @ self.tail[: n + 1])


@lru_cache(maxsize=256)
def _required(
    psi_o: float, delta_o: float, alpha: float, power: float, deff: float, n_max: int
) -> int:
    from evalkit.stats.sizing import required_n_paired

    curve = _PowerCurve(psi_o, delta_o, alpha)

    def ok(m: int) -> bool:
        return curve(m) >= power

    start = required_n_paired(psi_o, delta_o, alpha, power, "one-sided")  # Connor: a first guess
    m = max(1, int(0.8 * start))
    while not ok(m):
        m += max(1, m // 50)
        if m > n_max:
            raise ValueError(f"more than {n_max} cases needed")
    while m > 1 and ok(m - 1):  # back to the first n past the target ...
        m -= 1
    while True:  # ... from which it stays past it: jump past the last dip in the window
        span = 20 + int(2 * math.sqrt(m))
        dips = [j for j in range(m, m + span) if not ok(j)]
        if not dips:
            break
        m = dips[-1] + 1
        if m > n_max:
            raise ValueError(f"more than {n_max} cases needed")
    return math.ceil(m * deff)


def required_n_exact(
    psi: float,
    delta: float,
    alpha: float = 0.05,
    power: float = 0.8,
    *,
    replays: int = 1,
    flake: float = 0.0,
    pass_rate: float = 0.85,
    deff: float = 1.0,
    n_max: int = 1_000_000,
) -> int:
    """Cases for the gate's one-sided exact McNemar test to reach ``power`` against a net drop
    ``delta`` at flip fraction ``psi`` (module docstring): the smallest n from which the exact
    power stays at or above ``power`` (checked over the next max(20, n/10) values), times the
    design effect.

    Examples:
        >>> required_n_exact(0.02, 0.02)   # every flip a break: the gate's "no flips seen" case
        335
        >>> required_n_exact(0.10, 0.05, flake=0.05, replays=5) < required_n_exact(
        ...     0.10, 0.05, flake=0.05)
        True
    """
    if not 0 < delta <= psi <= 1 or deff < 1:
        raise ValueError(f"need 0 < delta <= psi <= 1 and deff >= 1, got {psi}, {delta}, {deff}")
    psi_o, delta_o = _flips(psi, delta, replays, flake, pass_rate)
    return _required(psi_o, delta_o, alpha, power, deff, n_max)


@lru_cache(maxsize=1024)
def min_detectable_collapse(n: int, alpha: float = 0.05, power: float = 0.8) -> float | None:
    """Smallest drop (in steps of 1 point, every flip a break) that the gate's exact one-sided
    McNemar test detects with ``power`` on ``n`` cases; None when even 100 points is not enough.

    Examples:
        >>> min_detectable_collapse(13), min_detectable_collapse(6), min_detectable_collapse(4)
        (0.47, 0.87, None)
    """
    from evalkit.stats.sizing import exact_power_paired

    for drop in np.arange(1, 101) / 100:
        if n and exact_power_paired(n, float(drop), float(drop), alpha) >= power:
            return float(drop)
    return None
