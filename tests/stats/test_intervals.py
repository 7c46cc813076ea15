"""evalkit.stats.intervals: proportion intervals against statsmodels; the paired small-n interval
against a numerical score-test inversion, exact coverage and the exact McNemar test."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
from scipy import stats as sps

from evalkit import stats
from evalkit.stats import (
    Interval,
    clopper_pearson_interval,
    paired_diff_interval,
    wilson_interval,
)
from evalkit.stats import intervals as module


def test_docstring_examples_run() -> None:
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 5 and result.failed == 0


# --- proportion intervals --------------------------------------------------------------------


@pytest.mark.parametrize("level", [0.8, 0.9, 0.95, 0.99])
def test_intervals_match_statsmodels(level: float) -> None:
    from statsmodels.stats.proportion import proportion_confint

    pairs = [
        (k, n) for n in [*range(1, 41), 99, 250, 1000, 12345] for k in {0, 1, n // 3, n - 1, n}
    ]
    pairs += [(k, 17) for k in range(18)]
    for k, n in pairs:
        for ours, method in ((wilson_interval, "wilson"), (clopper_pearson_interval, "beta")):
            ref = proportion_confint(k, n, alpha=1 - level, method=method)
            got = ours(k, n, level)
            assert (got.lo, got.hi) == pytest.approx(ref, abs=1e-10), (k, n, method)
            assert 0.0 <= got.lo <= k / n <= got.hi <= 1.0


def test_interval_edges_and_unpacking() -> None:
    lo, hi = wilson_interval(0, 1)
    assert lo == 0.0 and 0 < hi < 1
    assert clopper_pearson_interval(5, 5).hi == 1.0
    iv = clopper_pearson_interval(3, 10, 0.9)
    assert isinstance(iv, Interval) and tuple(iv) == (iv.lo, iv.hi) and iv.level == 0.9
    assert clopper_pearson_interval(3, 10).hi - clopper_pearson_interval(3, 10).lo > (
        wilson_interval(3, 10).hi - wilson_interval(3, 10).lo
    )
    for bad in [(0, 0), (3, 2), (-1, 5)]:
        with pytest.raises(ValueError):
            wilson_interval(*bad)
        with pytest.raises(ValueError):
            clopper_pearson_interval(*bad)


# --- the paired difference at small n (issue 13, item 1) --------------------------------------


def _score_reference(broken: int, fixed: int, n: int, delta: float) -> float:
    """Tango's statistic with the constrained MLE found numerically (no closed-form quadratic)."""
    from scipy import optimize

    rest = n - broken - fixed

    def nll(q: float) -> float:  # P(broken) = q, P(fixed) = q + delta under H0
        pf, pb = q + delta, q
        terms = [(fixed, pf), (broken, pb), (rest, 1 - pf - pb)]
        return -sum(k * math.log(max(p, 1e-300)) for k, p in terms if k)

    lo, hi = max(0.0, -delta), min(1.0, (1 - delta) / 2)
    q = optimize.minimize_scalar(nll, bounds=(lo, hi), method="bounded", options={"xatol": 1e-12})
    return (fixed - broken - n * delta) / math.sqrt(n * (2 * q.x + delta * (1 - delta)))


def test_tango_score_matches_a_numerical_constrained_mle() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(5, 80))
        broken = int(rng.integers(0, n + 1))
        fixed = int(rng.integers(0, n - broken + 1))
        delta = float(rng.uniform(-0.9, 0.9))
        ref = _score_reference(broken, fixed, n, delta)
        assert module.tango_score(fixed, broken, n, delta) == pytest.approx(ref, abs=1e-5)
    assert module.tango_score(3, 7, 20, 0.0) == pytest.approx((3 - 7) / math.sqrt(10))  # McNemar


