"""Judge calibration: how well a judge model + rubric agrees with humans, and whether it may gate.

``calibrate`` joins a run's judge scores with imported human labels (:mod:`evalkit.judges.labels`)
and
computes, through :mod:`evalkit.judges.agreement`: raw agreement, Cohen's kappa with an interval,
the
quadratic-weighted kappa (score levels are ordinal), Krippendorff's alpha across all raters (the
humans, and the judge as one more rater), per-class precision/recall/F1, the confusion matrix,
length bias and, when ``evalkit judge-pairs`` has run with the same judge and rubric, position
consistency. The result is stored as a :class:`Calibration` record.

Joining: one *item* per distinct judged output (case id +
:func:`~evalkit.judges.labels.output_hash`);
its judge label is the commonest judge score over replays (ties: the lower score). A human label
pinned to an output hash matches that output; a case-level label matches the case's outputs.
The human label of an item is the majority over raters; a tie is dropped and counted.

The gate rule (:func:`judge_gating`, :func:`gated_scores`): a judge check may block only where
the latest calibration record for its judge model and rubric hash has kappa >= the policy's
minimum; other judge checks are reported, not gated, with the reason.

Examples:
    >>> result = calibrate(store, "baseline", rubric=Path("rubrics/tone.md"))  # doctest: +SKIP
    >>> result.record.kappa, result.record.n                                  # doctest: +SKIP
    (0.41, 40)
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from evalkit.errors import EvalkitError
from evalkit.judges import agreement
from evalkit.judges.gating import (
    JudgeCheck,
    JudgeGating,
    gated_scores,
    judge_details,
    judge_gating,
    judge_rows,
    short_path,
)
from evalkit.judges.labels import output_hash
from evalkit.scorers.judge_client import load_rubric

if TYPE_CHECKING:
    from evalkit.store import Store

__all__ = [
    "Calibration",
    "CalibrationError",
    "CalibrationResult",
    "JudgeCheck",
    "JudgeGating",
    "calibrate",
    "calibrate_frames",
    "gated_scores",
    "judge_gating",
    "judged_outputs",
    "latest_calibration",
    "short_path",
]


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


def _nan_to_none(value: float | None) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


@dataclass(frozen=True)
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
            kappa=_nan_to_none(record.kappa),
            kappa_lo=_nan_to_none(record.kappa_lo),
            kappa_hi=_nan_to_none(record.kappa_hi),
            weighted_kappa=_nan_to_none(record.weighted_kappa),
            accuracy=record.accuracy,
            macro_f1=record.macro_f1,
            alpha=_nan_to_none(alpha),
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
        values = {k: row.get(k) for k in cls.__dataclass_fields__ if k != "figures"}
        return cls(**values, figures=json.loads(row.get("figures") or "{}"))

    def _repr_html_(self) -> str:
        from evalkit.judges.display import calibration_table

        return calibration_table([asdict(self)], title="Judge calibration record").as_raw_html()


@dataclass(frozen=True)
class CalibrationResult:
    """Everything ``evalkit calibrate`` computed; ``record`` is what was stored."""

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
                else "n/a (run `evalkit judge-pairs` with this judge and rubric)"
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
                else "n/a (run `evalkit judge-pairs` with this judge and rubric)",
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


def judged_outputs(
    scores: pl.DataFrame,
    outputs: pl.DataFrame,
    scorer: str = "judge",
    rubric_hash: str | None = None,
) -> pl.DataFrame:
    """One row per distinct judged output of a run: its judge label and where it came from.

    Columns: ``case_id, output_hash, judge_score`` (commonest decided score, ties -> lower),
    ``judge_passed`` (majority, ties -> fail), ``judge_model, rubric, rubric_hash, length``
    (characters), ``n_scores``, ``n_errors`` (undecided judge calls on that output). Outputs whose
    every judge call errored keep a null ``judge_score``.

    Examples:
        >>> scores = pl.DataFrame({"run_id": ["r"], "case_id": ["a"], "replay": [0],
        ...     "scorer": ["judge"], "tier": [3], "passed": [True], "error": [False],
        ...     "details": ['{"judge_model": "m", "rubric_hash": "h", "judge_score": 4}']})
        >>> outputs = pl.DataFrame({"run_id": ["r"], "case_id": ["a"], "replay": [0],
        ...     "text": ["Thanks!"]})
        >>> judged_outputs(scores, outputs).select("case_id", "judge_score", "length").row(0)
        ('a', 4, 7)
    """
    rows = scores.filter(judge_rows(scores) & (pl.col("scorer") == scorer)).with_columns(
        judge_details("judge_model").alias("judge_model"),
        judge_details("rubric").alias("rubric"),
        judge_details("rubric_hash").alias("rubric_hash"),
        judge_details("judge_prompt").alias("judge_prompt"),
        judge_details("judge_score").cast(pl.Int64).alias("judge_score"),
        pl.col("replay").cast(pl.Int64),
    )
    if rubric_hash is not None:
        rows = rows.filter(pl.col("rubric_hash") == rubric_hash)
    texts = outputs.select(
        "run_id", "case_id", pl.col("replay").cast(pl.Int64), pl.col("text").fill_null("")
    )
    joined = rows.join(texts, on=["run_id", "case_id", "replay"], how="inner").with_columns(
        pl.col("text").map_elements(output_hash, return_dtype=pl.String).alias("output_hash"),
        pl.col("text").str.len_chars().alias("length"),
        (pl.col("error").fill_null(False) | pl.col("judge_score").is_null()).alias("_undecided"),
    )
    decided = pl.col("judge_score").filter(~pl.col("_undecided"))
    passed = pl.col("passed").filter(~pl.col("_undecided")).cast(pl.Int64)
    return (
        joined.group_by("case_id", "output_hash", maintain_order=True)
        .agg(
            decided.mode().min().alias("judge_score"),
            (passed.sum() * 2 > passed.count()).alias("judge_passed"),
            pl.col("judge_model").drop_nulls().first(),
            pl.col("rubric").drop_nulls().first(),
            pl.col("rubric_hash").drop_nulls().first(),
            pl.col("judge_prompt").drop_nulls().first(),
            pl.col("length").first(),
            pl.len().alias("n_scores"),
            pl.col("_undecided").sum().alias("n_errors"),
        )
        .sort("case_id", "output_hash")
    )


def _votes(judged: pl.DataFrame, labels: pl.DataFrame) -> pl.DataFrame:
    """Human votes per judged output: pinned labels by hash, case-level labels by case id."""
    items = judged.select("case_id", "output_hash")
    labels = labels.select(
        pl.col("case_id", "output_hash", "rater").cast(pl.String), pl.col("label").cast(pl.Int64)
    )
    pinned = labels.filter(pl.col("output_hash").is_not_null()).join(
        items, on="output_hash", how="inner", suffix="_item"
    )
    pinned = pinned.select(
        pl.col("case_id_item").alias("case_id"), "output_hash", "rater", "label", pl.lit(True)
    )
    case_level = (
        labels.filter(pl.col("output_hash").is_null())
        .drop("output_hash")
        .join(items, on="case_id", how="inner")
        .select("case_id", "output_hash", "rater", "label", pl.lit(False))
    )
    return (
        pl.concat([pinned, case_level])
        .rename({"literal": "pinned"})
        .sort("pinned", descending=True)
        .unique(["case_id", "output_hash", "rater"], keep="first", maintain_order=True)
    )


def _majority(votes: pl.DataFrame) -> pl.DataFrame:
    """One row per item with a strict majority human label; ``tied`` marks the others."""
    counts = votes.group_by("case_id", "output_hash", "label").agg(pl.len().alias("k"))
    return (
        counts.group_by("case_id", "output_hash")
        .agg(
            pl.col("label").filter(pl.col("k") == pl.col("k").max()).alias("top"),
            pl.col("k").sum().alias("n_raters"),
        )
        .with_columns(
            (pl.col("top").list.len() > 1).alias("tied"),
            pl.col("top").list.first().alias("human"),
        )
        .drop("top")
    )


def calibrate_frames(
    scores: pl.DataFrame,
    outputs: pl.DataFrame,
    labels: pl.DataFrame,
    *,
    scorer: str = "judge",
    rubric_path: Path | None = None,
    run_id: str | None = None,
    judge_snapshot: str | None = None,
    pairwise: pl.DataFrame | None = None,
    binary: bool = False,
    level: float = 0.95,
    seed: int = 0,
    iters: int = 2000,
) -> CalibrationResult:
    """:func:`calibrate` on frames (no store): a run's scores and outputs, the human labels.

    Raises:
        CalibrationError: no judge scores, several judges or rubrics, or no labelled item.
    """
    wanted = load_rubric(rubric_path).hash if rubric_path is not None else None
    judged = judged_outputs(scores, outputs, scorer, wanted)
    where = f"run {run_id}" if run_id else "the run"
    if judged.is_empty():
        rubric_note = f" with rubric {rubric_path}" if rubric_path else ""
        raise CalibrationError(f"{where} has no {scorer!r} judge scores{rubric_note}")
    fixes = {
        "rubric_hash": "choose one with --rubric PATH",
        "judge_model": "calibrate one judge",
        "judge_prompt": "calibrate one judge prompt version",
    }
    for column, fix in fixes.items():
        seen = judged[column].drop_nulls().unique().sort().to_list()
        if len(seen) > 1:
            raise CalibrationError(
                f"{where} has {scorer!r} scores from {len(seen)} values of {column} "
                f"({', '.join(s[:12] for s in seen)}): {fix}"
            )
    judge_model, rubric_hash = judged["judge_model"].drop_nulls().first(), wanted
    rubric_hash = rubric_hash or judged["rubric_hash"].drop_nulls().first()
    rubric_name = judged["rubric"].drop_nulls().first() or (
        str(rubric_path) if rubric_path else None
    )
    if judge_model is None or rubric_hash is None:
        raise CalibrationError(f"{where}: every {scorer!r} judge call failed; nothing to calibrate")
    n_errors = int(judged["n_errors"].sum())
    decided = judged.filter(pl.col("judge_score").is_not_null())
    votes = _votes(decided, labels.filter(pl.col("scorer") == scorer))
    majority = _majority(votes)
    items = decided.join(majority, on=["case_id", "output_hash"], how="inner")
    kept = items.filter(~pl.col("tied"))
    if kept.is_empty():
        raise CalibrationError(
            f"{where}: none of its {decided.height} judged outputs has a (non-tied) human label "
            f"for scorer {scorer!r}; import labels with `evalkit labels import FILE --run RUN`"
        )
    levels = _levels(rubric_path, rubric_name, rubric_hash)
    humans = sorted(set(votes["label"].to_list()))
    scale = (
        "pass_fail"
        if binary or (set(humans) <= {0, 1} and not set(humans) <= set(levels))
        else "levels"
    )
    judge_col = "judge_passed" if scale == "pass_fail" else "judge_score"
    kept = kept.with_columns(pl.col(judge_col).cast(pl.Int64).alias("judge"))
    if scale == "pass_fail":
        bad = sorted(set(humans) - {0, 1})
        label_set: tuple[int, ...] = (0, 1)
    else:
        bad = sorted(set(humans) - set(levels)) if levels else []
        seen = set(humans) | set(kept["judge"].to_list()) | set(levels)
        label_set = tuple(range(min(seen), max(seen) + 1))
    if bad:
        raise CalibrationError(
            f"human labels {bad} for scorer {scorer!r} are not "
            + ("pass/fail (1/0)" if scale == "pass_fail" else f"rubric levels {list(levels)}")
        )
    summary = agreement.agreement_summary(
        kept["human"],
        kept["judge"],
        labels=label_set,
        ordinal=scale == "levels",
        level=level,
        seed=seed,
        iters=iters,
    )
    # Per-class figures cover the labels either side used (a level nobody gave has no
    # precision or recall to speak of); kappa weights and the confusion matrix keep every level.
    used = sorted(set(kept["human"].to_list()) | set(kept["judge"].to_list()))
    report = agreement.classification_report(kept["human"], kept["judge"], labels=used)
    summary = replace(summary, report=report)
    raters = _rater_agreement(votes, items, judge_col, judge_model, scale)
    consistency, n_pairs = _position_consistency(pairwise, judge_model, rubric_hash)
    record = agreement.CalibrationRecord.from_summary(
        summary,
        judge_model=judge_model,
        dataset=run_id or "frames",
        rubric_hash=rubric_hash,
        position_consistency=consistency,
    )
    figures = _figures(summary, raters, judged, kept, scale, n_pairs)
    figures |= {"n_tied": int(items["tied"].sum()), "n_judge_errors": n_errors}
    calibration = Calibration.from_record(
        record,
        judge_snapshot=judge_snapshot,
        rubric=rubric_name,
        scorer=scorer,
        run_id=run_id,
        alpha=raters.alpha if raters is not None else None,
        figures=figures,
        judge_prompt=judged["judge_prompt"].drop_nulls().first(),
    )
    pinned = votes.join(kept.select("case_id", "output_hash"), on=["case_id", "output_hash"])
    return CalibrationResult(
        record=calibration,
        summary=summary,
        raters=raters,
        items=kept.select("case_id", "output_hash", "human", "judge", "n_raters", "length"),
        scale=scale,
        n_tied=int(items["tied"].sum()),
        n_unlabelled=decided.height - items.height,
        n_judge_errors=n_errors,
        n_case_level=int((~pinned["pinned"]).sum()),
    )


def _levels(rubric_path: Path | None, rubric_name: str | None, rubric_hash: str) -> tuple[int, ...]:
    """The rubric's score levels: from ``--rubric``, or the file the scores name if unchanged."""
    for candidate in (rubric_path, Path(rubric_name) if rubric_name else None):
        if candidate is None or not candidate.is_file():
            continue
        try:
            rubric = load_rubric(candidate)
        except (OSError, ValueError):
            continue
        if rubric.hash == rubric_hash:
            return rubric.levels
    return ()


