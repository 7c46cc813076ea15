"""The gate judges the candidate against the pin: must_pass is absolute, the corpus delta is
accounted for per critical tag, the baseline's gaps are gaps, an override accepts one kind of
finding, a loosened policy and blocked siblings are shown (issue 22)."""

from __future__ import annotations

import polars as pl
from synthetic_runs import C, make_run

from evalkit.compare.analysis import compare
from evalkit.compare.decision import Override, PairContext
from evalkit.compare.evidence import side_errors
from evalkit.compare.gate import decide
from evalkit.compare.policy import GatePolicy
from evalkit.report.build import build_report

BILLING = GatePolicy(critical_tags=("billing",))


def _gate(base, cand, policy=BILLING, rebaseline=None, **context):
    cmp = compare(base, cand, rebaseline=rebaseline)
    ctx = PairContext(base.run_id, cand.run_id, cmp.delta, side_errors(base, cmp.paired),
                      cmp.rebaseline_blocker, **context)  # fmt: skip
    return cmp, decide(cmp.paired, policy, corpus=cand.cases, context=ctx)


def _two(base_cases: list[C], cand_cases: list[C]):
    return make_run("b", base_cases, label="base"), make_run("c", cand_cases, label="cand")


def test_an_edited_must_pass_case_that_fails_in_the_candidate_blocks():
    common = [C(f"billing-{i:02d}", "p", ["billing"]) for i in range(20)]
    base, cand = _two(
        [*common, C("inc-1", "p", ["policy"], "must_pass")],
        [*common, C("inc-1", "f", ["policy"], "must_pass", hash="reworded")],
    )
    cmp, decision = _gate(base, cand)
    assert "inc-1" not in cmp.paired["case_id"].to_list()  # edited: never paired as such
    assert decision.status == "BLOCKED"
    (finding,) = [f for f in decision.blocking() if f.tier == 1]
    assert finding.case_ids == ("inc-1",) and finding.key == "tier1/must_pass/failed/inc-1"
    assert "edited in this pull request" in finding.message


def test_a_new_must_pass_case_that_fails_blocks_and_one_that_errors_is_unverified():
    common = [C(f"billing-{i:02d}", "p", ["billing"]) for i in range(20)]
    base, cand = _two(common, [*common, C("inc-new", "f", [], "must_pass")])
    assert _gate(base, cand)[1].status == "BLOCKED"
    base, cand = _two(common, [*common, C("inc-new", "e", [], "must_pass")])
    decision = _gate(base, cand)[1]
    assert decision.status == "UNVERIFIED"
    assert decision.blocking()[0].key == "tier1/must_pass/errored/inc-new"
    base, cand = _two(common, [*common, C("inc-new", "p", [], "must_pass")])
    assert _gate(base, cand)[1].status == "PASSED"


def test_a_demoted_must_pass_case_is_still_checked():
    common = [C(f"billing-{i:02d}", "p", ["billing"]) for i in range(20)]
    base, cand = _two(
        [*common, C("inc-1", "p", [], "must_pass")], [*common, C("inc-1", "f", [], hash="h2")]
    )
    assert _gate(base, cand)[1].status == "BLOCKED"


def test_a_removed_must_pass_case_stops_the_gate_until_an_override_accepts_it():
    common = [C(f"billing-{i:02d}", "p", ["billing"]) for i in range(20)]
    base, cand = _two([*common, C("inc-1", "p", [], "must_pass")], common)
    cmp, decision = _gate(base, cand)
    assert decision.status == "UNVERIFIED"
    (key,) = decision.uncovered
    assert key == "tier1/must_pass/removed/inc-1"
    ctx = PairContext("b", "c", cmp.delta)
    accepted = decide(cmp.paired, BILLING, overrides=[Override("ana", "retired", None, (key,))],
                      corpus=cand.cases, context=ctx)  # fmt: skip
    assert accepted.status == "PASSED WITH OVERRIDE"


def _reworded_regression():
    """A critical tag of 20 cases; the candidate breaks 6, and the PR rewords exactly those."""
    base_cases = [C(f"billing-{i:02d}", "p", ["billing"]) for i in range(20)]
    cand_cases = [
        C(f"billing-{i:02d}", "f", ["billing"], hash="reworded") if i < 6 else c
        for i, c in enumerate(base_cases)
    ]
    return _two(base_cases, cand_cases)


