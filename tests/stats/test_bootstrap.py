"""evalkit.stats.bootstrap: percentile and BCa bootstraps, by case and by cluster, and the
clustered SE, against reference loops, scipy and statsmodels."""

from __future__ import annotations

import doctest
import math
import warnings

import numpy as np
import pytest
from scipy import stats as sps

from evalkit.stats import (
    BootstrapResult,
    cluster_bootstrap,
    clustered_se,
    mcnemar_exact,
    paired_bootstrap,
)
from evalkit.stats import bootstrap as module


def test_docstring_examples_run() -> None:
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 5 and result.failed == 0


# --- paired bootstrap ------------------------------------------------------------------------


def _billing_slice() -> tuple[np.ndarray, np.ndarray]:
    base = np.r_[np.ones(90), np.zeros(10)]
    cand = base.copy()
    cand[:8] = 0  # 8 of the 90 baseline passes break, none are fixed
    return base, cand


def test_seed_000_billing_slice() -> None:
    base, cand = _billing_slice()
    broken = int(((base == 1) & (cand == 0)).sum())
    fixed = int(((base == 0) & (cand == 1)).sum())
    assert mcnemar_exact(broken, fixed) == 0.00390625
    r = paired_bootstrap(base, cand, seed=0)
    assert r.diff == pytest.approx(-0.08)
    assert -0.045 < r.hi < -0.02  # "upper bound near minus three points"
    assert r.lo < -0.12


def _naive_bootstrap(d: np.ndarray, iters: int, level: float, seed: int) -> tuple[float, float]:
    """Reference: resample case indices, one row per resample."""
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, d.size, size=(iters, d.size))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


@pytest.mark.parametrize("seed", range(6))
def test_paired_bootstrap_multinomial_path_matches_index_resampling(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(150, 400))
    base = rng.random(n) < 0.8
    cand = np.where(rng.random(n) < 0.15, ~base, base)  # 15% of cases flip
    r = paired_bootstrap(base, cand, iters=10_000, seed=seed)
    lo, hi = _naive_bootstrap(cand.astype(float) - base, 10_000, 0.95, seed + 1000)
    tol = 2.5 / n + 0.004  # a couple of lattice steps plus Monte Carlo error
    assert r.lo == pytest.approx(lo, abs=tol)
    assert r.hi == pytest.approx(hi, abs=tol)
    assert r.diff == pytest.approx(cand.mean() - base.mean(), abs=1e-12)


def test_paired_bootstrap_judge_levels_and_continuous_scores() -> None:
    rng = np.random.default_rng(7)
    base = rng.integers(1, 6, size=500).astype(float)  # 1-5 judge levels: multinomial path
    cand = np.clip(base + rng.integers(-1, 2, size=500), 1, 5)
    r = paired_bootstrap(base, cand, iters=8000, level=0.9, seed=3)
    lo, hi = _naive_bootstrap(cand - base, 8000, 0.9, 99)
    assert (r.lo, r.hi) == pytest.approx((lo, hi), abs=0.012)
    base_c, cand_c = rng.random(400), rng.random(400)  # > 64 distinct values: index path
    r = paired_bootstrap(base_c, cand_c, iters=8000, seed=4)
    lo, hi = _naive_bootstrap(cand_c - base_c, 8000, 0.95, 98)
    assert (r.lo, r.hi) == pytest.approx((lo, hi), abs=0.012)


def test_paired_bootstrap_both_draw_methods_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(11)
    base = (rng.random(300) < 0.7).astype(float)
    cand = np.where(rng.random(300) < 0.2, 1 - base, base)
    multinomial = paired_bootstrap(base, cand, iters=20_000, seed=5)
    monkeypatch.setattr(module, "_MAX_LEVELS", 0)  # force index resampling on the same data
    index = paired_bootstrap(base, cand, iters=20_000, seed=5)
    assert (multinomial.lo, multinomial.hi) == pytest.approx((index.lo, index.hi), abs=0.0101)


