"""Judge–human agreement: the figures that decide whether a model judge may gate.

Pure functions over label arrays (lists, numpy arrays or Polars Series): confusion matrix,
per-class precision/recall/F1, Cohen's kappa with an interval, agreement per slice with Wilson
intervals, position (order) consistency, length bias, and agreement among human raters. Results
are frozen dataclasses that render themselves in Jupyter. A :class:`CalibrationRecord` is what the
store keeps: a judge without one may not gate.

Pairwise verdicts use one coding: ``1`` = output 1 is better, ``2`` = output 2 is better, ``0`` =
tie, always in the *original* numbering (a verdict from the swapped order is mapped back first).
Missing values are not labels: drop or map them (e.g. unparseable judge output -> tie) first.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from itertools import combinations
from typing import Any, Literal, cast

import numpy as np
import polars as pl

from evalkit import stats
from evalkit.judges.bias import (  # re-exported: agreement.X stays the one place to look
    Labels,
    LengthBias,
    OrderSummary,
    combine_orders,
    label_array,
    length_bias,
    order_by_slice,
    order_summary,
    position_consistency,
    score_length_correlation,
)

__all__ = [
    "AgreementSummary",
    "CalibrationRecord",
    "ClassReport",
    "LengthBias",
    "OrderSummary",
    "RaterAgreement",
    "agreement_summary",
    "classification_report",
    "combine_orders",
    "confusion_array",
    "confusion_matrix",
    "length_bias",
    "order_by_slice",
    "order_summary",
    "position_consistency",
    "rater_agreement",
    "score_length_correlation",
    "slice_agreement",
]


def _codes(
    human: Labels, judge: Labels, labels: Sequence[Any] | None
) -> tuple[np.ndarray, np.ndarray, tuple[Any, ...]]:
    """Both raters' labels as indices into ``labels`` (default: sorted labels seen)."""
    h, j = label_array(human, "human"), label_array(judge, "judge")
    if h.shape != j.shape:
        raise ValueError(f"human and judge differ in length: {h.size} vs {j.size}")
    if labels is None:
        labels = sorted(set(h.tolist()) | set(j.tolist()))
    labs = tuple(labels)
    index = {lab: i for i, lab in enumerate(labs)}
    if len(index) != len(labs):
        raise ValueError(f"labels must be distinct, got {labs}")
    unknown = (set(h.tolist()) | set(j.tolist())) - index.keys()
    if unknown:
        raise ValueError(f"labels {sorted(map(str, unknown))} are not in labels={labs}")
    lookup = np.vectorize(index.__getitem__, otypes=[np.int64])
    return (
        (lookup(h) if h.size else h.astype(np.int64)),
        (lookup(j) if j.size else j.astype(np.int64)),
        labs,
    )


def confusion_array(
    human: Labels, judge: Labels, labels: Sequence[Any] | None = None
) -> np.ndarray:
    """Counts as a (k, k) int array: rows = human label, columns = judge label, in ``labels``
    order (default: sorted labels seen). Same as ``sklearn.metrics.confusion_matrix`` except
    that a label outside ``labels`` raises ValueError instead of being dropped silently.

    Examples:
        >>> confusion_array([1, 2, 2, 0], [1, 2, 1, 0], labels=[0, 1, 2]).tolist()
        [[1, 0, 0], [0, 1, 0], [0, 1, 1]]
    """
    h, j, labs = _codes(human, judge, labels)
    k = len(labs)
    return np.bincount(h * k + j, minlength=k * k).reshape(k, k)


def confusion_matrix(
    human: Labels, judge: Labels, labels: Sequence[Any] | None = None
) -> pl.DataFrame:
    """Confusion matrix in long form: one row per (human, judge) label pair, zeros included.

    Examples:
        >>> confusion_matrix(["a", "b", "b"], ["a", "a", "b"]).rows()
        [('a', 'a', 1), ('a', 'b', 0), ('b', 'a', 1), ('b', 'b', 1)]
    """
    labs = _codes(human, judge, labels)[2]
    counts = confusion_array(human, judge, labs)
    k = len(labs)
    return pl.DataFrame(
        {
            "human": [labs[i] for i in range(k) for _ in range(k)],
            "judge": [labs[c] for _ in range(k) for c in range(k)],
            "n": counts.ravel().tolist(),
        },
        schema_overrides={"n": pl.Int64},
    )