def test_a_critical_tag_whose_regressed_cases_were_reworded_is_not_passed_as_underpowered():
    base, cand = _reworded_regression()
    # Before: the six dropped out of pairing and the tag, 14 cases with no flips, passed.
    plain = decide(compare(base, cand).paired, BILLING, corpus=cand.cases)
    assert plain.status == "PASSED"
    cmp, decision = _gate(base, cand)
    assert decision.status == "UNVERIFIED"
    (finding,) = [f for f in decision.blocking() if f.slice == "billing"]
    assert finding.key.startswith("tier0/billing/corpus-delta/")
    assert "6 edited" in finding.message and "--rebaseline" in finding.message
    assert decision.corpus_delta[0] | {"share": 0} == {
        "tag": "billing", "edited": 6, "added": 0, "removed": 0, "rebaselined": 0,
        "unaccounted": 6, "share": 0,
    }  # fmt: skip
    assert "6 edited" in build_report(cmp, decision).delta_line()


def test_the_reworded_regression_blocks_once_the_baseline_configuration_ran_the_new_wording():
    base, cand = _reworded_regression()
    # The baseline configuration passes the reworded cases; the candidate fails them.
    rerun = make_run("rb", [C(f"billing-{i:02d}", "p", ["billing"], hash="reworded")
                            for i in range(6)], label="rebaseline:b")  # fmt: skip
    cmp, decision = _gate(base, cand, rebaseline=rerun)
    assert set(cmp.paired.filter(pl.col("origin") == "rebaselined")["case_id"]) == {
        f"billing-{i:02d}" for i in range(6)
    }
    assert decision.status == "BLOCKED"
    (state,) = decision.critical
    assert (state.state, state.broken, state.fixed, state.n) == ("regressed", 6, 0, 20)
    assert decision.corpus_delta[0]["rebaselined"] == 6


def test_a_python_baseline_whose_code_changed_names_the_promotion_instead_of_rebaselining():
    base, cand = _reworded_regression()
    for run, code in ((base, "v1"), (cand, "v2")):
        run.manifest.update(provider={"name": "python"}, system={"code_fingerprint": code},
                            rerun={})  # fmt: skip
    decision = _gate(base, cand)[1]
    message = next(f.message for f in decision.blocking() if f.slice == "billing")
    assert decision.status == "UNVERIFIED"
    assert "--rebaseline cannot" in message and "Python system" in message


def test_a_small_edit_under_the_changed_share_still_gates():
    base_cases = [C(f"billing-{i:02d}", "p", ["billing"]) for i in range(40)]
    cand_cases = [C("billing-00", "p", ["billing"], hash="typo"), *base_cases[1:]]
    assert _gate(*_two(base_cases, cand_cases))[1].status == "PASSED"


def test_an_edited_case_that_failed_in_the_baseline_is_flagged():
    base_cases = [C(f"billing-{i:02d}", "f" if i == 0 else "p", ["billing"]) for i in range(40)]
    cand_cases = [C("billing-00", "p", ["billing"], hash="h2"), *base_cases[1:]]
    decision = _gate(*_two(base_cases, cand_cases))[1]
    flagged = [f for f in decision.findings if f.kind == "edited-failing"]
    assert [f.case_ids for f in flagged] == [("billing-00",)]
    assert "never edit a case because it failed" in flagged[0].message


def test_an_all_errored_baseline_is_unverified_and_pairs_nothing():
    base_cases = [C(f"billing-{i:02d}", "e", ["billing"]) for i in range(20)]
    cand_cases = [C(f"billing-{i:02d}", "p", ["billing"]) for i in range(20)]
    cmp, decision = _gate(*_two(base_cases, cand_cases))
    assert decision.status == "UNVERIFIED" and decision.n_verified == 0
    assert {f.kind for f in decision.blocking()} == {"baseline-errored"}
    messages = " ".join(f.message for f in decision.blocking())
    assert "20 of 20 baseline outputs errored" in messages
    report = build_report(cmp, decision)
    assert report.counts_line().startswith("0 paired cases (+20 with an errored side)")


