"""evalkit.stats.gate_power: sizing on the test the gate runs (one-sided exact McNemar, majority
of replays, design effect of case groups), checked by exact enumeration against scipy and by
seeded simulation of the whole model (replays, majority, groups)."""

from __future__ import annotations

import doctest

import numpy as np
import polars as pl
import pytest
from scipy import stats as sps

from evalkit import stats
from evalkit.compare.gate import decide
from evalkit.compare.policy import GatePolicy
from evalkit.compare.tiers import sizing
from evalkit.stats import gate_power as module


def test_docstring_examples_run() -> None:
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 8 and result.failed == 0


def _exact_power_scipy(n: int, psi: float, delta: float, alpha: float) -> float:
    """Direct enumeration over the discordant count m and the broken count among them, each
    p-value from scipy's binomtest."""
    q = (psi + delta) / (2 * psi)
    total = 0.0
    for m in range(n + 1):
        pm = sps.binom.pmf(m, n, psi)
        if pm < 1e-14 or m == 0:  # no discordant pair: no test can reject
            continue
        crit = next(
            (b for b in range(m + 1) if sps.binomtest(b, m, 0.5, "greater").pvalue <= alpha),
            None,
        )
        if crit is not None:
            total += pm * sps.binom.sf(crit - 1, m, q)
    return total


def test_majority_error_and_observed_flips_match_scipy() -> None:
    for e, k in [(0.1, 1), (0.1, 5), (0.3, 3), (0.2, 4)]:
        fail_pass, pass_fail = stats.majority_error(e, k)
        # a true pass fails when at least half the replays are wrong (ties fail)
        assert fail_pass == pytest.approx(sps.binom.sf(np.ceil(k / 2) - 1, k, e))
        assert pass_fail == pytest.approx(sps.binom.sf(np.floor(k / 2), k, e))
    psi, delta = stats.observed_flips(0.10, 0.05, 0.85, (0.0, 0.0))
    assert (psi, delta) == pytest.approx((0.10, 0.05))
    # symmetric noise e on both sides shrinks the net drop by exactly (1 - 2e)
    _, d = stats.observed_flips(0.10, 0.05, 0.85, (0.05, 0.05))
    assert d == pytest.approx(0.05 * 0.9)


@pytest.mark.parametrize(("psi", "delta", "flake", "replays"), [
    (0.10, 0.05, 0.05, 1), (0.10, 0.05, 0.05, 5), (0.02, 0.02, 0.0, 1), (0.20, 0.10, 0.10, 3),
])  # fmt: skip
def test_required_n_at_the_seeds_figures_reaches_its_exact_power(psi, delta, flake, replays):
    n = stats.required_n_exact(psi, delta, flake=flake, replays=replays)
    psi_o, delta_o = stats.observed_flips(
        psi, delta, 0.85, stats.majority_error(stats.replay_error(flake), replays)
    )
    power = _exact_power_scipy(n, psi_o, delta_o, 0.05)  # scipy, not evalkit's enumeration
    assert power >= 0.80
    # and it stays there: the saw-tooth never drops under the target past n
    assert all(
        stats.exact_power_gate(j, psi, delta, flake=flake, replays=replays) >= 0.8
        for j in range(n, n + 30)
    )


def test_the_old_sizing_was_optimistic_and_the_new_one_is_not() -> None:
    # "365 cases at 1 replay" (Miller's formula, read as the mean) falls short of 0.80 under the
    # gate's own exact test; the exact sizing asks for more
    assert stats.exact_power_gate(365, 0.10, 0.05, flake=0.05) < 0.78
    assert stats.required_n_exact(0.10, 0.05, flake=0.05) > 365
    # the gate's "needs ≈ N" (Connor) had exact power under 0.80; the gate's sizing now reaches it
    connor = stats.required_n_paired(0.02, 0.02, 0.05, 0.8, "one-sided")
    assert stats.exact_power_paired(connor, 0.02, 0.02) < 0.8
    _, _, need, _ = sizing(50, 0, 0, GatePolicy())
    assert stats.exact_power_paired(need, 0.02, 0.02) >= 0.8


