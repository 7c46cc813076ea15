"""A comparison of two runs: their frames, verdicts, paired frame and case changes, loaded from
the store with judge gating applied (`load_comparison`), ready for the gate, the report and a
notebook.

Data flows one way: outputs + scores -> verdicts (:mod:`evalkit.compare.verdicts`) -> paired
frame (:mod:`evalkit.compare.paired`) -> slices (:mod:`evalkit.compare.slices`) -> gate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import polars as pl

from evalkit.compare.case_columns import read_cases
from evalkit.compare.comparability import (
    check_comparable,
    comparability_warnings,
    rebaseline_blocker,
)
from evalkit.compare.paired import case_changes, corpus_delta, paired_frame, same_cases
from evalkit.compare.pass_rules import PassRules
from evalkit.compare.shared_cases import share_cases
from evalkit.compare.trust import trusted_calibrations
from evalkit.compare.verdicts import verdicts
from evalkit.judges.gating import (
    JudgeGating,
    gated_scores,
    judge_gating,
    judge_levels,
    judge_rows,
    ungated_scores,
)
from evalkit.renderers import html_for
from evalkit.run_manifest import RunManifest, as_manifest
from evalkit.scorers.registry import JUDGE
from evalkit.store.history_queries import CaseCounts, case_counts

if TYPE_CHECKING:
    from evalkit.store import Store


@dataclass(frozen=True, kw_only=True)
class RunData:
    """One run's frames as the store returns them (see the data contract in `evalkit.store`);
    `load_run` reads outputs and scores in storage order (not sorted)."""

    run_id: str
    label: str
    # A stored JSON object is taken too (read as `RunManifest.from_stored` reads one).
    manifest: RunManifest
    cases: pl.DataFrame
    outputs: pl.DataFrame
    scores: pl.DataFrame
    # The run's stored summary (``evalkit run``'s counts of outputs, cost, ...).
    summary: dict[str, Any] = field(default_factory=dict)
    # Its cases as `evalkit run` and `evalkit history` count them: its own pass rate, per case
    # over all its checks (`evalkit.store.history_queries.case_counts`).
    case_counts: CaseCounts | None = None
    # The store file holding the outputs' `DETAIL_COLUMNS` when ``outputs`` was read without
    # them (`load_run(thin=True)`: the gate's); `output_details` reads them per case. A path,
    # not the store: the comparison is handed to the gate's notebook kernel as a pickle.
    details_db: str | None = field(default=None, repr=False, compare=False)
    # The scoring ``scores`` are (`load_run`: the newest when loaded), so the details read back
    # later are that scoring's even after a rescore; None: frames not read from a store.
    scoring_id: str | None = None
    # True when ``scores`` holds the judges' rows alone (`load_run(thin=True)`): the rest stay
    # in the store, and `verdicts_of` reads them a range of cases at a time.
    scores_in_store: bool = field(default=False, repr=False, compare=False)
    # A thin run's cases whose rows are held here in place of the store's (a candidate judged
    # on a pinned exam: its rescored and exam-answered cases, `evalkit.compare.exam_thin`):
    # their outputs, cases and scores with every column; the store's rows of them are not read.
    overlay: RunData | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "manifest", as_manifest(self.manifest))

    @property
    def config_hash(self) -> str | None:
        return self.manifest.config_hash or None


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """Everything a gate, a report or a notebook needs about one baseline/candidate pair."""

    base: RunData
    cand: RunData
    manifest_diff: tuple[str, ...]
    base_verdicts: pl.DataFrame
    cand_verdicts: pl.DataFrame
    paired: pl.DataFrame
    changes: pl.DataFrame
    judge_notes: tuple[str, ...] = ()  # judge checks reported but not gated, and why
    warnings: tuple[str, ...] = ()  # for the person reading the report (comparability, runs)

    # Verdicts of the judge checks that may not gate (uncalibrated), paired like ``paired``:
    # their flips are reported, labelled "judge not calibrated — reported, not gated".
    judge_paired: pl.DataFrame | None = None

    # The corpus delta (`evalkit.compare.paired.corpus_delta`): every edited, added or removed
    # case with the evidence on each side; the gate accounts for it per critical tag.
    delta: pl.DataFrame | None = None
    # The run of the baseline's configuration on the added and edited cases (`evalkit gate
    # --rebaseline`), whose verdicts pair those cases (``origin == "rebaselined"``).
    rebaseline: RunData | None = None
    # Why the delta cannot be rebaselined (a Python system whose code changed ...), or None.
    rebaseline_blocker: str | None = None
    # Judged on the baseline's pinned exam (`evalkit.compare.exam`): what the candidate was
    # judged on (`ExamSummary`), and the pull request's own added and edited cases (its
    # additive exam, `evalkit.compare.exam.additive_exam`); None without a pinned exam.
    exam: Any = None
    additions: pl.DataFrame | None = None

    def _repr_html_(self) -> str:
        """Jupyter shows the pair's runs and its per-slice table (drawn by `evalkit.report`)."""
        return html_for(self)


