"""evalkit.stats.totals: several metrics from one draw of resamples give each the result it gets
alone; the t intervals match scipy (the mean difference exactly, the ratio of totals against
scipy's paired percentile bootstrap) and hold their stated coverage in a seeded simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from evalkit.stats.totals import paired_totals, paired_totals_many, paired_totals_t


def _usage(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    base = rng.gamma(2.0, 300.0, n).round()
    return base, (base * rng.lognormal(0.1, 0.4, n)).round()


@pytest.mark.parametrize("seed", [0, 7, 2**40])
def test_one_draw_for_many_metrics_is_each_metrics_own_bootstrap(seed: int) -> None:
    rng = np.random.default_rng(seed)
    pairs = [_usage(rng, 300), _usage(rng, 300), _usage(rng, 41), _usage(rng, 300)]
    pairs.append((pairs[0][0] / 1000.0, pairs[0][1] / 700.0))  # cost-like, not integers
    pairs.append((np.zeros(41), rng.poisson(2.0, 41).astype(float)))  # a zero baseline
    many = paired_totals_many(pairs, iters=700, level=0.9, seed=seed)
    assert many == [paired_totals(b, c, iters=700, level=0.9, seed=seed) for b, c in pairs]
    assert {r.method for r in many} == {"paired bootstrap"} and many[0].seed == seed


def test_a_generator_seed_draws_one_int_and_records_it() -> None:
    pairs = [_usage(np.random.default_rng(1), 50), _usage(np.random.default_rng(2), 50)]
    many = paired_totals_many(pairs, iters=300, seed=np.random.default_rng(5))
    again = [paired_totals(b, c, iters=300, seed=many[0].seed) for b, c in pairs]
    assert many == again and paired_totals_many([], iters=10) == []


@pytest.mark.parametrize("n", [2, 5, 30, 400])
@pytest.mark.parametrize("level", [0.8, 0.95])
def test_the_mean_difference_interval_is_scipys_paired_t(n: int, level: float) -> None:
    b, c = _usage(np.random.default_rng(n), n)
    r = paired_totals_t(b, c, level)
    ci = sps.ttest_rel(c, b).confidence_interval(level)
    assert (r.diff_lo, r.diff_hi) == pytest.approx((ci.low, ci.high), rel=1e-9, abs=1e-9)
    assert r.diff == pytest.approx(float((c - b).mean()))
    assert (r.method, r.iters, r.level, r.n) == ("t", 0, level, n)


def test_the_ratio_interval_agrees_with_scipys_paired_percentile_bootstrap() -> None:
    rng = np.random.default_rng(11)
    for n in (300, 2000):
        b, c = _usage(rng, n)
        r = paired_totals_t(b, c)
        boot = sps.bootstrap(
            (b, c), lambda x, y, axis=-1: y.sum(axis) / x.sum(axis), paired=True,
            vectorized=True, n_resamples=4000, method="percentile", random_state=1,
        ).confidence_interval  # fmt: skip
        width = boot.high - boot.low
        assert abs(r.lo - boot.low) < 0.1 * width and abs(r.hi - boot.high) < 0.1 * width
        mine = paired_totals(b, c, iters=4000, seed=1)
        assert abs(mine.lo - boot.low) < 0.1 * width and abs(mine.hi - boot.high) < 0.1 * width


@pytest.mark.parametrize("level", [0.8, 0.95])
def test_the_t_intervals_cover_the_true_ratio_and_difference_at_their_level(level: float) -> None:
    # seeded coverage: gamma usage times an independent lognormal factor, n = 120;
    # E[cand] / E[base] = E[factor] = exp(mu + s^2 / 2), E[cand - base] = E[base](E[factor] - 1)
    rng = np.random.default_rng(2026)
    mu, s, n, reps = 0.1, 0.4, 120, 1500
    ratio = math.exp(mu + s * s / 2)
    diff = 2.0 * 300.0 * (ratio - 1)
    hits_ratio = hits_diff = 0
    for _ in range(reps):
        b = rng.gamma(2.0, 300.0, n)
        c = b * rng.lognormal(mu, s, n)
        r = paired_totals_t(b, c, level)
        hits_ratio += r.lo <= ratio <= r.hi
        hits_diff += r.diff_lo <= diff <= r.diff_hi
    slack = 3 * math.sqrt(level * (1 - level) / reps)
    for hits in (hits_ratio, hits_diff):
        assert abs(hits / reps - level) < slack


def test_the_t_interval_edges() -> None:
    zero = paired_totals_t([0.0] * 10, [3.0] * 10)
    assert (zero.ratio, zero.lo, zero.hi) == (math.inf, math.inf, math.inf)
    assert (zero.diff, zero.diff_lo, zero.diff_hi) == (3.0, 3.0, 3.0) and zero.zero_base == 10
    nothing = paired_totals_t([0.0] * 5, [0.0] * 5)
    assert (nothing.ratio, nothing.lo, nothing.hi) == (1.0, 1.0, 1.0)
    wide = paired_totals_t([1.0, 1.0, 1.0], [0.0, 0.0, 9.0])  # the delta method dips below 0
    assert wide.lo == 0.0 < wide.hi
    with pytest.raises(ValueError, match=">= 2 cases"):
        paired_totals_t([1.0], [2.0])
    with pytest.raises(ValueError, match=">= 0"):
        paired_totals_many([([1.0, -1.0], [1.0, 1.0])], iters=10)
