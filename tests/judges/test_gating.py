"""The gate rule for judges: reported, not gated, until calibrated at the policy's kappa."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import polars as pl

from evalkit.compare.analysis import load_comparison
from evalkit.compare.gate import gate_comparison
from evalkit.compare.policy import GatePolicy
from evalkit.judges.calibration_record import Calibration
from evalkit.store import OUTPUT_SCHEMA, SCORE_SCHEMA, open_store

DETAILS = json.dumps({"judge_model": "judge-x", "rubric": "rubrics/tone.md", "rubric_hash": "abc"})


class _Case:
    def __init__(self, case_id: str) -> None:
        self.id, self.tags, self.hash = case_id, ("tone",), "h-" + case_id
        self.criticality, self.sealed, self.provenance = "must_pass", False, {}
        self.source = "cases/a.yaml:1"

    def input_json(self) -> str:
        return "{}"


def _run(store, run_id: str, judge_passes: bool) -> None:
    manifest = {"run": {"run_id": run_id, "label": run_id}, "config_hash": "c", "model": {}}
    store.create_run(manifest, [_Case("tone-001")])
    now = dt.datetime.now(dt.UTC)
    output = {name: [None] for name in OUTPUT_SCHEMA}
    output |= {"run_id": [run_id], "case_id": ["tone-001"], "replay": [0], "text": ["Hi."],
               "tool_calls": ["[]"], "steps": [1], "latency_ms": [1.0], "prompt_tokens": [1],
               "completion_tokens": [1], "cost_usd": [0.0], "cached": [False],
               "created_at": [now]}  # fmt: skip
    scores = pl.DataFrame(
        {
            "run_id": [run_id] * 2, "scoring_id": [f"{run_id}/s0"] * 2,
            "case_id": ["tone-001"] * 2, "replay": [0, 0], "scorer": ["contains", "judge"],
            "scorer_index": [0, 1], "tier": [0, 3], "score": [1.0, 1.0 if judge_passes else 0.0],
            "passed": [True, judge_passes], "error": [False, False],
            "reason": ["found", "judge 5/5" if judge_passes else "judge 1/5: rude"],
            "details": [None, DETAILS],
        },
        schema=SCORE_SCHEMA,
    )  # fmt: skip
    store.write_results(pl.DataFrame(output, schema=OUTPUT_SCHEMA), scores)


def _calibration(kappa: float) -> Calibration:
    return Calibration(
        judge_model="judge-x", judge_snapshot=None, rubric="rubrics/tone.md", rubric_hash="abc",
        scorer="judge", n=200, kappa=kappa, kappa_lo=kappa - 0.1, kappa_hi=kappa + 0.1,
        weighted_kappa=None, accuracy=0.9, macro_f1=0.85, alpha=None,
        position_consistency=None, created_at=dt.datetime.now(dt.UTC), run_id=None,
    )  # fmt: skip


def test_gate_blocks_on_a_judge_only_once_it_is_calibrated(tmp_path: Path) -> None:
    policy = GatePolicy(judge_kappa_min=0.6)
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        _run(store, "base", judge_passes=True)
        _run(store, "cand", judge_passes=False)

        uncalibrated = load_comparison(store, "base", "cand", judge_kappa_min=0.6)
        decision = gate_comparison(store, uncalibrated, policy)
        assert not decision.blocked  # the must_pass case fails only on an uncalibrated judge
        notes = [f.message for f in decision.findings if f.slice == "judge"]
        assert len(notes) == 1 and "no calibration record" in notes[0]
        assert "reported, not gated" in notes[0]

        store.save_calibration(_calibration(0.41).to_row())
        weak = gate_comparison(store, load_comparison(store, "base", "cand"), policy)
        assert not weak.blocked
        assert any("0.41" in f.message for f in weak.findings if f.slice == "judge")

        store.save_calibration(_calibration(0.82).to_row())
        calibrated = load_comparison(store, "base", "cand", judge_kappa_min=0.6)
        decision = gate_comparison(store, calibrated, policy)
        assert decision.blocked
        assert [f.tier for f in decision.findings if f.severity == "block"] == [1]
        assert not calibrated.judge_notes


def _record(**changes: object) -> Calibration:
    from dataclasses import replace

    return replace(_calibration(0.82), **changes)


def test_nine_labels_cannot_let_a_judge_gate(tmp_path: Path) -> None:
    policy = GatePolicy(judge_kappa_min=0.6)
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        _run(store, "base", judge_passes=True)
        _run(store, "cand", judge_passes=False)
        store.save_calibration(_record(n=9, kappa=0.74, kappa_lo=0.0, kappa_hi=1.0).to_row())
        decision = gate_comparison(store, load_comparison(store, "base", "cand"), policy)
    assert not decision.blocked
    (note,) = [f.message for f in decision.findings if f.slice == "judge"]
    assert "kappa 0.74 [0.00, 1.00], n=9" in note and "needs ≥ 100 labelled items" in note


def test_a_high_kappa_with_a_low_interval_bound_does_not_gate(tmp_path: Path) -> None:
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        _run(store, "base", judge_passes=True)
        _run(store, "cand", judge_passes=False)
        store.save_calibration(_record(n=150, kappa=0.7, kappa_lo=0.55).to_row())
        decision = gate_comparison(store, load_comparison(store, "base", "cand"), GatePolicy())
    assert not decision.blocked
    (note,) = [f.message for f in decision.findings if f.slice == "judge"]
    assert "lower bound is not ≥ 0.60" in note


def test_a_calibration_of_another_snapshot_or_prompt_does_not_apply(tmp_path: Path) -> None:
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        _run(store, "base", judge_passes=True)
        _run(store, "cand", judge_passes=False)
        store.save_calibration(_record(judge_snapshot="judge-x-2026-01").to_row())
        decision = gate_comparison(store, load_comparison(store, "base", "cand"), GatePolicy())
        assert not decision.blocked
        (note,) = [f.message for f in decision.findings if f.slice == "judge"]
        assert "a record exists for another: recalibrate" in note
        store.save_calibration(_record(judge_prompt="sha256:000000000000").to_row())
        decision = gate_comparison(store, load_comparison(store, "base", "cand"), GatePolicy())
        assert not decision.blocked
