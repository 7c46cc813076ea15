"""The judge gate rule: a judge check may block only where its judge is calibrated.

A *judge check* is a (scorer, judge model, rubric hash) found in the ``details`` JSON of tier-3
(judge) score rows. :func:`judge_gating` looks up the latest calibration record
(:mod:`evalkit.judges.calibration`) for each check's judge model and rubric hash: kappa at or above
the
policy's minimum lets the check gate; otherwise its results are reported, not gated, and the
check carries a one-line reason for the report. In a pair (``candidate=``), a check gates only
where both runs were judged by that same calibrated judge: a baseline judged by a calibrated judge
and a candidate by another one (or none) would otherwise count the first judge's fails as
"fixed" cases. :func:`gated_scores` drops the non-gating judge
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
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
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
    "judge_levels",
    "judge_rows",
    "short_path",
    "ungated_scores",
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
    judge_snapshot: str | None = None
    judge_prompt: str | None = None
    kappa_lo: float | None = None
    kappa_hi: float | None = None
    n_labels: int = 0  # labelled items behind the calibration record
    side: str | None = None  # in a pair: "both", "baseline" or "candidate"; else None


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
        return tuple(dict.fromkeys(c.reason for c in self.checks if not c.gating))

    def to_frame(self) -> pl.DataFrame:
        """One row per judge check."""
        rows = [asdict(c) for c in self.checks]
        schema: dict[str, Any] = {
            "scorer": pl.String,
            "judge_model": pl.String,
            "rubric": pl.String,
            "rubric_hash": pl.String,
            "n_scores": pl.Int64,
            "gating": pl.Boolean,
            "kappa": pl.Float64,
            "calibrated_at": pl.Datetime("us", "UTC"),
            "reason": pl.String,
            "judge_snapshot": pl.String,
            "judge_prompt": pl.String,
            "kappa_lo": pl.Float64,
            "kappa_hi": pl.Float64,
            "n_labels": pl.Int64,
            "side": pl.String,
        }
        return (
            pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)
        )

    def _repr_html_(self) -> str:
        from evalkit.judges.display import gating_table

        return gating_table(self.to_frame(), self.kappa_min).as_raw_html()


def _keys(field: Callable[[str], pl.Expr] = judge_details) -> pl.Expr:
    """Each row's judge check key (see :func:`_check_key`), its fields read by ``field``."""
    return pl.concat_str(
        pl.col("scorer"),
        *(field(k).fill_null("") for k in _CHECK_FIELDS),
        separator="\x00",
    )


def _check_key(check: JudgeCheck) -> str:
    values = (check.judge_model, check.judge_snapshot, check.judge_prompt, check.rubric_hash)
    return "\x00".join((check.scorer, *(v or "" for v in values)))


#: What identifies a judge check in the score details, besides the scorer name.
_CHECK_FIELDS = ("judge_model", "judge_snapshot", "judge_prompt", "rubric_hash")


