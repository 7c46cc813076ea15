"""`clustered_interval`: the cluster-robust t interval and one-sided tests of a mean, against
statsmodels (OLS on a constant, cluster covariance, t with G - 1 df) on many inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from evalkit.stats import clustered_interval, clustered_se


def _statsmodels(x: np.ndarray, g: np.ndarray, level: float) -> tuple[float, float, float, float]:
    import statsmodels.api as sm

    fit = sm.OLS(x, np.ones(x.size)).fit(cov_type="cluster", cov_kwds={"groups": g}, use_t=True)
    lo, hi = fit.conf_int(alpha=1 - level)[0]
    two_sided = float(fit.pvalues[0])
    t = float(fit.tvalues[0])
    p_less = two_sided / 2 if t < 0 else 1 - two_sided / 2
    return float(lo), float(hi), float(fit.bse[0]), p_less


@pytest.mark.parametrize("kind", ["paired-verdicts", "graded"])
def test_clustered_interval_matches_statsmodels_on_many_inputs(kind: str) -> None:
    for seed in range(60):
        rng = np.random.default_rng(seed)
        n, level = int(rng.integers(6, 200)), float(rng.choice([0.9, 0.95, 0.98]))
        g = rng.integers(0, int(rng.integers(2, max(3, n // 2))), n)
        if np.unique(g).size < 2:
            g[0], g[1] = 0, 1
        if kind == "paired-verdicts":  # cand - base of pass/fail: -1, 0, 1, clustered shifts
            shift = rng.normal(0, 0.4, g.max() + 1)[g]
            x = np.clip(np.round(rng.normal(-0.1, 0.5, n) + shift), -1, 1)
        else:
            x = rng.normal(0, 1, g.max() + 1)[g] + rng.normal(-0.2, 1, n)
        if np.ptp(x) == 0:
            x[0] += 1
        r = clustered_interval(x, g, level)
        lo, hi, se, p_less = _statsmodels(x, g, level)
        assert (r.lo, r.hi, r.se) == pytest.approx((lo, hi, se), rel=1e-9, abs=1e-12)
        assert r.p_less == pytest.approx(p_less, rel=1e-9, abs=1e-12)
        assert r.p_less + r.p_greater == pytest.approx(1.0)
        assert r.n_clusters == np.unique(g).size and r.se == clustered_se(x, g)


def test_clustered_interval_closed_form_and_consistency_with_its_test() -> None:
    x = np.array([-1, -1, 0, 0, -1, 0, 0, 0, -1, -1, 0, 0], float)
    g = np.array([0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5])
    r = clustered_interval(x, g, 0.90)
    sums = np.bincount(g, weights=x - x.mean())
    se = math.sqrt(6 / 5 * (sums @ sums)) / x.size  # Miller's formula, G / (G - 1)
    t = sps.t.ppf(0.95, 5)
    assert (r.lo, r.hi) == pytest.approx((x.mean() - t * se, x.mean() + t * se))
    # the upper bound at level 1 - 2a is below 0 exactly when the one-sided p is below a
    for level in np.linspace(0.5, 0.99, 50):
        r = clustered_interval(x, g, level)
        assert (r.hi < 0) == (r.p_less < (1 - level) / 2)


def test_clustered_interval_edge_cases() -> None:
    one = clustered_interval([-1, 0, -1], ["a", "a", "a"])
    assert one.n_clusters == 1 and math.isnan(one.hi) and math.isnan(one.p_less)
    flat = clustered_interval([0, 0, 0, 0], [0, 0, 1, 1])
    assert (flat.lo, flat.hi, flat.p_less, flat.p_greater) == (0.0, 0.0, 1.0, 1.0)
    down = clustered_interval([-1, -1, -1, -1], [0, 0, 1, 1])
    assert (down.hi, down.p_less, down.p_greater) == (-1.0, 0.0, 1.0)
    with pytest.raises(ValueError):
        clustered_interval([], [])
    with pytest.raises(ValueError):
        clustered_interval([1, 2], [0])