@dataclass(frozen=True)
class ClassReport:
    """Per-class precision, recall, F1 and support, their unweighted (macro) means, accuracy.

    A class with no judge predictions has precision 0.0, one with no human support has recall
    0.0, and F1 is 0.0 when both are 0 (sklearn's ``zero_division=0``). Such classes still count
    in the macro means.
    """

    labels: tuple[Any, ...]
    precision: tuple[float, ...]
    recall: tuple[float, ...]
    f1: tuple[float, ...]
    support: tuple[int, ...]
    predicted: tuple[int, ...]
    n: int
    accuracy: float
    macro_precision: float
    macro_recall: float
    macro_f1: float

    def to_frame(self) -> pl.DataFrame:
        """One row per class: label, precision, recall, f1, support (human), predicted (judge)."""
        return pl.DataFrame(
            {
                "label": [str(x) for x in self.labels],
                "precision": self.precision,
                "recall": self.recall,
                "f1": self.f1,
                "support": self.support,
                "predicted": self.predicted,
            }
        )

    def _repr_html_(self) -> str:
        head = (
            f"<p>n = {self.n}, accuracy {self.accuracy:.4f}, macro P/R/F1 "
            f"{self.macro_precision:.4f} / {self.macro_recall:.4f} / {self.macro_f1:.4f}</p>"
        )
        return head + _styled(self.to_frame(), "Per class")


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    out = np.zeros(num.shape, dtype=float)
    np.divide(num, den, out=out, where=den > 0)
    return out


def classification_report(
    human: Labels, judge: Labels, labels: Sequence[Any] | None = None
) -> ClassReport:
    """Precision/recall/F1 of the judge against the human labels, per class and macro-averaged.

    Matches ``sklearn.metrics.precision_recall_fscore_support(human, judge, labels=labels,
    zero_division=0)`` and ``accuracy_score``. Edge cases: n = 0 -> ValueError; constant labels
    and never-predicted classes give 0.0 where the ratio is 0/0 (see :class:`ClassReport`).

    Examples:
        >>> r = classification_report([0, 1, 1, 2], [0, 1, 2, 2], labels=[0, 1, 2])
        >>> r.accuracy, r.recall, round(r.macro_f1, 4)
        (0.75, (1.0, 0.5, 1.0), 0.7778)
    """
    cm = confusion_array(human, judge, labels)
    n = int(cm.sum())
    if n == 0:
        raise ValueError("no items: a classification report needs at least one")
    labs = _codes(human, judge, labels)[2]
    tp, support, predicted = np.diag(cm), cm.sum(1), cm.sum(0)
    precision, recall = _ratio(tp, predicted), _ratio(tp, support)
    f1 = _ratio(2 * tp, support + predicted)
    return ClassReport(
        labels=labs,
        precision=tuple(precision.tolist()),
        recall=tuple(recall.tolist()),
        f1=tuple(f1.tolist()),
        support=tuple(int(s) for s in support),
        predicted=tuple(int(p) for p in predicted),
        n=n,
        accuracy=float(tp.sum() / n),
        macro_precision=float(precision.mean()),
        macro_recall=float(recall.mean()),
        macro_f1=float(f1.mean()),
    )


