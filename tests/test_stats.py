"""Tests for evalkit.stats, checked against scipy, statsmodels, scikit-learn and krippendorff."""

from __future__ import annotations

import doctest
import math
import time
import warnings
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats as sps

from evalkit import stats
from evalkit.stats import (
    BootstrapResult,
    Interval,
    clopper_pearson_interval,
    cluster_bootstrap,
    clustered_se,
    cohen_kappa,
    cohen_kappa_ci,
    exact_min_flips,
    exact_power_paired,
    fleiss_kappa,
    holm,
    krippendorff_alpha,
    mcnemar,
    mcnemar_exact,
    min_detectable_drop_paired,
    paired_bootstrap,
    required_n,
    required_n_paired,
    required_n_unpaired,
    wilson_interval,
)

ALTERNATIVES = ("greater", "less", "two-sided")


def test_docstring_examples_run() -> None:
    result = doctest.testmod(stats, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 20
    assert result.failed == 0


# --- McNemar ---------------------------------------------------------------------------------


@pytest.mark.parametrize("alternative", ALTERNATIVES)
def test_mcnemar_exact_matches_scipy_binomtest(alternative: str) -> None:
    for broken in range(31):
        for fixed in range(31):
            if broken + fixed == 0:
                continue
            ref = sps.binomtest(broken, broken + fixed, 0.5, alternative=alternative).pvalue
            got = mcnemar_exact(broken, fixed, alternative)
            assert got == pytest.approx(ref, rel=1e-12, abs=1e-300), (broken, fixed)


def _tail(k_from: int, k_to: int, n: int) -> Fraction:
    """Exact P[k_from <= X <= k_to] for X ~ Bin(n, 1/2), as a fraction."""
    return Fraction(sum(math.comb(n, k) for k in range(k_from, k_to + 1)), 2**n)


@pytest.mark.parametrize("alternative", ALTERNATIVES)
def test_mcnemar_mid_p_matches_exact_fractions(alternative: str) -> None:
    for broken in range(26):
        for fixed in range(26):
            n = broken + fixed
            if n == 0:
                continue
            half_point = Fraction(math.comb(n, broken), 2**n) / 2
            upper = _tail(broken, n, n) - half_point  # P[X > b] + P[X = b] / 2
            lower = _tail(0, broken, n) - half_point
            ref = {"greater": upper, "less": lower, "two-sided": min(1, 2 * min(upper, lower))}
            assert mcnemar_exact(broken, fixed, alternative, mid_p=True) == pytest.approx(
                float(ref[alternative]), rel=1e-12
            )
    # mid-p against scipy.stats.binom, too: P[X > b] + pmf(b) / 2
    assert mcnemar_exact(7, 3, mid_p=True) == pytest.approx(
        sps.binom.sf(7, 10, 0.5) + 0.5 * sps.binom.pmf(7, 10, 0.5), rel=1e-12
    )


def test_mcnemar_mid_p_is_smaller_than_exact() -> None:
    for b, f in [(3, 1), (10, 2), (6, 6), (1, 9)]:
        for alt in ALTERNATIVES:
            assert mcnemar_exact(b, f, alt, mid_p=True) <= mcnemar_exact(b, f, alt)
    assert mcnemar_exact(3, 1, mid_p=True) < mcnemar_exact(3, 1)


@pytest.mark.parametrize("alternative", ALTERNATIVES)
@pytest.mark.parametrize("mid_p", [False, True])
def test_mcnemar_no_discordant_pairs_is_one(alternative: str, mid_p: bool) -> None:
    assert mcnemar_exact(0, 0, alternative, mid_p) == 1.0


def test_mcnemar_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 3)
    with pytest.raises(ValueError):
        mcnemar_exact(3, -1)
    with pytest.raises(ValueError):
        mcnemar_exact(3, 1, alternative="bigger")  # type: ignore[arg-type]


