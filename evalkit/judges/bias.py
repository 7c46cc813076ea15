"""Judge biases: position (order) consistency and length preference of pairwise verdicts, and
the length correlation of pointwise scores.

Pairwise verdicts use one coding: ``1`` = output 1 is better, ``2`` = output 2 is better, ``0`` =
tie, always in the *original* numbering (a verdict from the swapped order is mapped back first).
Missing values are not labels: drop or map them first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from evalkit import stats

Labels = Sequence[Any] | np.ndarray | pl.Series


def label_array(x: Labels, name: str) -> np.ndarray:
    """One rater's labels as a 1-d array; nulls, NaN and None raise ValueError naming ``name``."""
    if isinstance(x, pl.Series):
        if x.null_count():
            raise ValueError(f"{name} has {x.null_count()} nulls; drop or map them first")
        arr = x.to_numpy()
    else:
        arr = np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.dtype.kind == "f" and np.isnan(arr).any():
        raise ValueError(f"{name} contains NaN; drop or map missing labels first")
    if arr.dtype == object and any(v is None for v in arr):
        raise ValueError(f"{name} contains None; drop or map missing labels first")
    return arr


def _orders(ab: Labels, ba: Labels) -> tuple[np.ndarray, np.ndarray]:
    a, b = label_array(ab, "verdict_order_ab"), label_array(ba, "verdict_order_ba")
    if a.shape != b.shape:
        raise ValueError(f"the two orders differ in length: {a.size} vs {b.size}")
    if a.size == 0:
        raise ValueError("no items")
    return a, b


def position_consistency(verdict_order_ab: Labels, verdict_order_ba: Labels) -> float:
    """Share of items whose verdict is the same when the two outputs are shown in either order.

    Both verdicts must already be in the original numbering (1 = output 1 better, whichever
    position it was shown in). 1.0 = no position effect. Edge case: n = 0 -> ValueError.

    Examples:
        >>> position_consistency([1, 2, 2, 1], [1, 2, 1, 1])
        0.75
    """
    a, b = _orders(verdict_order_ab, verdict_order_ba)
    return float((a == b).mean())


def combine_orders(verdict_order_ab: Labels, verdict_order_ba: Labels, tie: Any = 0) -> np.ndarray:
    """One verdict from both orders: the common verdict where they agree, ``tie`` where not.

    Examples:
        >>> combine_orders([1, 2, 2, 1], [1, 2, 1, 0]).tolist()
        [1, 2, 0, 0]
    """
    a, b = _orders(verdict_order_ab, verdict_order_ba)
    return np.where(a == b, a, np.asarray(tie))


@dataclass(frozen=True, kw_only=True)
class OrderSummary:
    """Counts from judging every item in both orders, against a gold label.

    ``first_ab``/``first_ba`` count verdicts for the output shown *first* (output 1 in order
    a,b; output 2 in order b,a); ``decisive_*`` count non-tie verdicts in each order.
    """

    n: int
    correct_ab: int
    correct_ba: int
    correct_both: int
    consistent: int
    first_ab: int
    first_ba: int
    decisive_ab: int
    decisive_ba: int

    @property
    def accuracy_ab(self) -> float:
        return self.correct_ab / self.n

    @property
    def accuracy_ba(self) -> float:
        return self.correct_ba / self.n

    @property
    def accuracy(self) -> float:
        """Mean accuracy over both orders (LLMBar's "Acc.")."""
        return (self.correct_ab + self.correct_ba) / (2 * self.n)

    @property
    def consistency(self) -> float:
        """Share of items with the same verdict in both orders (LLMBar's "Agr.")."""
        return self.consistent / self.n

    @property
    def first_position_rate(self) -> float:
        """Share of decisive verdicts that went to the output shown first (0.5 = no bias)."""
        d = self.decisive_ab + self.decisive_ba
        return (self.first_ab + self.first_ba) / d if d else math.nan


def order_summary(
    label: Labels, verdict_order_ab: Labels, verdict_order_ba: Labels
) -> OrderSummary:
    """Accuracy in each order, consistency across orders and the first-position preference.

    Verdicts in the original numbering (1, 2, or 0 for a tie). Edge case: n = 0 -> ValueError.

    Examples:
        >>> s = order_summary([1, 2, 2, 1], [1, 2, 2, 1], [1, 1, 1, 1])
        >>> s.accuracy, s.consistency, s.first_position_rate
        (0.75, 0.5, 0.25)
    """
    a, b = _orders(verdict_order_ab, verdict_order_ba)
    g = label_array(label, "label")
    if g.shape != a.shape:
        raise ValueError(f"label and verdicts differ in length: {g.size} vs {a.size}")
    return OrderSummary(
        n=int(a.size),
        correct_ab=int((a == g).sum()),
        correct_ba=int((b == g).sum()),
        correct_both=int(((a == g) & (b == g)).sum()),
        consistent=int((a == b).sum()),
        first_ab=int((a == 1).sum()),
        first_ba=int((b == 2).sum()),
        decisive_ab=int(np.isin(a, (1, 2)).sum()),
        decisive_ba=int(np.isin(b, (1, 2)).sum()),
    )


