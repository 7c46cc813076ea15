"""The tiered gate: the seeds' worked examples, config validation, states, flakes, overrides."""

from __future__ import annotations

import json

import polars as pl
import pytest
from synthetic_runs import MANIFEST, C, make_run, seed000_runs, write_store

from evalkit.compare.analysis import compare
from evalkit.compare.decision import Override
from evalkit.compare.gate import decide, gate_comparison
from evalkit.compare.policy import GatePolicy
from evalkit.compare.power import power_table
from evalkit.compare.slices import slices
from evalkit.errors import ConfigError
from evalkit.store import open_store


def _paired(rows: list[tuple[str, list[str], str, bool | None, bool | None]]) -> pl.DataFrame:
    frame = pl.DataFrame(
        rows, schema=["case_id", "tags", "criticality", "base", "cand"], orient="row"
    )
    return frame.with_columns(
        base_error=pl.col("base").is_null(), cand_error=pl.col("cand").is_null(), sealed=False
    )


def test_seed000_blocks_on_must_pass_and_billing_while_the_aggregate_rises():
    base, cand = seed000_runs()
    cmp = compare(base, cand)
    decision = decide(cmp.paired, GatePolicy.from_suite(["billing"]))
    assert decision.blocked and decision.exit_code == 1
    blocks = {(f.tier, f.slice): f for f in decision.blocking()}
    assert set(blocks) == {(1, "must_pass"), (2, "billing")}
    assert blocks[(1, "must_pass")].case_ids == ("policy-000",)
    billing = blocks[(2, "billing")]
    assert len(billing.case_ids) == 8
    assert billing.statistic["p_value"] == pytest.approx(0.5**8)
    # the seed's bootstrap bound is "near minus three points"; the small-n score interval's -4.0
    assert -0.05 < billing.statistic["hi"] < -0.02
    (state,) = decision.critical
    assert state.state == "regressed" and (state.broken, state.fixed) == (8, 0)
    aggregate = slices(cmp.paired).row(-1, named=True)
    assert aggregate["slice"] == "ALL" and (aggregate["broken"], aggregate["fixed"]) == (12, 18)
    assert aggregate["cand_pass"] - aggregate["base_pass"] == pytest.approx(0.01)
    assert sum(len(f.case_ids) for f in decision.blocking()) == 9  # nine in blocking tiers


def test_seed000_each_blocking_tier_blocks_on_its_own():
    base, cand = seed000_runs()
    paired = compare(base, cand).paired
    only_billing = paired.with_columns(criticality=pl.lit("normal"))
    assert decide(only_billing, GatePolicy(critical_tags=("billing",))).blocked
    only_must_pass = decide(paired, GatePolicy())
    assert only_must_pass.blocked and [f.tier for f in only_must_pass.blocking()] == [1]
    assert not decide(only_billing, GatePolicy()).blocked  # a global threshold would approve


def test_seed003_negation_six_cases_four_flips_does_not_block():
    rows = [(f"neg-{i}", ["negation"], "normal", True, i >= 4) for i in range(6)]
    decision = decide(_paired(rows), GatePolicy())
    assert not decision.blocked
    neg = slices(_paired(rows)).row(0, named=True)
    assert (neg["broken"], neg["fixed"], neg["p_value"]) == (4, 0, 0.0625)
    assert neg["diff_hi"] == 0.0  # the interval agrees with the exact test: no evidence
    assert not any(f.slice == "negation" and f.severity == "block" for f in decision.findings)


def test_a_six_case_critical_tag_is_a_config_error_that_says_why():
    rows = [(f"neg-{i}", ["negation"], "normal", True, True) for i in range(6)]
    policy = GatePolicy.from_suite(["negation"])
    with pytest.raises(ConfigError) as err:
        decide(_paired(rows), policy)
    assert str(err.value) == (
        "critical tag 'negation' has 6 cases; a one-sided exact McNemar test needs 5 one-way "
        "flips to reach p ≤ 0.05, so a critical tag needs ≥ 8 cases — add cases or drop it "
        "from critical_tags"
    )
    with pytest.raises(ConfigError, match="has 0 cases"):
        policy.validate_against({"billing": 40})
    policy.validate_against({"billing": 40}, {"tier": "smoke"})  # a tier leaves it out: fine


