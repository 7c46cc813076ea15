"""Paired cost and trajectory regressions on totals: a candidate with the same verdicts but 2.8×
the steps on a critical tag blocks under gate.relative_budgets and passes without; a heavy tail
(10 % of cases at 10× the tokens) and a zero-inflated growth (steps 0 → 3) block a 1.25 budget,
which a median of per-case ratios passed; the statistics are checked against a direct
computation, a seeded bootstrap's coverage and scipy's sign test."""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl
import pytest
from scipy import stats as scipy_stats
from synthetic_runs import C, make_run

from evalkit import stats
from evalkit.compare.analysis import compare
from evalkit.compare.gate import decide
from evalkit.compare.policy import GatePolicy, policy_changes
from evalkit.compare.usage_deltas import usage_deltas, usage_tail
from evalkit.errors import ConfigError
from evalkit.report.build import build_report, growth_text, to_text
from evalkit.report.html import to_html

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
    assert "20 cases grew, 0 shrank" in finding.message and "total ×" in finding.message
    report = build_report(cmp, decision)
    text = to_text(report, max_cases=3)
    assert "Paired growth against the baseline" in text and "Steps grew most" in text
    page = to_html(report)
    assert "Paired growth against the baseline" in page and "Steps grew most" in page
    case, before, after, base_calls, cand_calls = report.grew_most[0]
    assert base_calls.count("lookup") <= before
    assert case.startswith("billing-") and after / before >= 2.5
    assert cand_calls.count("lookup") == after and "→" in cand_calls


def test_the_ratio_of_totals_and_sign_test_match_a_direct_computation():
    base, cand = _pair()
    paired = compare(base, cand).paired
    row = usage_deltas(paired, ["billing"], ["steps"]).row(0, named=True)
    part = paired.filter(pl.col("tags").list.contains("billing"))
    b, c = part["base_steps"].to_numpy(), part["cand_steps"].to_numpy()
    assert row["estimate"] == pytest.approx(c.sum() / b.sum())
    assert row["mean_diff"] == pytest.approx((c - b).mean())
    grew = int((c > b).sum())
    shrank = int((c < b).sum())
    expected = scipy_stats.binomtest(grew, grew + shrank, 0.5, "greater").pvalue
    assert (row["grew"], row["shrank"]) == (grew, shrank)
    assert abs(row["p_grew"] - expected) < 1e-12
    assert row["lo"] <= row["estimate"] <= row["hi"]
    assert row["diff_lo"] <= row["mean_diff"] <= row["diff_hi"]


def test_the_median_latency_keeps_its_exact_order_statistic_interval():
    rng = np.random.default_rng(3)
    n = 30
    frame = _frame(n, base_latency_ms=rng.uniform(500, 900, n), cand_latency_ms=rng.uniform(
        600, 1000, n))  # fmt: skip
    row = usage_deltas(frame, ["t"], ["latency_p50_s"]).row(0, named=True)
    d = np.sort((frame["cand_latency_ms"] - frame["base_latency_ms"]).to_numpy() / 1000)
    assert row["estimate"] == pytest.approx(np.median(d))
    j = max(k for k in range(n) if scipy_stats.binom.cdf(k, n, 0.5) <= 0.025)
    assert (row["lo"], row["hi"]) == pytest.approx((d[j], d[n - 1 - j]), abs=1e-12)


def _frame(n: int, **columns) -> pl.DataFrame:
    return pl.DataFrame({
        "case_id": [f"c{i:03d}" for i in range(n)], "tags": [["t"]] * n,
        "criticality": ["normal"] * n, "base": [True] * n, "cand": [True] * n,
        "base_error": [False] * n, "cand_error": [False] * n,
        **{k: np.asarray(v, dtype=float) for k, v in columns.items()},
    })  # fmt: skip


def _tokens_budget(frame: pl.DataFrame, metric: str = "total_tokens", limit: float = 1.25):
    policy = GatePolicy(critical_tags=("t",), relative_budgets=((metric, limit),))
    return decide(frame, policy)


