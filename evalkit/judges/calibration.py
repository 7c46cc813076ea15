"""Judge calibration: how well a judge model + rubric agrees with humans, and whether it may gate.

``calibrate`` joins a run's judge scores with imported human labels (:mod:`evalkit.judges.labels`)
and computes, through :mod:`evalkit.judges.agreement`: raw agreement, Cohen's kappa with an
interval, the quadratic-weighted kappa (score levels are ordinal), Krippendorff's alpha across
all raters (the humans, and the judge as one more rater), per-class precision/recall/F1, the
confusion matrix, length bias and, when ``evalkit judges pairs`` has run with the same judge and
rubric, position consistency. The result is stored as a :class:`Calibration` record.

Joining: human labels match judged outputs (case id +
:func:`~evalkit.judges.labels.output_hash`), and the items counted are **labelled cases**, not
outputs (`per_case`: 25 labels over 5 replays is n = 25); a case's judge label is the
commonest judge score over its outputs (ties: the lower score). Agreement is also measured on
the decision the judge makes, pass/fail at its threshold (`decision_agreement`). A human label
pinned to an output hash matches that output; a case-level label matches the case's outputs.
The human label of an item is the majority over raters; a tie is dropped and counted.

The gate rule lives in :mod:`evalkit.judges.gating`; the records in
:mod:`evalkit.judges.calibration_record`.

Examples:
    >>> result = calibrate(store, "baseline", rubric=Path("rubrics/tone.md"))  # doctest: +SKIP
    >>> result.record.kappa, result.record.n                                  # doctest: +SKIP
    (0.41, 40)
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import polars as pl

from evalkit.judges import agreement
from evalkit.judges.calibration_record import (
    Calibration,
    CalibrationError,
    CalibrationResult,
    nan_to_none,
)
from evalkit.judges.gating import (
    judge_details,
    judge_rows,
)
from evalkit.judges.labels import output_hash
from evalkit.scorers.judge_client import load_rubric

if TYPE_CHECKING:
    from evalkit.store import Store

__all__ = ["calibrate", "calibrate_frames", "judged_outputs", "latest_calibration"]


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


def per_case(items: pl.DataFrame) -> pl.DataFrame:
    """One item per labelled case, not per output: 25 labelled cases answered over 5 replays
    are n = 25 (issue 42). The case's human label is its commonest one, its judge label the
    commonest judge score over its outputs (ties: the lower), its judge verdict the majority.

    Examples:
        >>> items = pl.DataFrame({"case_id": ["a"] * 3, "output_hash": ["x", "y", "z"],
        ...     "judge_score": [4, 4, 2], "judge_passed": [True, True, False], "human": [4] * 3,
        ...     "n_raters": [1] * 3, "length": [10, 12, 14], "tied": [False] * 3})
        >>> per_case(items).select("case_id", "judge_score", "judge_passed", "human").row(0)
        ('a', 4, True, 4)
    """
    passed = pl.col("judge_passed").cast(pl.Int64)
    extra = [c for c in items.columns if c not in _PER_CASE]
    return (
        items.group_by("case_id", maintain_order=True)
        .agg(
            pl.col("output_hash").first(),
            pl.col("judge_score").drop_nulls().mode().min(),
            (passed.sum() * 2 > passed.count()).alias("judge_passed"),
            pl.col("human").mode().min(),
            pl.col("n_raters").max(),
            pl.col("length").mean().round().cast(pl.Int64),
            *[pl.col(c).first() for c in extra],
        )
        .sort("case_id")
    )


_PER_CASE = frozenset(
    {"case_id", "output_hash", "judge_score", "judge_passed", "human", "n_raters", "length"}
)


def decision_agreement(
    kept: pl.DataFrame, judged: pl.DataFrame, scale: str, level: float, seed: int, iters: int
) -> dict[str, Any]:
    """Agreement on the decision the judge makes: pass/fail at its threshold (the lowest level
    it passed, read from its own verdicts), the human's level against the same threshold.
    On a pass/fail scale that is the agreement itself. Empty when no threshold can be read.
    """
    if scale == "pass_fail":
        human, judge, threshold = kept["human"], kept["judge"], None
    else:
        passing = judged.filter(pl.col("judge_passed").fill_null(False))["judge_score"]
        failing = judged.filter(~pl.col("judge_passed").fill_null(True))["judge_score"]
        if passing.drop_nulls().is_empty() and failing.drop_nulls().is_empty():
            return {}
        threshold = (
            int(cast(float, passing.drop_nulls().min()))
            if not passing.drop_nulls().is_empty()
            else int(cast(float, failing.drop_nulls().max())) + 1
        )
        human = (kept["human"] >= threshold).cast(pl.Int64)
        judge = kept["judge_passed"].cast(pl.Int64)
    summary = agreement.agreement_summary(
        human, judge, labels=(0, 1), level=level, seed=seed, iters=iters
    )
    return {
        "decision_threshold": threshold,
        "decision_n": summary.n,
        "decision_agree": summary.agree,
        "decision_kappa": nan_to_none(summary.kappa),
        "decision_kappa_lo": nan_to_none(summary.kappa_lo),
        "decision_kappa_hi": nan_to_none(summary.kappa_hi),
    }


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
    # String columns: their first value is a str (None: none given)
    judge_model = cast(str, judged["judge_model"].drop_nulls().first())
    rubric_hash = wanted or cast("str | None", judged["rubric_hash"].drop_nulls().first())
    rubric_name = cast("str | None", judged["rubric"].drop_nulls().first()) or (
        str(rubric_path) if rubric_path else None
    )
    if judge_model is None or rubric_hash is None:
        raise CalibrationError(f"{where}: every {scorer!r} judge call failed; nothing to calibrate")
    n_errors = int(judged["n_errors"].sum())
    decided = judged.filter(pl.col("judge_score").is_not_null())
    votes = _votes(decided, labels.filter(pl.col("scorer") == scorer))
    majority = _majority(votes)
    items = decided.join(majority, on=["case_id", "output_hash"], how="inner")
    kept = per_case(items.filter(~pl.col("tied")))
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
        present = {*humans, *kept["judge"].to_list(), *levels}
        label_set = tuple(range(min(present), max(present) + 1))
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
    figures |= decision_agreement(kept, judged, scale, level, seed, iters)
    figures |= {"n_tied": int(items["tied"].sum()), "n_judge_errors": n_errors}
    calibration = Calibration.from_record(
        record,
        judge_snapshot=judge_snapshot,
        rubric=rubric_name,
        scorer=scorer,
        run_id=run_id,
        alpha=raters.alpha if raters is not None else None,
        figures=figures,
        judge_prompt=cast("str | None", judged["judge_prompt"].drop_nulls().first()),
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
        "weighted_kappa_lo": nan_to_none(summary.weighted_kappa_lo),
        "weighted_kappa_hi": nan_to_none(summary.weighted_kappa_hi),
        "macro_precision": summary.report.macro_precision,
        "macro_recall": summary.report.macro_recall,
        "per_class": summary.report.to_frame().to_dicts(),
        "confusion": summary.confusion.rows(),
        "raters": []
        if raters is None
        else sorted(set(raters.pairwise["rater_a"]) | set(raters.pairwise["rater_b"])),
        "rater_pairwise": [] if raters is None else raters.pairwise.to_dicts(),
        "length_corr_judge": nan_to_none(
            agreement.score_length_correlation(scored["judge_score"], scored["length"])
        ),
        "length_corr_human": nan_to_none(
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
    judge = store.manifest(run_id).judge
    result = calibrate_frames(
        store.scores(run_id),
        store.outputs(run_id),
        store.human_labels(scorer),
        scorer=scorer,
        rubric_path=rubric,
        run_id=run_id,
        judge_snapshot=judge.snapshot if judge else None,
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