def test_seed_003_negation_slice() -> None:
    # 6 negation cases, 4 flip pass -> fail, none the other way: one-sided exact p = 1/16.
    assert mcnemar_exact(4, 0) == 0.0625
    assert mcnemar_exact(5, 0) == 0.03125
    assert exact_min_flips(0.05) == 5
    assert exact_min_flips(0.0625) == 4


@pytest.mark.parametrize("alpha", [0.2, 0.1, 0.05, 0.0625, 0.03125, 0.01, 0.001, 1e-6])
def test_exact_min_flips_is_the_first_k_that_gates(alpha: float) -> None:
    k = exact_min_flips(alpha)
    assert mcnemar_exact(k, 0) <= alpha
    assert mcnemar_exact(k - 1, 0) > alpha


def test_mcnemar_result_records_inputs() -> None:
    r = mcnemar(8, 2, alternative="two-sided", mid_p=True)
    assert (r.broken, r.fixed, r.n_discordant, r.alternative, r.mid_p) == (
        8,
        2,
        10,
        "two-sided",
        True,
    )
    assert r.p_value == mcnemar_exact(8, 2, "two-sided", True)
    with pytest.raises(AttributeError):
        r.p_value = 0.5  # type: ignore[misc]


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
    monkeypatch.setattr(stats, "_MAX_LEVELS", 0)  # force index resampling on the same data
    index = paired_bootstrap(base, cand, iters=20_000, seed=5)
    assert (multinomial.lo, multinomial.hi) == pytest.approx((index.lo, index.hi), abs=0.0101)