def test_exact_power_with_replays_matches_a_seeded_simulation() -> None:
    """The whole model simulated: truth, K replays per side through the flake, majority (ties
    fail), the real exact McNemar; 3000 corpora of 200 cases."""
    rng = np.random.default_rng(45)
    n, psi, delta, flake, k, reps = 200, 0.10, 0.06, 0.10, 3, 3000
    e = stats.replay_error(flake)
    blocks = 0
    for _ in range(reps):
        u = rng.random(n)
        broken = u < (psi + delta) / 2
        fixed = (u >= (psi + delta) / 2) & (u < psi)
        # pass rate 0.85 for the baseline: broken cases pass, fixed fail, the rest fill it up
        rest = ~broken & ~fixed
        p_rest = (0.85 - (psi + delta) / 2) / (1 - psi)
        base_true = np.where(rest, rng.random(n) < p_rest, broken)
        cand_true = np.where(rest, base_true, fixed)
        seen = lambda t: (t[:, None] ^ (rng.random((n, k)) < e)).sum(1) * 2 > k  # noqa: E731
        b, c = seen(base_true), seen(cand_true)
        nb, nf = int((b & ~c).sum()), int((~b & c).sum())
        blocks += nb > nf and stats.mcnemar_exact(nb, nf) <= 0.05
    rate = blocks / reps
    expected = stats.exact_power_gate(n, psi, delta, flake=flake, replays=k)
    assert abs(rate - expected) < 3 * np.sqrt(expected * (1 - expected) / reps)


def test_icc_oneway_matches_the_anova_definition_and_a_simulation() -> None:
    rng = np.random.default_rng(1)
    # beta-binomial groups: ICC of Bernoulli draws sharing a Beta(a, b) rate is 1 / (a + b + 1)
    a, b, groups, m = 2.0, 6.0, 400, 10
    rates = rng.beta(a, b, groups)
    y = (rng.random((groups, m)) < rates[:, None]).astype(float).ravel()
    g = np.repeat(np.arange(groups), m)
    assert stats.icc_oneway(y, g) == pytest.approx(1 / (a + b + 1), abs=0.03)
    # against the one-way ANOVA mean squares from scipy's f_oneway (F = MSB / MSW)
    y2 = rng.normal(size=30) + np.repeat(rng.normal(size=6), 5)
    g2 = np.repeat(np.arange(6), 5)
    f = sps.f_oneway(*[y2[g2 == i] for i in range(6)]).statistic
    assert stats.icc_oneway(y2, g2) == pytest.approx(max(0, (f - 1) / (f + 5 - 1)))
    assert np.isnan(stats.icc_oneway([1.0, 0.0], ["a", "b"]))


def _grouped(n_groups: int, size: int, broken_groups: int = 0) -> pl.DataFrame:
    import polars as pl

    k = n_groups * size
    groups = [f"g{i // size}" for i in range(k)]
    cand = [not (i // size < broken_groups and i % size < size // 2) for i in range(k)]
    return pl.DataFrame({
        "case_id": [f"c{i}" for i in range(k)], "tags": [["t"]] * k,
        "criticality": ["normal"] * k, "base": [True] * k, "cand": cand,
        "base_error": [False] * k, "cand_error": [False] * k, "case_group": groups,
    })  # fmt: skip


def test_grouped_sizing_needs_more_cases_than_ungrouped() -> None:
    # 400 cases in 8 groups of 50 with positive intra-group correlation
    deff = stats.design_effect([50] * 8, 0.05)
    assert deff == pytest.approx(1 + 49 * 0.05)
    ungrouped = stats.required_n_exact(0.10, 0.05)
    grouped = stats.required_n_exact(0.10, 0.05, deff=deff)
    assert grouped > ungrouped and grouped == pytest.approx(ungrouped * deff, abs=1)
    assert stats.exact_power_gate(400, 0.10, 0.05, deff=deff) < stats.exact_power_gate(
        400, 0.10, 0.05
    )
    # through the gate: the same 400 unchanged cases, grouped, need more and say why
    policy = GatePolicy(critical_tags=("t",))
    plain = decide(_grouped(8, 50).with_columns(case_group=pl.lit(None, pl.String)), policy)
    grouped_d = decide(_grouped(8, 50), policy)
    (s_plain,), (s_grouped,) = plain.critical, grouped_d.critical
    assert s_grouped.required_n > s_plain.required_n and s_grouped.power < s_plain.power
    (warn,) = [f for f in grouped_d.findings if f.kind == "underpowered"]
    assert "8 case groups" in warn.message and "assumed (gate.assumed_icc)" in warn.message