def compare(
    base: RunData,
    cand: RunData,
    allow_diff: Sequence[str] = (),
    gating: JudgeGating | None = None,
    rebaseline: RunData | None = None,
    pass_rules: PassRules | None = None,
) -> Comparison:
    """Check comparability, then build verdicts, the paired frame and the corpus delta.

    With ``gating``, verdicts ignore the judge checks that may not gate (uncalibrated judges);
    their scores stay in ``base.scores``/``cand.scores`` for the report. Where judge checks may
    gate, the paired frame also carries each case's mean level of them, ``base_judge_level`` and
    ``cand_judge_level`` (`evalkit.judges.gating.judge_levels`), for the gate's judge-level rule.

    ``rebaseline`` is a run of the baseline's configuration on the candidate's added and edited
    cases: those cases pair with its verdicts as their baseline side (``origin`` column:
    ``"paired"`` for cases unedited in both runs, ``"rebaselined"`` for these).

    ``pass_rules`` (the policy's, `evalkit.compare.pass_rules`) turn each case's replays into
    its verdict on every side; None: majority.
    """
    differing = check_comparable(base.manifest, cand.manifest, allow_diff)
    keep: Callable[[pl.DataFrame], pl.DataFrame] | None = None
    judge_paired = None
    if gating is not None and not all(check.gating for check in gating.checks):
        keep = partial(gated_scores, gating=gating)
        judge_paired = _ungated_judge_paired(base, cand, gating, pass_rules)
    bv = verdicts_of(base, pass_rules, keep)
    cv = verdicts_of(cand, pass_rules, keep)
    changes = _with_sources(case_changes(base.cases, cand.cases), base, cand)
    paired = paired_frame(bv, cv, base.cases, cand.cases)
    rebaselined: frozenset[str] = frozenset()
    if rebaseline is not None:
        wanted = changes.filter(pl.col("change") != "removed")["case_id"].implode()
        rv = verdicts_of(rebaseline, pass_rules, keep)
        extra = paired_frame(rv, cv, rebaseline.cases, cand.cases)
        extra = extra.filter(pl.col("case_id").is_in(wanted)).with_columns(
            origin=pl.lit("rebaselined")
        )
        rebaselined = frozenset(extra["case_id"])
        paired = pl.concat([paired, extra], how="diagonal_relaxed").sort("case_id")
    delta = corpus_delta(changes, base.cases, cand.cases, bv, cv, rebaselined)
    if rebaselined:
        # A must_pass case demoted in the PR is still a must_pass case until that is promoted.
        must = delta.filter(pl.col("criticality") == "must_pass")["case_id"].implode()
        paired = paired.with_columns(
            criticality=pl.when(pl.col("case_id").is_in(must))
            .then(pl.lit("must_pass"))
            .otherwise(pl.col("criticality"))
        )
    if judge_paired is not None:
        # A case whose every check is an ungated judge has nothing that may gate: it is not
        # errored (its outputs exist); it leaves the gated pairing and is reported instead.
        runs = [base, cand] + ([rebaseline] if rebaseline is not None else [])
        scored = pl.concat([scored_cases(run, keep) for run in runs]).unique()
        failed = pl.concat(
            [r.outputs.filter(pl.col("error").is_not_null())["case_id"] for r in runs]
        )
        paired = paired.filter(
            pl.col("case_id").is_in(scored.implode()) | pl.col("case_id").is_in(failed.implode())
        )
    if gating is not None and gating.gating:
        # Calibrated judges also gate on their own scale (gate.judge_tolerance_levels).
        for side, run in (("base", base), ("cand", cand)):
            levels = judge_levels(run.scores, gating)
            if side == "base" and rebaseline is not None:
                levels = levels.filter(~pl.col("case_id").is_in(list(rebaselined)))
                rb_levels = judge_levels(rebaseline.scores, gating)
                rb_levels = rb_levels.filter(pl.col("case_id").is_in(list(rebaselined)))
                levels = pl.concat([levels, rb_levels], how="diagonal_relaxed")
            levels = levels.rename({"judge_level": f"{side}_judge_level"})
            paired = paired.join(levels, on="case_id", how="left", maintain_order="left")
    notes = tuple(gating.reasons) if gating is not None else ()
    warnings = [*comparability_warnings(differing, allow_diff)]
    for run, role in ((base, "baseline"), (cand, "candidate")):
        warnings += [f"{role} run: {w}" for w in run.manifest.warnings]
    return Comparison(
        base=base,
        cand=cand,
        manifest_diff=tuple(differing),
        base_verdicts=bv,
        cand_verdicts=cv,
        paired=paired,
        changes=changes,
        judge_notes=notes,
        warnings=tuple(warnings),
        judge_paired=judge_paired,
        delta=delta,
        rebaseline=rebaseline,
        rebaseline_blocker=rebaseline_blocker(base.manifest, cand.manifest),
    )


