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
id (`score_details`), not the runs twice. The cases frame of a candidate's side
(`pinned_cases_frame`), the check of its scoring (`scored_as_pinned`) and the columns scoring reads
(`with_output_columns`) are here, and the whole-run path reads them too.

Examples:
    >>> exam_cand, parts = judge_pinned_thin(store, exam, base, cand)  # doctest: +SKIP
    >>> exam_cand.overlay.cases.height == len(parts["rescored"])         # doctest: +SKIP
    True
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from evalkit.compare.analysis import (
    Comparison,
    RunData,
    case_details_of,
    compare,
    output_details,
    score_details,
)
from evalkit.compare.paired import case_changes
from evalkit.compare.pass_rules import PassRules
from evalkit.compare.verdicts import strictly_increasing
from evalkit.corpus.cases import Case
from evalkit.corpus.pinned import CASE_DIRS, load_pinned_corpus
from evalkit.corpus.scorer_modules import MODULE_PREFIX
from evalkit.judges.gating import JudgeGating

if TYPE_CHECKING:
    from evalkit.store import Store
    from evalkit.store.exams import StoredExam

__all__ = ["changed_comparison", "judge_pinned_thin"]


def judge_pinned_thin(
    store: Store,
    exam: StoredExam,
    base: RunData,
    cand: RunData,
    exam_run: RunData | None = None,
) -> tuple[RunData, dict[str, tuple[str, ...]]]:
    """`evalkit.compare.exam.judge_on_exam` of thin runs on ``exam`` (read without its files'
    contents: ``store.exam(..., contents=False)``): the same cases, verdicts and parts, the
    candidate's side a thin run with an overlay (see the module docstring).

    The pinned cases are built only where they are read: when no file a scorer reads differs
    from the pin, the cases whose hash the candidate kept need no pinned case (a promotion
    pins an exam only when every case its run ran has the pinned hash: `evalkit.cli.baseline`),
    and only the files holding the others are loaded; else, or when one of those is not in the
    file its baseline row names, the whole pinned corpus.
    """
    hashes = exam.file_hashes()
    pinned_files = _pinned_scorer_files(hashes)
    with tempfile.TemporaryDirectory(prefix="evalkit-exam-") as scratch:
        if _all_scored_as_pinned(cand.manifest.scorer_files, pinned_files):
            kept = [c for c in ("sealed", "source") if c in base.cases.columns]
            pin = base.cases.select("case_id", pl.col("case_hash").alias("pinned_hash"), *kept)
            split = _split(pin, cand)
            wanted: set[str] = set()  # the files of the others (their rows name them)
            if split.others:
                named = case_details_of(base, split.others)["source"]
                wanted = {str(source).rpartition(":")[0] for source in named}
            shared = [p for p in hashes if not _case_file(p)]
            files = store.exam_contents(exam.exam_id, [*shared, *sorted(wanted & set(hashes))])
            where = Path(scratch) / "some"
            where.mkdir()
            some = {c.id: c for c in load_pinned_corpus(files, where).cases} if wanted else {}
            if set(split.others) <= set(some):
                return _judged(pin, some, split, pinned_files, cand, exam_run)
        # a scorer's file changed (or a case moved): every pinned case is read
        files = store.exam_contents(exam.exam_id, list(hashes))
        (Path(scratch) / "all").mkdir()
        corpus = {c.id: c for c in load_pinned_corpus(files, Path(scratch) / "all").cases}
        del files
    ran = base.cases.select("case_id").filter(pl.col("case_id").is_in(list(corpus)))
    ids = ran["case_id"].to_list()
    pin = ran.with_columns(
        pinned_hash=pl.Series([corpus[c].hash for c in ids], dtype=pl.String),
        sealed=pl.Series([corpus[c].sealed for c in ids], dtype=pl.Boolean),
        source=pl.Series([corpus[c].source for c in ids], dtype=pl.String),
    )
    return _judged(pin, corpus, _split(pin, cand), pinned_files, cand, exam_run)


def _case_file(path: str) -> bool:
    """Whether a pinned file is a case file (`evalkit.corpus.pinned.exam_files`)."""
    top, _, rest = path.partition("/")
    return top in CASE_DIRS and bool(rest) and path.endswith((".yaml", ".yml"))


def _pinned_scorer_files(hashes: Mapping[str, str]) -> dict[str, str]:
    """The pinned ``scorer_files`` (as `evalkit.compare.exam._pinned_scorer_files` reads them
    from the loaded corpus): every file a case references, then every scorer module."""
    files = {p: d for p, d in hashes.items()
             if not _case_file(p) and not p.startswith(MODULE_PREFIX)}  # fmt: skip
    modules = {p: d for p, d in hashes.items() if p.startswith(MODULE_PREFIX)}
    return {**dict(sorted(files.items())), **modules}


@dataclass(frozen=True)
class _Split:
    """The pinned cases the candidate answered with the pinned hash (``alike``: a series, a
    million of them held as one column), the others, and which of those it answered."""

    alike: pl.Series
    others: list[str]
    answered: set[str]