def _rater_agreement(
    votes: pl.DataFrame, items: pl.DataFrame, judge_col: str, judge_model: str, scale: str
) -> agreement.RaterAgreement | None:
    judge_votes = items.select(
        "case_id",
        "output_hash",
        pl.lit(f"judge:{judge_model}").alias("rater"),
        pl.col(judge_col).cast(pl.Int64).alias("label"),
    )
    long = pl.concat(
        [
            votes.select("case_id", "output_hash", "rater", pl.col("label").cast(pl.Int64)),
            judge_votes.filter(pl.col("label").is_not_null()),
        ]
    ).with_columns(pl.concat_str("case_id", "output_hash", separator="|").alias("item"))
    try:
        return agreement.rater_agreement(long, level="ordinal" if scale == "levels" else "nominal")
    except ValueError:
        return None


def _position_consistency(
    pairwise: pl.DataFrame | None, judge_model: str, rubric_hash: str
) -> tuple[float | None, int]:
    if pairwise is None or pairwise.is_empty():
        return None, 0
    rows = pairwise.filter(
        (pl.col("judge_model") == judge_model)
        & (pl.col("rubric_hash") == rubric_hash)
        & pl.col("error").is_null()
    )
    if rows.is_empty():
        return None, 0
    return agreement.position_consistency(rows["order_ab"], rows["order_ba"]), rows.height


