"""A judge check gates in a pair only when both runs were scored by the same calibrated judge:
a calibrated judge on one side and another (or none) on the other never yields gated "fixed"
(or "broken") cases; the check is reported, not gated, naming both judges."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import polars as pl
import pytest

from evalkit.compare.analysis import RunData, compare, load_comparison
from evalkit.compare.gate import decide, gate_comparison
from evalkit.compare.policy import GatePolicy
from evalkit.judges.calibration_record import Calibration
from evalkit.judges.gating import gated_scores, judge_gating
from evalkit.store import CALIBRATION_SCHEMA, OUTPUT_SCHEMA, SCORE_SCHEMA, open_store

IDS = [f"tone-{i:02d}" for i in range(20)]
POLICY = GatePolicy(critical_tags=("tone",))
_A = {"judge_model": "judge-a", "judge_snapshot": "2025-01", "judge_prompt": "p1",
      "rubric": "rubrics/tone.md", "rubric_hash": "abc123"}  # fmt: skip
A, B, A2 = (
    _A,
    _A | {"judge_model": "judge-b", "judge_snapshot": "2025-06"},
    _A | {"judge_snapshot": "2025-06"},
)
#: The candidate really breaks six cases on its deterministic check...
BROKEN = set(IDS[:6])
#: ... and the baseline's judge fails eight others, which the candidate's judge passes.
JUDGE_FAILS = set(IDS[6:14])


def _run(run_id: str, judge: dict[str, str] | None, contains_fails=(), judge_fails=()) -> RunData:
    rows = [(c, "contains", 0, c not in contains_fails, None) for c in IDS]
    if judge is not None:
        rows += [(c, "judge", 3, c not in judge_fails, json.dumps(judge)) for c in IDS]
    scores = pl.DataFrame({
        "run_id": run_id, "case_id": [r[0] for r in rows], "replay": 0,
        "scorer": [r[1] for r in rows], "tier": [r[2] for r in rows],
        "score": [float(r[3]) for r in rows], "passed": [r[3] for r in rows], "error": False,
        "details": pl.Series([r[4] for r in rows], dtype=pl.String),
    })  # fmt: skip
    outputs = pl.DataFrame(
        {"run_id": run_id, "case_id": IDS, "replay": 0, "error": None, "fail_reason": None},
        schema_overrides={"error": pl.String, "fail_reason": pl.String},
    )
    cases = pl.DataFrame({"run_id": run_id, "case_id": IDS, "case_hash": IDS,
                          "tags": [["tone"]] * len(IDS), "criticality": "normal",
                          "sealed": False, "source": "cases/tone.yaml"})  # fmt: skip
    return RunData(
        run_id=run_id,
        label=run_id,
        manifest={"model": {"id": "m"}},
        cases=cases,
        outputs=outputs,
        scores=scores,
    )


def _calibration(judge: dict[str, str], kappa: float = 0.85) -> Calibration:
    return Calibration(
        judge_model=judge["judge_model"], judge_snapshot=judge["judge_snapshot"],
        rubric=judge["rubric"], rubric_hash=judge["rubric_hash"], scorer="judge", n=200,
        kappa=kappa, kappa_lo=kappa - 0.1, kappa_hi=kappa + 0.1, weighted_kappa=None,
        accuracy=0.9, macro_f1=0.85, alpha=None, position_consistency=None,
        created_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), run_id=None,
        judge_prompt=judge["judge_prompt"],
    )  # fmt: skip


def _calibrations(*judges: dict[str, str]) -> pl.DataFrame:
    return pl.DataFrame([_calibration(j).to_row() for j in judges], schema=CALIBRATION_SCHEMA)


def _fixed(paired: pl.DataFrame) -> list[str]:
    return paired.filter(~pl.col("base") & pl.col("cand"))["case_id"].to_list()


def _broken(paired: pl.DataFrame) -> list[str]:
    return paired.filter(pl.col("base") & ~pl.col("cand"))["case_id"].to_list()


def test_the_same_calibrated_judge_on_both_sides_gates_as_before() -> None:
    base = _run("b", A, judge_fails=JUDGE_FAILS)
    cand = _run("c", A, contains_fails=BROKEN)
    gating = judge_gating(base.scores, _calibrations(A), 0.6, candidate=cand.scores)
    assert gating.gating == {("judge", "abc123")} and gating.reasons == ()
    (check,) = gating.checks
    assert check.side == "both" and check.n_scores == 40 and "— gates" in check.reason
    paired = compare(base, cand, gating=gating).paired
    assert sorted(_fixed(paired)) == sorted(JUDGE_FAILS)  # the judge's verdicts count
    assert sorted(_broken(paired)) == sorted(BROKEN)
    assert "base_judge_level" in paired.columns
    assert not decide(paired, POLICY).blocked  # 6 broken against 8 fixed: no evidence


@pytest.mark.parametrize(
    ("base_judge", "cand_judge", "calibrated", "says"),
    [
        (A, B, (A,), "by judge-a@2025-01 [prompt p1, rubric abc123] (calibrated) and the "
         "candidate was judged by judge-b@2025-06 [prompt p1, rubric abc123] (no calibration)"),
        (A, A2, (A, A2), "by judge-a@2025-01 [prompt p1, rubric abc123] (calibrated) and the "
         "candidate was judged by judge-a@2025-06 [prompt p1, rubric abc123] (calibrated)"),
        (A, A | {"rubric_hash": "def456"}, (A,), "(calibrated) and the candidate was judged "
         "by judge-a@2025-01 [prompt p1, rubric def456] (no calibration)"),
        (A, A | {"judge_prompt": "p2"}, (A,), "and the candidate was judged by judge-a@2025-01 "
         "[prompt p2,"),
        (A, None, (A,), "(calibrated) and the candidate was not judged by it"),
    ],
    ids=["calibrated-vs-uncalibrated", "two-calibrations", "rubric-edited", "prompt", "no-judge"],
)  # fmt: skip
def test_a_judge_that_differs_between_the_sides_gates_nothing(
    base_judge, cand_judge, calibrated, says
) -> None:
    """Where the candidate's judge differs, the baseline judge's fails would be gated "fixed"
    cases that outweigh the candidate's real breakage: the check gates on neither side."""
    base = _run("b", base_judge, judge_fails=JUDGE_FAILS)
    cand = _run("c", cand_judge, contains_fails=BROKEN)
    cals = _calibrations(*calibrated)
    gating = judge_gating(base.scores, cals, 0.6, candidate=cand.scores)
    assert gating.gating == frozenset()
    assert {c.side for c in gating.checks} <= {"baseline", "candidate"}
    (reason,) = gating.reasons  # one reason for the check, however many judges it names
    assert reason.startswith("judge rubric rubrics/tone.md: the baseline was judged by judge-a")
    assert says in reason and reason.endswith("— reported, not gated")
    comparison = compare(base, cand, gating=gating)
    assert _fixed(comparison.paired) == [] and reason in comparison.judge_notes
    assert sorted(_broken(comparison.paired)) == sorted(BROKEN)
    assert "base_judge_level" not in comparison.paired.columns
    assert decide(comparison.paired, POLICY).blocked  # the real breakage is no longer hidden
    # the judge's own flips are still reported, not lost
    assert comparison.judge_paired is not None and comparison.judge_paired.height > 0