@dataclass(frozen=True)
class AgreementSummary:
    """Judge vs human on n items: raw agreement (Wilson CI), Cohen's kappa (bootstrap CI),
    quadratic-weighted kappa when the labels are ordinal, per-class report, confusion matrix."""

    n: int
    labels: tuple[Any, ...]
    agree: int
    accuracy: float
    accuracy_lo: float
    accuracy_hi: float
    kappa: float
    kappa_lo: float
    kappa_hi: float
    weighted_kappa: float | None
    weighted_kappa_lo: float | None
    weighted_kappa_hi: float | None
    report: ClassReport
    level: float
    seed: int
    iters: int
    confusion: pl.DataFrame = field(compare=False, repr=False)

    def to_frame(self) -> pl.DataFrame:
        """The headline figures: metric, value, lo, hi (lo/hi null where there is no interval)."""
        rows: list[tuple[str, float, float | None, float | None]] = [
            ("accuracy", self.accuracy, self.accuracy_lo, self.accuracy_hi),
            ("cohen_kappa", self.kappa, self.kappa_lo, self.kappa_hi),
        ]
        if self.weighted_kappa is not None:
            rows.append(
                (
                    "weighted_kappa (quadratic)",
                    self.weighted_kappa,
                    self.weighted_kappa_lo,
                    self.weighted_kappa_hi,
                )
            )
        rows += [
            ("macro_precision", self.report.macro_precision, None, None),
            ("macro_recall", self.report.macro_recall, None, None),
            ("macro_f1", self.report.macro_f1, None, None),
        ]
        return pl.DataFrame(
            rows,
            schema={"metric": pl.String, "value": pl.Float64, "lo": pl.Float64, "hi": pl.Float64},
            orient="row",
        )

    def _repr_html_(self) -> str:
        head = (
            f"<p><b>Judge–human agreement</b>: n = {self.n}, labels {html.escape(str(self.labels))}"
            f", {self.level:.0%} intervals (accuracy: Wilson; kappa: bootstrap, {self.iters} "
            f"resamples, seed {self.seed})</p>"
        )
        return head + _styled(self.to_frame(), "Agreement") + self.report._repr_html_()


def agreement_summary(
    human: Labels,
    judge: Labels,
    labels: Sequence[Any] | None = None,
    ordinal: bool = False,
    level: float = 0.95,
    seed: int = 0,
    iters: int = 2000,
) -> AgreementSummary:
    """Everything a judge calibration reports, in one value.

    ``labels`` fixes the classes and, when ``ordinal``, their order for the quadratic-weighted
    kappa (pairwise verdicts are ordinal as ``(1, 0, 2)``: output 1 better < tie < output 2
    better). Both kappas and their intervals use every label in ``labels``, used or not. Edge
    cases: n = 0 -> ValueError; constant identical labels -> kappa nan with nan bounds (agreement
    is perfect but chance agreement is too); one item -> nan bounds (no interval from one item).

    Examples:
        >>> s = agreement_summary([1, 1, 2, 2, 0, 1], [1, 1, 2, 1, 0, 1], labels=(1, 0, 2))
        >>> s.agree, round(s.accuracy, 4), round(s.kappa, 4)
        (5, 0.8333, 0.7143)
        >>> s = agreement_summary([5, 5, 2, 1, 1, 2], [5, 2, 5, 1, 1, 2], labels=range(1, 6),
        ...                       ordinal=True, iters=200)
        >>> round(s.weighted_kappa, 2)  # on the 1-5 scale; 0.75 on the labels seen (1, 2, 5)
        0.48
    """
    h, j, labs = _codes(human, judge, labels)
    n = int(h.size)
    if n == 0:
        raise ValueError("no items: agreement needs at least one")
    agree = int((h == j).sum())
    ci = stats.wilson_interval(agree, n, level)
    # codes 0..k-1 follow the order of ``labels``, so the weighted kappa uses that order
    # ... and on the whole declared scale, used or not: a 1-5 scale whose raters used only 1, 2
    # and 5 weighs 2 vs 5 as three steps, not one (and the interval resamples that table too)
    scale = np.arange(len(labs))
    kap = stats.cohen_kappa_ci(h, j, level=level, iters=iters, seed=seed, labels=scale)
    wk: stats.KappaResult | None = None
    if ordinal:
        wk = stats.cohen_kappa_ci(
            h, j, level=level, weights="quadratic", iters=iters, seed=seed, labels=scale
        )
    return AgreementSummary(
        n=n,
        labels=labs,
        agree=agree,
        accuracy=agree / n,
        accuracy_lo=ci.lo,
        accuracy_hi=ci.hi,
        kappa=kap.kappa,
        kappa_lo=kap.lo,
        kappa_hi=kap.hi,
        weighted_kappa=None if wk is None else wk.kappa,
        weighted_kappa_lo=None if wk is None else wk.lo,
        weighted_kappa_hi=None if wk is None else wk.hi,
        report=classification_report(human, judge, labs),
        level=level,
        seed=seed,
        iters=iters,
        confusion=confusion_matrix(human, judge, labs),
    )