def _figures(
    summary: agreement.AgreementSummary,
    raters: agreement.RaterAgreement | None,
    judged: pl.DataFrame,
    kept: pl.DataFrame,
    scale: str,
    n_pairs: int,
) -> dict[str, Any]:
    scored = judged.filter(pl.col("judge_score").is_not_null())
    return {
        "scale": scale,
        "labels": list(summary.labels),
        "level": summary.level,
        "seed": summary.seed,
        "iters": summary.iters,
        "agree": summary.agree,
        "accuracy_lo": summary.accuracy_lo,
        "accuracy_hi": summary.accuracy_hi,
        "weighted_kappa_lo": _nan_to_none(summary.weighted_kappa_lo),
        "weighted_kappa_hi": _nan_to_none(summary.weighted_kappa_hi),
        "macro_precision": summary.report.macro_precision,
        "macro_recall": summary.report.macro_recall,
        "per_class": summary.report.to_frame().to_dicts(),
        "confusion": summary.confusion.rows(),
        "raters": []
        if raters is None
        else sorted(set(raters.pairwise["rater_a"]) | set(raters.pairwise["rater_b"])),
        "rater_pairwise": [] if raters is None else raters.pairwise.to_dicts(),
        "length_corr_judge": _nan_to_none(
            agreement.score_length_correlation(scored["judge_score"], scored["length"])
        ),
        "length_corr_human": _nan_to_none(
            agreement.score_length_correlation(kept["human"], kept["length"])
        ),
        "n_judged": judged.height,
        "n_pairwise": n_pairs,
    }


