"""The judges layer's display tables: calibration records, a calibration's figures and the judge
gating table render as formatted HTML (percentages, kappa with its interval to 2 decimals, every
row, escaped text)."""

from __future__ import annotations

import doctest
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from evalkit.judges import display
from evalkit.judges.calibration import calibrate_frames
from evalkit.judges.calibration_record import CalibrationResult
from evalkit.judges.gating import judge_gating
from evalkit.judges.labels import output_hash
from evalkit.scorers.judge_client import load_rubric

REPO = Path(__file__).resolve().parents[2]
RUBRIC = REPO / "corpus" / "rubrics" / "reply_tone.md"


def _text(page: str) -> str:
    """The page's visible text, tags removed and whitespace collapsed."""
    return " ".join(re.sub(r"<[^>]+>", " ", page).split())


def _result(judge_model: str = "demo-judge-1") -> CalibrationResult:
    """60 outputs on the 1-5 rubric; the judge agrees with the one human on 2 of 3."""
    rubric_hash = load_rubric(RUBRIC).hash
    cases = [f"case-{i:02d}" for i in range(60)]
    human = [1 + i % 5 for i in range(60)]
    judge = [h if i % 3 else min(5, h + 1) for i, h in enumerate(human)]
    texts = [f"reply {i} " + "x" * (i * 7 % 50) for i in range(60)]
    details = [
        json.dumps(
            {
                "judge_model": judge_model,
                "rubric": str(RUBRIC),
                "rubric_hash": rubric_hash,
                "judge_score": j,
            }
        )
        for j in judge
    ]
    scores = pl.DataFrame(
        {"run_id": "r", "case_id": cases, "replay": 0, "scorer": "judge", "tier": 3,
         "score": 0.0, "passed": [j >= 3 for j in judge], "error": False, "details": details}
    )  # fmt: skip
    outputs = pl.DataFrame({"run_id": "r", "case_id": cases, "replay": 0, "text": texts})
    labels = pl.DataFrame(
        {"case_id": cases, "output_hash": [output_hash(t) for t in texts], "rater": "ana",
         "label": human, "scorer": "judge"}
    )  # fmt: skip
    return calibrate_frames(scores, outputs, labels, run_id="r", iters=300)


def test_a_calibration_result_renders_its_figures_formatted() -> None:
    result = _result()
    r, s = result.record, result.summary
    page = result._repr_html_()
    text = _text(page)
    assert f"{r.kappa:.2f} [{r.kappa_lo:.2f}, {r.kappa_hi:.2f}]" in text
    assert f"{s.accuracy:.1%} [{s.accuracy_lo:.1%}, {s.accuracy_hi:.1%}]" in text
    assert f"{s.report.macro_f1:.1%}" in text and "n/a (run `evalkit judges pairs`" in text
    assert "judge demo-judge-1" in text and "scorer judge, run r" in text
    for i, label in enumerate(s.report.labels):  # per class: precision as a percentage
        assert f"{s.report.precision[i]:.1%}" in text and f"judge {label}" in text
    grid = page[page.index('id="evalkit-confusion"') :]
    cells = [
        int(v) for v in re.findall(r"headers=\"evalkit-confusion-judge-\d\" [^>]*>(\d+)<", grid)
    ]
    assert sum(cells) == r.n == 60  # every item is in the confusion grid
    assert "0.4133" not in text and "nan" not in text.lower()


def test_a_calibration_record_renders_as_a_table_row() -> None:
    record = _result().record
    text = _text(record._repr_html_())
    assert f"{record.kappa:.2f} [{record.kappa_lo:.2f}, {record.kappa_hi:.2f}]" in text
    assert f"{record.accuracy:.1%}" in text and f"{record.macro_f1:.1%}" in text
    assert "Judge calibration record" in text and record.rubric_hash[:8] in text


def test_html_in_a_judge_name_is_escaped() -> None:
    page = _result(judge_model="<script>alert(1)</script>")._repr_html_()
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_the_judge_gating_table_shows_every_check_and_its_full_reason() -> None:
    details = [
        json.dumps({"judge_model": f"judge-{i}", "rubric": "r.md", "rubric_hash": f"h{i:02d}"})
        for i in range(55)
    ]
    scores = pl.DataFrame({"scorer": "judge", "tier": 3, "details": details})
    now = datetime(2025, 1, 2, tzinfo=UTC)
    calibrations = pl.DataFrame(
        [{"judge_model": "judge-0", "judge_snapshot": None, "judge_prompt": None,
          "rubric_hash": "h00", "n": 150, "kappa": 0.8123, "kappa_lo": 0.704, "kappa_hi": 0.9,
          "created_at": now}]
    )  # fmt: skip
    gating = judge_gating(scores, calibrations, 0.6)
    assert gating.to_frame().height == 55
    polars_page = gating.to_frame()._repr_html_()
    assert "judge-27" not in polars_page  # what the old table did: drop the middle rows
    text = _text(gating._repr_html_())
    for check in gating.checks:
        assert _text(check.reason.replace("<", "&lt;")) in text
    assert "judge-27" in text and text.count("reported, not gated") >= 54
    assert "0.81 [0.70, 0.90]" in text and "✓ gates" in text and "≥ 0.60" in text


def test_calibration_table_of_store_rows_and_missing_figures() -> None:
    rows = [
        {"judge_model": "m", "rubric": "r.md", "rubric_hash": "abcdef123", "n": 9,
         "kappa": float("nan"), "accuracy": 0.5, "macro_f1": 0.25, "position_consistency": 0.875}
    ]  # fmt: skip
    text = _text(display.calibration_table(rows).as_raw_html())
    assert "n/a" in text and "50.0%" in text and "87.5%" in text and "abcdef12" in text


@pytest.mark.parametrize("module", [display])
def test_docstring_examples_run(module) -> None:
    result = doctest.testmod(module)
    assert result.failed == 0 and result.attempted >= 2