def judge_gating(
    scores: pl.DataFrame,
    calibrations: pl.DataFrame,
    kappa_min: float,
    min_labels: int = 100,
    *,
    candidate: pl.DataFrame | None = None,
) -> JudgeGating:
    """Decide, per judge check in ``scores``, whether it may gate.

    A judge check is a (scorer, judge model, snapshot, judge prompt version, rubric hash) found
    in the ``details`` of tier-3 score rows. It may gate only when the *latest* record in
    ``calibrations`` (the ``store.calibrations()`` frame) for exactly that judge model,
    snapshot, rubric hash and prompt version measured at least ``min_labels`` labelled items
    and the **lower bound** of its kappa interval is at least ``kappa_min``: a kappa of 0.74
    on 9 labels (interval 0.00 to 1.00) is no evidence that the judge agrees with people.
    Otherwise it is reported, not gated, and ``reason`` says why.

    With ``candidate``, ``scores`` are the baseline's and ``candidate`` the candidate's: a
    judge scorer's rubric (scorer + rubric path) gates only when every one of its scores on both
    sides came from one and the same judge, and that judge may gate. Where the sides differ (a
    calibrated judge on one, another judge, calibration or none on the other), none of its
    checks gates, on either side, and the reason names the judges of both.

    Examples:
        >>> scores = pl.DataFrame({"scorer": ["judge"], "tier": [3],
        ...     "details": ['{"judge_model": "m", "rubric": "r.md", "rubric_hash": "ab12"}']})
        >>> judge_gating(scores, pl.DataFrame(), 0.6).reasons
        ('judge m with r.md (rubric ab12) has no calibration record — reported, not gated',)
        >>> cal = pl.DataFrame({"judge_model": ["m"], "rubric_hash": ["ab12"], "n": [200],
        ...     "kappa": [0.9], "kappa_lo": [0.8], "kappa_hi": [0.95], "created_at": [None]})
        >>> judge_gating(scores, cal, 0.6).gating
        frozenset({('judge', 'ab12')})
        >>> cand = scores.with_columns(pl.col("details").str.replace('"m"', '"m2"'))
        >>> print(judge_gating(scores, cal, 0.6, candidate=cand).reasons[0])
        ... # doctest: +NORMALIZE_WHITESPACE
        judge rubric r.md: the baseline was judged by m [prompt ?, rubric ab12] (calibrated)
        and the candidate was judged by m2 [prompt ?, rubric ab12] (no calibration) — reported,
        not gated
    """
    sides = {None: scores} if candidate is None else {"baseline": scores, "candidate": candidate}
    fields = [*_CHECK_FIELDS, "rubric"]
    rows = pl.concat(
        [
            frame.filter(judge_rows(frame)).select(
                pl.col("scorer").cast(pl.String),
                *(judge_details(k).alias(k) for k in fields),
                pl.lit(side, pl.String).alias("side"),
            )
            for side, frame in sides.items()
        ]
    )
    keys = ["scorer", "judge_model", "judge_snapshot", "judge_prompt", "rubric_hash"]
    found = (
        rows.group_by(keys, maintain_order=True)
        .agg(pl.col("rubric").drop_nulls().first(), pl.len().alias("n"), pl.col("side").unique())
        .sort(keys, nulls_last=True)
    )
    latest: dict[tuple[Any, ...], dict[str, Any]] = {}
    if not calibrations.is_empty():
        for row in calibrations.sort("created_at").iter_rows(named=True):
            key = (row["judge_model"], row.get("judge_snapshot"), row.get("judge_prompt"),
                   row["rubric_hash"])  # fmt: skip
            latest[key] = row
    checks = {}
    for scorer, model, snapshot, prompt, rubric_hash, rubric, n, seen in found.rows():
        check = _assess(scorer, model, snapshot, prompt, rubric_hash, rubric, n, latest,
                        kappa_min, min_labels)  # fmt: skip
        side = None if candidate is None else ("both" if len(seen) == 2 else seen[0])
        checks[_check_key(check)] = replace(check, side=side)
    if candidate is not None:
        for identities, reason in _mismatches(rows, checks):
            for check_key in identities:
                checks[check_key] = replace(checks[check_key], gating=False, reason=reason)
    return JudgeGating(tuple(checks.values()), kappa_min)


