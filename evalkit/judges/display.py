"""Display tables (great_tables) for the judges layer: calibration records, a calibration's
figures, and the judge gating table, as notebooks show them (``_repr_html_``).

Each function takes plain values (mappings shaped like ``Calibration.to_row()``, the frames of
``JudgeGating.to_frame()`` and ``ClassReport.to_frame()``) and returns a ``great_tables.GT``
(or HTML). Rates show as percentages, kappas to 2 decimals with their interval, and every row is
shown: no silent truncation. This layer sits below ``evalkit.compare``, so it formats here.

Examples:
    >>> row = {"judge_model": "m", "rubric": "r.md", "rubric_hash": "ab12cd34ef", "scorer": "judge",
    ...        "n": 40, "kappa": 0.413, "kappa_lo": 0.2, "kappa_hi": 0.6, "accuracy": 0.625}
    >>> "0.41 [0.20, 0.60]" in calibration_table([row]).as_raw_html()
    True
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl
from great_tables import GT, loc, style

from evalkit.display import styled_table

__all__ = [
    "calibration_table",
    "class_table",
    "confusion_table",
    "figures_table",
    "fmt_kappa",
    "gating_table",
    "headline",
]


def _number(value: Any) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)


def fmt_kappa(value: Any, lo: Any = None, hi: Any = None) -> str:
    """A kappa to 2 decimals with its interval when there is one (``n/a`` when undefined).

    Examples:
        >>> fmt_kappa(0.4133, -0.001, 0.65), fmt_kappa(0.5), fmt_kappa(float("nan"))
        ('0.41 [0.00, 0.65]', '0.50', 'n/a')
    """
    k, a, b = _number(value), _number(lo), _number(hi)
    if k is None:
        return "n/a"

    def two(x: float) -> str:
        return f"{round(x, 2) + 0.0:.2f}"  # + 0.0: no "-0.00"

    return two(k) + (f" [{two(a)}, {two(b)}]" if a is not None and b is not None else "")


def calibration_table(
    records: Sequence[Mapping[str, Any]],
    title: str | None = "Judge calibration records",
    id: str = "evalkit-calibrations",
) -> GT:
    """One row per calibration record (``Calibration.to_row()`` or ``store.calibrations()``
    rows): judge, rubric, n, Cohen's kappa with its interval, weighted kappa, agreement, macro F1,
    Krippendorff's alpha, position consistency, when."""
    frame = pl.DataFrame(
        [
            {
                "judge": str(r.get("judge_model") or "?")
                + (
                    f"@{r['judge_snapshot']}"
                    if r.get("judge_snapshot") and r.get("judge_snapshot") != r.get("judge_model")
                    else ""
                ),
                "rubric": f"{r.get('rubric') or '?'} ({str(r.get('rubric_hash') or '?')[:8]})",
                "scorer": r.get("scorer"),
                "run": r.get("run_id"),
                "n": r.get("n"),
                "kappa": fmt_kappa(r.get("kappa"), r.get("kappa_lo"), r.get("kappa_hi")),
                "weighted kappa": fmt_kappa(r.get("weighted_kappa")),
                "agreement": _number(r.get("accuracy")),
                "macro F1": _number(r.get("macro_f1")),
                "alpha": fmt_kappa(r.get("alpha")),
                "position": _number(r.get("position_consistency")),
                "calibrated": str(r.get("created_at") or "")[:19] or None,
            }
            for r in records
        ],
        schema={
            "judge": pl.String,
            "rubric": pl.String,
            "scorer": pl.String,
            "run": pl.String,
            "n": pl.Int64,
            "kappa": pl.String,
            "weighted kappa": pl.String,
            "agreement": pl.Float64,
            "macro F1": pl.Float64,
            "alpha": pl.String,
            "position": pl.Float64,
            "calibrated": pl.String,
        },
    )
    note = (
        "kappa: Cohen's, bootstrap interval; weighted: quadratic; alpha: Krippendorff's across "
        "the humans and the judge; position: verdicts unchanged when the two outputs swap"
    )
    return (
        styled_table(frame, id, title, note)
        .fmt_percent(columns=["agreement", "macro F1", "position"], decimals=1)
        .cols_label(kappa="Cohen's kappa [CI]", position="position consistency")
        .cols_align("right", columns=["kappa", "weighted kappa", "alpha"])
    )