def test_a_heavy_tail_of_ten_times_the_tokens_blocks_a_1_25_budget():
    # 10 % of 100 cases use 10× the tokens: the median per-case ratio is 1.0, the total 1.9×
    rng = np.random.default_rng(0)
    base = rng.integers(800, 1200, 100).astype(float)
    cand = base.copy()
    cand[:10] *= 10
    decision = _tokens_budget(_frame(100, base_total_tokens=base, cand_total_tokens=cand))
    assert decision.status == "BLOCKED"
    (finding,) = decision.blocking()
    assert finding.key == "tier4/t/relative:total_tokens"
    assert finding.statistic["lo"] > 1.25
    assert finding.statistic["estimate"] == pytest.approx(cand.sum() / base.sum())
    tail = usage_tail(_frame(100, base_total_tokens=base, cand_total_tokens=cand), k=10)
    assert {c for c, *_ in tail} == {f"c{i:03d}" for i in range(10)}
    assert sum(share for *_, share in tail) == pytest.approx(1.0, abs=0.01)


def test_steps_from_zero_to_three_block_a_1_25_budget():
    # all zero baselines: the ratio is infinite, the mean difference +3 per case
    decision = _tokens_budget(_frame(60, base_steps=[0] * 60, cand_steps=[3] * 60), "steps")
    (finding,) = decision.blocking()
    assert finding.statistic["zero_base"] == 60 and finding.statistic["mean_diff"] == 3.0
    # zero-inflated: 40 cases 0 -> 3 beside 20 unchanged at 2 steps (total ×4)
    mixed = _frame(60, base_steps=[0] * 40 + [2] * 20, cand_steps=[3] * 40 + [2] * 20)
    (finding,) = _tokens_budget(mixed, "steps").blocking()
    assert finding.statistic["estimate"] == pytest.approx(160 / 40)
    assert "40 from a baseline of 0" in finding.message


def test_unchanged_or_slightly_grown_totals_pass():
    rng = np.random.default_rng(1)
    base = rng.integers(800, 1200, 100).astype(float)
    noisy = base * rng.uniform(0.9, 1.2, 100)  # ×1.05 on average: under 1.25
    assert _tokens_budget(_frame(100, base_total_tokens=base, cand_total_tokens=noisy)).status \
        == "PASSED"  # fmt: skip


def test_the_paired_bootstrap_interval_covers_the_true_ratio_of_totals():
    # seeded coverage check: lognormal usage, true ratio of expected totals 1.3
    rng = np.random.default_rng(7)
    reps, covered = 200, 0
    for _ in range(reps):
        b = rng.lognormal(7, 0.8, 80)
        c = b * 1.3 * rng.lognormal(-0.02, 0.2, 80)  # E[c] = 1.3 E[b]
        r = stats.paired_totals(b, c, iters=400, level=0.90, seed=rng)
        covered += r.lo <= 1.3 * np.exp(-0.02 + 0.02) <= r.hi
    assert covered / reps >= 0.90 - 2 * np.sqrt(0.09 / reps)


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