def _with_sources(changes: pl.DataFrame, base: RunData, cand: RunData) -> pl.DataFrame:
    """``changes`` with each changed case's source (the candidate's, else the baseline's) read
    back from the store when its runs were read without it (a thin load)."""
    if changes.is_empty() or all(SOURCE in r.cases.columns for r in (base, cand)):
        return changes
    ids = changes["case_id"].to_list()
    sides = [
        case_details_of(run, ids).select("case_id", pl.col(SOURCE).alias(f"_{side}"))
        for side, run in (("cand", cand), ("base", base))
    ]
    found = changes.join(sides[0], on="case_id", how="left", maintain_order="left")
    found = found.join(sides[1], on="case_id", how="left", maintain_order="left")
    return found.with_columns(pl.coalesce("_cand", "_base").alias(SOURCE)).select(changes.columns)


def verdicts_of(
    run: RunData,
    rules: PassRules | None = None,
    keep: Callable[[pl.DataFrame], pl.DataFrame] | None = None,
) -> pl.DataFrame:
    """`verdicts` of ``run`` from its score rows ``keep`` keeps (None: every row; the judge
    gating's `gated_scores`). A thin run's rows are read from its store a range of cases at a
    time (``run.scores_in_store``): what is held at once is one range's rows, not the run's.

    Examples:
        >>> out = pl.DataFrame({"run_id": ["r"], "case_id": ["a"], "replay": [0],
        ...     "error": [None], "fail_reason": [None]})
        >>> sc = out.select("run_id", "case_id", "replay").with_columns(scorer=pl.lit("s"),
        ...     score=pl.lit(1.0), passed=pl.lit(True), error=pl.lit(False))
        >>> run = RunData(run_id="r", label="r", manifest={}, cases=None, outputs=out, scores=sc)
        >>> verdicts_of(run)["passed"].to_list()
        [True]
    """
    keep = keep or (lambda frame: frame)
    if not run.scores_in_store:
        return verdicts(run.outputs, keep(run.scores), run.cases, rules)
    with _details_store(run) as store:
        # a thin run's score rows and its outputs' usage figures stay in the store: read a
        # range of cases at a time
        def scores_of(low: str | None, high: str | None) -> pl.DataFrame:
            rows = store.scores(run.run_id, run.scoring_id, ordered=False,
                                without=SCORE_DETAIL_COLUMNS, case_range=(low, high))  # fmt: skip
            overlay = run.overlay.scores if run.overlay else None
            return keep(_overlaid(run, rows, overlay, low, high))

        def outputs_of(low: str | None, high: str | None) -> pl.DataFrame:
            rows = store.outputs(run.run_id, ordered=False, without=DETAIL_COLUMNS,
                                 case_range=(low, high))  # fmt: skip
            store.release()  # DuckDB's cache of the blocks read goes, range by range
            overlay = run.overlay.outputs if run.overlay else None  # an exam run's answers
            return compact_strings(_overlaid(run, rows, overlay, low, high))

        return verdicts(
            run.outputs, run.scores, run.cases, rules, scores_of=scores_of, outputs_of=outputs_of
        )


