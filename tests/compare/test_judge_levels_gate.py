"""Graded scores gate on their own scale: a calibrated judge's levels, through the real
`decide` (BCa upper bound of the mean level change below -judge_tolerance_levels, and the exact
sign test at alpha), and the levels `compare` puts in the paired frame."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest
from scipy import stats as sps

from evalkit import stats
from evalkit.compare.analysis import RunData, compare
from evalkit.compare.gate import decide
from evalkit.compare.policy import GatePolicy
from evalkit.judges.gating import JudgeCheck, JudgeGating, judge_levels

POLICY = GatePolicy(critical_tags=("tone",), bootstrap_iters=4000)


def _frame(base_levels, cand_levels, tag: str = "tone") -> pl.DataFrame:
    n = len(base_levels)
    return pl.DataFrame({
        "case_id": [f"c{i:03d}" for i in range(n)], "tags": [[tag]] * n,
        "criticality": ["normal"] * n, "base": [True] * n, "cand": [True] * n,
        "base_error": [False] * n, "cand_error": [False] * n,
        "base_judge_level": pl.Series(base_levels, dtype=pl.Float64),
        "cand_judge_level": pl.Series(cand_levels, dtype=pl.Float64),
    })  # fmt: skip


def test_levels_dropping_on_many_cases_block_though_no_verdict_flips() -> None:
    base = [5.0] * 20
    cand = [4.0] * 18 + [5.0] * 2  # still at a min_score of 4: pass/fail sees nothing
    decision = decide(_frame(base, cand), POLICY)
    assert decision.blocked and decision.critical[0].state == "regressed"
    finding = next(f for f in decision.blocking())
    assert finding.slice == "tone:judge-levels" and len(finding.case_ids) == 18
    # the finding's bound is scipy's BCa on the same differences, at the gate's level
    d = np.array(cand) - np.array(base)
    ref = sps.bootstrap((d,), np.mean, n_resamples=4000, method="BCa",
                        confidence_level=POLICY.interval_level(), random_state=0)  # fmt: skip
    assert finding.statistic["hi"] == pytest.approx(ref.confidence_interval.high, abs=0.03)
    assert finding.statistic["p_value"] == stats.mcnemar_exact(18, 0, "greater")
    assert "BCa upper bound" in finding.message and "sign test" in finding.message


def test_tolerance_and_the_setting_are_fixed_rules() -> None:
    base, cand = [5.0] * 20, [4.0] * 18 + [5.0] * 2  # mean drop 0.9 levels
    assert not decide(_frame(base, cand), GatePolicy(("tone",), judge_tolerance_levels=1.0)).blocked
    off = GatePolicy(("tone",), judge_tolerance_levels=None)
    assert not decide(_frame(base, cand), off).blocked
    assert decide(_frame(base, cand), GatePolicy(("tone",))).blocked  # the default, 0.5 levels


def test_no_block_where_the_exact_sign_test_sees_no_evidence() -> None:
    """4 of 8 cases fall by 4 levels: BCa's upper bound alone is far below -0.5, but 4 one-way
    changes have exact p = 0.0625 > alpha: no block (the small-n rule of item 1, graded)."""
    policy = GatePolicy(("tone",), bootstrap_iters=4000, judge_tolerance_levels=0.25)
    base, cand = [5.0] * 8, [1.0] * 4 + [5.0] * 4
    boot = stats.paired_bootstrap(base, cand, 4000, policy.interval_level(), 0, method="bca")
    assert boot.hi < -policy.judge_tolerance_levels  # BCa would block on its own
    assert stats.mcnemar_exact(4, 0, "greater") == 0.0625
    assert not decide(_frame(base, cand), policy).blocked
    five = [1.0] * 5 + [5.0] * 3  # 5 one-way changes: p = 0.031
    assert decide(_frame(base, five), policy).blocked


def test_no_change_or_too_few_judged_cases_never_block() -> None:
    assert not decide(_frame([3.0] * 30, [3.0] * 30), POLICY).blocked  # BCa undefined
    # seven judged cases (the rest unjudged) are fewer than a critical tag needs
    base = [5.0] * 7 + [None] * 13
    cand = [1.0] * 7 + [None] * 13
    assert not decide(_frame(base, cand), POLICY).blocked
    # rises are not regressions
    assert not decide(_frame([2.0] * 20, [4.0] * 20), POLICY).blocked


def test_false_block_rate_under_no_true_change_is_at_most_alpha() -> None:
    """With no true change (each run's level is the case's true level plus independent judge
    noise), the rule blocks at most alpha of the time, within Monte-Carlo error."""
    rng = np.random.default_rng(7)
    policy = GatePolicy(("tone",), bootstrap_iters=1000, judge_tolerance_levels=0.1)
    reps, blocks = 300, 0
    for _ in range(reps):
        n = int(rng.choice([8, 13, 30, 100]))
        truth = rng.integers(1, 6, n)
        noise = rng.choice([-1, 0, 0, 0, 1], (2, n))
        base, cand = np.clip(truth + noise[0], 1, 5), np.clip(truth + noise[1], 1, 5)
        blocks += decide(_frame(base.astype(float), cand.astype(float)), policy).blocked
    se = math.sqrt(policy.alpha * (1 - policy.alpha) / reps)
    assert blocks / reps <= policy.alpha + 3 * se


def _judge_run(run_id: str, levels: dict[str, list[int]]) -> RunData:
    detail = {"judge_model": "m", "rubric": "r.md", "rubric_hash": "h"}
    rows = [(c, k, lv) for c, lvs in levels.items() for k, lv in enumerate(lvs)]
    scores = pl.DataFrame({
        "run_id": [run_id] * len(rows), "case_id": [r[0] for r in rows],
        "replay": [r[1] for r in rows], "scorer": ["judge"] * len(rows), "tier": [3] * len(rows),
        "score": [(r[2] - 1) / 4 for r in rows], "passed": [r[2] >= 4 for r in rows],
        "error": [False] * len(rows),
        "details": [json.dumps(detail | {"judge_score": r[2]}) for r in rows],
    })  # fmt: skip
    outputs = scores.select("run_id", "case_id", "replay").with_columns(
        error=pl.lit(None, pl.String), fail_reason=pl.lit(None, pl.String)
    )
    ids = sorted(levels)
    cases = pl.DataFrame({"run_id": [run_id] * len(ids), "case_id": ids, "case_hash": ids,
                          "tags": [["tone"]] * len(ids), "criticality": ["normal"] * len(ids),
                          "sealed": [False] * len(ids), "source": ["x"] * len(ids)})  # fmt: skip
    manifest = {"model": {"id": "m"}, "replays": 2}
    return RunData(
        run_id=run_id, label=run_id, manifest=manifest, cases=cases, outputs=outputs, scores=scores
    )


def test_compare_puts_the_calibrated_judges_levels_in_the_paired_frame() -> None:
    levels = {f"c{i:02d}": [5, 5] for i in range(12)}
    cand = {c: [3, 4] if i < 10 else [5, 5] for i, c in enumerate(levels)}
    base_run, cand_run = _judge_run("b", levels), _judge_run("c", cand)
    check = JudgeCheck(
        scorer="judge",
        judge_model="m",
        rubric="r.md",
        rubric_hash="h",
        n_scores=24,
        gating=True,
        kappa=0.8,
        calibrated_at=None,
        reason="gates",
    )
    gating = JudgeGating((check,), 0.6)
    assert judge_levels(cand_run.scores, gating)["judge_level"].to_list()[:2] == [3.5, 3.5]
    paired = compare(base_run, cand_run, gating=gating).paired
    assert paired["cand_judge_level"].to_list() == [3.5] * 10 + [5.0] * 2
    assert paired["base_judge_level"].to_list() == [5.0] * 12
    decision = decide(paired, POLICY)
    assert decision.blocked and "tone:judge-levels" in {f.slice for f in decision.blocking()}
    # the same judge, not calibrated: no levels, no judge-level rule
    check = JudgeCheck(
        scorer="judge",
        judge_model="m",
        rubric="r.md",
        rubric_hash="h",
        n_scores=24,
        gating=False,
        kappa=None,
        calibrated_at=None,
        reason="no",
    )
    ungated = JudgeGating((check,), 0.6)
    assert "cand_judge_level" not in compare(base_run, cand_run, gating=ungated).paired.columns