def test_paired_bootstrap_is_deterministic_and_chunk_invariant(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(2)
    base, cand = rng.random(257) < 0.6, rng.random(257) < 0.6
    for force_index in (False, True):
        if force_index:
            monkeypatch.setattr(module, "_MAX_LEVELS", 0)
        ref = paired_bootstrap(base, cand, iters=1001, seed=9)
        assert paired_bootstrap(base, cand, iters=1001, seed=9) == ref
        for chunk in (1, 7, 100, 1001, 5000):
            assert paired_bootstrap(base, cand, iters=1001, seed=9, chunk_size=chunk) == ref
        assert paired_bootstrap(base, cand, iters=1001, seed=10) != ref


def test_paired_bootstrap_generator_seed_is_recorded_and_replays() -> None:
    base, cand = _billing_slice()
    gen = np.random.default_rng(42)
    r = paired_bootstrap(base, cand, iters=500, seed=gen)
    assert isinstance(r.seed, int)
    assert paired_bootstrap(base, cand, iters=500, seed=r.seed) == r
    assert paired_bootstrap(base, cand, iters=500, seed=gen).seed != r.seed  # gen advanced
    with pytest.raises(ValueError):
        paired_bootstrap(base, cand, seed=-1)
    with pytest.raises(ValueError):
        paired_bootstrap(base, cand, seed=1.5)  # type: ignore[arg-type]


def test_paired_bootstrap_does_not_touch_global_rng() -> None:
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    paired_bootstrap(*_billing_slice(), iters=200)
    assert (np.random.get_state()[1] == before).all()


def test_paired_bootstrap_edge_cases() -> None:
    r = paired_bootstrap([1.0, 0.0], [0.0, 0.0], iters=100)
    assert (r.n, r.iters, r.level, r.seed, r.method) == (2, 100, 0.95, 0, "percentile")
    r = paired_bootstrap(np.full(50, 0.3), np.full(50, 0.7), iters=100)  # constant differences
    assert r.lo == pytest.approx(r.hi) and r.diff == pytest.approx(0.4)
    with pytest.raises(ValueError):
        paired_bootstrap([], [])
    with pytest.raises(ValueError):
        paired_bootstrap([1, 0, 1], [1, 0])
    with pytest.raises(ValueError):
        paired_bootstrap([1, np.nan], [1, 0])
    with pytest.raises(ValueError):
        paired_bootstrap([1, 0], [1, 0], level=1.0)
    with pytest.raises(ValueError):
        paired_bootstrap([1, 0], [1, 0], iters=0)


def test_paired_bootstrap_at_100k_cases() -> None:
    """10,000 resamples of 100k pass/fail pairs (how fast: bench/bench_bootstrap.py)."""
    rng = np.random.default_rng(0)
    base = rng.random(100_000) < 0.9
    cand = np.where(rng.random(100_000) < 0.05, ~base, base)
    r = paired_bootstrap(base, cand, iters=10_000, seed=1)
    assert r.diff == pytest.approx(cand.mean() - base.mean())
    assert r.lo < r.diff < r.hi and r.hi - r.lo < 0.01


# --- clustered statistics --------------------------------------------------------------------


def _clustered_data(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    g = int(rng.integers(2, 30))
    sizes = rng.integers(1, 12, size=g)
    clusters = np.repeat(np.arange(g), sizes)
    effects = rng.normal(0, 1, g)[clusters]
    return effects + rng.normal(0, 1, clusters.size), clusters


@pytest.mark.parametrize("use_correction", [True, False])
def test_clustered_se_matches_statsmodels_ols(use_correction: bool) -> None:
    import statsmodels.api as sm

    for seed in range(25):
        x, g = _clustered_data(seed)
        g = np.random.default_rng(seed).permutation(g)  # clusters need not be contiguous
        fit = sm.OLS(x, np.ones(x.size)).fit(
            cov_type="cluster", cov_kwds={"groups": g, "use_correction": use_correction}
        )
        assert clustered_se(x, g, use_correction) == pytest.approx(fit.bse[0], rel=1e-10)


def test_clustered_se_matches_miller_formula() -> None:
    x, g = _clustered_data(3)
    resid = x - x.mean()
    ref = math.sqrt(sum(resid[g == c].sum() ** 2 for c in np.unique(g))) / x.size
    assert clustered_se(x, g, use_correction=False) == pytest.approx(ref, rel=1e-12)


def test_clustered_se_singleton_clusters_reduce_to_naive_se() -> None:
    x = np.random.default_rng(1).normal(size=37)
    ids = np.arange(37)
    assert clustered_se(x, ids) == pytest.approx(x.std(ddof=1) / math.sqrt(37), rel=1e-12)
    assert clustered_se(x, ids, False) == pytest.approx(x.std(ddof=0) / math.sqrt(37), rel=1e-12)
    assert math.isnan(clustered_se(x, np.zeros(37)))  # one cluster
    with pytest.raises(ValueError):
        clustered_se([], [])
    with pytest.raises(ValueError):
        clustered_se([1.0, 2.0], [0])


def test_clustered_se_exceeds_naive_when_clusters_correlate() -> None:
    x, g = _clustered_data(5)
    assert clustered_se(x, g) > 1.2 * x.std(ddof=1) / math.sqrt(x.size)


def _loop_cluster_bootstrap(x, g, iters, level, seed) -> tuple[float, float]:
    """Reference: a Python loop that draws whole clusters with replacement."""
    rng = np.random.default_rng(seed)
    groups = [x[g == c] for c in np.unique(g)]
    means = []
    for _ in range(iters):
        pick = rng.integers(0, len(groups), size=len(groups))
        means.append(np.concatenate([groups[i] for i in pick]).mean())
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_cluster_bootstrap_matches_loop_reference(seed: int) -> None:
    x, g = _clustered_data(seed + 20)
    r = cluster_bootstrap(x, g, iters=6000, seed=seed)
    lo, hi = _loop_cluster_bootstrap(x, g, 3000, 0.95, seed + 50)
    width = r.hi - r.lo
    assert r.lo == pytest.approx(lo, abs=0.08 * width)
    assert r.hi == pytest.approx(hi, abs=0.08 * width)
    assert r.diff == pytest.approx(x.mean(), abs=1e-12)
    assert (r.n, r.n_clusters) == (x.size, np.unique(g).size)


def test_cluster_bootstrap_singletons_match_case_bootstrap() -> None:
    rng = np.random.default_rng(8)
    x = rng.normal(size=300)
    by_cluster = cluster_bootstrap(x, np.arange(300), iters=20_000, seed=1)
    by_case = paired_bootstrap(np.zeros(300), x, iters=20_000, seed=2)
    assert (by_cluster.lo, by_cluster.hi) == pytest.approx((by_case.lo, by_case.hi), abs=0.01)


def test_cluster_bootstrap_edge_cases_and_determinism() -> None:
    x, g = _clustered_data(4)
    r = cluster_bootstrap(x, g, iters=999, seed=3)
    assert cluster_bootstrap(x, g, iters=999, seed=3, chunk_size=10) == r
    assert isinstance(r, BootstrapResult) and r.seed == 3
    with pytest.raises(ValueError, match="one cluster"):
        cluster_bootstrap([0.5, 1.0, 0.0], ["a", "a", "a"], iters=50)
    with pytest.raises(ValueError):
        cluster_bootstrap([], [])
    with pytest.raises(ValueError):
        cluster_bootstrap([1.0, 2.0], [1, 2, 3])


# --- one observation has no interval (issue 13, item 3) ---------------------------------------


def test_one_case_or_one_cluster_is_refused_as_scipy_refuses() -> None:
    with pytest.raises(ValueError):  # scipy: a sample needs two or more observations
        sps.bootstrap(([0.0],), np.mean, n_resamples=100, rng=0)
    for method in ("percentile", "bca"):
        with pytest.raises(ValueError, match="at least two cases"):
            paired_bootstrap([1.0], [0.0], iters=100, method=method)
    with pytest.raises(ValueError, match="at least two clusters"):
        cluster_bootstrap([1.0, 0.0, 1.0], [7, 7, 7], iters=100)
    assert cluster_bootstrap([1.0, 0.0], [1, 2], iters=100).n_clusters == 2


# --- BCa ------------------------------------------------------------------------------------


def _graded(kind: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(15, 120))
    if kind == "judge":  # 1-5 judge levels, skewed towards the top
        base = rng.choice([1, 2, 3, 4, 5], n, p=[0.05, 0.05, 0.1, 0.3, 0.5]).astype(float)
        drop = rng.random(n) < 0.2
        cand = np.clip(base - drop * rng.integers(1, 4, n), 1, 5)
    else:  # similarity in [0, 1], a skewed change
        base = rng.beta(5, 1.5, n)
        cand = np.clip(base - rng.exponential(0.05, n) * (rng.random(n) < 0.4), 0, 1)
    return base, cand


@pytest.mark.parametrize("kind", ["judge", "similarity"])
def test_bca_matches_scipy_on_many_inputs(kind: str) -> None:
    for seed in range(8):
        base, cand = _graded(kind, seed)
        d = cand - base
        ref = sps.bootstrap(
            (d,), np.mean, n_resamples=20_000, method="BCa", rng=seed, confidence_level=0.9
        ).confidence_interval
        got = paired_bootstrap(base, cand, iters=20_000, level=0.9, seed=seed, method="bca")
        width = ref.high - ref.low
        assert got.method == "bca" and got.diff == pytest.approx(d.mean())
        assert got.lo == pytest.approx(ref.low, abs=0.06 * width + 1e-3), (kind, seed)
        assert got.hi == pytest.approx(ref.high, abs=0.06 * width + 1e-3), (kind, seed)


def test_bca_acceleration_is_the_jackknife_closed_form() -> None:
    rng = np.random.default_rng(3)
    d = rng.exponential(1.0, 40)
    jack = np.array([np.delete(d, i).mean() for i in range(d.size)])  # leave-one-out means
    u = jack.mean() - jack
    a_ref = (u**3).sum() / (6 * ((u**2).sum()) ** 1.5)
    e = d - d.mean()
    assert (e**3).sum() / (6 * (e @ e) ** 1.5) == pytest.approx(a_ref, rel=1e-10)
    boot = np.sort(rng.choice(d, size=(4000, d.size)).mean(1))
    z0 = sps.norm.ppf(((boot < d.mean()).sum() + (boot <= d.mean()).sum()) / (2 * boot.size))
    want = []
    for q in (0.025, 0.975):
        zq = sps.norm.ppf(q)
        want.append(np.quantile(boot, sps.norm.cdf(z0 + (z0 + zq) / (1 - a_ref * (z0 + zq)))))
    assert module._bca_bounds(boot, float(d.mean()), d, 0.95) == pytest.approx(tuple(want))


def test_bca_shifts_with_skew_and_equals_percentile_when_symmetric() -> None:
    rng = np.random.default_rng(5)
    skewed = rng.exponential(1.0, 200)
    pct = paired_bootstrap(np.zeros(200), skewed, iters=20_000, seed=1)
    bca = paired_bootstrap(np.zeros(200), skewed, iters=20_000, seed=1, method="bca")
    assert bca.lo > pct.lo and bca.hi > pct.hi  # right skew moves both bounds up
    sym = np.r_[np.arange(-50, 51), -np.arange(-50, 51)].astype(float)  # a = 0, z0 ~ 0
    p, b = (paired_bootstrap(np.zeros(sym.size), sym, iters=20_000, seed=2, method=m)
            for m in ("percentile", "bca"))  # fmt: skip
    assert (b.lo, b.hi) == pytest.approx((p.lo, p.hi), abs=0.02 * (p.hi - p.lo))


def test_bca_all_equal_differences_are_undefined_as_in_scipy() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = sps.bootstrap((np.full(30, 0.5),), np.mean, method="BCa", rng=0)
    assert math.isnan(ref.confidence_interval.low)
    r = paired_bootstrap(np.full(30, 3.0), np.full(30, 3.5), iters=500, method="bca")
    assert r.diff == 0.5 and math.isnan(r.lo) and math.isnan(r.hi)
    p = paired_bootstrap(np.full(30, 3.0), np.full(30, 3.5), iters=500)
    assert p.lo == p.hi == 0.5  # the percentile method returns the point, as scipy's does
    with pytest.raises(ValueError, match="method"):
        paired_bootstrap([1, 2], [2, 3], method="basic")  # type: ignore[arg-type]
