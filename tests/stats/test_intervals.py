"""evalkit.stats.intervals: proportion intervals against statsmodels; the paired small-n interval
against a numerical score-test inversion, exact coverage and the exact McNemar test."""

from __future__ import annotations

import doctest

import pytest

from evalkit.stats import (
    Interval,
    clopper_pearson_interval,
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