def _assess(
    scorer: str,
    model: str | None,
    snapshot: str | None,
    prompt: str | None,
    rubric_hash: str | None,
    rubric: str | None,
    n: int,
    latest: dict[tuple[Any, ...], dict[str, Any]],
    kappa_min: float,
    min_labels: int,
) -> JudgeCheck:
    """One judge identity against its latest calibration record."""
    pinned = f"{model}@{snapshot}" if snapshot else f"{model}"
    name = f"judge {pinned} with {short_path(rubric)} (rubric {(rubric_hash or '?')[:8]})"
    record = latest.get((model, snapshot, prompt, rubric_hash)) if model and rubric_hash else None
    kappa, lo, hi = (_number(record.get(k)) if record else None
                     for k in ("kappa", "kappa_lo", "kappa_hi"))  # fmt: skip
    lo = _decision_bound(record, lo)
    labels = int(record["n"]) if record and record.get("n") is not None else 0
    when = record["created_at"] if record else None
    gating = lo is not None and lo >= kappa_min and labels >= min_labels
    if model is None or rubric_hash is None:
        reason = (
            f"scorer {scorer}: no judge model or rubric recorded on {n} score(s) (the judge "
            "was not configured or never answered) — reported, not gated"
        )
    elif record is None:
        others = [k for k in latest if k[0] == model and k[3] == rubric_hash]
        stale = (
            " for this snapshot and judge prompt (a record exists for another: recalibrate)"
            if others
            else ""
        )
        reason = f"{name} has no calibration record{stale} — reported, not gated"
    else:
        seen = (
            f"kappa {_fmt(kappa)} [{_fmt(lo)}, {_fmt(hi)}], n={labels}, calibrated {str(when)[:10]}"
        )
        if kappa is None:
            reason = f"{name}: kappa undefined ({seen}) — reported, not gated"
        elif gating:
            reason = f"{name}: {seen}; lower bound ≥ {kappa_min:.2f} — gates"
        elif labels < min_labels:
            reason = (
                f"{name}: {seen}; needs ≥ {min_labels} labelled items "
                f"(gate.judge_min_labels) — reported, not gated"
            )
        elif lo is None:
            reason = f"{name}: {seen}; kappa has no interval — reported, not gated"
        else:
            reason = (
                f"{name}: {seen}; the lower bound is not ≥ {kappa_min:.2f} "
                "(gate.judge_kappa_min) — reported, not gated"
            )
    return JudgeCheck(
        scorer, model, rubric, rubric_hash, n, gating, kappa, when, reason,
        snapshot, prompt, lo, hi, labels,
    )  # fmt: skip


def _decision_bound(record: dict[str, Any] | None, lo: float | None) -> float | None:
    """The kappa lower bound that gates: the lower of the raw levels' and the pass/fail
    decision's (`evalkit.judges.calibration.decision_agreement`), when the record has both."""
    import json

    raw = (record or {}).get("figures")
    try:
        figures = json.loads(raw) if isinstance(raw, str) else (raw or {})
    except ValueError:
        return lo
    decision = _number(figures.get("decision_kappa_lo")) if isinstance(figures, dict) else None
    if lo is None or decision is None:
        return lo
    return min(lo, decision)


def _mismatches(rows: pl.DataFrame, checks: dict[str, JudgeCheck]) -> list[tuple[list[str], str]]:
    """Per judge scorer and rubric path whose judges differ between the baseline and the
    candidate (or that one side lacks) while one of them could gate on its own: its checks'
    keys, and the reason naming both sides. (Where none could, their own reasons say more.)"""
    keyed = rows.with_columns(_keys(pl.col).alias("key"))
    found = []
    for (scorer, rubric), group in keyed.group_by("scorer", "rubric", maintain_order=True):
        by_side = {side: group.filter(pl.col("side") == side)["key"].unique(maintain_order=True)
                   .to_list() for side in ("baseline", "candidate")}  # fmt: skip
        same = len(by_side["baseline"]) == 1 and by_side["baseline"] == by_side["candidate"]
        if same or not any(checks[k].gating for ids in by_side.values() for k in ids):
            continue
        judged = [
            f"the {side} was judged by {', '.join(_identity(checks[k]) for k in ids)}"
            if ids
            else f"the {side} was not judged by it"
            for side, ids in by_side.items()
        ]
        what = f"{scorer} rubric {short_path(rubric)}" if rubric else f"scorer {scorer}"
        reason = f"{what}: {judged[0]} and {judged[1]} — reported, not gated"
        found.append(([*by_side["baseline"], *by_side["candidate"]], reason))
    return found


