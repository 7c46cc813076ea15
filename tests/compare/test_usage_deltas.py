"""Paired cost and trajectory regressions: a candidate with the same verdicts but 2.8× the
steps on a critical tag blocks under gate.relative_budgets and passes without; the statistics
are checked against a direct computation and scipy's sign test."""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl
import pytest
from scipy import stats as scipy_stats
from synthetic_runs import C, make_run

from evalkit.compare.analysis import compare
from evalkit.compare.gate import decide
from evalkit.compare.html import to_html
from evalkit.compare.policy import GatePolicy, policy_changes
from evalkit.compare.report import build_report, to_text
from evalkit.compare.usage_deltas import usage_deltas
from evalkit.errors import ConfigError

CASES = [C(f"billing-{i:02d}", "p", ["billing"]) for i in range(20)]
CASES += [C(f"general-{i:02d}", "p", ["general"]) for i in range(20)]


def _steps(run, steps_of):
    steps = pl.Series([steps_of(c) for c in run.outputs["case_id"]], dtype=pl.Int64)
    calls = [
        '[{"function": {"name": "lookup"}}]' if s <= 2 else
        '[' + ", ".join(['{"function": {"name": "lookup"}}'] * int(s)) + ']'
        for s in steps
    ]  # fmt: skip
    outputs = run.outputs.with_columns(steps=steps, tool_calls=pl.Series(calls))
    return dataclasses.replace(run, outputs=outputs)


def _pair():
    base = _steps(make_run("b", CASES, label="base"), lambda c: 2 + int(c[-1]) % 3)
    grown = {f"billing-{i:02d}" for i in range(20)}
    cand = _steps(
        make_run("c", CASES, label="cand"),
        lambda c: round((2 + int(c[-1]) % 3) * (2.8 if c in grown else 1.0)),
    )
    return base, cand


def test_the_same_verdicts_with_2_8x_steps_block_only_under_relative_budgets():
    base, cand = _pair()
    cmp = compare(base, cand)
    assert cmp.paired.filter(pl.col("base") != pl.col("cand")).is_empty()  # no verdict flips
    plain = GatePolicy(critical_tags=("billing", "general"))
    assert decide(cmp.paired, plain).status == "PASSED"
    strict = dataclasses.replace(plain, relative_budgets=(("steps", 1.5),))
    decision = decide(cmp.paired, strict)
    assert decision.status == "BLOCKED"
    (finding,) = decision.blocking()
    assert finding.key == "tier4/billing/relative:steps"  # general did not grow
    assert "gate.relative_budgets allows ×1.5" in finding.message
    assert "20 cases grew and 0 shrank" in finding.message
    report = build_report(cmp, decision)
    text = to_text(report, max_cases=3)
    assert "Paired growth against the baseline" in text and "Steps grew most" in text
    page = to_html(report)
    assert "Paired growth against the baseline" in page and "Steps grew most" in page
    case, before, after, base_calls, cand_calls = report.grew_most[0]
    assert base_calls.count("lookup") <= before
    assert case.startswith("billing-") and after / before >= 2.5
    assert cand_calls.count("lookup") == after and "→" in cand_calls


def test_the_median_ratio_and_sign_test_match_a_direct_computation():
    base, cand = _pair()
    paired = compare(base, cand).paired
    row = usage_deltas(paired, ["billing"], ["steps"]).row(0, named=True)
    part = paired.filter(pl.col("tags").list.contains("billing"))
    ratios = (part["cand_steps"] / part["base_steps"]).to_numpy()
    assert row["estimate"] == np.median(ratios)
    grew = int((part["cand_steps"] > part["base_steps"]).sum())
    shrank = int((part["cand_steps"] < part["base_steps"]).sum())
    expected = scipy_stats.binomtest(grew, grew + shrank, 0.5, "greater").pvalue
    assert (row["grew"], row["shrank"]) == (grew, shrank)
    assert abs(row["p_grew"] - expected) < 1e-12
    assert row["lo"] <= row["estimate"] <= row["hi"]
    # the exact order-statistic interval: coverage 1 - 2 P(B <= j) >= 95%, B ~ Bin(n, 1/2)
    n, ordered = ratios.size, np.sort(ratios)
    j = max(k for k in range(n) if scipy_stats.binom.cdf(k, n, 0.5) <= 0.025)
    assert (row["lo"], row["hi"]) == (ordered[j], ordered[n - 1 - j])


def test_relative_budgets_are_validated_and_pinned():
    policy = GatePolicy.from_suite(["billing"], {"relative_budgets": {"steps": 1.5}})
    assert policy.relative_budgets == (("steps", 1.5),)
    raised = policy_changes(
        {"gate": {"relative_budgets": {"steps": 1.5}}},
        {"gate": {"relative_budgets": {"steps": 3.0}}},
    )
    assert raised.looser == ("gate.relative_budgets.steps 1.5 → 3 (looser: more growth passes)",)
    removed = policy_changes({"gate": {"relative_budgets": {"steps": 1.5}}}, {"gate": {}})
    assert "removed" in removed.looser[0]
    with pytest.raises(ConfigError, match="relative_budgets"):
        GatePolicy.from_suite([], {"relative_budgets": {"wall_time": 2}})


def test_unchanged_usage_shows_no_growth_table():
    base = make_run("b", CASES, label="base")
    cand = make_run("c", CASES, label="cand")
    cmp = compare(base, cand)
    report = build_report(cmp, decide(cmp.paired, GatePolicy(critical_tags=("billing",))))
    assert report.usage_deltas.height > 0 and report.changed_usage() == []
    assert "Paired growth" not in to_text(report, max_cases=3) and "Paired growth" not in to_html(
        report
    )
