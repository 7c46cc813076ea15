"""Critical tags at small n, through the real `decide`: the interval arm agrees with the exact test
(issue 13, item 1), checked exhaustively against scipy's binomial test."""

from __future__ import annotations

import polars as pl
import pytest
from scipy.stats import binomtest

from evalkit.compare.gate import decide
from evalkit.compare.policy import GatePolicy
from evalkit.compare.slices import slices


def _tag(n: int, broken: int, fixed: int = 0, tag: str = "negation") -> pl.DataFrame:
    """``n`` normal cases of one critical tag: ``broken`` pass -> fail, ``fixed`` fail -> pass."""
    base = [True] * broken + [False] * fixed + [True] * (n - broken - fixed)
    cand = [False] * broken + [True] * fixed + [True] * (n - broken - fixed)
    return pl.DataFrame({
        "case_id": [f"{tag}-{i}" for i in range(n)], "tags": [[tag]] * n,
        "criticality": ["normal"] * n, "base": base, "cand": cand,
        "base_error": [False] * n, "cand_error": [False] * n,
    })  # fmt: skip


def _critical(n: int, broken: int, fixed: int = 0):
    decision = decide(_tag(n, broken, fixed), GatePolicy(critical_tags=("negation",)))
    (state,) = decision.critical
    return decision, state


def test_eight_cases_four_broken_none_fixed_does_not_block():
    decision, state = _critical(8, 4)
    assert binomtest(4, 4, 0.5, alternative="greater").pvalue == 0.0625
    assert state.p_value == 0.0625 and not decision.blocked
    assert state.state != "regressed" and state.hi == 0.0  # the bootstrap said -12.5 points
    row = slices(_tag(8, 4)).row(0, named=True)
    assert row["interval_method"] == "tango-exact"


def test_eight_cases_three_broken_does_not_block():
    decision, state = _critical(8, 3)
    assert state.p_value == 0.125 and not decision.blocked and state.hi >= 0.0


def test_eight_cases_five_broken_blocks_on_the_exact_test():
    decision, state = _critical(8, 5)
    assert decision.blocked and state.state == "regressed"
    assert state.p_value == pytest.approx(0.03125)
    (finding,) = decision.blocking()
    assert "exact McNemar p = 0.03125" in finding.message


@pytest.mark.parametrize("n", [8, 9, 13, 20])
def test_no_interval_block_where_exact_p_exceeds_alpha(n: int):
    policy = GatePolicy(critical_tags=("negation",))
    for broken in range(n + 1):
        for fixed in range(n + 1 - broken):
            decision = decide(_tag(n, broken, fixed), policy)
            p = binomtest(broken, broken + fixed, 0.5, "greater").pvalue if broken else 1.0
            want = broken > fixed and p <= policy.alpha
            assert decision.blocked == want, (n, broken, fixed, p)