def _split(pin: pl.DataFrame, cand: RunData) -> _Split:
    answered = cand.outputs.select(pl.col("case_id").unique(), answered=pl.lit(True))
    frame = (
        pin.select("case_id", "pinned_hash")
        .join(cand.cases.select("case_id", "case_hash"), on="case_id", how="left")
        .join(answered, on="case_id", how="left")
        .with_columns(pl.col("answered").fill_null(False))
        .sort("case_id")
    )
    same = (pl.col("case_hash") == pl.col("pinned_hash")) & pl.col("answered")
    others = frame.filter(~same.fill_null(False))
    return _Split(
        frame.filter(same)["case_id"],
        others["case_id"].to_list(),
        set(others.filter(pl.col("answered"))["case_id"].to_list()),
    )


def _judged(
    pin: pl.DataFrame,
    pinned: Mapping[str, Case],
    split: _Split,
    pinned_files: Mapping[str, str],
    cand: RunData,
    exam_run: RunData | None,
) -> tuple[RunData, dict[str, tuple[str, ...]]]:
    """The candidate's side of the exam, from ``pin`` (``case_id, pinned_hash, sealed,
    source`` of every pinned case the baseline ran) and the pinned cases ``pinned`` (those of
    ``split.others`` at least; every one when a scorer's file differs)."""
    cand_files = cand.manifest.scorer_files
    as_stored = split.alike
    rescore: list[str] = []
    if not _all_scored_as_pinned(cand_files, pinned_files):  # those whose scorers' files changed
        rescore = [c for c in split.alike if not scored_as_pinned(pinned[c], cand_files,
                                                                   pinned_files)]  # fmt: skip
        as_stored = as_stored.filter(~as_stored.is_in(rescore))
    # the others: the pinned input answered (an edited expectation) is rescored
    others = split.others
    stored = case_details_of(cand, others) if others else cand.cases.clear()
    cand_rows = {r["case_id"]: r for r in stored.iter_rows(named=True)}
    exam_ids = _exam_answered(exam_run, pin)
    from_exam: list[str] = []
    missing: list[str] = []
    for case_id in others:
        case, row = pinned[case_id], cand_rows.get(case_id)
        if row is not None and row["input"] == case.input_json() and case_id in split.answered:
            rescore.append(case_id)  # its hash differs: never as stored
        elif case_id in exam_ids:
            from_exam.append(case_id)
        elif not case.sealed:  # a sealed case only ever reports: no evidence is no gap
            missing.append(case_id)
    rescore.sort()
    held = [pinned[c] for c in rescore], [pinned[c] for c in from_exam]
    overlay = _overlay(cand, exam_run, *held, cand_rows)
    kept = pl.concat([as_stored, pl.Series("case_id", rescore, pl.String)])
    ids = cand.cases["case_id"]
    every = not rescore and overlay.cases.is_empty() and as_stored.equals(ids, check_names=False)
    if every and cand.outputs["case_id"].equals(ids, check_names=False):
        outputs = [cand.outputs]  # the usual exam: each case as stored, one output each
    else:
        outputs = [cand.outputs.filter(pl.col("case_id").is_in(kept.implode()))]
    if from_exam and exam_run is not None:
        theirs = exam_run.outputs.filter(pl.col("case_id").is_in(from_exam))
        outputs.append(theirs.with_columns(run_id=pl.lit(cand.run_id)))
    held_scores = cand.scores.filter(pl.col("case_id").is_in(as_stored.implode()))
    scores = pl.concat(
        [
            held_scores.with_columns(pl.col("run_id").cast(pl.String)),
            overlay.scores.select([c for c in held_scores.columns if c in overlay.scores.columns]),
        ],
        how="diagonal_relaxed",
    )
    # the columns a thin load holds, of the types it holds them in
    columns = [c for c in overlay.cases.columns if c in cand.cases.columns]
    thin_cases = overlay.cases.select(columns).cast({c: cand.cases.schema[c] for c in columns})
    # a case hashed alike is the pinned case (tags, criticality, group); its place the pin's
    place = [c for c in ("sealed", "source") if c in columns]
    if every and pin["case_id"].equals(ids, check_names=False) and strictly_increasing(ids):
        # every case as stored, in the pin's order: the candidate's own columns (no copy of a
        # million cases), their place the pin's
        cases = cand.cases.with_columns(pin.get_column(c) for c in place).select(columns)
    else:
        cases = _as_pinned(cand.cases, as_stored, pin, place, columns, thin_cases)
    manifest = replace(cand.manifest, scorer_files=dict(pinned_files), rescoring=None)
    exam_cand = replace(
        cand,
        manifest=manifest,
        cases=cases,
        outputs=outputs[0] if len(outputs) == 1 else pl.concat(outputs, how="diagonal_relaxed"),
        scores=scores,
        overlay=overlay,
    )  # its own run's figures, and the store of its as-stored cases' rows
    parts = {"rescored": tuple(rescore), "answered": tuple(from_exam), "missing": tuple(missing)}
    return exam_cand, parts


