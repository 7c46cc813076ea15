"""The Mann–Kendall trend test against references computed independently: the null distribution
of S by enumerating every permutation (small n), and scipy's Kendall tau of the values against
their index (the same S, tau-b and, with ties, the same normal approximation)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from evalkit.stats.trend import EXACT_MAX_N, _inversions, mann_kendall


def _s(values: np.ndarray) -> int:
    """S the slow way: every later-greater pair minus every later-smaller pair."""
    n = len(values)
    return sum(int(np.sign(values[j] - values[i])) for i in range(n) for j in range(i + 1, n))


def _enumerated_p(values: list[float], alternative: str) -> float:
    """The exact p-value from every ordering of the values (no ties): the permutation test."""
    observed = _s(np.asarray(values, dtype=float))
    null = [_s(np.asarray(p, dtype=float)) for p in itertools.permutations(values)]
    upper = sum(s >= observed for s in null) / len(null)
    lower = sum(s <= observed for s in null) / len(null)
    if alternative == "greater":
        return upper
    if alternative == "less":
        return lower
    return min(1.0, 2 * min(upper, lower))


@pytest.mark.parametrize("n", [3, 4, 5, 6, 7])
@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
def test_exact_p_equals_the_enumerated_permutation_distribution(n: int, alternative: str) -> None:
    rng = np.random.default_rng(n)
    for _ in range(6):
        values = [float(v) for v in rng.permutation(n) * 1.5 + 2]
        result = mann_kendall(values, alternative)
        assert result.method == "exact"
        assert result.s == _s(np.asarray(values))
        assert result.p_value == pytest.approx(_enumerated_p(values, alternative), abs=1e-12)


@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
def test_no_ties_agrees_with_scipy_kendalltau_exact(alternative: str) -> None:
    rng = np.random.default_rng(7)
    for n in (3, 8, 12, 20, 30):
        for _ in range(5):
            values = rng.normal(size=n) + rng.uniform(-0.2, 0.2) * np.arange(n)
            ours = mann_kendall(values, alternative)
            ref = stats.kendalltau(np.arange(n), values, method="exact", alternative=alternative)
            assert ours.tau == pytest.approx(ref.statistic, abs=1e-12)
            assert ours.p_value == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
def test_ties_use_the_normal_approximation_scipy_uses(alternative: str) -> None:
    rng = np.random.default_rng(11)
    for n in (4, 6, 10, 25, 80):
        for _ in range(5):
            values = rng.integers(0, 4, size=n) + (rng.uniform() < 0.5) * np.arange(n) // 3
            if np.all(values == values[0]):
                continue
            ours = mann_kendall(values, alternative)
            ref = stats.kendalltau(
                np.arange(n), values, method="asymptotic", alternative=alternative
            )
            assert ours.method == "normal"
            assert ours.s == _s(values.astype(float))
            assert ours.tau == pytest.approx(ref.statistic, abs=1e-12)
            assert ours.p_value == pytest.approx(ref.pvalue, rel=1e-9)


def test_long_series_without_ties_falls_back_to_the_normal_approximation() -> None:
    values = np.arange(EXACT_MAX_N + 1, dtype=float)[::-1]
    result = mann_kendall(values, "less")
    ref = stats.kendalltau(np.arange(len(values)), values, method="asymptotic", alternative="less")
    assert result.method == "normal"
    assert result.p_value == pytest.approx(ref.pvalue, rel=1e-9)
    assert mann_kendall(values[:EXACT_MAX_N], "less").method == "exact"


def test_inversion_table_is_the_mahonian_numbers() -> None:
    assert _inversions(1) == (1,)
    assert _inversions(4) == (1, 3, 5, 6, 5, 3, 1)  # OEIS A008302, row 4
    for n in (5, 10, 60):
        row = _inversions(n)
        assert len(row) == n * (n - 1) // 2 + 1
        assert sum(row) == math.factorial(n)
        assert row == row[::-1]


def test_edge_cases() -> None:
    for values in ([], [1.0], [1.0, 2.0], [4, 4, 4, 4]):
        result = mann_kendall(values)
        assert (result.p_value, result.method, result.s) == (1.0, "none", 0)
    assert mann_kendall([1, 2, 3]).p_value == pytest.approx(1 / 6)  # one ordering in six
    assert mann_kendall([3, 2, 1]).p_value == 1.0
    with pytest.raises(ValueError, match="NaN"):
        mann_kendall([1.0, float("nan"), 2.0])
    with pytest.raises(ValueError, match="alternative"):
        mann_kendall([1, 2, 3], "up")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="one-dimensional"):
        mann_kendall([[1, 2], [3, 4]])


def test_an_outlier_moves_s_by_at_most_twice_n_minus_one() -> None:
    growing = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    spiked = [*growing[:3], 100.0, *growing[4:]]  # now above the 4 values after it
    assert mann_kendall(growing).s - mann_kendall(spiked).s == 2 * 4
    worst = [100.0, *growing[1:]]  # the first value above all 7 others: every pair flips
    assert mann_kendall(growing).s - mann_kendall(worst).s == 2 * (len(growing) - 1)