def test_a_killed_baseline_counts_its_missing_outputs_as_errored():
    cases = [C(f"billing-{i:02d}", "p", ["billing"]) for i in range(20)]
    base, cand = _two(cases, cases)
    killed = base.outputs.filter(pl.col("case_id") != "billing-03")
    base = type(base)(base.run_id, base.label, base.manifest, base.cases, killed, base.scores)
    decision = _gate(base, cand)[1]
    assert decision.status == "UNVERIFIED"
    assert any(f.kind == "baseline-errored" and "billing-03" in f.case_ids
               for f in decision.blocking())  # fmt: skip


def test_an_override_for_an_outage_does_not_accept_the_same_case_failing():
    outage = decide(_rows(None), GatePolicy())
    assert set(outage.uncovered) == {"tier1/must_pass/errored/mp", "tier0/errors/errored/mp"}
    accepted = [Override("ana", "outage", None, outage.uncovered)]
    assert decide(_rows(None), GatePolicy(), overrides=accepted).status == "PASSED WITH OVERRIDE"
    failing = decide(_rows(False), GatePolicy(), overrides=accepted)
    assert failing.status == "BLOCKED" and failing.uncovered == ("tier1/must_pass/failed/mp",)


def test_a_latency_override_does_not_accept_a_token_overrun():
    policy = GatePolicy.from_suite(
        [], {}, {"mean_latency_ms": 50, "mean_total_tokens": {"limit": 10}}
    )
    observed = {"mean_latency_ms": 100.0, "mean_total_tokens": 10.0}
    latency = decide(_rows(True), policy, budgets_observed=observed)
    (key,) = latency.uncovered
    assert key == "tier4/-/budget:mean_latency_ms"
    worse = {"mean_latency_ms": 100.0, "mean_total_tokens": 20.0}
    later = decide(_rows(True), policy, budgets_observed=worse,
                   overrides=[Override("ana", "slow is fine", None, (key,))])  # fmt: skip
    assert later.status == "BLOCKED" and later.uncovered == ("tier4/-/budget:mean_total_tokens",)


def _rows(cand: bool | None) -> pl.DataFrame:
    """A must_pass case whose candidate side is ``cand`` beside a normal case passing both."""
    return pl.DataFrame(
        {"case_id": ["mp", "ok"], "tags": [["x"], ["x"]], "criticality": ["must_pass", "normal"],
         "base": [True, True], "cand": [cand, True], "base_error": [False, False],
         "cand_error": [cand is None, False], "sealed": [False, False]}
    )  # fmt: skip


def test_a_loosened_policy_is_unverified_and_names_the_promotion():
    changes = ("gate.alpha 0.05 → 0.001 (looser)",)
    ctx = PairContext("b1", "c1", policy_changes=changes, policy_source="promoted by ana")
    decision = decide(_rows(True), GatePolicy(), context=ctx)
    assert decision.status == "UNVERIFIED"
    (finding,) = decision.blocking()
    assert finding.key == "tier0/policy/loosened"
    assert "evalkit baseline promote b1 --policy" in finding.message and "alpha" in finding.message


def test_a_blocked_sibling_blocks_by_default_and_report_only_shows_it():
    ctx = PairContext(siblings=(("r1", "BLOCKED"), ("r2", "PASSED"), ("r3", "PASSED")))
    strict = decide(_rows(True), GatePolicy(), context=ctx)  # issue 42: block is the default
    assert strict.status == "BLOCKED" and strict.blocking()[0].case_ids == ("r1",)
    shown = decide(_rows(True), GatePolicy(siblings="report"), context=ctx)
    (finding,) = [f for f in shown.findings if f.kind == "siblings"]
    assert shown.status == "PASSED" and finding.severity == "warn"
    assert "3 other run(s) of this configuration" in finding.message
    assert "1 BLOCKED, 2 PASSED" in finding.message
    # An unverified sibling (an outage) is shown, never a block by itself.
    gap = PairContext(siblings=(("r1", "UNVERIFIED"), ("r2", "PASSED")))
    assert decide(_rows(True), GatePolicy(), context=gap).status == "PASSED"


def test_siblings_report_is_a_loosening_of_the_pinned_policy():
    from evalkit.compare.policy import policy_changes

    changes = policy_changes({"gate": {}}, {"gate": {"siblings": "report"}})
    assert changes.looser == (
        "gate.siblings block → report (looser: a blocked sibling run no longer blocks)",
    )