def _as_pinned(
    cases: pl.DataFrame,
    as_stored: pl.Series,
    pin: pl.DataFrame,
    place: Sequence[str],
    columns: Sequence[str],
    thin_cases: pl.DataFrame,
) -> pl.DataFrame:
    """The candidate's side's cases: those hashed alike as stored (their place the pin's) and
    the overlay's (``thin_cases``), sorted by id."""
    stored_cases = (
        cases.filter(pl.col("case_id").is_in(as_stored.implode()))
        .drop(place)
        .join(pin.select("case_id", *place), on="case_id", how="left")
        .select(columns)
    )
    return pl.concat([stored_cases, thin_cases]).sort("case_id")


def scored_as_pinned(case: Case, cand_files: Mapping[str, str], pinned: Mapping[str, str]) -> bool:
    """Whether a run scored with ``cand_files`` scored ``case`` exactly as the pin does: every
    file its scorers read, and every custom scorer module, the pinned one."""
    for scorer in case.scorers:
        for path in scorer.file_hashes:
            if cand_files.get(path) != pinned.get(path):
                return False
    modules = {k for k in (*cand_files, *pinned) if k.startswith(MODULE_PREFIX)}
    return all(cand_files.get(k) == pinned.get(k) for k in modules)


def with_output_columns(outputs: pl.DataFrame) -> pl.DataFrame:
    """Stored outputs with every column scoring reads (a synthetic frame may lack some)."""
    wanted = {"text": pl.String, "tool_calls": pl.String, "steps": pl.Int64,
              "error": pl.String, "fail_reason": pl.String, "latency_ms": pl.Float64,
              "prompt_tokens": pl.Int64, "completion_tokens": pl.Int64, "model": pl.String,
              "cached": pl.Boolean}  # fmt: skip
    missing = [pl.lit(None, t).alias(c) for c, t in wanted.items() if c not in outputs.columns]
    return outputs.with_columns(missing) if missing else outputs


def pinned_cases_frame(
    cand: RunData, cases: Sequence[Case], cand_rows: Mapping[str, dict[str, Any]]
) -> pl.DataFrame:
    """The cases frame of the candidate's side: the pinned version's hash, input and metadata;
    the pull request may only add (a tag, must_pass)."""
    rows = []
    for case in cases:
        mine = cand_rows.get(case.id) or {}
        tags = list(dict.fromkeys([*case.tags, *(mine.get("tags") or [])]))
        must = case.must_pass or mine.get("criticality") == "must_pass"
        rows.append({
            "run_id": cand.run_id, "case_id": case.id, "case_hash": case.hash, "tags": tags,
            "criticality": "must_pass" if must else case.criticality, "sealed": case.sealed,
            "input": case.input_json(), "provenance": json.dumps(case.provenance, default=str),
            "source": case.source, "case_group": case.group,
        })  # fmt: skip
    schema: dict[str, pl.DataType] = {
        "run_id": pl.String(), "case_id": pl.String(), "case_hash": pl.String(),
        "tags": pl.List(pl.String), "criticality": pl.String(), "sealed": pl.Boolean(),
        "input": pl.String(), "provenance": pl.String(), "source": pl.String(),
        "case_group": pl.String(),
    }  # fmt: skip
    return pl.DataFrame(rows, schema=schema)


def _all_scored_as_pinned(cand_files: Mapping[str, str], pinned: Mapping[str, str]) -> bool:
    """Whether every case is scored as pinned (`scored_as_pinned`), whatever files its
    scorers read: no file differs between the two, and no scorer module."""
    return all(cand_files.get(k) == pinned.get(k) for k in (*cand_files, *pinned))


def _exam_answered(exam_run: RunData | None, pin: pl.DataFrame) -> set[str]:
    """The pinned cases the exam run answered in their pinned version."""
    if exam_run is None or not exam_run.outputs.height:
        return set()
    answered = exam_run.outputs.select(pl.col("case_id").unique())
    hashes = exam_run.cases.select("case_id", "case_hash").join(answered, on="case_id")
    alike = hashes.join(pin, on="case_id").filter(pl.col("case_hash") == pl.col("pinned_hash"))
    return set(alike["case_id"].to_list())


def _overlay(
    cand: RunData,
    exam_run: RunData | None,
    rescore: Sequence[Case],
    from_exam: Sequence[Case],
    cand_rows: Mapping[str, dict[str, Any]],
) -> RunData:
    """The candidate's side's held cases: the rescored ones' outputs and the exam run's,
    read back by id with every column, scored in memory under their pinned versions."""
    from evalkit.run.rescore import score_in_memory as score

    outputs, scores = [], []
    for run, cases in ((cand, rescore), (exam_run, from_exam)):
        if not cases or run is None:
            continue
        mine = output_details(run, [c.id for c in cases]).with_columns(run_id=pl.lit(cand.run_id))
        outputs.append(mine)
        scores.append(score(with_output_columns(mine), {c.id: c for c in cases}, cand.run_id))
    empty = cand.outputs.clear()
    frames = pinned_cases_frame(cand, sorted([*rescore, *from_exam], key=lambda c: c.id), cand_rows)
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
