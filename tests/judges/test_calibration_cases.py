"""Judge calibration counts labelled cases, not outputs (issue 42): 25 labelled cases judged
over 5 replays are n = 25, and agreement is also measured on the decision the judge makes
(pass/fail at its threshold), checked against statsmodels' Cohen's kappa."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from statsmodels.stats.inter_rater import cohens_kappa

from evalkit.judges.calibration import calibrate_frames
from evalkit.judges.gating import judge_gating
from evalkit.scorers.judge_client import load_rubric

RUBRIC = Path(__file__).resolve().parents[2] / "corpus" / "rubrics" / "reply_tone.md"
THRESHOLD = 4  # the demo rubric has levels 1-5: the judge passes at 4 and above


def _run(n_cases: int = 25, replays: int = 5) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(scores, outputs, labels): each case answered differently on every replay (5 distinct
    outputs), judged near the human's level, one case-level human label per case."""
    rng = np.random.default_rng(7)
    rubric_hash = load_rubric(RUBRIC).hash
    scores, outputs, labels = [], [], []
    for i in range(n_cases):
        case, human = f"case-{i:02d}", 1 + i % 5
        labels.append({"case_id": case, "output_hash": None, "rater": "ana", "label": human,
                       "scorer": "judge"})  # fmt: skip
        for replay in range(replays):
            level = int(np.clip(human + rng.choice([-1, 0, 0, 0, 1]), 1, 5))
            details = {"judge_model": "m", "rubric": str(RUBRIC), "rubric_hash": rubric_hash,
                       "judge_score": level}  # fmt: skip
            scores.append({"run_id": "r", "case_id": case, "replay": replay, "scorer": "judge",
                           "tier": 3, "score": (level - 1) / 4, "passed": level >= THRESHOLD,
                           "error": False, "details": json.dumps(details)})  # fmt: skip
            outputs.append({"run_id": "r", "case_id": case, "replay": replay,
                            "text": f"answer {replay} to {case}"})  # fmt: skip
    return pl.DataFrame(scores), pl.DataFrame(outputs), pl.DataFrame(labels)


def test_twenty_five_labelled_cases_over_five_replays_are_n_25() -> None:
    scores, outputs, labels = _run()
    assert outputs.select(pl.struct("case_id", "text").n_unique()).item() == 125
    result = calibrate_frames(scores, outputs, labels, iters=200)
    assert result.record.n == 25 and result.items.height == 25
    assert result.items["case_id"].n_unique() == 25
    figures = result.record.figures
    assert figures["decision_n"] == 25 and figures["decision_threshold"] == THRESHOLD


def test_agreement_on_the_decision_is_cohens_kappa_of_pass_fail_at_the_threshold() -> None:
    scores, outputs, labels = _run()
    result = calibrate_frames(scores, outputs, labels, iters=200)
    items = result.items.sort("case_id")
    # The judge's decision per case: the majority of its replays' verdicts.
    passed = scores.group_by("case_id").agg((pl.col("passed").sum() * 2 > pl.len()).alias("p"))
    judge = items.join(passed, on="case_id", maintain_order="left")["p"].cast(pl.Int64).to_numpy()
    human = (items["human"] >= THRESHOLD).cast(pl.Int64).to_numpy()
    table = np.zeros((2, 2))
    for h, j in zip(human, judge, strict=True):
        table[h, j] += 1
    expected = cohens_kappa(table).kappa
    figures = result.record.figures
    assert figures["decision_kappa"] == pytest.approx(expected)
    assert figures["decision_agree"] == int((human == judge).sum())


def test_a_judge_that_agrees_on_levels_but_not_on_its_decision_does_not_gate() -> None:
    row = {"judge_model": ["m"], "judge_snapshot": [None], "judge_prompt": [None],
           "rubric_hash": ["ab12"], "n": [200], "kappa": [0.9], "kappa_lo": [0.8],
           "kappa_hi": [0.95], "created_at": [None]}  # fmt: skip
    scores = pl.DataFrame({"scorer": ["judge"], "tier": [3],
                           "details": ['{"judge_model": "m", "rubric": "r.md", '
                                       '"rubric_hash": "ab12"}']})  # fmt: skip
    good = pl.DataFrame(row | {"figures": [json.dumps({"decision_kappa_lo": 0.7})]})
    weak = pl.DataFrame(row | {"figures": [json.dumps({"decision_kappa_lo": 0.3})]})
    assert judge_gating(scores, good, 0.6).gating == frozenset({("judge", "ab12")})
    assert judge_gating(scores, weak, 0.6).gating == frozenset()