def order_by_slice(
    frame: pl.DataFrame, label: str, verdict_ab: str, verdict_ba: str, by: str
) -> pl.DataFrame:
    """:func:`order_summary` per slice, in order of first appearance.

    Columns: ``slice, n, accuracy_ab, accuracy_ba, accuracy`` (mean of the two),
    ``consistency`` (same verdict both orders), ``both_correct`` (right in both orders: the
    accuracy of the combined verdict when inconsistent pairs count as ties), and
    ``first_position_rate``.

    Examples:
        >>> df = pl.DataFrame({"g": [1, 2, 2, 1], "ab": [1, 2, 2, 1], "ba": [1, 1, 2, 2],
        ...                    "s": ["x", "x", "y", "y"]})
        >>> order_by_slice(df, "g", "ab", "ba", "s").select("slice", "consistency").rows()
        [('x', 0.5), ('y', 0.5)]
    """
    rows = []
    for (name,), part in frame.group_by([by], maintain_order=True):
        s = order_summary(part[label], part[verdict_ab], part[verdict_ba])
        rows.append(
            {
                "slice": str(name),
                "n": s.n,
                "accuracy_ab": s.accuracy_ab,
                "accuracy_ba": s.accuracy_ba,
                "accuracy": s.accuracy,
                "consistency": s.consistency,
                "both_correct": s.correct_both / s.n,
                "first_position_rate": s.first_position_rate,
            }
        )
    return pl.DataFrame(rows)


def _rank(x: np.ndarray) -> np.ndarray:
    """Average ranks (ties share the mean rank), as ``scipy.stats.rankdata``."""
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    return (ends - (counts - 1) / 2)[inverse].astype(float)


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    if x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    return float(np.corrcoef(x, y)[0, 1])


@dataclass(frozen=True, kw_only=True)
class LengthBias:
    """Does the judge prefer the longer output?

    ``share_longer`` (Wilson ``lo``/``hi``) is the share of decisive verdicts on unequal-length
    pairs that picked the longer output (0.5 = no preference). ``point_biserial`` is Pearson's r
    between "picked output 2" (0/1) and ``len_2 - len_1`` over decisive verdicts; ``spearman`` is
    the same on ranks (robust to a few very long outputs). Compare with the same figures for the
    human labels: longer answers may really be better.
    """

    n: int
    n_decisive: int
    n_unequal: int
    picked_longer: int
    share_longer: float
    lo: float
    hi: float
    point_biserial: float
    spearman: float


def length_bias(verdicts: Labels, len_1: Labels, len_2: Labels, level: float = 0.95) -> LengthBias:
    """Length preference of pairwise verdicts (1 / 2; ties = 0 are left out).

    Edge cases: n = 0 -> ValueError; no decisive verdict on unequal lengths -> share and bounds
    nan; a constant verdict or length difference -> correlations nan.

    Examples:
        >>> b = length_bias([2, 2, 1, 0], [10, 50, 40, 5], [30, 60, 20, 9])
        >>> b.picked_longer, b.n_unequal, b.share_longer
        (3, 3, 1.0)
    """
    v = label_array(verdicts, "verdicts")
    l1 = label_array(len_1, "len_1").astype(float)
    l2 = label_array(len_2, "len_2").astype(float)
    if not v.shape == l1.shape == l2.shape:
        raise ValueError(f"verdicts and lengths differ in length: {v.size}, {l1.size}, {l2.size}")
    if v.size == 0:
        raise ValueError("no items")
    keep = np.isin(v, (1, 2))
    picked2, diff = (v[keep] == 2).astype(float), (l2 - l1)[keep]
    unequal = diff != 0
    longer = int(((picked2 == 1) & (diff > 0)).sum() + ((picked2 == 0) & (diff < 0)).sum())
    m = int(unequal.sum())
    lo, hi = stats.wilson_interval(longer, m, level) if m else (math.nan, math.nan)
    return LengthBias(
        n=int(v.size),
        n_decisive=int(keep.sum()),
        n_unequal=m,
        picked_longer=longer,
        share_longer=longer / m if m else math.nan,
        lo=lo,
        hi=hi,
        point_biserial=_pearson(picked2, diff),
        spearman=_pearson(_rank(picked2), _rank(diff)),
    )


def score_length_correlation(scores: Labels, lengths: Labels) -> float:
    """Spearman's rank correlation between pointwise judge scores and output length.

    Edge cases: fewer than 2 items or a constant input -> nan.

    Examples:
        >>> round(score_length_correlation([1, 2, 3, 5], [10, 30, 20, 40]), 4)
        0.8
    """
    s = label_array(scores, "scores").astype(float)
    n = label_array(lengths, "lengths").astype(float)
    if s.shape != n.shape:
        raise ValueError(f"scores and lengths differ in length: {s.size} vs {n.size}")
    return _pearson(_rank(s), _rank(n)) if s.size else math.nan
