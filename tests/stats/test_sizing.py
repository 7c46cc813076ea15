"""evalkit.stats.sizing: paired, unpaired and replay sample sizes against statsmodels, closed
forms and simulation."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
from scipy import stats as sps

from evalkit import stats
from evalkit.stats import (
    exact_power_paired,
    mcnemar_exact,
    min_detectable_drop_paired,
    required_n,
    required_n_paired,
    required_n_unpaired,
)
from evalkit.stats import sizing as module


def test_docstring_examples_run() -> None:
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 5 and result.failed == 0


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


# --- two rates, Wald, replays (issue 13, item 4) -----------------------------------------------


def test_required_n_two_rates_matches_statsmodels() -> None:
    from statsmodels.stats.proportion import samplesize_proportions_2indep_onetail

    for p1 in (0.5, 0.7, 0.8, 0.9, 0.95, 0.99):
        for d in (-0.2, -0.1, -0.05, -0.02, 0.01, 0.03):
            p2 = p1 + d
            if not 0 <= p2 <= 1:
                continue
            for sides, alt in (("two-sided", "two-sided"), ("one-sided", "larger")):
                for power in (0.8, 0.9):
                    ref = samplesize_proportions_2indep_onetail(
                        p2 - p1, p1, power, alpha=0.05, alternative=alt
                    )
                    got = stats.required_n_two_rates(p1, p2, 0.05, power, sides)
                    assert got == math.ceil(ref - 1e-9), (p1, p2, sides, power)
    # equal-rate form is the two-rate form with both variances at the mean rate
    assert abs(stats.required_n_two_rates(0.9, 0.85) - required_n_unpaired(0.875, 0.05)) <= 3
    for bad in [(0.5, 0.5), (-0.1, 0.5), (0.5, 1.2)]:
        with pytest.raises(ValueError):
            stats.required_n_two_rates(*bad)


def test_required_n_paired_wald_closed_form_and_relation_to_connor() -> None:
    z = sps.norm.isf(0.025) + sps.norm.ppf(0.8)
    for psi in (0.02, 0.05, 0.1, 0.3, 0.6):
        for delta in (0.01, 0.02, 0.05):
            if delta > psi:
                continue
            want = math.ceil(z**2 * (psi - delta**2) / delta**2 - 1e-9)
            got = stats.required_n_paired_wald(psi, delta)
            assert got == max(1, want)
            assert got <= required_n_paired(psi, delta)  # Connor's null variance is larger
    with pytest.raises(ValueError):
        stats.required_n_paired_wald(0.05, 0.1)  # a net change larger than the flip rate


def test_required_n_paired_wald_reaches_its_power_by_simulation() -> None:
    rng = np.random.default_rng(7)
    psi, delta = 0.2, 0.1
    n = stats.required_n_paired_wald(psi, delta, alternative="one-sided")
    z_crit = sps.norm.isf(0.05)
    pb, pf = (psi + delta) / 2, (psi - delta) / 2
    draws = rng.multinomial(n, [pb, pf, 1 - psi], size=20_000)
    d = (draws[:, 0] - draws[:, 1]) / n
    var = ((draws[:, 0] + draws[:, 1]) / n - d**2) / n
    with np.errstate(divide="ignore", invalid="ignore"):
        power = np.mean(d / np.sqrt(var) > z_crit)
    assert power == pytest.approx(0.8, abs=0.04)


def test_required_n_replays_is_miller_eq_9_and_reaches_its_power() -> None:
    z = sps.norm.isf(0.025) + sps.norm.ppf(0.8)
    for omega2, sigma2, k in [(0.04, 0.1, 1), (0.04, 0.1, 5), (0.01, (0.2, 0.1), (3, 7))]:
        s_a, s_b = sigma2 if isinstance(sigma2, tuple) else (sigma2, sigma2)
        k_a, k_b = k if isinstance(k, tuple) else (k, k)
        want = math.ceil(z**2 * (omega2 + s_a / k_a + s_b / k_b) / 0.05**2 - 1e-9)
        assert stats.required_n_replays(0.05, omega2, sigma2, k) == want
    # many replays: only the between-case term is left
    assert stats.required_n_replays(0.05, 0.04, 0.1, 10**9) == math.ceil(z**2 * 0.04 / 0.05**2)
    # simulation: per-case pass probabilities, K Bernoulli replays, a z-test on the means
    rng = np.random.default_rng(3)
    k, delta = 4, 0.1
    p_base = rng.beta(2, 2, 200_000)  # a population of cases
    p_cand = np.clip(p_base - delta + rng.normal(0, 0.1, p_base.size), 0, 1)
    diff = p_cand - p_base
    omega2 = float(diff.var())
    sig_a, sig_b = float((p_base * (1 - p_base)).mean()), float((p_cand * (1 - p_cand)).mean())
    n = stats.required_n_replays(float(-diff.mean()), omega2, (sig_a, sig_b), k)
    hits, reps = 0, 2000
    for _ in range(reps):
        idx = rng.integers(0, p_base.size, n)
        a = rng.binomial(k, p_base[idx]) / k
        b = rng.binomial(k, p_cand[idx]) / k
        d = b - a
        hits += abs(d.mean() / (d.std(ddof=1) / math.sqrt(n))) > sps.norm.isf(0.025)
    assert hits / reps == pytest.approx(0.8, abs=0.04)
    for bad in [dict(delta=0.0), dict(omega2=-1.0), dict(replays=0)]:
        args = dict(delta=0.05, omega2=0.04, sigma2=0.1, replays=1) | bad
        with pytest.raises(ValueError):
            stats.required_n_replays(**args)  # type: ignore[arg-type]