def scored_cases(
    run: RunData, keep: Callable[[pl.DataFrame], pl.DataFrame] | None = None
) -> pl.Series:
    """The ids of ``run``'s cases with a score row ``keep`` keeps (repeated per row); a thin
    run's other rows than its judges' are asked of its store."""
    held = (keep or (lambda frame: frame))(run.scores)["case_id"]
    if not run.scores_in_store:
        return held
    with _details_store(run) as store:
        rest = store.query(
            f"SELECT DISTINCT case_id FROM scores WHERE run_id = ? AND scoring_id = ? "
            f"AND tier <> {JUDGE}",
            [run.run_id, run.scoring_id],
        )
    return pl.concat([held, _not_overlaid(run, rest)["case_id"]])


def _overlaid(
    run: RunData, rows: pl.DataFrame, held: pl.DataFrame | None, low: str | None, high: str | None
) -> pl.DataFrame:
    """``rows`` of the case ids from ``low`` up to ``high`` read from ``run``'s store, those of
    the cases its overlay holds replaced by the overlay's (``held``, a frame of the same kind)."""
    if held is None:
        return rows
    share = pl.col("case_id") >= low if low is not None else pl.lit(True)
    share = share & (pl.col("case_id") < high) if high is not None else share
    ours = held.filter(share).select([c for c in rows.columns if c in held.columns])
    return pl.concat([_not_overlaid(run, rows), ours], how="diagonal_relaxed")


def _not_overlaid(run: RunData, rows: pl.DataFrame) -> pl.DataFrame:
    """``rows`` read from ``run``'s store but those of the cases its overlay holds."""
    if run.overlay is None or rows.is_empty():
        return rows
    return rows.filter(~pl.col("case_id").is_in(run.overlay.cases["case_id"].implode()))


def _details_store(run: RunData) -> Store:
    """The store a thin run was read from, opened read-only."""
    from evalkit.store import open_store

    assert run.details_db is not None, "a thin run names its store"
    return open_store(run.details_db, read_only=True)


def _ungated_judge_paired(
    base: RunData, cand: RunData, gating: JudgeGating, rules: PassRules | None = None
) -> pl.DataFrame:
    """The paired frame of the judge checks that may not gate, on the cases they scored."""
    judged = [ungated_scores(run.scores, gating) for run in (base, cand)]
    ungated = partial(ungated_scores, gating=gating)
    base_side, cand_side = (verdicts_of(run, rules, ungated) for run in (base, cand))
    frame = paired_frame(base_side, cand_side, base.cases, cand.cases)
    return frame.filter(
        pl.col("case_id").is_in(pl.concat([s["case_id"] for s in judged]).implode())
    )