def slice_agreement(
    frame: pl.DataFrame, human: str, judge: str, by: str, level: float = 0.95
) -> pl.DataFrame:
    """Raw agreement per slice with Wilson intervals, weakest slice first.

    Columns: ``slice`` (as text), ``n``, ``agree``, ``agreement``, ``lo``, ``hi``. Edge cases:
    nulls in ``human`` or ``judge`` -> ValueError; a one-item slice gets a wide interval.

    Examples:
        >>> df = pl.DataFrame({"h": [1, 1, 2, 2], "j": [1, 2, 2, 2], "s": ["a", "a", "b", "b"]})
        >>> slice_agreement(df, "h", "j", "s").select("slice", "agreement").rows()
        [('a', 0.5), ('b', 1.0)]
    """
    nulls = frame.select(pl.col(human, judge).null_count()).row(0)
    if any(nulls):
        raise ValueError(f"{human}/{judge} have {nulls} nulls; drop or map them first")
    counts = (
        frame.group_by(pl.col(by).cast(pl.String).alias("slice"))
        .agg(pl.len().alias("n"), (pl.col(human) == pl.col(judge)).sum().alias("agree"))
        .with_columns(pl.col("n").cast(pl.Int64), pl.col("agree").cast(pl.Int64))
    )
    bounds = [stats.wilson_interval(k, n, level) for k, n in counts.select("agree", "n").rows()]
    return counts.with_columns(
        (pl.col("agree") / pl.col("n")).alias("agreement"),
        pl.Series("lo", [b.lo for b in bounds], dtype=pl.Float64),
        pl.Series("hi", [b.hi for b in bounds], dtype=pl.Float64),
    ).sort("agreement", "slice")


@dataclass(frozen=True)
class RaterAgreement:
    """Agreement among several raters: pairwise Cohen's kappa and Krippendorff's alpha."""

    pairwise: pl.DataFrame = field(compare=False)
    alpha: float
    level: str
    n_items: int
    n_raters: int

    def _repr_html_(self) -> str:
        head = (
            f"<p>{self.n_raters} raters, {self.n_items} items; Krippendorff's alpha "
            f"({self.level}) = {self.alpha:.4f}</p>"
        )
        return head + _styled(self.pairwise, "Pairwise Cohen's kappa")