def _identity(check: JudgeCheck) -> str:
    """A judge identity for a message: model@snapshot [prompt, rubric] (calibration status)."""
    pinned = f"{check.judge_model}@{check.judge_snapshot}" if check.judge_snapshot else None
    status = (
        "calibrated"
        if check.gating
        else "no calibration"
        if check.calibrated_at is None
        else "calibration not sufficient"
    )
    return (
        f"{pinned or check.judge_model or 'no recorded judge'} [prompt {check.judge_prompt or '?'}"
        f", rubric {(check.rubric_hash or '?')[:8]}] ({status})"
    )


def _number(value: Any) -> float | None:
    return (
        None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)
    )


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def gated_scores(scores: pl.DataFrame, gating: JudgeGating) -> pl.DataFrame:
    """``scores`` without the judge rows that may not gate (verdicts from it ignore them).

    Examples:
        >>> scores = pl.DataFrame({"scorer": ["contains", "judge"], "tier": [0, 3],
        ...     "details": [None, '{"judge_model": "m", "rubric_hash": "h"}']})
        >>> gated_scores(scores, judge_gating(scores, pl.DataFrame(), 0.6))["scorer"].to_list()
        ['contains']
    """
    allowed = [_check_key(c) for c in gating.checks if c.gating]
    return scores.filter(~judge_rows(scores) | _keys().is_in(allowed))


def ungated_scores(scores: pl.DataFrame, gating: JudgeGating) -> pl.DataFrame:
    """Only the judge rows that may not gate: what the report shows as "reported, not gated".

    Examples:
        >>> scores = pl.DataFrame({"scorer": ["contains", "judge"], "tier": [0, 3],
        ...     "details": [None, '{"judge_model": "m", "rubric_hash": "h"}']})
        >>> ungated_scores(scores, judge_gating(scores, pl.DataFrame(), 0.6))["scorer"].to_list()
        ['judge']
    """
    allowed = [_check_key(c) for c in gating.checks if c.gating]
    return scores.filter(judge_rows(scores) & ~_keys().is_in(allowed))


def judge_levels(scores: pl.DataFrame, gating: JudgeGating) -> pl.DataFrame:
    """Per case, the mean judge level (the rubric's own scale, e.g. 1-5) over the decided
    replays of the judge checks that may gate: ``case_id, judge_level``. Errored or unparsed
    judge answers are left out; a case no gating judge decided has no row.

    Examples:
        >>> scores = pl.DataFrame({"case_id": ["a", "a"], "scorer": ["judge"] * 2,
        ...     "tier": [3, 3], "error": [False, False], "details": [
        ...     '{"judge_model": "m", "rubric_hash": "h", "judge_score": 4}',
        ...     '{"judge_model": "m", "rubric_hash": "h", "judge_score": 5}']})
        >>> gating = JudgeGating((JudgeCheck("judge", "m", None, "h", 2, True, 0.8, None, ""),),
        ...     0.6)
        >>> judge_levels(scores, gating).rows()
        [('a', 4.5)]
    """
    schema = {"case_id": pl.String, "judge_level": pl.Float64}
    if scores.is_empty() or not gating.gating:
        return pl.DataFrame(schema=schema)
    allowed = [_check_key(c) for c in gating.checks if c.gating]
    decided = ~pl.col("error").fill_null(False) if "error" in scores.columns else pl.lit(True)
    rows = scores.filter(judge_rows(scores) & _keys().is_in(allowed) & decided)
    level = judge_details("judge_score").cast(pl.Float64, strict=False)
    return (
        rows.select("case_id", level.alias("judge_level"))
        .drop_nulls("judge_level")
        .group_by("case_id")
        .agg(pl.col("judge_level").mean())
        .sort("case_id")
        .select(pl.col(c).cast(t) for c, t in schema.items())
    )
