"""evalkit.stats.sizing: paired, unpaired and replay sample sizes against statsmodels, closed
forms and simulation."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
from scipy import stats as sps

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