def test_tango_interval_inverts_the_score_test_and_reproduces_fagerland() -> None:
    z = sps.norm.isf(0.025)
    for broken, fixed, n in [(7, 1, 21), (8, 0, 100), (3, 5, 30), (0, 0, 8), (12, 9, 40)]:
        r = paired_diff_interval(broken, fixed, n, method="tango")
        assert r.lo <= r.diff <= r.hi
        for bound, target in ((r.lo, z), (r.hi, -z)):
            if abs(bound) < 1:
                assert module.tango_score(fixed, broken, n, bound) == pytest.approx(target)
    lo, hi = paired_diff_interval(7, 1, 21, method="tango")  # Fagerland et al. (2014), Table 7
    assert (round(lo, 3), round(hi, 3)) == (-0.517, -0.026)


def _coverage(n: int, pb: float, pf: float, method: str) -> float:
    """Exact coverage: the trinomial probability of the outcomes whose interval holds pf - pb."""
    total = 0.0
    for b in range(n + 1):
        for f in range(n + 1 - b):
            r = paired_diff_interval(b, f, n, method=method)
            if r.lo <= pf - pb <= r.hi:
                total += sps.multinomial.pmf([b, f, n - b - f], n, [pb, pf, 1 - pb - pf])
    return total


@pytest.mark.parametrize("n", [8, 13, 30])
def test_small_n_interval_has_close_to_nominal_coverage_where_the_bootstrap_does_not(n: int):
    grid = [(pb, pf) for pb in (0.02, 0.05, 0.1, 0.2, 0.3) for pf in (0.0, 0.02, 0.1, 0.2)]
    cover = [_coverage(n, pb, pf, "tango-exact") for pb, pf in grid]
    # Tango dips a little below nominal at some points (Fagerland et al. 2014); never far
    assert min(cover) >= 0.925 and np.mean(cover) >= 0.95, cover
    # the percentile bootstrap on the same slices: no flips give [0, 0] -> far below nominal
    rng_seed, pb, pf = 0, 0.02, 0.0  # 2% of cases break, none fixed
    hits = 0.0
    for b in range(n + 1):
        d = np.r_[-np.ones(b), np.zeros(n - b)]
        boot = stats.paired_bootstrap(np.zeros(n), d, iters=2000, seed=rng_seed)
        if boot.lo <= pf - pb <= boot.hi:
            hits += sps.binom.pmf(b, n, pb)
    assert hits < 0.9


def test_interval_reaches_zero_exactly_where_the_exact_test_sees_no_evidence() -> None:
    for n in (8, 13, 30, 60):
        for b in range(n + 1):
            for f in range(n + 1 - b):
                r = paired_diff_interval(b, f, n)
                t = paired_diff_interval(b, f, n, method="tango")
                assert r.lo <= t.lo <= t.hi <= r.hi  # only ever widened
                p_greater = sps.binomtest(b, b + f, 0.5, "greater").pvalue if b + f else 1.0
                p_less = sps.binomtest(b, b + f, 0.5, "less").pvalue if b + f else 1.0
                assert (r.hi < 0) == (t.hi < 0 and p_greater <= 0.025), (n, b, f)
                assert (r.lo > 0) == (t.lo > 0 and p_less <= 0.025), (n, b, f)
    assert paired_diff_interval(4, 0, 8).hi == 0.0  # p = 0.0625
    assert paired_diff_interval(5, 0, 8).hi == 0.0  # p = 0.03125 > 0.025: the p arm gates it
    assert paired_diff_interval(8, 0, 8).hi < -0.3  # p = 0.0039


def test_paired_interval_edges() -> None:
    r = paired_diff_interval(0, 0, 8)
    assert r.lo < 0 < r.hi and r.lo == pytest.approx(-r.hi)
    assert paired_diff_interval(0, 0, 800).hi < r.hi  # shrinks with n, never a point
    assert paired_diff_interval(8, 0, 8).lo == -1.0 and paired_diff_interval(0, 8, 8).hi == 1.0
    assert tuple(paired_diff_interval(2, 1, 10)) == (
        paired_diff_interval(2, 1, 10).lo,
        paired_diff_interval(2, 1, 10).hi,
    )
    for bad in [(1, 0, 0), (5, 4, 8), (-1, 0, 8)]:
        with pytest.raises(ValueError):
            paired_diff_interval(*bad)
    with pytest.raises(ValueError):
        paired_diff_interval(1, 0, 8, method="wald")  # type: ignore[arg-type]