def test_a_judge_calibrated_only_on_the_candidate_side_cannot_block() -> None:
    """The other direction: the baseline's uncalibrated judge dropped, the candidate's
    calibrated one kept, would make every judge fail of the candidate a gated "broken" case."""
    base = _run("b", B)
    cand = _run("c", A, judge_fails=JUDGE_FAILS)
    gating = judge_gating(base.scores, _calibrations(A), 0.6, candidate=cand.scores)
    assert gating.gating == frozenset()
    assert "the baseline was judged by judge-b@2025-06" in gating.reasons[0]
    assert (
        "candidate was judged by judge-a@2025-01 [prompt p1, rubric abc123] (calibrated)"
        in (gating.reasons[0])
    )
    paired = compare(base, cand, gating=gating).paired
    assert _broken(paired) == [] and not decide(paired, POLICY).blocked


def test_a_side_judged_by_two_judges_does_not_gate_even_if_the_other_matches_one() -> None:
    """Per identity, the calibrated judge-a is on both sides; but the candidate's cases judged
    by judge-b would lose their judge verdict while the baseline's keep theirs."""
    base = _run("b", A, judge_fails=JUDGE_FAILS)
    cand = _run("c", A, contains_fails=BROKEN)
    mixed = cand.scores.with_columns(
        details=pl.when(pl.col("case_id").is_in(list(JUDGE_FAILS)) & (pl.col("tier") == 3))
        .then(pl.lit(json.dumps(B)))
        .otherwise(pl.col("details"))
    )
    gating = judge_gating(base.scores, _calibrations(A), 0.6, candidate=mixed)
    assert gating.gating == frozenset()
    assert (
        "the candidate was judged by judge-a@2025-01 [prompt p1, rubric abc123] (calibrated), "
        in (gating.reasons[0])
    )
    mixed_run = dataclasses.replace(cand, run_id="c", label="c", scores=mixed)
    paired = compare(base, mixed_run, gating=gating).paired
    assert _fixed(paired) == []


