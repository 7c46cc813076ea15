"""The pinned exam of a thin run (the gate's): the candidate's side of the exam built without
holding what the plain gate leaves in the store (issue 48, item 4).

`evalkit.compare.exam.judge_on_exam` holds both runs whole: every answer's text, every input
and every score row. `judge_on_exam_thin` takes the runs as `load_run(thin=True)` reads them
and decides the same, case by pinned case:

- a case the candidate answered whose stored hash is the pinned one asked the pinned input
  (the case hash covers the input), so no input is read for it; it keeps its scores in the
  store when its scorers read the pinned files (every one, almost always), and `verdicts_of`
  reads them there a range of cases at a time;
- only the others' stored inputs are read back (`case_details_of`), to tell an edited
  expectation (the pinned input answered: rescored) from an edited input;
- the rescored cases and those the exam run answered are the *overlay* of the candidate's side
  (`RunData.overlay`): their outputs read back by id, scored in memory under the pinned cases,
  held with every column in place of the store's rows (few: the pull request's edits).

The pull request's own comparison (its additive exam, `additive_exam`) needs only its added,
edited and removed cases: `changed_comparison` compares those alone, their score rows read by
id (`score_details`), not the runs twice.

Examples:
    >>> exam_cand, parts = judge_on_exam_thin(corpus, files, base, cand)  # doctest: +SKIP
    >>> exam_cand.overlay.cases.height == len(parts["rescored"])         # doctest: +SKIP
    True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import polars as pl

from evalkit.compare.analysis import (
    CASE_DETAIL_COLUMNS,
    Comparison,
    RunData,
    case_details_of,
    compare,
    output_details,
    score_details,
)
from evalkit.compare.paired import case_changes
from evalkit.compare.pass_rules import PassRules
from evalkit.corpus.cases import Case, Corpus
from evalkit.judges.gating import JudgeGating

__all__ = ["changed_comparison", "judge_on_exam_thin"]


def judge_on_exam_thin(
    corpus: Corpus,
    pinned_files: Mapping[str, str],
    base: RunData,
    cand: RunData,
    exam_run: RunData | None = None,
) -> tuple[RunData, dict[str, tuple[str, ...]]]:
    """`evalkit.compare.exam.judge_on_exam` of thin runs (see the module docstring): the same
    cases, verdicts and parts, the candidate's side a thin run with an overlay."""
    from evalkit.compare.exam import _scored_as_pinned

    pinned = {case.id: case for case in corpus.cases}
    ran = base.cases.select("case_id").filter(pl.col("case_id").is_in(list(pinned)))
    pin = ran.with_columns(
        pinned_hash=pl.col("case_id").replace_strict({c: pinned[c].hash for c in pinned}),
    )
    answered = cand.outputs.select(pl.col("case_id").unique(), answered=pl.lit(True))
    frame = (
        pin.join(cand.cases.select("case_id", "case_hash"), on="case_id", how="left")
        .join(answered, on="case_id", how="left")
        .with_columns(pl.col("answered").fill_null(False))
        .sort("case_id")
    )
    same = (pl.col("case_hash") == pl.col("pinned_hash")) & pl.col("answered")
    hashed_alike = frame.filter(same)["case_id"].to_list()
    others = frame.filter(~same.fill_null(False))["case_id"].to_list()
    cand_files = cand.manifest.scorer_files
    as_stored: list[str] = []
    rescore: list[str] = []
    if _all_scored_as_pinned(cand_files, pinned_files):
        as_stored = hashed_alike
    else:  # a file some scorers read changed: those cases are rescored
        for case_id in hashed_alike:
            keep = _scored_as_pinned(pinned[case_id], cand_files, pinned_files)
            (as_stored if keep else rescore).append(case_id)
    # the others: the pinned input answered (an edited expectation) is rescored
    stored = case_details_of(cand, others) if others else cand.cases.clear()
    cand_rows = {r["case_id"]: r for r in stored.iter_rows(named=True)}
    answered_ids = set(frame.filter(pl.col("answered"))["case_id"].to_list())
    exam_ids = _exam_answered(exam_run, pinned)
    from_exam: list[str] = []
    missing: list[str] = []
    for case_id in others:
        case, row = pinned[case_id], cand_rows.get(case_id)
        if row is not None and row["input"] == case.input_json() and case_id in answered_ids:
            rescore.append(case_id)  # its hash differs: never as stored
        elif case_id in exam_ids:
            from_exam.append(case_id)
        elif not case.sealed:  # a sealed case only ever reports: no evidence is no gap
            missing.append(case_id)
    rescore.sort()
    held = [pinned[c] for c in rescore], [pinned[c] for c in from_exam]
    overlay = _overlay(cand, exam_run, *held, cand_rows)
    kept = set(as_stored) | set(rescore)
    outputs = [cand.outputs.filter(pl.col("case_id").is_in(list(kept)))]
    if from_exam and exam_run is not None:
        theirs = exam_run.outputs.filter(pl.col("case_id").is_in(from_exam))
        outputs.append(theirs.with_columns(run_id=pl.lit(cand.run_id)))
    held_scores = cand.scores.filter(pl.col("case_id").is_in(as_stored))
    scores = pl.concat(
        [
            held_scores.with_columns(pl.col("run_id").cast(pl.String)),
            overlay.scores.select([c for c in held_scores.columns if c in overlay.scores.columns]),
        ],
        how="diagonal_relaxed",
    )
    thin_cases = overlay.cases.drop(CASE_DETAIL_COLUMNS)
    stored_cases = (
        cand.cases.filter(pl.col("case_id").is_in(as_stored))
        .drop("sealed", "source")
        .join(_pinned_places(pinned, as_stored), on="case_id", how="left")
        .select(thin_cases.columns)
        .cast(dict(thin_cases.schema))  # type: ignore[arg-type]
    )
    cases = pl.concat([stored_cases, thin_cases]).sort("case_id")
    manifest = replace(cand.manifest, scorer_files=dict(pinned_files), rescoring=None)
    exam_cand = replace(
        cand,
        manifest=manifest,
        cases=cases,
        outputs=pl.concat(outputs, how="diagonal_relaxed"),
        scores=scores,
        overlay=overlay,
    )  # its own run's figures, and the store of its as-stored cases' rows
    parts = {"rescored": tuple(rescore), "answered": tuple(from_exam), "missing": tuple(missing)}
    return exam_cand, parts


