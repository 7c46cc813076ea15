"""A comparison of two runs: their frames, verdicts, paired frame and case changes, loaded from
the store with judge gating applied (`load_comparison`), ready for the gate, the report and a
notebook.

Data flows one way: outputs + scores -> verdicts (:mod:`evalkit.compare.verdicts`) -> paired
frame (:mod:`evalkit.compare.paired`) -> slices (:mod:`evalkit.compare.slices`) -> gate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl

from evalkit.compare.comparability import check_comparable, comparability_warnings
from evalkit.compare.paired import case_changes, paired_frame
from evalkit.compare.slices import slices
from evalkit.compare.verdicts import verdicts
from evalkit.judges.gating import (
    JudgeGating,
    gated_scores,
    judge_gating,
    judge_levels,
    judge_rows,
    ungated_scores,
)

if TYPE_CHECKING:
    from evalkit.store import Store


@dataclass(frozen=True)
class RunData:
    """One run's frames as the store returns them (see the data contract in `evalkit.store`);
    `load_run` reads outputs and scores in storage order (not sorted)."""

    run_id: str
    label: str
    manifest: dict[str, Any]
    cases: pl.DataFrame
    outputs: pl.DataFrame
    scores: pl.DataFrame

    @property
    def config_hash(self) -> str | None:
        return self.manifest.get("config_hash")


@dataclass(frozen=True)
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

    def _repr_html_(self) -> str:
        """Jupyter shows the pair's runs and its per-slice table (percentages, 3-digit p)."""
        from html import escape

        from evalkit.compare.tables import slice_table  # great_tables: only when displayed

        head = (
            f"<p><b>{escape(self.base.label)}</b> ({escape(self.base.run_id)}) → "
            f"<b>{escape(self.cand.label)}</b> ({escape(self.cand.run_id)}): "
            f"{self.paired.height} paired cases</p>"
        )
        return head + slice_table(slices(self.paired)).as_raw_html()


def compare(
    base: RunData,
    cand: RunData,
    allow_diff: Sequence[str] = (),
    gating: JudgeGating | None = None,
) -> Comparison:
    """Check comparability, then build verdicts, the paired frame and the case changes.

    With ``gating``, verdicts ignore the judge checks that may not gate (uncalibrated judges);
    their scores stay in ``base.scores``/``cand.scores`` for the report. Where judge checks may
    gate, the paired frame also carries each case's mean level of them, ``base_judge_level`` and
    ``cand_judge_level`` (`evalkit.judges.gating.judge_levels`), for the gate's judge-level rule.
    """
    differing = check_comparable(base.manifest, cand.manifest, allow_diff)
    base_scores, cand_scores = base.scores, cand.scores
    judge_paired = None
    if gating is not None and not all(check.gating for check in gating.checks):
        base_scores, cand_scores = (
            gated_scores(base_scores, gating),
            gated_scores(cand_scores, gating),
        )
        judge_paired = _ungated_judge_paired(base, cand, gating)
    bv = verdicts(base.outputs, base_scores, base.cases)
    cv = verdicts(cand.outputs, cand_scores, cand.cases)
    paired, changes = (
        paired_frame(bv, cv, base.cases, cand.cases),
        case_changes(base.cases, cand.cases),
    )
    if judge_paired is not None:
        # A case whose every check is an ungated judge has nothing that may gate: it is not
        # errored (its outputs exist); it leaves the gated pairing and is reported instead.
        scored = pl.concat([base_scores["case_id"], cand_scores["case_id"]]).unique()
        failed = pl.concat(
            [r.outputs.filter(pl.col("error").is_not_null())["case_id"] for r in (base, cand)]
        )
        paired = paired.filter(
            pl.col("case_id").is_in(scored.implode()) | pl.col("case_id").is_in(failed.implode())
        )
    if gating is not None and gating.gating:
        # Calibrated judges also gate on their own scale (gate.judge_tolerance_levels).
        for side, run in (("base", base), ("cand", cand)):
            levels = judge_levels(run.scores, gating).rename({"judge_level": f"{side}_judge_level"})
            paired = paired.join(levels, on="case_id", how="left", maintain_order="left")
    notes = tuple(gating.reasons) if gating is not None else ()
    warnings = [*comparability_warnings(differing, allow_diff)]
    for run, role in ((base, "baseline"), (cand, "candidate")):
        warnings += [f"{role} run: {w}" for w in run.manifest.get("warnings") or ()]
    return Comparison(
        base, cand, tuple(differing), bv, cv, paired, changes, notes, tuple(warnings), judge_paired
    )


def _ungated_judge_paired(base: RunData, cand: RunData, gating: JudgeGating) -> pl.DataFrame:
    """The paired frame of the judge checks that may not gate, on the cases they scored."""
    judged = [ungated_scores(run.scores, gating) for run in (base, cand)]
    sides = [verdicts(r.outputs, s, r.cases) for r, s in zip((base, cand), judged, strict=True)]
    frame = paired_frame(*sides, base.cases, cand.cases)
    return frame.filter(
        pl.col("case_id").is_in(pl.concat([s["case_id"] for s in judged]).implode())
    )


def load_run(store: Store, ref: str) -> RunData:
    """A run's frames from the store; ``ref`` is a run id, a unique prefix or a label."""
    run_id = store.resolve_run(ref)
    runs = store.runs().filter(pl.col("run_id") == run_id)
    label = runs["label"][0] if runs.height else ref
    # In storage order: verdicts group the rows themselves, faster than the store can sort them.
    outputs, scores = store.outputs(run_id, ordered=False), store.scores(run_id, ordered=False)
    return RunData(run_id, label, store.manifest(run_id), store.cases(run_id), outputs, scores)


def load_comparison(
    store: Store,
    baseline: str,
    candidate: str,
    allow_diff: Sequence[str] = (),
    judge_kappa_min: float = 0.6,
    judge_min_labels: int = 100,
) -> Comparison:
    """`compare` two runs read from the store; judge checks gate only where the store holds a
    calibration record for that judge model, snapshot, prompt version and rubric on at least
    ``judge_min_labels`` items whose kappa interval's lower bound is ≥ ``judge_kappa_min``.

    Examples:
        >>> cmp = load_comparison(open_store("x.duckdb"), "base", "cand")  # doctest: +SKIP
        >>> flips(cmp.paired).broken.height                              # doctest: +SKIP
        12
    """
    base, cand = load_run(store, baseline), load_run(store, candidate)
    judged = [run.scores.filter(judge_rows(run.scores)) for run in (base, cand)]
    both = pl.concat(judged, how="diagonal_relaxed")  # judge rows only: not 3M score rows
    gating = judge_gating(both, store.calibrations(), judge_kappa_min, judge_min_labels)
    return compare(base, cand, allow_diff, gating)