#: Output columns no verdict, pairing or tier reads, only the report's shown cases (and the
#: cache key, which nothing of a comparison reads): a thin load (the gate's) leaves them in the
#: store, and `output_details` reads them for the cases shown (a million answers' text would
#: be most of what a gate holds).
DETAIL_COLUMNS = ("text", "tool_calls", "request_hash")
#: The same for cases (`case_details_of`: the report shows the input of its shown cases) and
#: scores (`score_details`: the scorers' reasons of the shown and failing cases).
CASE_DETAIL_COLUMNS = ("input", "provenance")
#: Where each case was read from: shown for the changed cases alone (`case_changes`), so a thin
#: load leaves it in the store too, read back for those.
SOURCE = "source"
SCORE_DETAIL_COLUMNS = ("reason", "scoring_id")
#: Output columns only verdicts read (the usage figures; and when an answer was stored, which
#: nothing of a comparison reads): a thin load leaves them in the store too, and `verdicts_of`
#: reads them a range of cases at a time with the score rows.
USAGE_DETAIL_COLUMNS = (
    "steps", "latency_ms", "prompt_tokens", "completion_tokens", "cost_usd", "created_at",
)  # fmt: skip
#: String columns of a run's frames with few distinct values: a thin load holds them as
#: categoricals (a code per row, each string once), and so do the verdicts and the paired
#: frame built from them (every comparison and join with strings reads them as strings).
REPEATED_STRING_COLUMNS = ("run_id", "criticality", "model", "case_group")


def compact_strings(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with its `REPEATED_STRING_COLUMNS` categorical: what a million rows of a few
    distinct strings hold is a code each, not a string each. (Tags stay strings: each tag
    becomes a slice's name, concatenated with literal names such as "all".)

    Examples:
        >>> frame = pl.DataFrame({"criticality": ["normal", "must_pass"], "tags": [["a"], []]})
        >>> compact_strings(frame).dtypes
        [Categorical, List(String)]
        >>> compact_strings(frame).equals(frame)
        True
    """
    cast = [pl.col(c).cast(pl.Categorical) for c in REPEATED_STRING_COLUMNS if c in frame.columns]
    return frame.with_columns(cast) if cast else frame


def output_details(run: RunData, case_ids: Sequence[str]) -> pl.DataFrame:
    """``run``'s outputs of ``case_ids``, every column (the text and tool calls a thin load
    left in the store read back for these cases alone), in the order ``run.outputs`` has them.

    Examples:
        >>> run = RunData(run_id="r", label="r", manifest={}, cases=pl.DataFrame(),
        ...     outputs=pl.DataFrame({"case_id": ["a", "b"], "text": ["yes", "no"]}),
        ...     scores=pl.DataFrame())
        >>> output_details(run, ["b"])["text"].to_list()
        ['no']
    """
    return _read_back(
        run,
        "outputs",
        DETAIL_COLUMNS,
        case_ids,
        lambda store, ids: store.outputs(run.run_id, ordered=False, case_ids=ids),
    )


def case_details_of(run: RunData, case_ids: Sequence[str]) -> pl.DataFrame:
    """``run``'s cases of ``case_ids``, every column (the input a thin load left in the store
    read back for these cases alone), ordered by case id.

    Examples:
        >>> run = RunData(run_id="r", label="r", manifest={}, outputs=pl.DataFrame(),
        ...     cases=pl.DataFrame({"case_id": ["a", "b"], "input": ["{}", "[]"]}),
        ...     scores=pl.DataFrame())
        >>> case_details_of(run, ["b"])["input"].to_list()
        ['[]']
    """
    return _read_back(
        run,
        "cases",
        CASE_DETAIL_COLUMNS,
        case_ids,
        lambda store, ids: store.cases(run.run_id, case_ids=ids, scoring_id=run.scoring_id),
    )


def score_details(run: RunData, case_ids: Sequence[str]) -> pl.DataFrame:
    """``run``'s scores of ``case_ids``, every column (the reasons a thin load left in the
    store read back for these cases alone), of the scoring ``run`` was loaded with
    (``run.scoring_id``), never a newer rescore's.

    Examples:
        >>> run = RunData(run_id="r", label="r", manifest={}, outputs=pl.DataFrame(),
        ...     cases=pl.DataFrame(), scores=pl.DataFrame({"case_id": ["a", "b"],
        ...     "reason": ["ok", "missing 'refund'"]}))
        >>> score_details(run, ["b"])["reason"].to_list()
        ["missing 'refund'"]
    """
    return _read_back(
        run,
        "scores",
        SCORE_DETAIL_COLUMNS,
        case_ids,
        lambda store, ids: store.scores(run.run_id, run.scoring_id, ordered=False, case_ids=ids),
    )


def _read_back(
    run: RunData,
    kind: str,
    detail_columns: Sequence[str],
    case_ids: Sequence[str],
    read: Callable[[Store, list[str]], pl.DataFrame],
) -> pl.DataFrame:
    """``run``'s ``kind`` frame's rows of ``case_ids`` when it has ``detail_columns`` (a whole
    load), else the same rows read again from the run's store with every column (a thin load;
    those of its overlay's cases from the overlay)."""
    held: pl.DataFrame = getattr(run, kind)
    if run.details_db is None or all(c in held.columns for c in detail_columns):
        return held.filter(pl.col("case_id").is_in(list(case_ids)))
    from evalkit.store import open_store

    overlay = run.overlay
    mine = set(overlay.cases["case_id"]) if overlay is not None else set()
    with open_store(run.details_db, read_only=True) as store:
        rows = read(store, [c for c in case_ids if c not in mine])
    if overlay is None or not mine & set(case_ids):
        return rows
    frame: pl.DataFrame = getattr(overlay, kind)
    ours = frame.filter(pl.col("case_id").is_in(list(mine & set(case_ids))))
    return pl.concat([rows, ours.select([c for c in rows.columns if c in ours.columns])],
                     how="diagonal_relaxed")  # fmt: skip