def test_a_critical_tag_outside_the_selection_is_reported_not_an_error():
    rows = [(f"smoke-{i}", ["smoke"], "normal", True, True) for i in range(10)]
    policy = GatePolicy.from_suite(["billing", "smoke"])
    with pytest.raises(ConfigError, match="'billing' has 0 cases"):
        decide(_paired(rows), policy)  # the full suite: a critical tag nobody has is an error
    decision = decide(_paired(rows), policy, selection={"tier": "smoke", "tags": ["smoke"]})
    assert decision.status == "PASSED"
    states = {s.tag: s.state for s in decision.critical}
    assert states == {"billing": "not in this selection", "smoke": "underpowered"}
    (note,) = [f for f in decision.findings if f.slice == "billing"]
    assert note.severity == "info" and "not in this selection" in note.message


def test_eight_cases_five_one_way_flips_block_at_p_0_03():
    rows = [(f"neg-{i}", ["negation"], "normal", True, i >= 5) for i in range(8)]
    decision = decide(_paired(rows), GatePolicy.from_suite(["negation"], {"tolerance": 0.5}))
    (finding,) = decision.blocking()
    assert finding.statistic["p_value"] == pytest.approx(0.03125)
    assert "McNemar p = 0.03125" in finding.message and "bootstrap" not in finding.message


@pytest.mark.parametrize(
    ("tags", "gate", "budgets", "match"),
    [
        (["a", "b", "c", "d", "e"], {}, {}, "critical_tags lists 5 tags; at most 4"),
        (["a", "a"], {}, {}, "lists a tag twice"),
        ([], {"alpah": 0.05}, {}, r"gate\.alpah: unknown key"),
        ([], {"alpha": 1.5}, {}, r"gate\.alpha: invalid"),
        ([], {"bootstrap_iters": 10}, {}, r"gate\.bootstrap_iters: invalid"),
        ([], {}, {"mean_latency": {"limit": 1}}, r"budgets\.metric: invalid"),
        ([], {}, {"mean_cost_usd": {"limit": 1, "action": "ignore"}}, r"budgets\.action"),
        ([], {}, {"mean_cost_usd": {"limit": -1}}, r"budgets\.limit: invalid"),
    ],
)
def test_policy_validation_is_one_line_config_errors(tags, gate, budgets, match):
    with pytest.raises(ConfigError, match=match) as err:
        GatePolicy.from_suite(tags, gate, budgets, source="corpus/evalkit.yaml")
    assert "\n" not in str(err.value) and str(err.value).startswith("corpus/evalkit.yaml")


def test_policy_defaults_and_parsing():
    policy = GatePolicy.from_suite(
        ["billing"],
        {"alpha": 0.01, "bootstrap_seed": 7},
        {"mean_latency_ms": {"limit": 900, "action": "warn"}, "mean_cost_usd": 0.01},
    )
    assert (policy.alpha, policy.tolerance, policy.power, policy.bootstrap_seed) == (
        0.01, 0.02, 0.8, 7,
    )  # fmt: skip
    assert [(b.metric, b.limit, b.action) for b in policy.budgets] == [
        ("mean_latency_ms", 900.0, "warn"),
        ("mean_cost_usd", 0.01, "block"),
    ]
    assert policy.min_cases() == 8  # 7 one-way flips reach p <= 0.01, 8 cases still hold them


def test_critical_states_underpowered_names_the_n_it_needs():
    small = [(f"b-{i}", ["billing"], "normal", True, True) for i in range(8)]
    decision = decide(_paired(small), GatePolicy(critical_tags=("billing",)))
    (state,) = decision.critical
    assert state.state == "underpowered" and state.psi_assumed and state.psi == 0.02
    # the exact test: every flip a break at 2 %, it needs 5 broken, P(Bin(n, 0.02) >= 5) >= 0.8
    # (Connor's normal formula said 308, where the exact power is 0.74)
    from scipy import stats as sps

    assert state.required_n == 335
    assert sps.binom.sf(4, 335, 0.02) >= 0.8 > sps.binom.sf(4, 334, 0.02)
    (warning,) = [f for f in decision.findings if f.kind == "underpowered"]
    assert warning.severity == "warn" and "needs ≈335 cases" in warning.message
    assert "assumed" in warning.message and not decision.blocked
    big = [(f"b-{i}", ["billing"], "normal", True, True) for i in range(400)]
    (state,) = decide(_paired(big), GatePolicy(critical_tags=("billing",))).critical
    assert state.state == "no evidence of regression"
    flips = [(f"b-{i}", ["billing"], "normal", i % 10 != 0, i % 10 != 5) for i in range(400)]
    (state,) = decide(_paired(flips), GatePolicy(critical_tags=("billing",))).critical
    assert state.state == "underpowered" and not state.psi_assumed and state.psi == 0.2