def test_paired_bootstrap_is_deterministic_and_chunk_invariant(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(2)
    base, cand = rng.random(257) < 0.6, rng.random(257) < 0.6
    for force_index in (False, True):
        if force_index:
            monkeypatch.setattr(stats, "_MAX_LEVELS", 0)
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
    r = paired_bootstrap([1.0], [0.0], iters=100)
    assert r.lo == r.hi == r.diff == -1.0
    assert (r.n, r.iters, r.level, r.seed) == (1, 100, 0.95, 0)
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


def test_paired_bootstrap_is_fast_at_100k_cases() -> None:
    rng = np.random.default_rng(0)
    base = rng.random(100_000) < 0.9
    cand = np.where(rng.random(100_000) < 0.05, ~base, base)
    start = time.perf_counter()
    r = paired_bootstrap(base, cand, iters=10_000, seed=1)
    assert time.perf_counter() - start < 2.0
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
    one = cluster_bootstrap([0.5, 1.0, 0.0], ["a", "a", "a"], iters=50)
    assert one.lo == one.hi == one.diff == 0.5
    with pytest.raises(ValueError):
        cluster_bootstrap([], [])
    with pytest.raises(ValueError):
        cluster_bootstrap([1.0, 2.0], [1, 2, 3])


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


# --- sample size and power -------------------------------------------------------------------


def test_required_n_unpaired_seed_002_figures() -> None:
    # Seed 002 rounds 2 (z_0.975 + z_0.8)^2 = 15.698 to 15.7 and reports ~565 and ~14,130 at
    # p = 0.9. The exact z-based formula gives 565.1 and 14,128.0, ceiled to 566 and 14,128.
    assert required_n_unpaired(0.9, 0.05) == 566
    assert required_n_unpaired(0.9, 0.01) == 14_128
    assert required_n_unpaired(0.9, 0.05) == pytest.approx(565, rel=0.005)
    assert required_n_unpaired(0.9, 0.01) == pytest.approx(14_130, rel=0.005)
    assert required_n(0.9, 0.05) == 566
    assert required_n(0.9, -0.05) == 566  # a drop and a gain of the same size
    assert required_n_unpaired(0.9, 0.05, alternative="one-sided") < 566


def test_required_n_unpaired_matches_statsmodels_normal_power() -> None:
    from statsmodels.stats.power import NormalIndPower

    for p, delta in [(0.9, 0.05), (0.5, 0.1), (0.7, 0.02)]:
        effect = delta / math.sqrt(p * (1 - p))
        ref = NormalIndPower().solve_power(effect, alpha=0.05, power=0.8, ratio=1.0)
        assert required_n_unpaired(p, delta) == math.ceil(ref)


def test_required_n_paired_published_values() -> None:
    # powerandsamplesize.com McNemar calculators (Connor 1987, p. 209): p01 = 0.45, p10 = 0.05
    # gives 23 pairs both two-sided at power 0.8 and one-sided at power 0.9.
    assert required_n_paired(psi=0.50, delta=0.40) == 23
    assert required_n_paired(0.50, -0.40, power=0.9, alternative="one-sided") == 23


def test_required_n_paired_monte_carlo_power() -> None:
    # Connor's n should give ~80% power to the (asymptotic) McNemar z-test it approximates.
    rng = np.random.default_rng(2024)
    for psi, delta, sides in [(0.2, 0.08, "two-sided"), (0.3, 0.1, "one-sided")]:
        n = required_n_paired(psi, delta, alternative=sides)
        b, f, _ = rng.multinomial(n, [(psi + delta) / 2, (psi - delta) / 2, 1 - psi], 20_000).T
        z = (b - f) / np.sqrt(np.maximum(b + f, 1))
        crit = sps.norm.isf(0.05 if sides == "one-sided" else 0.025)
        power = np.mean(z > crit if sides == "one-sided" else np.abs(z) > crit)
        assert power == pytest.approx(0.8, abs=0.03), (psi, delta, n)


def test_pairing_needs_fewer_cases_when_few_flip() -> None:
    assert required_n_paired(0.06, 0.05) < required_n_unpaired(0.9, 0.05) / 2
    assert required_n_paired(0.10, 0.05) < required_n_paired(0.20, 0.05)


def test_required_n_validation() -> None:
    for psi, delta in [(0.05, 0.1), (0.1, 0.0), (1.2, 0.1)]:
        with pytest.raises(ValueError):
            required_n_paired(psi, delta)
    for p, delta in [(0.0, 0.1), (1.0, 0.1), (0.5, 0.0)]:
        with pytest.raises(ValueError):
            required_n_unpaired(p, delta)
    with pytest.raises(ValueError):
        required_n_paired(0.2, 0.1, alternative="greater")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        required_n_unpaired(0.5, 0.1, power=1.0)
    assert required_n_paired(0.1, 0.1) >= 1  # every flip one way is allowed


@pytest.mark.parametrize(
    ("psi", "sides"), [(0.1, "two-sided"), (0.25, "one-sided"), (1.0, "two-sided")]
)
def test_min_detectable_drop_inverts_connor(psi: float, sides: str) -> None:
    for n in [50, 200, 1000, 10_000]:
        d = min_detectable_drop_paired(n, psi, alternative=sides)
        if math.isnan(d):
            assert required_n_paired(psi, psi, alternative=sides) > n
            continue
        assert 0 < d <= psi
        assert required_n_paired(psi, d, alternative=sides) == n
        assert required_n_paired(psi, d * 1.001, alternative=sides) <= n
        assert required_n_paired(psi, d * 0.999, alternative=sides) > n
    assert math.isnan(min_detectable_drop_paired(5, 0.1))
    with pytest.raises(ValueError):
        min_detectable_drop_paired(0, 0.1)


def _enumerated_power(n: int, psi: float, delta: float, alpha: float) -> float:
    """Reference: sum the trinomial over every (broken, fixed), asking mcnemar_exact directly."""
    p_b, p_f = (psi + delta) / 2, (psi - delta) / 2
    dist = sps.multinomial(n, [p_b, p_f, 1 - psi])
    return sum(
        dist.pmf([b, f, n - b - f])
        for b in range(n + 1)
        for f in range(n + 1 - b)
        if mcnemar_exact(b, f) <= alpha
    )


@pytest.mark.parametrize(
    ("n", "psi", "delta", "alpha"),
    [(6, 1.0, 1.0, 0.05), (8, 0.5, 0.3, 0.05), (20, 0.3, 0.1, 0.05), (25, 0.4, 0.4, 0.0625),
     (30, 0.2, 0.0, 0.05), (12, 0.6, -0.2, 0.1)],
)  # fmt: skip
def test_exact_power_matches_enumeration(n: int, psi: float, delta: float, alpha: float) -> None:
    got = exact_power_paired(n, psi, delta, alpha)
    assert got == pytest.approx(_enumerated_power(n, psi, delta, alpha), abs=1e-12)


@pytest.mark.parametrize(
    ("n", "psi", "delta"), [(100, 0.08, 0.08), (60, 0.3, 0.15), (400, 0.1, 0.04), (40, 0.2, 0.1)]
)
def test_exact_power_matches_simulation(n: int, psi: float, delta: float) -> None:
    rng = np.random.default_rng(n)
    b, f, _ = rng.multinomial(n, [(psi + delta) / 2, (psi - delta) / 2, 1 - psi], 20_000).T
    p = sps.binom.sf(b - 1, b + f, 0.5)  # one-sided exact McNemar, vectorized
    assert exact_power_paired(n, psi, delta) == pytest.approx(np.mean(p <= 0.05), abs=0.02)


def test_exact_power_properties() -> None:
    assert exact_power_paired(500, 0.1, 0.0) <= 0.05  # size of the exact test
    assert exact_power_paired(0, 0.1, 0.1) == 0.0
    assert exact_power_paired(4, 1.0, 1.0) == 0.0  # 4 flips can never reach p <= 0.05
    assert exact_power_paired(5, 1.0, 1.0) == pytest.approx(1.0)
    powers = [exact_power_paired(n, 0.2, 0.1) for n in (50, 100, 200, 400)]
    assert powers == sorted(powers) and powers[-1] > 0.9
    with pytest.raises(ValueError):
        exact_power_paired(10, 0.1, 0.2)


# --- multiple testing ------------------------------------------------------------------------


def test_holm_matches_statsmodels(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    from statsmodels.stats.multitest import multipletests

    monkeypatch.setattr(gc, "collect", lambda *args: 0)  # multipletests runs gc.collect(): 0.2 s

    rng = np.random.default_rng(0)
    for trial in range(200):
        m = int(rng.integers(1, 25))
        p = rng.choice([0.0, 0.001, 0.01, 0.02, 0.04, 0.5, 1.0], m) if trial % 2 else rng.random(m)
        if trial % 5 == 0:
            p = rng.random(m) ** 4
        ref = multipletests(p, method="holm")[1]
        np.testing.assert_allclose(holm(p), ref, rtol=1e-12, atol=1e-15)
    assert holm([]).size == 0
    assert holm([1.0, 1.0]).tolist() == [1.0, 1.0]
    for bad in ([0.5, 1.2], [np.nan], [[0.1, 0.2]]):
        with pytest.raises(ValueError):
            holm(bad)


# --- agreement -------------------------------------------------------------------------------


def _label_pairs(count: int, seed: int):
    rng = np.random.default_rng(seed)
    for i in range(count):
        k = int(rng.integers(2, 6))
        n = 1 + (i % 40) if i < 40 else int(rng.integers(1, 201))
        a = rng.integers(0, k, n)
        b = np.where(rng.random(n) < rng.random(), a, rng.integers(0, k, n))
        yield a, b


@pytest.mark.parametrize("weights", [None, "linear", "quadratic"])
def test_cohen_kappa_matches_sklearn(weights: str | None) -> None:
    from sklearn.metrics import cohen_kappa_score

    checked = 0
    for i, (a, b) in enumerate(_label_pairs(120, {None: 0, "linear": 1, "quadratic": 2}[weights])):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = cohen_kappa_score(a, b, weights=weights)
        got = cohen_kappa(a, b, weights=weights)
        if math.isnan(ref):
            assert math.isnan(got)
        else:
            assert got == pytest.approx(ref, abs=1e-12)
            checked += 1
        if i % 4:
            continue
        labels = np.arange(6)  # an extra class nobody uses changes weighted kappa distances
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = cohen_kappa_score(a, b, weights=weights, labels=labels)
        got = cohen_kappa(a, b, weights=weights, labels=labels)
        assert got == pytest.approx(ref, abs=1e-12, nan_ok=True)
    assert checked >= 100


def test_cohen_kappa_edge_cases() -> None:
    assert math.isnan(cohen_kappa([2, 2, 2], [2, 2, 2]))  # constant and identical: 0/0
    assert math.isnan(cohen_kappa(["x"], ["x"]))  # single item, agreeing
    assert cohen_kappa(["x"], ["y"]) == 0.0  # single item, disagreeing
    assert cohen_kappa([0, 0, 0, 0], [0, 1, 0, 1]) == 0.0  # one rater constant
    assert cohen_kappa([0, 1, 2, 2], [0, 1, 1, 1]) == pytest.approx(1 / 3)  # b never says 2
    assert cohen_kappa(["a", "b", "a"], ["a", "b", "a"]) == 1.0
    assert cohen_kappa([0, 1, 2], [1, 2, 0], weights="quadratic") < 0
    for a, b, kw in [([], [], {}), ([1, 2], [1], {}), ([1, 2], [1, 3], {"labels": [1, 2]})]:
        with pytest.raises(ValueError):
            cohen_kappa(a, b, **kw)
    with pytest.raises(ValueError):
        cohen_kappa([1, 2], [1, 2], weights="cubic")  # type: ignore[arg-type]


@pytest.mark.parametrize("weights", [None, "linear", "quadratic"])
def test_cohen_kappa_asymptotic_ci_matches_statsmodels(weights: str | None) -> None:
    from statsmodels.stats.inter_rater import cohens_kappa

    checked = 0
    for a, b in _label_pairs(90, seed=5):
        if a.size < 5 or math.isnan(cohen_kappa(a, b)):
            continue
        labels = np.unique(np.r_[a, b])
        table = (a[:, None, None] == labels[:, None]) & (b[:, None, None] == labels[None, :])
        table = table.sum(0)  # rows: rater a, columns: rater b
        ref = cohens_kappa(table) if weights is None else cohens_kappa(table, wt=weights)
        got = cohen_kappa_ci(a, b, weights=weights, method="asymptotic")
        assert got.kappa == pytest.approx(ref.kappa, abs=1e-12)
        assert got.se == pytest.approx(ref.std_kappa, rel=1e-9, abs=1e-12)
        assert (got.lo, got.hi) == pytest.approx((ref.kappa_low, ref.kappa_upp), abs=1e-9)
        assert got.iters is None and got.seed is None and got.n == a.size
        checked += 1
    assert checked >= 50


def test_cohen_kappa_bootstrap_ci() -> None:
    rng = np.random.default_rng(3)
    a = rng.integers(0, 3, 400)
    b = np.where(rng.random(400) < 0.7, a, rng.integers(0, 3, 400))
    boot = cohen_kappa_ci(a, b, iters=4000, seed=1)
    asym = cohen_kappa_ci(a, b, method="asymptotic")
    assert boot.kappa == asym.kappa == cohen_kappa(a, b)
    assert boot.lo < boot.kappa < boot.hi
    assert boot.se == pytest.approx(asym.se, rel=0.1)
    assert (boot.lo, boot.hi) == pytest.approx((asym.lo, asym.hi), abs=0.02)
    # against resampling items with a loop
    idx = np.random.default_rng(9).integers(0, 400, size=(1000, 400))
    ref = np.quantile([cohen_kappa(a[i], b[i]) for i in idx], [0.025, 0.975])
    assert (boot.lo, boot.hi) == pytest.approx(tuple(ref), abs=0.015)
    assert cohen_kappa_ci(a, b, iters=4000, seed=1) == boot
    assert (boot.iters, boot.seed, boot.method, boot.level) == (4000, 1, "bootstrap", 0.95)
    const = cohen_kappa_ci([1, 1, 1], [1, 1, 1])
    assert all(math.isnan(v) for v in (const.kappa, const.lo, const.hi, const.se))
    with pytest.raises(ValueError):
        cohen_kappa_ci(a, b, method="jackknife")  # type: ignore[arg-type]


def _reliability(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    raters, items = int(rng.integers(2, 7)), int(rng.integers(2, 40))
    truth = rng.integers(1, 6, items)
    data = np.where(rng.random((raters, items)) < 0.7, truth, rng.integers(1, 6, (raters, items)))
    data = data.astype(float) * (1.5 if seed % 3 == 0 else 1.0)  # non-integer values too
    data[rng.random(data.shape) < rng.uniform(0, 0.4)] = np.nan
    return data


@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval"])
def test_krippendorff_alpha_matches_package(level: str) -> None:
    import krippendorff

    checked = 0
    for seed in range(80):
        data = _reliability(seed)
        pairable = (~np.isnan(data)).sum(0) >= 2
        values = np.unique(data[:, pairable][~np.isnan(data[:, pairable])])
        if not pairable.any():
            with pytest.raises(ValueError):
                krippendorff_alpha(data, level)
            continue
        if values.size < 2:
            assert math.isnan(krippendorff_alpha(data, level))
            continue
        ref = krippendorff.alpha(reliability_data=data, level_of_measurement=level)
        assert krippendorff_alpha(data, level) == pytest.approx(ref, abs=1e-10), seed
        checked += 1
    assert checked >= 60


def test_krippendorff_alpha_edge_cases() -> None:
    import krippendorff

    assert math.isnan(krippendorff_alpha([[3, 3, 3], [3, 3, np.nan]]))  # no variation
    with pytest.raises(ValueError):
        krippendorff_alpha([[1, np.nan], [np.nan, 2]])  # no item has two ratings
    with pytest.raises(ValueError):
        krippendorff_alpha([1, 2, 3])
    with pytest.raises(ValueError):
        krippendorff_alpha([[1, np.inf], [1, 2]])
    with pytest.raises(ValueError):
        krippendorff_alpha([[1, 2], [1, 2]], level="ratio")  # type: ignore[arg-type]
    data = np.array([[1, 2, 3, 3, 2, 1, 4, 1, 2], [1, 2, 3, 3, 2, 2, 4, 1, 3.0]])
    lone = np.c_[data, [[5.0], [np.nan]]]  # an item rated once is not pairable
    for level in ("nominal", "ordinal", "interval"):
        assert krippendorff_alpha(lone, level) == pytest.approx(krippendorff_alpha(data, level))
        ref = krippendorff.alpha(reliability_data=lone, level_of_measurement=level)
        assert krippendorff_alpha(lone, level) == pytest.approx(ref)
    assert krippendorff_alpha([[1, 2, 3], [1, 2, 3]]) == 1.0


def test_fleiss_kappa_matches_statsmodels() -> None:
    from statsmodels.stats.inter_rater import fleiss_kappa as sm_fleiss

    rng = np.random.default_rng(4)
    for _ in range(60):
        items, cats, raters = (
            int(rng.integers(2, 30)),
            int(rng.integers(2, 5)),
            int(rng.integers(2, 7)),
        )
        table = np.array(
            [rng.multinomial(raters, rng.dirichlet(np.ones(cats))) for _ in range(items)]
        )
        if (table.sum(0) == table.sum()).any():
            assert math.isnan(fleiss_kappa(table))
            continue
        assert fleiss_kappa(table) == pytest.approx(sm_fleiss(table), abs=1e-12)
    assert math.isnan(fleiss_kappa([[3, 0], [3, 0]]))
    for bad in ([[3, 0], [2, 0]], [[1, 0], [0, 1]], [1, 2]):
        with pytest.raises(ValueError):
            fleiss_kappa(bad)