def load_run(
    store: Store,
    ref: str,
    *,
    thin: bool = False,
    like: pl.DataFrame | None = None,
    counts: CaseCounts | None = None,
) -> RunData:
    """A run's frames from the store; ``ref`` is a run id, a unique prefix or a label.
    ``thin`` (a read-only store only): the outputs without `DETAIL_COLUMNS`, read per case
    through `output_details` (what the gate's decision holds stays bounded by its figures),
    and without `USAGE_DETAIL_COLUMNS` (`verdicts_of` reads them by ranges of cases), their
    and the cases' repeated strings categorical (`compact_strings`), the cases without
    `CASE_DETAIL_COLUMNS` and `SOURCE` (`case_details_of`) and the scores without
    `SCORE_DETAIL_COLUMNS` (`score_details`); beside ``like``, the cases as `read_cases` does.
    ``counts``: the run's `case_counts`, when the caller counted them (`load_pair`).

    When the newest scoring is a rescore that recorded its scorer sources, the manifest's
    ``scorer_files`` are those (what the scores were made with), the run's own are kept under
    ``run_scorer_files`` and the scoring under ``rescoring`` (``scoring_id``, ``harness``), so
    `check_comparable` compares the sources each side was actually scored with.
    """
    import json

    run_id = store.resolve_run(ref)
    runs = store.runs().filter(pl.col("run_id") == run_id)
    label = runs["label"][0] if runs.height else ref
    stored = json.loads(runs["summary"][0] or "null") if runs.height else None
    # In storage order: verdicts group the rows themselves, faster than the store can sort them.
    thin = thin and store.read_only  # a writer's store is not reopened after it closes
    # counted first, and DuckDB's memory of the count let go before the frames are read: its
    # grouping of a million score rows is then not on top of them
    if counts is None:
        counts = case_counts(store, [run_id]).get(run_id)
        if thin:
            store.release()
    without = DETAIL_COLUMNS + USAGE_DETAIL_COLUMNS if thin else ()
    outputs = store.outputs(run_id, ordered=False, without=without)
    # thin: held to the end of the gate, its repeated strings as codes
    outputs = compact_strings(outputs) if thin else outputs
    # one scoring for every read of this run, the details read back later included
    scoring_id = store.latest_scoring(run_id)
    score_without = SCORE_DETAIL_COLUMNS if thin else ()
    # thin: the judges' rows alone (the judge gating's); `verdicts_of` reads the rest by ranges
    judges = JUDGE if thin else None
    scores = store.scores(run_id, scoring_id, ordered=False, without=score_without, tier=judges)
    case_without = (*CASE_DETAIL_COLUMNS, SOURCE) if thin else ()
    cases = read_cases(store, run_id, without=case_without, scoring_id=scoring_id,
                       like=like, compact=compact_strings if thin else None)  # fmt: skip
    manifest = store.manifest(run_id)
    scoring = store.scorings(run_id).filter(pl.col("scoring_id") == scoring_id)
    recorded = scoring["scorer_files"][0] if "scorer_files" in scoring.columns else None
    if scoring.height and recorded is not None:  # NULL: a run's own scoring, or an older one
        manifest = replace(
            manifest,
            run_scorer_files=manifest.scorer_files,
            scorer_files=json.loads(recorded),
            rescoring={"scoring_id": scoring_id, "harness": scoring["harness"][0]},
        )
    if thin:  # what DuckDB kept of these reads goes with its connection, before the next run's
        store.release()
    return RunData(
        run_id=run_id,
        label=label,
        manifest=manifest,
        cases=cases,
        outputs=outputs,
        scores=scores,
        summary=dict(stored or {}),
        case_counts=counts,
        details_db=str(store.path) if thin else None,
        scoring_id=scoring_id,
        scores_in_store=thin,
    )


