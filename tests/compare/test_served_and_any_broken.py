"""A regression beyond the statistics: the model the provider served changed (a finding on the
first screen, warn by default, block when the policy says so), and ``gate.block_on_any_broken``
makes even one broken case in a listed tag block (issue 25, items 3 and 5)."""

from __future__ import annotations

import dataclasses

import polars as pl
import pytest
from synthetic_runs import C, make_run

from evalkit.compare.analysis import compare
from evalkit.compare.decision import PairContext
from evalkit.compare.gate import decide
from evalkit.compare.policy import GatePolicy, policy_changes
from evalkit.compare.served import served_from
from evalkit.report.build import build_report, to_text
from evalkit.report.markdown import to_markdown

CASES = [C(f"billing-{i:02d}", "p", ["billing"]) for i in range(20)]


def _with_model(run, model: str):
    return dataclasses.replace(run, outputs=run.outputs.with_columns(model=pl.lit(model)))


def _decide(base, cand, policy: GatePolicy):
    cmp = compare(base, cand)
    served = served_from(base.outputs, cand.outputs, base.manifest, cand.manifest)
    context = PairContext(base.run_id, cand.run_id, cmp.delta, served=served)
    return cmp, decide(cmp.paired, policy, corpus=cand.cases, context=context)


def test_a_served_model_change_warns_on_the_first_screen_and_blocks_when_told():
    base = _with_model(make_run("b", CASES, label="base"), "demo-model")
    cand = _with_model(make_run("c", CASES, label="cand"), "demo-model-2026-11-30")
    cmp, decision = _decide(base, cand, GatePolicy(critical_tags=("billing",)))
    assert decision.status == "PASSED"
    (finding,) = [f for f in decision.findings if f.kind == "served-model"]
    assert finding.severity == "warn" and finding.key == "tier0/-/served-model"
    assert "baseline demo-model (20 outputs) → candidate demo-model-2026-11-30" in finding.message
    report = build_report(cmp, decision)
    first_screen = to_text(report, max_cases=5).split("Broken")[0]
    assert "served model: the provider served another model" in first_screen
    assert "the provider served another model" in to_markdown(report).split("###")[0]
    strict = GatePolicy(critical_tags=("billing",), served_model_change="block")
    assert _decide(base, cand, strict)[1].status == "BLOCKED"


def test_the_same_served_model_says_nothing_and_a_declared_model_change_is_not_drift():
    base = _with_model(make_run("b", CASES, label="base"), "demo-model")
    cand = _with_model(make_run("c", CASES, label="cand"), "demo-model")
    decision = _decide(base, cand, GatePolicy())[1]
    assert not [f for f in decision.findings if f.kind.startswith("served-")]
    moved = dataclasses.replace(
        cand, manifest=cand.manifest | {"model": {"id": "other", "snapshot": "other"}}
    )
    moved = _with_model(moved, "other")
    served = served_from(base.outputs, moved.outputs, base.manifest, moved.manifest)
    assert served.declared and served.cand == (("other", 20),)


def test_a_run_served_something_else_than_its_snapshot_is_named():
    base = make_run("b", CASES, label="base")
    base = dataclasses.replace(
        base, manifest=base.manifest | {"model": {"id": "gpt-x", "snapshot": "gpt-x-2026-01-01"}}
    )
    cand = dataclasses.replace(base, run_id="c", label="cand")
    base, cand = _with_model(base, "gpt-x-2026-01-01"), _with_model(cand, "gpt-x-2026-06-01")
    decision = _decide(base, cand, GatePolicy())[1]
    kinds = {f.kind: f for f in decision.findings if f.kind.startswith("served-")}
    assert set(kinds) == {"served-model", "served-snapshot"}
    assert kinds["served-snapshot"].message == (
        "the candidate was served gpt-x-2026-06-01 (20 outputs), not its snapshot "
        "'gpt-x-2026-01-01'"
    )


def _one_broken():
    cand = [*CASES[:-1], C("billing-19", "f", ["billing"])]
    return make_run("b", CASES, label="base"), make_run("c", cand, label="cand")


def test_one_broken_case_blocks_only_under_block_on_any_broken():
    base, cand = _one_broken()
    plain = GatePolicy(critical_tags=("billing",))
    assert _decide(base, cand, plain)[1].status == "PASSED"  # one flip is no evidence
    strict = dataclasses.replace(plain, block_on_any_broken=("billing",))
    decision = _decide(base, cand, strict)[1]
    assert decision.status == "BLOCKED"
    (finding,) = decision.blocking()
    assert finding.key == "tier2/billing/any-broken/billing-19"
    assert "a policy choice" in finding.message


def test_block_on_any_broken_is_read_from_the_config_and_pinned_like_the_rest():
    policy = GatePolicy.from_suite(["billing"], {"block_on_any_broken": ["billing"]})
    assert policy.block_on_any_broken == ("billing",)
    dropped = policy_changes(
        {"gate": {"block_on_any_broken": ["billing"]}}, {"gate": {"block_on_any_broken": []}}
    )
    assert dropped.looser and "'billing' dropped" in dropped.looser[0]
    added = policy_changes({"gate": {}}, {"gate": {"block_on_any_broken": ["billing"]}})
    assert added.stricter and not added.looser
    warned = policy_changes(
        {"gate": {"served_model_change": "block"}}, {"gate": {"served_model_change": "warn"}}
    )
    assert warned.looser == (
        "gate.served_model_change block → warn (looser: a served-model change no longer blocks)",
    )
    with pytest.raises(Exception, match="served_model_change"):
        GatePolicy.from_suite([], {"served_model_change": "maybe"})
