"""The pinned exam decides (issue 42, rule 1): the candidate is judged on the exam its baseline
was promoted with, never on the pull request's corpus.

A promotion pins every file the verdicts depend on (`evalkit.store.exams`,
`evalkit.corpus.pinned`). `judge_on_exam` builds the candidate's side of that exam, case by
pinned case:

- the candidate answered the pinned input (its stored input is the pinned one): its stored
  answers, scored under the pinned expectations — as stored when its case and the files its
  scorers read are the pinned ones, else rescored in memory (no model call; a judge check,
  which would need one, is undecided, so the case is errored);
- otherwise the candidate's configuration answered the pinned version in an exam run
  (`evalkit gate --rebaseline`, `evalkit.run.rebaseline.answer_pinned`, cached): those answers,
  rescored the same way;
- otherwise there is no evidence: the case is missing from the candidate's side, and the gate
  accounts for it as it does for a removed case (a must_pass case or a critical tag short of
  evidence is UNVERIFIED).

Metadata comes from the pin — tags, criticality, group, sealed status — and the pull request may
only add to it (a tag, must_pass). The pull request's own added and edited cases are a second,
additive exam (`additive_exam`): they can add blocks, never remove one.

Examples:
    >>> comparison = load_exam_comparison(store, "base", "cand")  # doctest: +SKIP
    >>> comparison.exam.line()                                     # doctest: +SKIP
    'judged on the exam promoted 2026-12-07 04:31 by ana; this PR adds 2 cases, edits 6 ...'
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from evalkit.compare.analysis import Comparison, RunData, compare, load_pair, load_run
from evalkit.compare.exam_thin import (
    changed_comparison,
    judge_pinned_thin,
    pinned_cases_frame,
    scored_as_pinned,
    with_output_columns,
)
from evalkit.compare.pass_rules import PassRules
from evalkit.corpus.cases import Corpus
from evalkit.corpus.pinned import load_pinned_corpus
from evalkit.corpus.scorer_modules import MODULE_PREFIX
from evalkit.judges.gating import judge_gating, judge_rows

if TYPE_CHECKING:
    from evalkit.store import Store
    from evalkit.store.exams import StoredExam

__all__ = ["ExamSummary", "additive_exam", "judge_on_exam", "load_exam_comparison"]


@dataclass(frozen=True, kw_only=True)
class ExamSummary:
    """What the candidate was judged on: the pinned exam (who promoted it, when) and what the
    pull request changed against it."""

    who: str
    promoted_at: str
    baseline: str
    added: tuple[str, ...] = ()
    edited: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()  # pinned cases with no candidate evidence
    rescored: tuple[str, ...] = ()  # pinned cases the candidate's stored answers were rescored on
    answered: tuple[str, ...] = ()  # pinned cases the exam run answered in their pinned version
    exam_run: str | None = None
    # Edited cases the candidate passes in the pull request's version and fails in the pinned
    loosened: tuple[str, ...] = ()
    removed: tuple[str, ...] = field(default=())  # cases the pull request's run did not hold
    # Of those, the ones still in the corpus the gate checked out, with no evidence: not
    # removed, not run (`evalkit.compare.not_run`; set by `evalkit.compare.pin.gate_pair`).
    not_run: tuple[str, ...] = ()
    not_run_answered: tuple[str, ...] = ()  # not run, but answered by the exam run

    def line(self) -> str:
        """The first screen's one line.

        Examples:
            >>> summary = ExamSummary(who="ana", promoted_at="2026-12-07 04:31", baseline="b1",
            ...     added=("n1",), edited=("e1",), missing=("m1",), removed=("m1",))
            >>> for part in summary.line().split("; "):
            ...     print(part)
            judged on the exam promoted 2026-12-07 04:31 by ana
            this PR adds 1 case, edits 1 (e1), removes 1 (evidence missing: m1)
            >>> ran_less = replace(summary, missing=("m1", "m2"), removed=("m1", "m2"),
            ...     not_run=("m2",))
            >>> print(ran_less.line().split("; ", 2)[2])
            the candidate did not run 1 pinned case still in the corpus (m2): unverified
        """
        edits = f"edits {len(self.edited)}" + (f" ({_named(self.edited)})" if self.edited else "")
        here = {*self.not_run, *self.not_run_answered}
        removed = [c for c in self.removed if c not in here]
        missing = [c for c in self.missing if c not in here]
        removes = f"removes {len(removed)}"
        if missing:
            removes += f" (evidence missing: {_named(missing)})"
        elif removed:
            removes += " (answered in their pinned version)"
        adds = f"adds {len(self.added)} case{'s' if len(self.added) != 1 else ''}"
        line = (
            f"judged on the exam promoted {self.promoted_at} by {self.who}; this PR {adds}, "
            f"{edits}, {removes}"
        )
        for ids, what in ((self.not_run, "unverified"),
                          (self.not_run_answered, "answered in their pinned version")):  # fmt: skip
            if ids:
                line += (
                    f"; the candidate did not run {len(ids)} pinned case"
                    f"{'s' if len(ids) != 1 else ''} still in the corpus ({_named(ids)}): {what}"
                )
        return line


def _named(ids: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def _pinned_scorer_files(corpus: Corpus, exam: StoredExam) -> dict[str, str]:
    """The pinned ``scorer_files`` (as a run manifest records them) of the exam."""
    modules = {
        path: digest
        for path, digest in exam.file_hashes().items()
        if path.startswith(MODULE_PREFIX)
    }
    return {**corpus.file_hashes, **modules}


def judge_on_exam(
    corpus: Corpus,
    pinned_files: Mapping[str, str],
    base: RunData,
    cand: RunData,
    exam_run: RunData | None = None,
) -> tuple[RunData, dict[str, tuple[str, ...]]]:
    """The candidate's side of the pinned exam (see the module docstring): a `RunData` whose
    cases are the pinned cases it has evidence for (pinned hash and metadata, the pull
    request's additions of tags and must_pass kept), and which pinned cases were rescored,
    answered by the exam run, or are missing."""
    from evalkit.run.rescore import score_in_memory

    pinned = {case.id: case for case in corpus.cases}
    ran = set(base.cases["case_id"].to_list())
    cand_rows = {r["case_id"]: r for r in cand.cases.iter_rows(named=True)}
    answered_ids = set(cand.outputs["case_id"].unique().to_list()) if cand.outputs.height else set()
    # The sources its newest scoring used (a rescore's, when it recorded them: `load_run`).
    cand_files = cand.manifest.scorer_files
    exam_ids: set[str] = set()
    if exam_run is not None and exam_run.outputs.height:
        hashes = dict(exam_run.cases.select("case_id", "case_hash").iter_rows())
        exam_ids = {c for c in exam_run.outputs["case_id"].unique().to_list()
                    if c in pinned and hashes.get(c) == pinned[c].hash}  # fmt: skip
    as_stored: list[str] = []
    rescore: list[str] = []
    from_exam: list[str] = []
    missing: list[str] = []
    for case_id in sorted(ran & set(pinned)):
        case, row = pinned[case_id], cand_rows.get(case_id)
        if row is not None and row["input"] == case.input_json() and case_id in answered_ids:
            same = row["case_hash"] == case.hash and scored_as_pinned(
                case, cand_files, pinned_files
            )
            (as_stored if same else rescore).append(case_id)
        elif case_id in exam_ids:
            from_exam.append(case_id)
        elif not case.sealed:  # a sealed case only ever reports: no evidence is no gap
            missing.append(case_id)
    outputs = [cand.outputs.filter(pl.col("case_id").is_in(as_stored + rescore))]
    scores = [cand.scores.filter(pl.col("case_id").is_in(as_stored))]
    if rescore:
        mine = with_output_columns(cand.outputs.filter(pl.col("case_id").is_in(rescore)))
        scores.append(score_in_memory(mine, {c: pinned[c] for c in rescore}, cand.run_id))
    if from_exam and exam_run is not None:
        theirs = exam_run.outputs.filter(pl.col("case_id").is_in(from_exam)).with_columns(
            run_id=pl.lit(cand.run_id)
        )
        outputs.append(theirs)
        theirs = with_output_columns(theirs)
        scores.append(score_in_memory(theirs, {c: pinned[c] for c in from_exam}, cand.run_id))
    kept = [*as_stored, *rescore, *from_exam]
    cases = pinned_cases_frame(cand, [pinned[c] for c in sorted(kept)], cand_rows)
    common = [c for c in scores[0].columns]
    frames = [s.select([c for c in common if c in s.columns]) for s in scores]
    score_frame = pl.concat(
        [f.with_columns(pl.col("run_id").cast(pl.String)) for f in frames], how="diagonal_relaxed"
    )
    output_frame = pl.concat(outputs, how="diagonal_relaxed")
    manifest = replace(cand.manifest, scorer_files=dict(pinned_files), rescoring=None)
    exam_cand = RunData(
        run_id=cand.run_id,
        label=cand.label,
        manifest=manifest,
        cases=cases,
        outputs=output_frame,
        scores=score_frame,
        summary=cand.summary,
        case_counts=cand.case_counts,
        scoring_id=cand.scoring_id,
    )  # its own run's figures
    parts = {"rescored": tuple(rescore), "answered": tuple(from_exam), "missing": tuple(missing)}
    return exam_cand, parts


def additive_exam(pr: Comparison) -> pl.DataFrame:
    """The pull request's own exam: its added and edited cases, each with the baseline
    configuration's verdict where it was rebaselined (``base``, else null) and the candidate's.

    Columns: ``case_id, change, tags, criticality, base, cand, base_error, cand_error,
    rebaselined``.
    """
    flags = ("base", "cand", "base_error", "cand_error", "rebaselined")
    schema = pl.Schema({
        "case_id": pl.String(), "change": pl.String(), "tags": pl.List(pl.String),
        "criticality": pl.String(), **dict.fromkeys(flags, pl.Boolean()),
    })  # fmt: skip
    delta = pr.delta
    if delta is None or delta.is_empty():
        return pl.DataFrame(schema=schema)
    changed = delta.filter(pl.col("change") != "removed")
    rebased = pr.paired.filter(pl.col("origin") == "rebaselined").select(
        "case_id", pl.col("base").alias("_b"), pl.col("base_error").alias("_be"),
        pl.col("cand").alias("_c"), pl.col("cand_error").alias("_ce"),
    )  # fmt: skip
    frame = changed.join(rebased, on="case_id", how="left")
    return frame.select(
        "case_id", "change", "tags", "criticality",
        pl.col("_b").alias("base"),
        pl.col("_c").fill_null(pl.col("cand")).alias("cand"),
        pl.col("_be").fill_null(True).alias("base_error"),
        pl.col("_ce").fill_null(pl.col("cand_error")).alias("cand_error"),
        "rebaselined",
    ).cast(schema)  # fmt: skip


def find_exam_run(
    store: Store, base_run_id: str, cand: RunData, thin: bool = False
) -> RunData | None:
    """The newest complete exam run of the candidate's configuration for this baseline
    (`evalkit.run.rebaseline.answer_pinned`), or None."""
    from evalkit.run.exam_run import find_exam_run as find

    run_id = find(store, base_run_id, cand.manifest)
    return load_run(store, run_id, thin=thin) if run_id else None


def trusted_exam(store: Store, baseline: str, contents: bool = True) -> StoredExam | None:
    """The exam pinned with the newest *trusted* promotion of ``baseline``
    (`evalkit.compare.trust.promotions`): an exam a pull-request job pinned with its own
    promotion judges nothing. ``contents`` False: its files' hashes alone."""
    from evalkit.compare.trust import promotions

    manifest = store.manifest(baseline)
    rows = promotions(store, manifest.suite or "", manifest.tier).filter(
        (pl.col("run_id") == baseline) & pl.col("why_not").is_null()
    )
    if not rows.height:
        return None
    return store.exam(baseline, rows["promoted_at"].to_list(), contents=contents)


def load_exam_comparison(
    store: Store,
    baseline: str,
    candidate: str,
    allow_diff: Sequence[str] = (),
    judge_kappa_min: float = 0.6,
    judge_min_labels: int = 100,
    pass_rules: PassRules | None = None,
    *,
    thin: bool = False,
) -> Comparison | None:
    """The comparison of the baseline with the candidate judged on the baseline's pinned exam;
    None when no exam was pinned with its promotion (the caller compares as before).
    ``thin`` (the gate's; a read-only store only): the runs read thin (`load_run`) and judged
    by `evalkit.compare.exam_thin`: the same comparison, what is held bounded as the plain
    gate's.

    The returned comparison's ``exam`` is the `ExamSummary`, its ``additions`` the additive
    exam (`additive_exam`) of the pull request, compared as before (`compare`, its own
    scorers, rebaselined where a rebaseline run exists).
    """
    from evalkit.compare.analysis import _rebaseline_run

    thin = thin and store.read_only
    exam = trusted_exam(store, baseline, contents=not thin)  # thin: its files read as needed
    if exam is None:
        return None
    base, cand = load_pair(store, baseline, candidate, thin=thin)
    exam_run = find_exam_run(store, baseline, cand, thin)
    if thin:
        exam_cand, parts = judge_pinned_thin(store, exam, base, cand, exam_run)
    else:
        with tempfile.TemporaryDirectory(prefix="evalkit-exam-") as scratch:
            corpus = load_pinned_corpus(exam.files, Path(scratch))
            pinned_files = _pinned_scorer_files(corpus, exam)
            exam_cand, parts = judge_on_exam(corpus, pinned_files, base, cand, exam_run)
    judged = [run.scores.filter(judge_rows(run.scores)) for run in (base, exam_cand)]
    calibrations = store.calibrations()
    gating = judge_gating(judged[0], calibrations, judge_kappa_min, judge_min_labels,
                          candidate=judged[1])  # fmt: skip
    pr_allow: tuple[str, ...] = (*allow_diff, "scorer_files")
    if not allow_diff:  # undeclared, one differing field is the variable under test, as ever
        from evalkit.corpus.manifest import manifest_diff

        others = [f for f in manifest_diff(base.manifest, cand.manifest) if f != "scorer_files"]
        if len(others) == 1:
            pr_allow = (*pr_allow, others[0])
    rebaseline = _rebaseline_run(store, base, cand, thin)
    pr_judged = cand.scores.filter(judge_rows(cand.scores))
    pr_gating = judge_gating(judged[0], calibrations, judge_kappa_min, judge_min_labels,
                             candidate=pr_judged)  # fmt: skip
    # thin: its added, edited and removed cases alone (all its additive exam reads)
    pr = (changed_comparison if thin else compare)(
        base, cand, pr_allow, pr_gating, rebaseline, pass_rules
    )
    main = compare(base, exam_cand, allow_diff, gating, None, pass_rules)
    additions = additive_exam(pr)
    edited = additions.filter(pl.col("change") == "edited")
    pinned_fail = set(main.paired.filter(pl.col("cand") == False)["case_id"].to_list())  # noqa: E712
    loosened = tuple(sorted(
        set(edited.filter(pl.col("cand") & ~pl.col("cand_error"))["case_id"].to_list())
        & pinned_fail
    ))  # fmt: skip
    summary = ExamSummary(
        who=exam.who,
        promoted_at=str(exam.promoted_at)[:16],
        baseline=baseline,
        added=tuple(additions.filter(pl.col("change") == "added")["case_id"].to_list()),
        edited=tuple(edited["case_id"].to_list()),
        missing=parts["missing"],
        rescored=parts["rescored"],
        answered=parts["answered"],
        exam_run=exam_run.run_id if exam_run is not None else None,
        loosened=loosened,
        removed=tuple(pr.changes.filter(pl.col("change") == "removed")["case_id"].to_list()),
    )
    warnings = list(main.warnings)
    if pr.manifest_diff and "scorer_files" in pr.manifest_diff:
        warnings.append(
            "the pull request's scorer sources differ from the pinned exam's: the pinned "
            "scorers decide; the pull request's judge only its own added and edited cases"
        )
    # The report lists what the pull request changed (its cases against the pinned ones).
    return replace(main, warnings=tuple(warnings), exam=summary, additions=additions,
                   rebaseline=rebaseline, changes=pr.changes)  # fmt: skip