def test_only_the_budgeted_rows_of_critical_tags_are_bootstrapped_and_keep_their_values():
    rng = np.random.default_rng(9)
    n = 400
    base = rng.gamma(2.0, 300.0, n).round()
    frame = _frame(
        n, base_total_tokens=base, cand_total_tokens=(base * rng.lognormal(0.2, 0.3, n)).round(),
        base_steps=rng.poisson(2, n), cand_steps=rng.poisson(3, n),
        base_latency_ms=rng.gamma(3, 300, n), cand_latency_ms=rng.gamma(3, 330, n),
    ).with_columns(tags=pl.Series([["t"] if i % 2 else ["u"] for i in range(n)]))  # fmt: skip
    every = usage_deltas(frame, ["t", "u"], iters=600, seed=4)  # all bootstrapped, as before
    some = usage_deltas(frame, ["t", "u"], iters=600, seed=4, bootstrap=["steps", "latency_s"])
    assert every.height == some.height == 12 and every["interval"].unique().sort().to_list() == [
        "order statistics", "paired bootstrap"]  # fmt: skip
    keyed = {(r["slice"], r["metric"]): r for r in every.iter_rows(named=True)}
    for row in some.iter_rows(named=True):
        boot = row["slice"] != "ALL" and row["metric"] in ("steps", "latency_s", "latency_p50_s")
        if boot:  # a budgeted row: what every row got before, seed for seed
            assert row == keyed[(row["slice"], row["metric"])]
        elif row["metric"] != "latency_p50_s":
            part = frame if row["slice"] == "ALL" else frame.filter(
                pl.col("tags").list.contains(row["slice"]))  # fmt: skip
            column = {"total_tokens": "total_tokens", "steps": "steps"}.get(row["metric"])
            scale = 1.0 if column else 1000.0
            b = part[f"base_{column or 'latency_ms'}"].to_numpy() / scale
            c = part[f"cand_{column or 'latency_ms'}"].to_numpy() / scale
            ci = scipy_stats.ttest_rel(c, b).confidence_interval()
            assert row["interval"] == "t"
            assert (row["diff_lo"], row["diff_hi"]) == pytest.approx((ci.low, ci.high))
        expected = "order statistics" if row["metric"] == "latency_p50_s" else (
            "paired bootstrap" if boot else "t")  # fmt: skip
        assert row["interval"] == expected


def test_the_report_shows_the_gates_budgeted_row_and_marks_the_t_rows():
    base, cand = _pair()
    cmp = compare(base, cand)
    policy = GatePolicy(critical_tags=("billing", "general"), relative_budgets=(("steps", 1.5),))
    decision = decide(cmp.paired, policy)
    (finding,) = decision.blocking()
    report = build_report(cmp, decision)
    rows = {(r["slice"], r["metric"]): r for r in report.usage_deltas.iter_rows(named=True)}
    shown = rows[("billing", "steps")]
    assert shown["interval"] == "paired bootstrap"
    assert {k: shown[k] for k in finding.statistic} == finding.statistic
    assert rows[("ALL", "steps")]["interval"] == "t"
    text = to_text(report, max_cases=3)
    assert "(t)" in text  # ALL's steps grew too: shown with its t interval, marked
    assert not growth_text(shown).endswith("(t)") and growth_text(rows[("ALL", "steps")]).endswith(
        "(t)"
    )


def test_the_median_and_its_interval_are_python_s_without_a_list_of_floats() -> None:
    import statistics

    import numpy as np

    from evalkit.compare.usage_deltas import _median, _sorted, median_interval
    from evalkit.stats._dist import half_lower, half_ppf

    def old_interval(values: np.ndarray, level: float) -> tuple[float | None, float | None]:
        n, tail = values.size, (1 - level) / 2
        j = half_ppf(tail, n)
        if half_lower(j, n) > tail:
            j -= 1
        if j < 0:
            return None, None
        ordered = sorted(values.tolist())
        return float(ordered[j]), float(ordered[n - 1 - j])

    rng = np.random.default_rng(48)
    samples = [rng.normal(size=n) for n in (2, 3, 10, 11, 999, 1000)]
    samples += [rng.integers(-3, 4, size=n).astype(float) for n in (2, 7, 500)]  # ties
    samples += [np.array([0.0, -0.0, 0.0, -0.0]), np.array([1.0, float("nan"), 0.5, 2.0])]
    for values in samples:
        got, want = _median(values), statistics.median(values.tolist())
        assert (got == want and np.signbit(got) == np.signbit(want)) or (
            got != got and want != want
        )
        for level in (0.8, 0.95):
            assert median_interval(values, level) == old_interval(values, level)
    assert isinstance(_sorted(samples[0]), np.ndarray)  # numpy's sort, no Python floats
    assert isinstance(_sorted(samples[-1]), list)  # a NaN: Python's own order
