"""Display tables (great_tables): what notebooks and the HTML report show as formatted tables.

Each function takes plain values (Polars frames, dicts from ``to_dict()``) and returns a
``great_tables.GT``, which renders itself in Jupyter; ``.as_raw_html()`` gives the HTML (cell
text is escaped). Percentages show as percentages, p-values to 3 significant digits, and every
row is shown: no silent truncation, whatever the number of slices.

Examples:
    >>> from evalkit.compare.slices import slices
    >>> slice_table(slices(paired), critical=["billing"])   # doctest: +SKIP
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl
from great_tables import GT, loc, style

from evalkit.compare.slices import INTERVAL_NAMES
from evalkit.display import styled_table
from evalkit.report.formatting import ci_label, fmt_p, fmt_pts, inert

_STATUS_ICON = {"PASSED": "✓", "BLOCKED": "✗", "UNVERIFIED": "?", "PASSED WITH OVERRIDE": "⚠"}


def status_class(status: str) -> str:
    """The CSS class of a gate status: ``status-passed``, ``status-passed-with-override``, ...

    Examples:
        >>> status_class("PASSED WITH OVERRIDE")
        'status-passed-with-override'
    """
    return "status-" + (re.sub(r"[^a-z]+", "-", status.lower()).strip("-") or "unknown")


def status_icon(status: str) -> str:
    return _STATUS_ICON.get(status, "•")


def slice_table(
    slices: pl.DataFrame,
    critical: Sequence[str] = (),
    title: str | None = "Slices",
    id: str = "evalkit-slices",
    level: float = 0.95,
) -> GT:
    """One row per slice (the ``ALL`` row last, as `slices.slices` orders it): n, errored,
    pass rates, flips, the paired difference with its interval, the one-sided exact p."""
    crit = list(critical)
    frame = slices.select(
        pl.when(pl.col("slice").is_in(crit))
        .then(pl.format("★ {}", "slice"))
        .otherwise("slice")
        .alias("slice"),
        "n",
        "n_error",
        "base_pass",
        "cand_pass",
        "broken",
        "fixed",
        pl.struct("diff", "diff_lo", "diff_hi")
        .map_elements(lambda r: fmt_pts(r["diff"], r["diff_lo"], r["diff_hi"]), pl.String)
        .alias("difference"),
        pl.col("p_value").map_elements(fmt_p, pl.String).alias("p"),
    )
    rows = [i for i, s in enumerate(slices["slice"].to_list()) if s in crit or s == "ALL"]
    methods = (
        slices["interval_method"].drop_nulls().unique().to_list()
        if "interval_method" in slices.columns
        else []
    )
    named = ", ".join(INTERVAL_NAMES.get(m, m) for m in methods) or "none"
    test = "one-sided exact McNemar"
    if "clustered-se" in methods:
        test += " (slices with case groups: the larger of it and the clustered t-test's)"
    note = f"★ critical tag (gated); p: {test}; interval: {named}"
    table = (
        styled_table(frame, id, title, note)
        .fmt_percent(columns=["base_pass", "cand_pass"], decimals=1)
        .cols_label(
            n_error="errored",
            base_pass="baseline",
            cand_pass="candidate",
            difference=f"difference [{ci_label(level)}]",
            p="p (one-sided)",
        )
        .cols_align("right", columns=["difference", "p"])
    )
    if rows:
        table = table.tab_style(style.text(weight="bold"), loc.body(rows=rows))
    return table


def critical_table(
    critical: Sequence[Mapping[str, Any]], id: str = "evalkit-critical", level: float = 0.95
) -> GT:
    """Critical tags' states (``GateDecision.to_dict()["critical"]``); ``level``: their
    intervals' (the header says it)."""
    frame = pl.DataFrame(
        [
            {
                "tag": c["tag"],
                "state": c["state"],
                "n": c["n"],
                "broken": c["broken"],
                "fixed": c["fixed"],
                "p": fmt_p(c.get("p_value")),
                "difference": fmt_pts(c.get("diff"), c.get("lo"), c.get("hi")),
                "power": c.get("power"),
                "needs n": c.get("required_n") if c["state"] == "underpowered" else None,
            }
            for c in critical
        ],
        schema={
            "tag": pl.String,
            "state": pl.String,
            "n": pl.Int64,
            "broken": pl.Int64,
            "fixed": pl.Int64,
            "p": pl.String,
            "difference": pl.String,
            "power": pl.Float64,
            "needs n": pl.Int64,
        },
    )
    note = "power: exact one-sided power at n for a drop of the tolerance"
    table = (
        styled_table(frame, id, "Critical tags", note)
        .fmt_percent(columns="power", decimals=0)
        .cols_label(difference=f"difference [{ci_label(level)}]")
    )
    for state, color in (("regressed", "#fbe3d6"), ("underpowered", "#fff4cc")):
        rows = [i for i, s in enumerate(frame["state"].to_list()) if s == state]
        if rows:
            table = table.tab_style(style.fill(color), loc.body(rows=rows))
    return table