def _all_scored_as_pinned(cand_files: Mapping[str, str], pinned: Mapping[str, str]) -> bool:
    """Whether every case is scored as pinned (`_scored_as_pinned`), whatever files its
    scorers read: no file differs between the two, and no scorer module."""
    return all(cand_files.get(k) == pinned.get(k) for k in (*cand_files, *pinned))


def _exam_answered(exam_run: RunData | None, pinned: Mapping[str, Case]) -> set[str]:
    """The pinned cases the exam run answered in their pinned version."""
    if exam_run is None or not exam_run.outputs.height:
        return set()
    hashes = dict(exam_run.cases.select("case_id", "case_hash").iter_rows())
    return {c for c in exam_run.outputs["case_id"].unique().to_list()
            if c in pinned and hashes.get(c) == pinned[c].hash}  # fmt: skip


def _pinned_places(pinned: Mapping[str, Case], ids: Sequence[str]) -> pl.DataFrame:
    """The pinned ``sealed`` and ``source`` of ``ids`` (what the case hash does not cover)."""
    return pl.DataFrame(
        {"case_id": list(ids), "sealed": [pinned[c].sealed for c in ids],
         "source": [pinned[c].source for c in ids]},
        schema={"case_id": pl.String, "sealed": pl.Boolean, "source": pl.String},
    )  # fmt: skip


def _overlay(
    cand: RunData,
    exam_run: RunData | None,
    rescore: Sequence[Case],
    from_exam: Sequence[Case],
    cand_rows: Mapping[str, dict[str, Any]],
) -> RunData:
    """The candidate's side's held cases: the rescored ones' outputs and the exam run's,
    read back by id with every column, scored in memory under their pinned versions."""
    from evalkit.compare.exam import _pinned_cases, _with_output_columns
    from evalkit.run.rescore import score_in_memory as score

    outputs, scores = [], []
    for run, cases in ((cand, rescore), (exam_run, from_exam)):
        if not cases or run is None:
            continue
        mine = output_details(run, [c.id for c in cases]).with_columns(run_id=pl.lit(cand.run_id))
        outputs.append(mine)
        scores.append(score(_with_output_columns(mine), {c.id: c for c in cases}, cand.run_id))
    empty = cand.outputs.clear()
    frames = _pinned_cases(cand, sorted([*rescore, *from_exam], key=lambda c: c.id), cand_rows)
    return RunData(
        run_id=cand.run_id,
        label=cand.label,
        manifest=cand.manifest,
        cases=frames,
        outputs=pl.concat(outputs, how="diagonal_relaxed") if outputs else empty,
        scores=pl.concat(scores, how="diagonal_relaxed") if scores else score(empty, {}, ""),
    )


def changed_comparison(
    base: RunData,
    cand: RunData,
    allow_diff: Sequence[str],
    gating: JudgeGating | None,
    rebaseline: RunData | None,
    pass_rules: PassRules | None,
) -> Comparison:
    """`compare` of the two runs' added, edited and removed cases alone (what the pull
    request's additive exam and its list of changes read): the same changes, delta and
    rebaselined pairs as comparing the whole runs."""
    ids = case_changes(base.cases, cand.cases)["case_id"].to_list()
    return compare(_only(base, ids), _only(cand, ids), allow_diff, gating, rebaseline, pass_rules)


def _only(run: RunData, ids: list[str]) -> RunData:
    """``run`` restricted to ``ids``: its score rows of them held (read back when thin)."""
    mine = pl.col("case_id").is_in(ids)
    scores = score_details(run, ids) if run.scores_in_store else run.scores.filter(mine)
    return replace(
        run,
        cases=run.cases.filter(mine),
        outputs=run.outputs.filter(mine),
        scores=scores,
        scores_in_store=False,
    )