def test_must_pass_flake_list_and_unverified_errors():
    rows = [
        ("flaky", [], "must_pass", True, False),
        ("errored", [], "must_pass", True, None),
        ("fine", [], "must_pass", True, True),
    ]
    decision = decide(_paired(rows), GatePolicy(), flakes={"flaky": 0.2})
    by_case = {f.case_ids[0]: f for f in decision.findings if f.tier == 1}
    assert by_case["flaky"].severity == "warn" and "flake list" in by_case["flaky"].message
    assert (
        by_case["errored"].severity == "unverified" and "unverified" in by_case["errored"].message
    )
    assert decision.blocked and "fine" not in by_case
    flakes = pl.DataFrame({"case_id": ["flaky"], "flake_rate": [0.0]})
    assert decide(_paired(rows[:1]), GatePolicy(), flakes=flakes).blocked  # rate 0 = not flaky


def test_budgets_block_or_warn_as_configured():
    rows = [(f"c{i}", [], "normal", True, True) for i in range(10)]
    policy = GatePolicy.from_suite(
        [],
        {},
        {"mean_latency_ms": {"limit": 500}, "mean_cost_usd": {"limit": 0.01, "action": "warn"}},
    )
    observed = {"mean_latency_ms": 650.0, "mean_cost_usd": 0.02, "mean_total_tokens": 10.0}
    decision = decide(_paired(rows), policy, budgets_observed=observed)
    assert decision.blocked
    assert sorted((f.statistic["observed"], f.severity) for f in decision.findings) == [
        (0.02, "warn"), (650.0, "block"),
    ]  # fmt: skip
    assert not decide(_paired(rows), policy, budgets_observed={"mean_latency_ms": 100.0}).blocked


def test_sizing_against_the_corpus_makes_edited_cases_underpowered_not_invalid():
    rows = [(f"b-{i}", ["billing"], "normal", True, True) for i in range(5)]  # 3 more edited
    policy = GatePolicy(critical_tags=("billing",))
    with pytest.raises(ConfigError):
        decide(_paired(rows), policy)
    (state,) = decide(_paired(rows), policy, corpus={"billing": 8}).critical
    assert state.state == "underpowered" and state.n == 5
    (state,) = decide(_paired(rows[:0]), policy, corpus={"billing": 8}).critical
    assert state.state == "underpowered" and state.n == 0 and state.p_value is None


def test_sealed_cases_never_gate():
    rows = [("sealed-mp", [], "must_pass", True, False), ("open", [], "normal", True, True)]
    paired = _paired(rows).with_columns(sealed=pl.col("case_id") == "sealed-mp")
    assert not decide(paired, GatePolicy()).blocked


def test_nothing_paired_is_unverified_not_passed():
    rows = [("sealed-mp", [], "must_pass", True, True)]
    decision = decide(_paired(rows).with_columns(sealed=True), GatePolicy())
    assert decision.status == "UNVERIFIED" and decision.exit_code == 1
    assert "nothing was verified" in decision.summary()


def test_all_errored_candidate_is_unverified_with_causes_and_no_must_pass_case():
    rows = [(f"c{i}", ["general"], "normal", True, None) for i in range(35)]
    errors = pl.DataFrame(
        {"case_id": [f"c{i}" for i in range(35)],
         "error": ["HTTP 400: Invalid model name gpt-5-typo (after 1 attempts)"] * 35}
    )  # fmt: skip
    decision = decide(_paired(rows), GatePolicy(), errors=errors)
    assert decision.status == "UNVERIFIED" and decision.blocked and decision.exit_code == 1
    (finding,) = decision.blocking()
    assert "35 of 35 candidate outputs errored" in finding.message
    assert "35 × HTTP 400: Invalid model name gpt-5-typo" in finding.message
    assert "c0" in finding.message


def test_errors_under_max_error_rate_pass_but_not_in_a_critical_tag():
    rows = [(f"c{i:02d}", ["billing"], "normal", True, True) for i in range(20)]
    rows[0] = ("c00", ["billing"], "normal", True, None)
    lenient = GatePolicy.from_suite([], {"max_error_rate": 0.1})
    assert decide(_paired(rows), lenient).status == "PASSED"
    critical = GatePolicy.from_suite(["billing"], {"max_error_rate": 0.1})
    decision = decide(_paired(rows), critical)
    assert decision.status == "UNVERIFIED"
    assert decision.blocking()[0].key == "tier0/billing/errored/c00"
    assert decide(_paired(rows), GatePolicy()).status == "UNVERIFIED"  # default rate 0