def class_table(
    per_class: pl.DataFrame, title: str | None = "Per class", id: str = "evalkit-classes"
) -> GT:
    """Precision, recall and F1 per label (``ClassReport.to_frame()``), with the human support
    and the judge's predicted count."""
    frame = per_class.with_columns(pl.col("label").cast(pl.String))
    note = "support: items the humans gave this label; predicted: items the judge gave it"
    return styled_table(frame, id, title, note).fmt_percent(
        columns=["precision", "recall", "f1"], decimals=1
    )


def confusion_table(
    confusion: pl.DataFrame,
    title: str | None = "Confusion (rows human, columns judge)",
    id: str = "evalkit-confusion",
) -> GT:
    """A long confusion matrix (``human``, ``judge``, ``n``) as a grid; the diagonal in bold."""
    data = confusion.with_columns(pl.col("human", "judge").cast(pl.String))
    order = data["human"].unique(maintain_order=True).to_list()
    order += [x for x in data["judge"].unique(maintain_order=True).to_list() if x not in order]
    counts = {(h, j): n for h, j, n in data.select("human", "judge", "n").rows()}
    frame = pl.DataFrame(
        {"human": order} | {f"judge {j}": [counts.get((h, j), 0) for h in order] for j in order},
        schema={"human": pl.String} | {f"judge {j}": pl.Int64 for j in order},
    )
    table = styled_table(frame, id, title)
    for i, label in enumerate(order):
        table = table.tab_style(
            style.text(weight="bold"), loc.body(columns=f"judge {label}", rows=[i])
        )
    return table


def gating_table(
    checks: pl.DataFrame,
    kappa_min: float,
    title: str | None = "Judge checks",
    id: str = "evalkit-judge-gating",
) -> GT:
    """One row per judge check (``JudgeGating.to_frame()``): whether it gates, the kappa of its
    latest calibration with the interval and labels behind it, and the reason in full."""
    frame = pl.DataFrame(
        [
            {
                "scorer": c["scorer"],
                "judge": str(c.get("judge_model") or "?")
                + (f"@{c['judge_snapshot']}" if c.get("judge_snapshot") else ""),
                "rubric": f"{c.get('rubric') or '?'} ({str(c.get('rubric_hash') or '?')[:8]})",
                "scores": c.get("n_scores"),
                "kappa": fmt_kappa(c.get("kappa"), c.get("kappa_lo"), c.get("kappa_hi"))
                if c.get("calibrated_at") is not None
                else "not calibrated",
                "labels": c.get("n_labels"),
                "gates": "✓ gates" if c.get("gating") else "reported, not gated",
                "reason": c.get("reason"),
            }
            for c in checks.iter_rows(named=True)
        ],
        schema={
            "scorer": pl.String,
            "judge": pl.String,
            "rubric": pl.String,
            "scores": pl.Int64,
            "kappa": pl.String,
            "labels": pl.Int64,
            "gates": pl.String,
            "reason": pl.String,
        },
    )
    note = (
        f"a judge check gates when its latest calibration's kappa lower bound is ≥ "
        f"{kappa_min:.2f} (gate.judge_kappa_min) on enough labelled items"
    )
    table = styled_table(frame, id, title, note).cols_label(
        kappa="kappa [CI]", labels="labelled items"
    )
    rows = [i for i, g in enumerate(frame["gates"].to_list()) if not g.startswith("✓")]
    if rows:
        table = table.tab_style(style.fill("#fff4cc"), loc.body(rows=rows))
    return table


def figures_table(
    rows: Sequence[tuple[str, str]], title: str | None = None, id: str = "evalkit-figures"
) -> GT:
    """Already formatted (figure, value) pairs as a two-column table."""
    frame = pl.DataFrame(rows, schema={"figure": pl.String, "value": pl.String}, orient="row")
    return styled_table(frame, id, title).cols_align("right", columns="value")


def headline(text: str) -> str:
    """A bold one-line heading above the tables (escaped)."""
    return f"<p><b>{html.escape(text)}</b></p>"
