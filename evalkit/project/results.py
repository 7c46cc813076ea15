"""What `evalkit.Project` hands back: frozen values that render themselves in Jupyter in the
CLI's words.

`RunResult` is a run's summary (``evalkit run`` prints the same lines); `ComparisonResult` is
a pair's comparison and the gate's decision on it (``evalkit compare``), with its Polars frames
and the report page's sections, decision first.

Examples:
    >>> cmp = project.compare("baseline", "candidate")     # doctest: +SKIP
    >>> cmp.decision.status, cmp.broken.height              # doctest: +SKIP
    ('BLOCKED', 3)
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING

import polars as pl

from evalkit.run.summary import BOLD, RED, YELLOW, summary_lines

if TYPE_CHECKING:
    from evalkit.compare.analysis import Comparison
    from evalkit.compare.decision import GateDecision
    from evalkit.report.build import Report
    from evalkit.report.html import Fragment
    from evalkit.run.summary import RunSummary

_STYLES = {BOLD: "font-weight:bold", YELLOW: "color:#9a6700", RED: "color:#cf222e"}


@dataclass(frozen=True)
class RunResult:
    """One finished run: its summary (counts, cost, warnings) and the store it is in."""

    summary: RunSummary
    db: str

    @property
    def run_id(self) -> str:
        return self.summary.run_id

    @property
    def label(self) -> str:
        return self.summary.label

    @property
    def pass_rate(self) -> float | None:
        """Passed cases over decided ones, each case's replays under the run's pass rule (the rate
        ``evalkit history`` and the gate count: `evalkit.run.summary`); None if none."""
        return self.summary.pass_rate

    @property
    def complete(self) -> bool:
        return self.summary.complete

    def __str__(self) -> str:
        return "\n".join(summary_lines(self.summary, self.db))

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        def paint(text: str, style: str) -> str:
            return f"\0{style}\1{text}\2"  # marked here, styled once the line is escaped

        rows = []
        for line in summary_lines(self.summary, self.db, paint):
            html = escape(line)
            for style, css in _STYLES.items():
                html = html.replace(f"\0{style}\1", f'<span style="{css}">')
            rows.append(html.replace("\2", "</span>"))
        body = "<br>".join(rows)
        return f'<div class="evalkit-run" style="font-family:monospace;font-size:13px">{body}</div>'


@dataclass(frozen=True)
class ComparisonResult:
    """A pair's comparison and the gate's decision on it, as ``evalkit compare`` makes them.

    ``decision`` is the gate's (`GateDecision`: ``.status``, ``.blocked``, ``.findings``);
    ``slices``, ``broken``, ``fixed`` and ``paired`` are Polars frames; ``report`` is what
    every renderer reads (`fragment` shows any of its sections).
    """

    comparison: Comparison
    decision: GateDecision
    report: Report

    @property
    def status(self) -> str:
        return self.decision.status

    @property
    def slices(self) -> pl.DataFrame:
        """Per tag (and ALL, last): pass rates, the paired difference with its interval,
        broken and fixed counts, McNemar's p; sealed cases left out."""
        return self.report.slices

    @property
    def paired(self) -> pl.DataFrame:
        """One row per case in both runs: verdicts, scores, errors, tags, criticality."""
        return self.comparison.paired

    @property
    def broken(self) -> pl.DataFrame:
        """Cases that passed in the baseline and fail in the candidate, blocking tiers first,
        with what the candidate's scorers said (``reason``)."""
        return self._flipped(self.report.broken, "broken")

    @property
    def fixed(self) -> pl.DataFrame:
        """Cases that failed in the baseline and pass in the candidate."""
        return self._flipped(self.report.fixed, "fixed")

    def _flipped(self, details: tuple, kind: str) -> pl.DataFrame:
        from evalkit.compare.paired import flips

        live = self.paired.filter(~pl.col("sealed").fill_null(False))
        frame = flips(live)[0 if kind == "broken" else 1]
        order = {d.case_id: i for i, d in enumerate(details)}
        reasons = self.report.cand_reasons
        return (
            frame.select("case_id", "tags", "criticality", "base_score", "cand_score")
            .with_columns(
                pl.col("case_id").replace_strict(reasons, default=None).alias("reason"),
                pl.col("case_id").replace_strict(order, default=len(order)).alias("_order"),
            )
            .sort("_order", "case_id")
            .drop("_order")
        )

    def fragment(self, sections: tuple[str, ...] = ("decision", "slices", "broken")) -> Fragment:
        """Sections of the report page (``decision``, ``broken``, ``fixed``, ``slices``,
        ``suite``, ``budgets``, ``manifest``, ``aggregate``) as one displayable value."""
        from evalkit.report.html import fragment

        return fragment(self.report, sections, max_cases=20)

    def to_html(self) -> str:
        """The whole report as a self-contained page (``evalkit compare --html``)."""
        from evalkit.report.html import to_html

        return to_html(self.report)

    def __repr__(self) -> str:
        r = self.report
        return (
            f"<{self.decision.summary()}: {r.base_label} ({r.base_run_id}) → {r.cand_label} "
            f"({r.cand_run_id}); {r.n_broken} broken, {r.n_fixed} fixed>"
        )

    def _repr_html_(self) -> str:
        """Decision first, then the per-tag table and the forest of paired differences, then
        the broken cases."""
        return self.fragment().html