def rater_agreement(
    frame: pl.DataFrame,
    item: str = "item",
    rater: str = "rater",
    label: str = "label",
    level: Literal["nominal", "ordinal", "interval"] = "nominal",
) -> RaterAgreement:
    """Pairwise Cohen's kappa (on the items both raters labelled) and Krippendorff's alpha.

    ``frame`` is long: one row per (item, rater) with a label. Nominal labels may be any type;
    ordinal and interval labels must be numbers. Edge cases: fewer than two raters ->
    ValueError; a pair sharing no item gets n = 0 and kappa nan; a duplicated (item, rater)
    -> ValueError.

    Examples:
        >>> df = pl.DataFrame({"item": [1, 1, 2, 2, 3, 3], "rater": ["a", "b"] * 3,
        ...                    "label": [0, 0, 1, 1, 1, 0]})
        >>> r = rater_agreement(df)
        >>> r.pairwise.select("rater_a", "rater_b", "n", "kappa").row(0), round(r.alpha, 4)
        (('a', 'b', 3, 0.4), 0.4444)
    """
    if frame.select(item, rater).is_duplicated().any():
        raise ValueError(f"some ({item}, {rater}) pairs have more than one {label}")
    raters = sorted(frame[rater].unique().to_list(), key=str)
    if len(raters) < 2:
        raise ValueError(f"need at least two raters, got {raters}")
    wide = frame.pivot(on=rater, index=item, values=label, aggregate_function=None)
    names = [str(r) for r in raters]
    rows = []
    for a, b in combinations(names, 2):
        both = wide.select(a, b).drop_nulls()
        n = both.height
        kappa = stats.cohen_kappa(both[a].to_numpy(), both[b].to_numpy()) if n else math.nan
        agree = float(cast(float, (both[a] == both[b]).mean())) if n else math.nan
        rows.append((a, b, n, agree, kappa))
    pairwise = pl.DataFrame(
        rows,
        schema={
            "rater_a": pl.String,
            "rater_b": pl.String,
            "n": pl.Int64,
            "agreement": pl.Float64,
            "kappa": pl.Float64,
        },
        orient="row",
    )
    if level == "nominal":
        values = sorted(frame[label].drop_nulls().unique().to_list(), key=str)
        code = {v: float(i) for i, v in enumerate(values)}
        matrix = np.array(
            [[math.nan if x is None else code[x] for x in wide[r].to_list()] for r in names]
        )
    else:
        matrix = np.array([wide[r].cast(pl.Float64).fill_null(math.nan).to_numpy() for r in names])
    return RaterAgreement(
        pairwise=pairwise,
        alpha=stats.krippendorff_alpha(matrix, level=level),
        level=level,
        n_items=wide.height,
        n_raters=len(names),
    )


@dataclass(frozen=True)
class CalibrationRecord:
    """A judge's measured agreement with humans: what lets it gate. The store persists it.

    Examples:
        >>> s = agreement_summary([1, 2, 2, 1, 0], [1, 2, 1, 1, 0], labels=(1, 0, 2), iters=200)
        >>> rec = CalibrationRecord.from_summary(s, judge_model="m", dataset="demo",
        ...                                      created_at=datetime(2026, 1, 1, tzinfo=UTC))
        >>> rec.to_dict()["n"], rec.to_dict()["created_at"]
        (5, '2026-01-01T00:00:00+00:00')
    """

    judge_model: str
    rubric_hash: str | None
    dataset: str
    n: int
    kappa: float
    kappa_lo: float
    kappa_hi: float
    accuracy: float
    macro_f1: float
    weighted_kappa: float | None
    position_consistency: float | None
    level: float
    created_at: datetime

    @classmethod
    def from_summary(
        cls,
        summary: AgreementSummary,
        judge_model: str,
        dataset: str,
        rubric_hash: str | None = None,
        position_consistency: float | None = None,
        created_at: datetime | None = None,
    ) -> CalibrationRecord:
        """Record an :class:`AgreementSummary` (``created_at`` defaults to now, UTC)."""
        return cls(
            judge_model=judge_model,
            rubric_hash=rubric_hash,
            dataset=dataset,
            n=summary.n,
            kappa=summary.kappa,
            kappa_lo=summary.kappa_lo,
            kappa_hi=summary.kappa_hi,
            accuracy=summary.accuracy,
            macro_f1=summary.report.macro_f1,
            weighted_kappa=summary.weighted_kappa,
            position_consistency=position_consistency,
            level=summary.level,
            created_at=created_at or datetime.now(UTC),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``created_at`` as ISO 8601, NaN as None."""
        out = asdict(self)
        out["created_at"] = self.created_at.isoformat()
        return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in out.items()}


def _styled(frame: pl.DataFrame, title: str) -> str:
    """A frame as the notebooks show tables (`evalkit.display.table`), as HTML."""
    from evalkit.display import table  # great_tables: only when shown

    return str(table(frame, title).as_raw_html())