def findings_table(findings: Sequence[Mapping[str, Any]], id: str = "evalkit-findings") -> GT:
    """Every finding: severity, tier, slice, cases, message (``to_dict()["findings"]``)."""
    frame = pl.DataFrame(
        [
            {
                "severity": f["severity"],
                "tier": f["tier"],
                "slice": f.get("slice"),
                "cases": len(f.get("case_ids") or ()),
                "finding": inert(f["message"]),
            }
            for f in findings
        ],
        schema={
            "severity": pl.String,
            "tier": pl.Int64,
            "slice": pl.String,
            "cases": pl.Int64,
            "finding": pl.String,
        },
    )
    return styled_table(frame, id, "Gate findings")


def usage_table(
    usage: Mapping[str, tuple[float | None, float | None]], id: str = "evalkit-usage"
) -> GT:
    """Mean latency, tokens and cost per case, baseline and candidate, and the relative change."""
    frame = pl.DataFrame(
        [
            {
                "metric": k,
                "baseline": b,
                "candidate": c,
                "change": (c - b) / b if b and c is not None else None,
            }
            for k, (b, c) in usage.items()
        ],
        schema={
            "metric": pl.String,
            "baseline": pl.Float64,
            "candidate": pl.Float64,
            "change": pl.Float64,
        },
    )
    return (
        styled_table(frame, id, "Cost and latency, mean per case")
        .fmt_number(columns=["baseline", "candidate"], n_sigfig=4)
        .fmt_percent(columns="change", decimals=1, force_sign=True)
    )


def decision_html(decision: Mapping[str, Any]) -> str:
    """A gate decision (``GateDecision.to_dict()``) as HTML: status, then the findings table."""
    status = str(decision.get("status", "?"))
    head = (
        f'<div class="evalkit-status {status_class(status)}" style="font-weight:bold;'
        f'font-size:1.2em">{status_icon(status)} gate {html.escape(status)}</div>'
    )
    findings = decision.get("findings") or []
    table = findings_table(findings).as_raw_html() if findings else "<p>no findings</p>"
    crit = decision.get("critical") or []
    policy = decision.get("policy") or {}
    level = max(float(policy.get("level", 0.95)), 1 - 2 * float(policy.get("alpha", 0.05)))
    return (
        head + table + (critical_table(crit, level=round(level, 12)).as_raw_html() if crit else "")
    )


def decision_record_html(decision: Any) -> str:
    """A `GateDecision` as Jupyter shows it (registered in `evalkit.report`)."""
    return decision_html(decision.to_dict())


def comparison_html(comparison: Any) -> str:
    """A `Comparison` as Jupyter shows it: the pair's runs and its per-slice table (percentages,
    3-digit p)."""
    from html import escape

    from evalkit.compare.slices import slices

    head = (
        f"<p><b>{escape(comparison.base.label)}</b> ({escape(comparison.base.run_id)}) → "
        f"<b>{escape(comparison.cand.label)}</b> ({escape(comparison.cand.run_id)}): "
        f"{comparison.paired.height} paired cases</p>"
    )
    return head + slice_table(slices(comparison.paired)).as_raw_html()
