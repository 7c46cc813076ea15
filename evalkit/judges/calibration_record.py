"""Calibration records: a judge model + snapshot + prompt version + rubric's measured agreement
with human labels (:class:`Calibration`, what the store keeps and the gate reads) and the full
result of one calibration (:class:`CalibrationResult`, what a person reads)."""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

import polars as pl

from evalkit.errors import EvalkitError
from evalkit.judges import agreement
from evalkit.judges.gating import short_path

__all__ = ["Calibration", "CalibrationError", "CalibrationResult", "nan_to_none"]


class CalibrationError(EvalkitError):
    """Nothing to calibrate (no judge scores, no matching labels, ambiguous judge or rubric)."""


def _json_safe(value: Any) -> Any:
    """NaN -> None, recursively, so the figures are strict JSON."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, Mapping):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def nan_to_none(value: float | None) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """A stored calibration record: a judge model + rubric's measured agreement with humans."""

    judge_model: str
    judge_snapshot: str | None
    rubric: str | None
    rubric_hash: str
    scorer: str
    n: int
    kappa: float | None
    kappa_lo: float | None
    kappa_hi: float | None
    weighted_kappa: float | None
    accuracy: float
    macro_f1: float
    alpha: float | None
    position_consistency: float | None
    created_at: datetime
    run_id: str | None
    figures: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    judge_prompt: str | None = None  # the judge prompt version the labels were judged with

    @classmethod
    def from_record(
        cls,
        record: agreement.CalibrationRecord,
        *,
        judge_snapshot: str | None,
        rubric: str | None,
        scorer: str,
        run_id: str | None,
        alpha: float | None,
        figures: Mapping[str, Any],
        judge_prompt: str | None = None,
    ) -> Calibration:
        """Extend :class:`evalkit.judges.agreement.CalibrationRecord` with what the store keeps."""
        return cls(
            judge_model=record.judge_model,
            judge_snapshot=judge_snapshot,
            rubric=rubric,
            rubric_hash=record.rubric_hash or "",
            scorer=scorer,
            n=record.n,
            kappa=nan_to_none(record.kappa),
            kappa_lo=nan_to_none(record.kappa_lo),
            kappa_hi=nan_to_none(record.kappa_hi),
            weighted_kappa=nan_to_none(record.weighted_kappa),
            accuracy=record.accuracy,
            macro_f1=record.macro_f1,
            alpha=nan_to_none(alpha),
            position_consistency=record.position_consistency,
            created_at=record.created_at,
            run_id=run_id,
            figures=dict(figures),
            judge_prompt=judge_prompt,
        )

    def to_row(self) -> dict[str, Any]:
        """The ``calibrations`` table row (``figures`` as JSON)."""
        row = asdict(self)
        row["figures"] = json.dumps(_json_safe(self.figures), sort_keys=True, default=str)
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Calibration:
        """Inverse of :meth:`to_row` (reads a ``calibrations`` row)."""
        values: dict[str, Any] = {k: row.get(k) for k in cls.__dataclass_fields__ if k != "figures"}
        return cls(**values, figures=json.loads(row.get("figures") or "{}"))

    def _repr_html_(self) -> str:
        from evalkit.judges.display import calibration_table

        return calibration_table([asdict(self)], title="Judge calibration record").as_raw_html()


