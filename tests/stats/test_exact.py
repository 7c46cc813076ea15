"""evalkit.stats.exact: exact McNemar (and mid-p) against scipy and exact fractions, Holm against
statsmodels."""

from __future__ import annotations

import doctest
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats as sps

import evalkit.stats
from evalkit.stats import (
    exact,
    exact_min_flips,
    holm,
    mcnemar,
    mcnemar_exact,
)

ALTERNATIVES = ("greater", "less", "two-sided")


def test_docstring_examples_run() -> None:
    for module in (evalkit.stats, exact):
        result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
        assert result.attempted >= 1 and result.failed == 0, module.__name__


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
            # two-sided: P(|X - n/2| > |b - n/2|) + P(|X - n/2| = |b - n/2|) / 2; when b = c only
            # one outcome is as extreme as the observed one, so that is 1 - P(X = b) / 2
            two = 1 - half_point if broken == fixed else 2 * min(upper, lower)
            ref = {"greater": upper, "less": lower, "two-sided": two}
            assert mcnemar_exact(broken, fixed, alternative, mid_p=True) == pytest.approx(
                float(ref[alternative]), rel=1e-12
            )
    # mid-p against scipy.stats.binom, too: P[X > b] + pmf(b) / 2
    assert mcnemar_exact(7, 3, mid_p=True) == pytest.approx(
        sps.binom.sf(7, 10, 0.5) + 0.5 * sps.binom.pmf(7, 10, 0.5), rel=1e-12
    )


def test_two_sided_mid_p_with_equal_counts_matches_scipy_pmf() -> None:
    # Item 3 of issue 13: b = c returned 1.0; Fagerland et al.'s mid-p is 1 - P(X = b) / 2.
    assert mcnemar_exact(1, 1, "two-sided", mid_p=True) == 0.75
    for b in range(0, 60):
        for c in range(0, 60):
            n = b + c
            if n == 0:
                continue
            k = np.arange(n + 1)
            pmf = sps.binom.pmf(k, n, 0.5)
            dist, obs = np.abs(k - n / 2), abs(b - n / 2)
            eq = np.isclose(dist, obs)
            ref = pmf[(dist > obs) & ~eq].sum() + 0.5 * pmf[eq].sum()
            got = mcnemar_exact(b, c, "two-sided", mid_p=True)
            assert got == pytest.approx(ref, rel=1e-9, abs=1e-300), (b, c)
            if b == c:
                assert got == pytest.approx(1 - 0.5 * sps.binom.pmf(b, n, 0.5), rel=1e-12)
                assert got < 1.0
    assert mcnemar_exact(600, 600, "two-sided", mid_p=True) == pytest.approx(
        1 - 0.5 * sps.binom.pmf(600, 1200, 0.5), rel=1e-12
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
