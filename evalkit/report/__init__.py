"""Presentation of a decision: the terminal report, HTML, Markdown, JSON and JUnit files, charts
and tables. It reads what `evalkit.compare` decided and never decides; nothing in
`evalkit.compare` imports it (Jupyter finds its renderers through `evalkit.renderers`)."""

from evalkit.renderers import register_html

register_html("evalkit.compare.decision.GateDecision", "evalkit.report.tables:decision_record_html")
register_html("evalkit.compare.analysis.Comparison", "evalkit.report.tables:comparison_html")