@dataclass(frozen=True, kw_only=True)
class CalibrationResult:
    """Everything ``evalkit judges calibrate`` computed; ``record`` is what was stored."""

    record: Calibration
    summary: agreement.AgreementSummary
    raters: agreement.RaterAgreement | None
    items: pl.DataFrame = field(compare=False, repr=False)  # case_id, output_hash, human, judge
    scale: str = "levels"  # "levels" (score levels) or "pass_fail"
    n_tied: int = 0
    n_unlabelled: int = 0
    n_judge_errors: int = 0
    n_case_level: int = 0  # labels matched by case id only (not pinned to an output hash)

    def lines(self) -> list[str]:
        """The summary as lines of text with rich markup (what the CLI prints)."""
        r, s = self.record, self.summary
        out = [
            f"[bold]judge {_esc(r.judge_model)}[/] with {_esc(short_path(r.rubric))} (rubric "
            f"{r.rubric_hash[:8]}), scorer {_esc(r.scorer)}, run {r.run_id}: n = {r.n} items "
            f"({self.scale})",
            f"  agreement {s.accuracy:.1%} [{s.accuracy_lo:.1%}, {s.accuracy_hi:.1%}]; "
            f"Cohen's kappa {_fmt(r.kappa)} [{_fmt(r.kappa_lo)}, {_fmt(r.kappa_hi)}] "
            f"({s.level:.0%}, bootstrap)",
            f"  weighted kappa (quadratic) {_fmt(r.weighted_kappa)}; Krippendorff's alpha "
            f"{_fmt(r.alpha)} across {len(self.record.figures.get('raters', []))} raters "
            "incl. the judge",
            f"  macro precision {s.report.macro_precision:.3f}, recall "
            f"{s.report.macro_recall:.3f}, F1 {s.report.macro_f1:.3f}",
            f"  length bias: Spearman(score, length) judge "
            f"{_fmt(r.figures.get('length_corr_judge'))}, humans "
            f"{_fmt(r.figures.get('length_corr_human'))}",
            "  position consistency "
            + (
                f"{r.position_consistency:.1%} over {r.figures.get('n_pairwise')} pairs"
                if r.position_consistency is not None
                else "n/a (run `evalkit judges pairs` with this judge and rubric)"
            ),
        ]
        cls = s.report
        out.append("  per class (label: precision / recall / F1, human support):")
        for i, label in enumerate(cls.labels):
            out.append(
                f"    {label}: {cls.precision[i]:.2f} / {cls.recall[i]:.2f} / {cls.f1[i]:.2f}, "
                f"{cls.support[i]}"
            )
        out.append(f"  confusion (rows human, columns judge; labels {list(s.labels)}):")
        matrix = agreement.confusion_array(self.items["human"], self.items["judge"], s.labels)
        out += ["    " + " ".join(f"{v:>3d}" for v in row) for row in matrix.tolist()]
        out += [f"  [yellow]note[/]: {_esc(note)}" for note in self.notes()]
        return out

    def __rich__(self) -> Any:
        from rich.text import Text

        return Text.from_markup("\n".join(self.lines()))

    def figures(self) -> list[tuple[str, str]]:
        """The headline figures, formatted: rates as percentages, kappas to 2 decimals with
        their interval (what the notebook's table shows)."""
        from evalkit.judges.display import fmt_kappa

        r, s, f = self.record, self.summary, self.record.figures
        pct = "{:.1%}".format
        pairs = f.get("n_pairwise")
        return [
            ("items (human majority label vs judge)", f"{r.n} ({self.scale})"),
            (
                "agreement [Wilson CI]",
                f"{pct(s.accuracy)} [{pct(s.accuracy_lo)}, {pct(s.accuracy_hi)}]",
            ),
            (
                f"Cohen's kappa [{s.level:.0%} bootstrap CI]",
                fmt_kappa(r.kappa, r.kappa_lo, r.kappa_hi),
            ),
            (
                "weighted kappa (quadratic)",
                fmt_kappa(r.weighted_kappa, f.get("weighted_kappa_lo"), f.get("weighted_kappa_hi")),
            ),
            (
                f"Krippendorff's alpha ({len(f.get('raters', []))} raters incl. the judge)",
                fmt_kappa(r.alpha),
            ),
            (
                "macro precision / recall / F1",
                f"{pct(s.report.macro_precision)} / "
                f"{pct(s.report.macro_recall)} / {pct(s.report.macro_f1)}",
            ),
            (
                "length bias: Spearman(score, length), judge / humans",
                f"{fmt_kappa(f.get('length_corr_judge'))} / "
                f"{fmt_kappa(f.get('length_corr_human'))}",
            ),
            (
                "position consistency",
                f"{pct(r.position_consistency)} over {pairs} pairs"
                if r.position_consistency is not None
                else "n/a (run `evalkit judges pairs` with this judge and rubric)",
            ),
        ]

    def notes(self) -> list[str]:
        """What was left out of the figures, one line each."""
        notes = [
            (self.n_tied, "items with tied human votes dropped"),
            (self.n_unlabelled, "judged outputs without a human label"),
            (self.n_judge_errors, "undecided judge calls (malformed output, failed call) left out"),
            (self.n_case_level, "labels matched by case id only (pin them with --run)"),
        ]
        return [f"{n} {text}" for n, text in notes if n]

    def _repr_html_(self) -> str:
        from evalkit.judges import display

        r = self.record
        head = display.headline(
            f"judge {r.judge_model} with {short_path(r.rubric)} (rubric {r.rubric_hash[:8]}), "
            f"scorer {r.scorer}, run {r.run_id}"
        )
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in self.notes())
        return (
            head
            + display.figures_table(self.figures(), id="evalkit-calibration").as_raw_html()
            + display.class_table(self.summary.report.to_frame()).as_raw_html()
            + display.confusion_table(self.summary.confusion).as_raw_html()
            + (f"<p>note:</p><ul>{notes}</ul>" if notes else "")
        )


def _esc(text: str) -> str:
    """Escape rich markup in data shown inside marked-up lines."""
    return str(text).replace("[", "\\[")


def _fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.3f}"