def test_two_rubrics_of_one_suite_are_separate_checks() -> None:
    """A second judge rubric that only one side has does not ungate the rubric both share."""
    other = A | {"rubric": "rubrics/facts.md", "rubric_hash": "fff000"}
    base, cand = _run("b", A, judge_fails=JUDGE_FAILS), _run("c", A)
    extra = pl.concat([cand.scores, cand.scores.filter(pl.col("tier") == 3).with_columns(
        details=pl.lit(json.dumps(other)))])  # fmt: skip
    gating = judge_gating(base.scores, _calibrations(A, other), 0.6, candidate=extra)
    assert gating.gating == {("judge", "abc123")}
    (reason,) = gating.reasons
    assert reason.startswith("judge rubric rubrics/facts.md: the baseline was not judged by it")
    assert gated_scores(extra, gating).filter(pl.col("tier") == 3).height == 20


def test_without_sides_a_single_frame_is_judged_as_before() -> None:
    """One run's scores (a notebook, the calibration table) have no sides: per judge identity."""
    scores = pl.concat([_run("b", A).scores, _run("c", B).scores])
    gating = judge_gating(scores, _calibrations(A), 0.6)
    assert gating.gating == {("judge", "abc123")}
    assert {c.side for c in gating.checks} == {None}
    assert "has no calibration record" in gating.reasons[0]


# --------------------------------------------------------------------------- from the store


class _Case:
    def __init__(self, case_id: str) -> None:
        self.id, self.tags, self.hash = case_id, ("tone",), "h-" + case_id
        self.criticality, self.sealed, self.provenance = "normal", False, {}
        self.source = "cases/tone.yaml:1"

    def input_json(self) -> str:
        return "{}"


def _store_run(store, run: RunData) -> None:
    manifest = {"run": {"run_id": run.run_id, "label": run.run_id}, "config_hash": "c",
                "model": {}}  # fmt: skip
    store.create_run(manifest, [_Case(c) for c in IDS])
    output = {name: [None] * len(IDS) for name in OUTPUT_SCHEMA}
    output |= {"run_id": [run.run_id] * len(IDS), "case_id": IDS, "replay": [0] * len(IDS),
               "text": ["Hi."] * len(IDS), "tool_calls": ["[]"] * len(IDS),
               "steps": [1] * len(IDS), "latency_ms": [1.0] * len(IDS),
               "prompt_tokens": [1] * len(IDS), "completion_tokens": [1] * len(IDS),
               "cost_usd": [0.0] * len(IDS), "cached": [False] * len(IDS),
               "created_at": [dt.datetime.now(dt.UTC)] * len(IDS)}  # fmt: skip
    scores = run.scores.with_columns(
        scoring_id=pl.lit(f"{run.run_id}/s0"),
        scorer_index=pl.col("tier").replace_strict({0: 0, 3: 1}),
        reason=pl.lit("r"),
    )
    store.write_results(
        pl.DataFrame(output, schema=OUTPUT_SCHEMA),
        pl.DataFrame(scores.select(list(SCORE_SCHEMA)), schema=SCORE_SCHEMA),
    )


def test_the_gate_from_the_store_does_not_count_the_baseline_judges_fails_as_fixed(
    tmp_path: Path,
) -> None:
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        _store_run(store, _run("base", A, judge_fails=JUDGE_FAILS))
        _store_run(store, _run("cand", B, contains_fails=BROKEN))
        store.save_calibration(_calibration(A).to_row())
        comparison = load_comparison(store, "base", "cand", judge_kappa_min=0.6)
        assert _fixed(comparison.paired) == []
        assert any("judged by judge-a@2025-01" in n for n in comparison.judge_notes)
        assert gate_comparison(store, comparison, POLICY).blocked


def test_where_no_judge_could_gate_each_keeps_its_own_reason() -> None:
    """Two uncalibrated judges: nothing gates either way; each says what to calibrate."""
    base, cand = _run("b", A), _run("c", B)
    gating = judge_gating(base.scores, _calibrations(), 0.6, candidate=cand.scores)
    assert not gating.gating and len(gating.reasons) == 2
    assert all("has no calibration record" in r for r in gating.reasons)