def test_a_regression_beside_missing_evidence_is_blocked_not_unverified():
    rows = [("mp", [], "must_pass", True, False), ("err", [], "normal", True, None)]
    assert decide(_paired(rows), GatePolicy()).status == "BLOCKED"


def test_an_override_accepts_only_the_findings_it_names():
    rows = [("inc-1", [], "must_pass", True, False), ("ok", [], "normal", True, True)]
    first = decide(_paired(rows), GatePolicy())
    (key,) = first.uncovered
    override = Override("ana", "incident replayed by hand", findings=(key,))
    assert decide(_paired(rows), GatePolicy(), overrides=[override]).status == (
        "PASSED WITH OVERRIDE"
    )
    rows.append(("inc-2", [], "must_pass", True, False))  # a new, different blocking finding
    later = decide(_paired(rows), GatePolicy(), overrides=[override])
    assert later.status == "BLOCKED" and later.uncovered == ("tier1/must_pass/failed/inc-2",)
    notes = " ".join(f.message for f in later.findings if f.severity == "info")
    assert "accepted by the override of ana" in notes and "tier1/must_pass/failed/inc-2" in notes
    blanket = Override("bob", "ship it")  # names nothing: accepts nothing
    assert decide(_paired(rows), GatePolicy(), overrides=[blanket]).status == "BLOCKED"


def test_non_critical_slices_warn_with_holm_adjusted_p():
    rows = [(f"a{i}", ["x"], "normal", True, i >= 6) for i in range(30)]
    rows += [(f"b{i}", ["y"], "normal", True, True) for i in range(30)]
    decision = decide(_paired(rows), GatePolicy())
    warned = {f.slice: f for f in decision.findings if f.tier == 3}
    assert set(warned) == {"x", "ALL"} and not decision.blocked
    assert warned["x"].statistic["p_holm"] == pytest.approx(min(1, 3 * 0.5**6))


def test_an_override_with_a_reason_passes_a_blocked_gate_and_is_recorded():
    rows = [("mp", [], "must_pass", True, False)]
    override = Override(
        "ana", "known upstream outage; tracked in INC-12", None, ("tier1/must_pass/failed/mp",)
    )
    decision = decide(_paired(rows), GatePolicy(), overrides=[override, Override("bob", "  ")])
    assert not decision.blocked and decision.overridden and decision.would_block
    assert decision.status == "PASSED WITH OVERRIDE" and decision.exit_code == 0
    assert decision.overrides == (override,)
    data = json.loads(json.dumps(decision.to_dict(), default=str))
    assert data["overrides"][0]["reason"].startswith("known upstream") and data["exit_code"] == 0
    blank = decide(
        _paired(rows),
        GatePolicy(),
        overrides=[Override("bob", " ", None, ("tier1/must_pass/failed/mp",))],
    )
    assert blank.blocked and not blank.overridden


def test_power_table_uses_paired_sizing():
    table = power_table({"billing": 100, "negation": 6, "general": 450}, drop=0.05, psi=0.1)
    rows = {r["slice"]: r for r in table.iter_rows(named=True)}
    assert rows["negation"]["can_gate"] is False and rows["billing"]["can_gate"] is True
    assert rows["general"]["min_detectable_drop"] < rows["billing"]["min_detectable_drop"]
    assert rows["negation"]["min_detectable_drop"] is None  # 6 cases cannot detect even psi
    assert rows["negation"]["min_detectable_collapse"] == 0.87  # only a near-total collapse
    assert rows["billing"]["min_detectable_collapse"] == 0.07
    assert rows["general"]["power"] > rows["billing"]["power"] > rows["negation"]["power"]


def test_gate_comparison_reads_flakes_and_overrides_from_the_store(tmp_path):
    base, cand = seed000_runs()
    write_store(tmp_path / "e.duckdb", [base])
    with open_store(
        tmp_path / "e.duckdb", write=True
    ) as store:  # measured on the baseline, before the PR
        store.save_flakes(MANIFEST["config_hash"], pl.DataFrame({
            "case_id": ["policy-000"], "tags": [["policy"]], "runs": [5], "flips": [2],
            "flake_rate": [0.4], "case_hash": ["h"]}))  # fmt: skip
    write_store(tmp_path / "e.duckdb", [cand])
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        from evalkit.compare.analysis import load_comparison

        cmp = load_comparison(store, "base", "cand")
        assert cmp.paired.height == 600 and cmp.base.label == "base"
        decision = gate_comparison(store, cmp, GatePolicy(critical_tags=("billing",)))
        assert [f.severity for f in decision.findings if f.tier == 1] == ["warn"]
        assert decision.blocked  # billing still blocks
        store.save_override(
            cmp.base.run_id, cmp.cand.run_id, "ana", "billing copy change is intended",
            findings=decision.uncovered,
        )  # fmt: skip
        decision = gate_comparison(store, cmp, GatePolicy(critical_tags=("billing",)))
        assert decision.overridden and not decision.blocked
        assert decision.overrides[0].who == "ana" and decision.overrides[0].created_at is not None


