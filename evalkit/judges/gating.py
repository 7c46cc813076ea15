"""The judge gate rule: a judge check may block only where its judge is calibrated.

A *judge check* is a (scorer, judge model, rubric hash) found in the ``details`` JSON of tier-3
(judge) score rows. :func:`judge_gating` looks up the latest calibration record
(:mod:`evalkit.judges.calibration`) for each check's judge model and rubric hash: kappa at or above
the
policy's minimum lets the check gate; otherwise its results are reported, not gated, and the
check carries a one-line reason for the report. :func:`gated_scores` drops the non-gating judge
rows, so verdicts computed from it ignore uncalibrated judges. Pure functions over frames; the
gate wires them in. Also re-exported by :mod:`evalkit.judges.calibration`.

Examples:
    >>> scores = pl.DataFrame({"scorer": ["judge"], "tier": [3],
    ...     "details": ['{"judge_model": "m", "rubric": "r.md", "rubric_hash": "ab12"}']})
    >>> judge_gating(scores, pl.DataFrame(), 0.6).to_frame()["gating"].to_list()
    [False]
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl

from evalkit.scorers.registry import JUDGE

__all__ = [
    "JudgeCheck",
    "JudgeGating",
    "gated_scores",
    "judge_details",
    "judge_gating",
    "judge_rows",
    "short_path",
]


def short_path(path: str | None) -> str:
    """A rubric path for messages: relative to the working directory when inside it.

    Examples:
        >>> short_path("rubrics/tone.md")
        'rubrics/tone.md'
    """
    if not path:
        return "?"
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return path


def judge_details(name: str) -> pl.Expr:
    """A field of the score rows' ``details`` JSON, as a string expression."""
    return pl.col("details").str.json_path_match(f"$.{name}")


def judge_rows(scores: pl.DataFrame) -> pl.Expr:
    """True on tier-3 (judge) score rows."""
    if "tier" in scores.columns:
        return pl.col("tier") == JUDGE
    return judge_details("judge_model").is_not_null()


@dataclass(frozen=True)
class JudgeCheck:
    """One judge check found in a run's scores, and whether it may gate (``reason`` says why)."""

    scorer: str
    judge_model: str | None
    rubric: str | None
    rubric_hash: str | None
    n_scores: int
    gating: bool
    kappa: float | None
    calibrated_at: datetime | None
    reason: str


@dataclass(frozen=True)
class JudgeGating:
    """Which judge checks may gate under ``kappa_min``; the others are reported with a reason."""

    checks: tuple[JudgeCheck, ...]
    kappa_min: float

    @property
    def gating(self) -> frozenset[tuple[str, str | None]]:
        """(scorer, rubric_hash) of the judge checks that may block."""
        return frozenset((c.scorer, c.rubric_hash) for c in self.checks if c.gating)

    @property
    def reasons(self) -> tuple[str, ...]:
        """Why each non-gating judge check is reported, not gated (for the report)."""
        return tuple(c.reason for c in self.checks if not c.gating)

    def to_frame(self) -> pl.DataFrame:
        """One row per judge check."""
        rows = [asdict(c) for c in self.checks]
        schema = {
            "scorer": pl.String,
            "judge_model": pl.String,
            "rubric": pl.String,
            "rubric_hash": pl.String,
            "n_scores": pl.Int64,
            "gating": pl.Boolean,
            "kappa": pl.Float64,
            "calibrated_at": pl.Datetime("us", "UTC"),
            "reason": pl.String,
        }
        return (
            pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)
        )

    def _repr_html_(self) -> str:
        return (
            f"<p>judge checks (kappa_min {self.kappa_min:.2f})</p>" + self.to_frame()._repr_html_()
        )


def _keys() -> pl.Expr:
    return pl.concat_str(
        pl.col("scorer"),
        judge_details("judge_model").fill_null(""),
        judge_details("rubric_hash").fill_null(""),
        separator="\x00",
    )