def load_comparison(
    store: Store,
    baseline: str,
    candidate: str,
    allow_diff: Sequence[str] = (),
    judge_kappa_min: float = 0.6,
    judge_min_labels: int = 100,
    pass_rules: PassRules | None = None,
    *,
    thin: bool = False,
) -> Comparison:
    """`compare` two runs read from the store; judge checks gate only where the store holds a
    calibration record for that judge model, snapshot, prompt version and rubric on at least
    ``judge_min_labels`` items whose kappa interval's lower bound is ≥ ``judge_kappa_min``.
    ``thin``: the runs as `load_run` reads them thin (the gate's).

    Examples:
        >>> cmp = load_comparison(open_store("x.duckdb"), "base", "cand")  # doctest: +SKIP
        >>> flips(cmp.paired).broken.height                              # doctest: +SKIP
        12
    """
    base, cand = load_pair(store, baseline, candidate, thin=thin)
    judged = [run.scores.filter(judge_rows(run.scores)) for run in (base, cand)]
    # Judge rows only (not 3M score rows), each side's own: a judge check gates only when both
    # sides were judged by the same calibrated identity.
    calibrations = trusted_calibrations(store.calibrations())  # a trusted writer's only
    gating = judge_gating(
        judged[0], calibrations, judge_kappa_min, judge_min_labels, candidate=judged[1]
    )
    rebaseline = _rebaseline_run(store, base, cand, thin)
    if thin and store.read_only:
        # what DuckDB kept of these reads (the blocks it scanned, a sort's memory) goes with
        # its connection; the verdicts read by ranges through their own (`verdicts_of`)
        store.release()
    return compare(base, cand, allow_diff, gating, rebaseline, pass_rules)


def load_pair(
    store: Store, baseline: str, candidate: str, *, thin: bool = False
) -> tuple[RunData, RunData]:
    """Both runs as `load_run` reads them, their cases held once (`share_cases`); thin, both
    `case_counts` first, DuckDB's memory of each let go: neither on top of a run's frames."""
    counted: dict[str, CaseCounts | None] = {}
    for ref in (baseline, candidate) if thin and store.read_only else ():
        run_id = store.resolve_run(ref)
        counted[ref] = case_counts(store, [run_id]).get(run_id)
        store.release()
    base = load_run(store, baseline, thin=thin, counts=counted.get(baseline))
    cand = load_run(store, candidate, thin=thin, like=base.cases, counts=counted.get(candidate))
    base, cand, _ = share_cases(base, cand)  # the usual pair's cases held once
    return base, cand


def _rebaseline_run(
    store: Store, base: RunData, cand: RunData, thin: bool = False
) -> RunData | None:
    """The newest complete run of the baseline's configuration on the candidate's added and
    edited cases (`evalkit gate --rebaseline`), if the store holds one."""
    from evalkit.run.rebaseline import delta_cases, find_rebaseline

    # the usual pair holds the same cases: no join over a million ids to find none changed
    wanted = {} if same_cases(base.cases, cand.cases) else delta_cases(base.cases, cand.cases)
    run_id = find_rebaseline(store, base.run_id, wanted) if wanted else None
    return load_run(store, run_id, thin=thin) if run_id else None
