"""evalkit.stats._dist: the distribution functions on scipy.special, against scipy.stats and
against exact fractions; and no gate, comparison or notebook statistic loading scipy.stats."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats as sps

from evalkit.stats import _dist


def test_normal_t_and_beta_are_scipy_stats_bit_for_bit() -> None:
    rng = np.random.default_rng(7)
    q, x = rng.random(300), rng.normal(0, 3, 300)
    a, b = rng.integers(1, 400, 300), rng.integers(1, 400, 300)
    for i in range(300):
        assert _dist.norm_isf(q[i]) == sps.norm.isf(q[i])
        assert _dist.norm_ppf(q[i]) == sps.norm.ppf(q[i])
        assert _dist.norm_sf(x[i]) == sps.norm.sf(x[i])
        assert _dist.norm_cdf(x[i]) == sps.norm.cdf(x[i])
        assert _dist.t_ppf(q[i], a[i]) == sps.t.ppf(q[i], a[i])
        assert _dist.t_cdf(x[i], a[i]) == sps.t.cdf(x[i], a[i])
        assert _dist.t_sf(x[i], a[i]) == sps.t.sf(x[i], a[i])
        assert _dist.beta_ppf(q[i], a[i], b[i]) == sps.beta.ppf(q[i], a[i], b[i])
        assert _dist.beta_isf(q[i], a[i], b[i]) == sps.beta.isf(q[i], a[i], b[i])
    z = np.array([-2.0, 0.0, 1.5])
    assert (_dist.norm_sf(z) == sps.norm.sf(z)).all()  # elementwise too (the trend test's use)


def _exact(k_from: int, k_to: int, n: int) -> float:
    return float(Fraction(sum(math.comb(n, j) for j in range(k_from, k_to + 1)), 2**n))


@pytest.mark.parametrize("n", [1, 2, 7, 15, 35, 100, 513, 1000])
def test_binomial_at_one_half_is_the_exact_fraction_correctly_rounded(n: int) -> None:
    for k in sorted({0, 1, 2, 6, n // 2 - 1, n // 2, n // 2 + 1, n - 2, n - 1, n}):
        if not 0 <= k <= n:
            continue
        assert _dist.half_lower(k, n) == _exact(0, k, n), (k, n)
        assert _dist.half_upper(k, n) == _exact(k, n, n), (k, n)
        assert _dist.half_point(k, n) == _exact(k, k, n), (k, n)
        # scipy.stats agrees to its own accuracy (it is ~1e-13 off in the far tails at n ~ 1000)
        assert _dist.half_lower(k, n) == pytest.approx(sps.binom.cdf(k, n, 0.5), rel=1e-12)
    assert (_dist.half_lower(-1, n), _dist.half_lower(n, n)) == (0.0, 1.0)
    assert (_dist.half_upper(0, n), _dist.half_upper(n + 1, n)) == (1.0, 0.0)
    assert _dist.half_point(-1, n) == _dist.half_point(n + 1, n) == 0.0


@pytest.mark.parametrize("n", [1001, 1500, 5000])
def test_binomial_at_one_half_beyond_the_exact_range_agrees_with_scipy(n: int) -> None:
    for k in (0, 17, n // 3, n // 2, n // 2 + 9, n - 1):
        assert _dist.half_lower(k, n) == pytest.approx(sps.binom.cdf(k, n, 0.5), rel=1e-12)
        assert _dist.half_upper(k, n) == pytest.approx(sps.binom.sf(k - 1, n, 0.5), rel=1e-12)
        assert _dist.half_point(k, n) == pytest.approx(sps.binom.pmf(k, n, 0.5), rel=2e-11)


def test_the_median_quantile_is_the_smallest_k_reaching_q_even_at_exact_ties() -> None:
    for q in (0.01, 0.025, 0.05, 0.5, 0.9, 0.9375, 0.95, 0.975):
        for n in [*range(60), 999, 1000, 1001, 3001]:
            k = _dist.half_ppf(q, n)
            assert _dist.half_lower(k, n) >= q, (q, n, k)
            assert k == 0 or _dist.half_lower(k - 1, n) < q, (q, n, k)
    # P[X <= 17] = 1/2 exactly at n = 35: the quantile is 17 (scipy.stats says 18, an ulp off)
    assert _dist.half_lower(17, 35) == 0.5 and _dist.half_ppf(0.5, 35) == 17
    assert sps.binom.ppf(0.5, 35, 0.5) == 18


@pytest.mark.parametrize("alpha", [0.05, 0.0625, 0.01, 0.1, 0.001])
def test_critical_counts_are_where_the_exact_test_first_rejects(alpha: float) -> None:
    _dist.half_critical.cache_clear()
    crit = _dist.half_critical(1100, alpha)
    assert len(crit) == 1101
    for m in [*range(120), *range(995, 1006), 1100]:
        c = crit[m]
        assert _dist.half_upper(c, m) <= alpha < _dist.half_upper(c - 1, m), (alpha, m, c)
    # scipy's quantile (which the power used) gives the same counts, 15/16 included
    ref = sps.binom.ppf(1 - alpha, np.arange(1101), 0.5) + 1
    assert np.array_equal(np.array(crit), ref)


@pytest.mark.parametrize("p", [0.0, 0.03, 0.3, 0.5, 0.77, 1.0])
@pytest.mark.parametrize("n", [0, 1, 5, 17, 300, 4000])
def test_binomial_point_and_tail_at_a_general_p(n: int, p: float) -> None:
    k = np.arange(-1, n + 2)
    pmf = _dist.binom_pmf(k, n, p)
    assert np.allclose(pmf, sps.binom.pmf(k, n, p), rtol=2e-11, atol=1e-300)
    assert np.abs(pmf - sps.binom.pmf(k, n, p)).sum() < 1e-11
    assert np.array_equal(_dist.binom_sf(k, n, p), sps.binom.sf(k, n, p))  # bit for bit
    m = np.arange(0, min(n, 300) + 1)  # one k against every n, as the power's sum uses it
    assert np.array_equal(_dist.binom_sf(m // 2, m, p), sps.binom.sf(m // 2, m, p))


_GATE_STATISTICS = """
import json, sys
import numpy as np
from evalkit import stats
from evalkit.stats import trend
from evalkit.compare import gate, pin, power, usage_deltas  # noqa: F401  (what a gate loads)

stats.paired_diff_interval(4, 1, 30)
stats.mcnemar_exact(9, 2, "two-sided", mid_p=True)
stats.exact_power_paired(200, 0.1, 0.05)
stats.required_n_paired(0.1, 0.05, 0.05, 0.8, "one-sided")
stats.min_detectable_drop_paired(200, 0.1)
stats.wilson_interval(3, 9), stats.clopper_pearson_interval(3, 9)
stats.clustered_interval([-1, 0, 0, 1, -1, 0], [0, 0, 1, 1, 2, 2])
stats.cohen_kappa_ci([1, 2, 2, 1], [1, 2, 1, 1], method="asymptotic")
trend.mann_kendall([1.0, 2.0, 2.0, 3.0] * 20)
usage_deltas.median_interval(np.arange(1.0, 30.0))
power.power_table({"billing": 100})
print(json.dumps(sorted(m for m in ("scipy.stats", "scipy.special") if m in sys.modules)))
"""


def test_the_gates_statistics_never_load_scipy_stats() -> None:
    """scipy.stats costs ~0.2 s of CPU per gate, compare and notebook kernel; scipy.special is
    what they need."""
    done = subprocess.run(
        [sys.executable, "-c", _GATE_STATISTICS],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["scipy.special"]