def judge_gating(scores: pl.DataFrame, calibrations: pl.DataFrame, kappa_min: float) -> JudgeGating:
    """Decide, per judge check in ``scores``, whether it may gate.

    A judge check is a (scorer, judge model, rubric hash) found in the ``details`` of tier-3
    score rows. It may gate when the *latest* record in ``calibrations`` (the
    ``store.calibrations()`` frame) for its judge model and rubric hash has kappa >=
    ``kappa_min``. Otherwise it is reported, not gated, and ``reason`` says why: no record,
    kappa below the minimum, kappa undefined, or no judge model recorded on the scores.

    Examples:
        >>> scores = pl.DataFrame({"scorer": ["judge"], "tier": [3],
        ...     "details": ['{"judge_model": "m", "rubric": "r.md", "rubric_hash": "ab12"}']})
        >>> judge_gating(scores, pl.DataFrame(), 0.6).reasons
        ('judge m with r.md (rubric ab12) has no calibration record — reported, not gated',)
    """
    rows = scores.filter(judge_rows(scores)).with_columns(
        judge_details("judge_model").alias("judge_model"),
        judge_details("rubric").alias("rubric"),
        judge_details("rubric_hash").alias("rubric_hash"),
    )
    found = (
        rows.group_by("scorer", "judge_model", "rubric_hash", maintain_order=True)
        .agg(pl.col("rubric").drop_nulls().first(), pl.len().alias("n"))
        .sort("scorer", "judge_model", "rubric_hash", nulls_last=True)
    )
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    if not calibrations.is_empty():
        for row in calibrations.sort("created_at").iter_rows(named=True):
            latest[(row["judge_model"], row["rubric_hash"])] = row
    checks = []
    for scorer, model, rubric_hash, rubric, n in found.rows():
        name = f"judge {model} with {short_path(rubric)} (rubric {(rubric_hash or '?')[:8]})"
        record = latest.get((model, rubric_hash)) if model and rubric_hash else None
        kappa = record["kappa"] if record else None
        kappa = None if kappa is None or math.isnan(kappa) else float(kappa)
        when = record["created_at"] if record else None
        gating = kappa is not None and kappa >= kappa_min
        if model is None or rubric_hash is None:
            reason = (
                f"scorer {scorer}: no judge model or rubric recorded on {n} score(s) (the judge "
                "was not configured or never answered) — reported, not gated"
            )
        elif record is None:
            reason = f"{name} has no calibration record — reported, not gated"
        else:
            seen = f"n={record['n']}, calibrated {str(when)[:10]}"
            if kappa is None:
                reason = f"{name}: kappa undefined ({seen}) — reported, not gated"
            elif gating:
                reason = f"{name}: kappa {kappa:.2f} ≥ {kappa_min:.2f} ({seen}) — gates"
            else:
                reason = (
                    f"{name}: kappa {kappa:.2f} < {kappa_min:.2f} ({seen}) — reported, not gated"
                )
        checks.append(
            JudgeCheck(scorer, model, rubric, rubric_hash, n, gating, kappa, when, reason)
        )
    return JudgeGating(tuple(checks), kappa_min)


def gated_scores(scores: pl.DataFrame, gating: JudgeGating) -> pl.DataFrame:
    """``scores`` without the judge rows that may not gate (verdicts from it ignore them).

    Examples:
        >>> scores = pl.DataFrame({"scorer": ["contains", "judge"], "tier": [0, 3],
        ...     "details": [None, '{"judge_model": "m", "rubric_hash": "h"}']})
        >>> gated_scores(scores, judge_gating(scores, pl.DataFrame(), 0.6))["scorer"].to_list()
        ['contains']
    """
    allowed = [
        "\x00".join((c.scorer, c.judge_model or "", c.rubric_hash or ""))
        for c in gating.checks
        if c.gating
    ]
    return scores.filter(~judge_rows(scores) | _keys().is_in(allowed))