def _with_judge(run, judge_fails: set[str], only_judge: set[str] = frozenset()):
    """``run`` plus an uncalibrated judge check on every case (failing on ``judge_fails``);
    cases in ``only_judge`` keep the judge as their only check."""
    from evalkit.compare.analysis import RunData

    details = json.dumps({"judge_model": "judge-x", "rubric": "r.md", "rubric_hash": "abc"})
    judge = run.scores.filter(pl.col("scorer_index") == 0).with_columns(
        scorer=pl.lit("judge"), scorer_index=pl.lit(2), tier=pl.lit(3), error=pl.lit(False),
        passed=~pl.col("case_id").is_in(list(judge_fails)),
        reason=pl.lit("judge says"), details=pl.lit(details),
    )  # fmt: skip
    judge = judge.with_columns(score=pl.col("passed").cast(pl.Float64))
    kept = run.scores.filter(~pl.col("case_id").is_in(list(only_judge)))
    scores = pl.concat([kept, judge], how="diagonal_relaxed")
    return RunData(
        run_id=run.run_id,
        label=run.label,
        manifest=run.manifest,
        cases=run.cases,
        outputs=run.outputs,
        scores=scores,
    )


def test_uncalibrated_judge_flips_are_reported_per_case_and_tag_while_checks_still_gate():
    from evalkit.compare.analysis import compare
    from evalkit.judges.gating import judge_gating

    cases = [C(f"tone-{i:02d}", "p", ["tone"]) for i in range(10)]
    broken_by_judge = {f"tone-{i:02d}" for i in range(6)}
    base = _with_judge(make_run("b", cases), set(), only_judge={"tone-09"})
    cand = _with_judge(make_run("c", cases), broken_by_judge, only_judge={"tone-09"})
    gating = judge_gating(pl.concat([base.scores, cand.scores]), pl.DataFrame(), 0.6)
    comparison = compare(base, cand, gating=gating)
    # the deterministic checks of the same cases still pair and gate; the judge-only case
    # is neither errored nor paired
    assert comparison.paired.height == 9 and not comparison.paired["cand_error"].any()
    policy = GatePolicy(critical_tags=("tone",))
    decision = decide(comparison.paired, policy, corpus={"tone": 10})
    assert decision.status == "PASSED" and not any(f.slice == "errors" for f in decision.findings)
    from evalkit.compare.gate import ungated_judge_flips

    flips = ungated_judge_flips(comparison.judge_paired, policy)
    by_tag = next(f for f in flips if f.slice == "tone")
    assert "tag 'tone' (critical): 6 case(s) broken, 0 fixed by the judge" in by_tag.message
    assert "judge not calibrated — reported, not gated" in by_tag.message
    per_case = sorted(f.case_ids[0] for f in flips if f.slice == "judge-flip")
    assert per_case == sorted(broken_by_judge)


def test_decision_and_comparison_render_as_formatted_html_in_jupyter():
    from evalkit.compare.analysis import compare

    base, cand = seed000_runs()
    comparison = compare(base, cand)
    decision = decide(comparison.paired, GatePolicy(critical_tags=("billing",)))
    page = decision._repr_html_()
    assert "BLOCKED" in page and "must_pass case policy-000 fails" in page
    table = comparison._repr_html_()
    assert "600 paired cases" in table and "billing" in table and "%" in table
    assert "<script" not in table


def test_an_errored_critical_tag_is_unverified_not_underpowered_and_must_pass_errors_group():
    rows = [(f"b{i}", ["billing"], "must_pass" if i < 3 else "normal", True, None)
            for i in range(10)]  # fmt: skip
    decision = decide(_paired(rows), GatePolicy(critical_tags=("billing",)))
    (state,) = decision.critical
    assert state.state == "unverified"
    assert not [f for f in decision.findings if "underpowered" in f.message]
    (must_pass,) = [f for f in decision.findings if f.tier == 1]
    assert must_pass.case_ids == ("b0", "b1", "b2") and "3 must_pass case(s) errored" in (
        must_pass.message
    )