def calibrate(
    store: Store,
    run: str,
    *,
    scorer: str = "judge",
    rubric: Path | None = None,
    binary: bool = False,
    level: float = 0.95,
    seed: int = 0,
    iters: int = 2000,
    save: bool = True,
) -> CalibrationResult:
    """Calibrate the judge of a stored run against the stored human labels; store the record.

    Args:
        run: run id, id prefix or label.
        scorer: the judge scorer's name in the corpus.
        rubric: the rubric file; required when the run's judge used several rubrics.
        binary: compare pass/fail (human 1/0 against the judge's verdict) instead of score
            levels; chosen automatically when the humans labelled 0/1 on a 1..n rubric.

    Raises:
        CalibrationError: see :func:`calibrate_frames`.
    """
    run_id = store.resolve_run(run)
    judge = store.manifest(run_id).get("judge") or {}
    result = calibrate_frames(
        store.scores(run_id),
        store.outputs(run_id),
        store.human_labels(scorer),
        scorer=scorer,
        rubric_path=rubric,
        run_id=run_id,
        judge_snapshot=judge.get("snapshot"),
        pairwise=store.pairwise_judgments(),
        binary=binary,
        level=level,
        seed=seed,
        iters=iters,
    )
    if save:
        store.save_calibration(result.record.to_row())
    return result


def latest_calibration(store: Store, judge_model: str, rubric_hash: str) -> Calibration | None:
    """The newest calibration record of a judge model with a rubric, or None.

    Examples:
        >>> latest_calibration(store, "demo-judge-1", rubric.hash)   # doctest: +SKIP
    """
    row = store.latest_calibration_row(judge_model, rubric_hash)
    return Calibration.from_row(row) if row is not None else None
