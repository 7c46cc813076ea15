"""The report as a self-contained HTML page: what ``gate.html`` and ``compare --html`` show.

From the top: the decision and its reasons (each stopping finding on one line: tier, slice,
statistic, cases), the broken cases (blocking tiers first: input, both outputs, each scorer's
reason, long text folded), the fixed cases, the slices (table, forest plot, flips), suite health,
budgets and cost, the manifests' differences, and the aggregate last. Charts are inline SVG
(vl-convert), tables great_tables: the page loads nothing from the network.

`section` renders one part; `fragment` several, as a value that renders itself in Jupyter (the
gate notebook shows the report through it); `page` wraps a body in the page's head and styles.

Examples:
    >>> Path("report.html").write_text(to_html(report))   # doctest: +SKIP
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from evalkit.compare import tables
from evalkit.compare.decision import STOPPING
from evalkit.compare.formatting import describe_statistic
from evalkit.compare.report import (
    CaseDetail,
    Report,
    ScorerNote,
    fmt_pct,
    fmt_pts,
    inert,
)

SECTIONS = ("decision", "broken", "fixed", "slices", "suite", "budgets", "manifest", "aggregate")
_FOLD = 600  # characters of a text shown before the rest is folded away

CSS = """
body{font:14px/1.45 -apple-system,BlinkMacSystemFont,'Segoe UI',Roboto,Helvetica,Arial,
sans-serif;color:#1f2328;margin:0;background:#f6f8fa}
main{max-width:1180px;margin:0 auto;padding:20px 28px 60px;background:#fff}
h1{font-size:1.55em;margin:.2em 0}h2{font-size:1.25em;margin:1.6em 0 .5em;
border-bottom:1px solid #d0d7de;padding-bottom:.2em}h4{margin:.2em 0;font-size:.95em}
code,pre{font:12.5px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{white-space:pre-wrap;word-break:break-word;background:#f6f8fa;border:1px solid #d8dee4;
border-radius:4px;padding:6px 8px;margin:.2em 0}
.banner{border-radius:6px;padding:12px 16px;margin:8px 0 12px;border:2px solid}
.banner h1{margin:0}.banner .meta{margin-top:4px}
.status-passed{background:#dafbe1;border-color:#1a7f37;color:#0f5323}
.status-blocked{background:#ffebe9;border-color:#cf222e;color:#82071e}
.status-unverified{background:#fff1e5;border-color:#bc4c00;color:#762c00;border-style:dashed}
.status-passed-with-override{background:#fff8c5;border-color:#9a6700;color:#4d2d00;
border-style:double;border-width:4px}
.status-compare{background:#ddf4ff;border-color:#0969da;color:#0a3069}
.reasons{border-collapse:collapse;width:100%;margin:6px 0}
.reasons td,.reasons th{border-bottom:1px solid #d8dee4;padding:4px 6px;text-align:left;
vertical-align:top}.reasons th{font-size:.85em;color:#57606a}
.sev{font-weight:bold;font-size:.8em;padding:1px 6px;border-radius:10px;color:#fff;
white-space:nowrap}.sev-block{background:#cf222e}.sev-unverified{background:#bc4c00}
.sev-warn{background:#9a6700}.sev-info{background:#57606a}
.case{border:1px solid #d0d7de;border-left:5px solid #d0d7de;border-radius:6px;
padding:8px 12px;margin:10px 0}.case.blocking{border-left-color:#cf222e}
.case header{font-weight:bold;margin-bottom:4px}.case header .about{font-weight:normal;
color:#57606a}.badge{font-size:.75em;padding:1px 6px;border-radius:10px;background:#cf222e;
color:#fff;margin-left:6px}.sides{display:grid;grid-template-columns:1fr 1fr;gap:12px}
.notes{list-style:none;padding:0;margin:.2em 0}.notes li{margin:.1em 0}
.pass{color:#1a7f37}.fail{color:#cf222e}.err{color:#bc4c00}
figure{margin:12px 0}figure svg{max-width:100%;height:auto}
.ids{color:#57606a}.aggregate{font-size:1.05em;background:#f6f8fa;padding:8px 12px;
border-radius:6px}.muted{color:#57606a}
"""


@dataclass(frozen=True)
class Fragment:
    """Part of the report as HTML; renders itself in Jupyter."""

    html: str

    def _repr_html_(self) -> str:
        return self.html


def _h(text: object) -> str:
    return html.escape(inert(str(text)))


def _fold(text: str | None, limit: int = _FOLD) -> str:
    if text is None:
        return '<pre class="muted">(no output)</pre>'
    if len(text) <= limit:
        return f"<pre>{_h(text)}</pre>"
    return (
        f"<pre>{_h(text[:limit])}…</pre><details><summary>show all {len(text):,} characters"
        f"</summary><pre>{_h(text)}</pre></details>"
    )


def _ids(ids: Sequence[str], limit: int = 30) -> str:
    if not ids:
        return '<span class="muted">none</span>'
    more = f" … and {len(ids) - limit} more" if len(ids) > limit else ""
    return (
        '<span class="ids">'
        + ", ".join(f"<code>{_h(i)}</code>" for i in ids[:limit])
        + (more + "</span>")
    )


def _findings(findings: Sequence[object]) -> str:
    rows = "".join(
        f'<tr><td><span class="sev sev-{_h(f.severity)}">{_h(str(f.severity).upper())}</span></td>'  # type: ignore[attr-defined]
        f"<td>{f.tier}</td><td>{_h(f.slice or '–')}</td>"  # type: ignore[attr-defined]
        f"<td>{_h(describe_statistic(getattr(f, 'statistic', None) or {}))}</td>"
        f"<td>{_ids(tuple(getattr(f, 'case_ids', ()) or ()), 5)}</td><td>{_h(f.message)}</td></tr>"  # type: ignore[attr-defined]
        for f in findings
    )
    cols = ("", "tier", "slice", "statistic", "cases", "finding")
    head = "<tr>" + "".join(f"<th>{c}</th>" for c in cols) + "</tr>"
    return f'<table class="reasons">{head}{rows}</table>'


def _decision(r: Report) -> str:
    status, d = r.status, r.decision
    meta = (
        f"{_h(r.suite)}: <b>{_h(r.base_label)}</b> (<code>{_h(r.base_run_id)}</code>) → "
        f"<b>{_h(r.cand_label)}</b> (<code>{_h(r.cand_run_id)}</code>) · {_h(r.counts_line())}"
    )
    meta += f"<br>{_h(r.delta_line())}" if r.delta_line() else ""
    meta += f"<br><b>{_h(r.served_line())}</b>" if r.served_line() else ""
    out = [
        f'<section id="decision"><div class="banner {tables.status_class(status)}">'
        f"<h1>{tables.status_icon(status)} {_h(r.heading())}</h1>"
        f'<div class="meta">{meta}</div></div>'
    ]
    stopping = r.stopping()
    if stopping:
        out.append(f"<h2>Why: {len(stopping)} finding(s) stop the gate</h2>{_findings(stopping)}")
    elif d is not None:
        out.append("<p>No finding stops the gate.</p>")
    for o in d.overrides if d else ():
        out.append(
            f'<p class="banner status-passed-with-override">⚠ override by <b>{_h(o.who)}</b> at '
            f"{_h(o.created_at or '–')}: {_h(o.reason)}</p>"
        )
    rest = [f for f in (d.findings if d else ()) if f.severity not in STOPPING]
    # What was not gated (underpowered, not in this selection, uncalibrated judges) stays in
    # view; the runs' own warnings (slice "warnings") fold away.
    ungated = [f for f in rest if f.slice != "warnings"]
    if ungated:
        out.append(f"<h3>Not gated here: {len(ungated)} finding(s)</h3>{_findings(ungated)}")
    warned = [f for f in rest if f.slice == "warnings"]
    if warned:
        out.append(
            f"<details><summary>{len(warned)} run warning(s)</summary>{_findings(warned)}</details>"
        )
    return "".join(out) + "</section>"


def _note(n: ScorerNote) -> str:
    cls, mark = {True: ("pass", "✓"), False: ("fail", "✗"), None: ("err", "?")}[n.passed]
    graded = n.score is not None and n.score not in (0.0, 1.0)
    score = f" <span class='muted'>(score {n.score:.3g})</span>" if graded else ""
    return f'<li class="{cls}">{mark} <b>{_h(n.scorer)}</b>{score}: {_h(n.reason)}</li>'


def _side(label: str, text: str | None, notes: tuple[ScorerNote, ...]) -> str:
    verdict = "failed" if any(n.passed is False for n in notes) else "passed"
    cls = "fail" if verdict == "failed" else "pass"
    items = "".join(_note(n) for n in notes)
    return (
        f'<div class="side"><h4>{_h(label)} <span class="{cls}">{verdict}</span></h4>'
        f'{_fold(text)}<ul class="notes">{items}</ul></div>'
    )


def _case(d: CaseDetail, r: Report) -> str:
    about = f"{', '.join(d.tags) or 'untagged'} · {d.criticality}"
    badge = '<span class="badge">BLOCKING</span>' if d.blocking else ""
    return (
        f'<article class="case{" blocking" if d.blocking else ""}" id="case-{_h(d.case_id)}">'
        f'<header><code>{_h(d.case_id)}</code> <span class="about">{_h(about)}</span>{badge}'
        f"</header><h4>input</h4>{_fold(d.input)}<div class='sides'>"
        f"{_side(r.base_label, d.base_output, d.base_notes)}"
        f"{_side(r.cand_label, d.cand_output, d.cand_notes)}</div></article>"
    )


def _broken(r: Report, max_cases: int) -> str:
    lead = sum(c.blocking for c in r.broken)
    out = [
        f'<section id="broken"><h2>Broken: {r.n_broken} (pass → fail), {lead} in blocking tiers '
        "first</h2>"
    ]
    out += [_case(c, r) for c in r.broken[:max_cases]]
    rest = r.broken[max_cases:]
    if rest:
        rows = "".join(
            f"<tr><td><code>{_h(c.case_id)}</code></td><td>{_h(', '.join(c.tags))}</td>"
            f"<td>{_h(r.cand_reasons.get(c.case_id, ''))}</td></tr>"
            for c in rest
        )
        out.append(
            f"<details><summary>{len(rest)} more broken case(s), one line each</summary>"
            f'<table class="reasons"><tr><th>case</th><th>tags</th><th>candidate failed'
            f"</th></tr>{rows}</table></details>"
        )
    if r.n_broken > len(r.broken):
        more = r.n_broken - len(r.broken)
        out.append(f"<p class='muted'>{more} further broken cases are counted, not detailed.</p>")
    return "".join(out) + "</section>"


def _fixed(r: Report) -> str:
    rows = "".join(
        f"<tr><td><code>{_h(c.case_id)}</code></td><td>{_h(', '.join(c.tags))}</td>"
        f"<td>{_h('; '.join(f'{n.scorer}: {n.reason}' for n in c.base_notes if n.passed is False))}"
        "</td></tr>"
        for c in r.fixed
    )
    table = (
        f'<table class="reasons"><tr><th>case</th><th>tags</th><th>baseline failed</th></tr>'
        f"{rows}</table>"
        if rows
        else ""
    )
    return f'<section id="fixed"><h2>Fixed: {r.n_fixed} (fail → pass)</h2>{table}</section>'


def _figure(chart: object) -> str:
    from evalkit.compare import charts

    return f"<figure>{charts.to_svg(chart)}</figure>"


def _slices(r: Report, charts: bool) -> str:
    out = ['<section id="slices"><h2>Slices</h2>']
    if r.decision is not None and r.decision.critical:
        crit = r.decision.to_dict()["critical"]
        out.append(tables.critical_table(crit).as_raw_html())
    out.append(tables.slice_table(r.slices, r.critical_tags).as_raw_html())
    if charts and r.slices.filter(pl.col("n") > 0).height:
        from evalkit.compare import charts as ch

        tol = r.decision.policy.tolerance if r.decision else 0.02
        level = getattr(r.decision.policy, "level", 0.95) if r.decision else 0.95
        from evalkit.compare.slices import interval_name

        methods = r.slices["interval_method"].drop_nulls().unique().to_list()
        method = f"{level:.0%} {', '.join(interval_name(m) for m in methods) or 'interval'}"
        out.append(_figure(ch.slice_forest(r.slices, tol, r.critical_tags, method)))
        out.append(_figure(ch.flip_counts(r.slices, r.critical_tags)))
    return "".join(out) + "</section>"


def _suite(r: Report) -> str:
    changes = [f"{c} ({k})" for c, k in r.changes.select("case_id", "change").iter_rows()]
    items = [
        ("Unstable (replays disagree)", r.unstable),
        ("Failing in both runs (label-error candidates)", r.failing_both),
        ("Always passing (saturated)", r.always_passing),
        ("Not paired (edited, added, removed)", changes),
    ]
    rows = "".join(
        f"<tr><th>{label} ({len(ids)})</th><td>{_ids(ids)}</td></tr>" for label, ids in items
    )
    out = f'<section id="suite"><h2>Suite health</h2><table class="reasons">{rows}</table>'
    if r.sealed.height:
        title = "Sealed slices (reported, never gated)"
        out += tables.slice_table(r.sealed, (), title, id="evalkit-sealed").as_raw_html()
    return out + "</section>"


def _budgets(r: Report) -> str:
    found = [f for f in (r.decision.findings if r.decision else ()) if f.tier == 4]
    budgets = r.decision.policy.budgets if r.decision else ()
    declared = ", ".join(f"{b.metric} ≤ {b.limit:g} ({b.action})" for b in budgets) or "none"
    return (
        f'<section id="budgets"><h2>Budgets and cost</h2><p>Declared budgets: {_h(declared)}</p>'
        f"{_findings(found) if found else ''}{tables.usage_table(r.usage).as_raw_html()}</section>"
    )


def _manifest(r: Report) -> str:
    body = (
        "<ul>" + "".join(f"<li><code>{_h(x)}</code></li>" for x in r.manifest_changes) + "</ul>"
        if r.manifest_changes
        else (
            f"<p>{_h(', '.join(r.manifest_diff))}</p>"
            if r.manifest_diff
            else "<p>The manifests agree on every comparable field.</p>"
        )
    )
    return f'<section id="manifest"><h2>Manifest differences</h2>{body}</section>'


def _aggregate(r: Report) -> str:
    a = r.aggregate
    text = (
        f"{fmt_pct(a['base_pass'])} → {fmt_pct(a['cand_pass'])} "
        f"({fmt_pts(a['diff'], a['diff_lo'], a['diff_hi'])}) over {a['n']} cases; "
        f"{a['broken']} broken, {a['fixed']} fixed"
        if a
        else "no paired cases"
    )
    return (
        '<section id="aggregate"><h2>Aggregate (last, on purpose)</h2>'
        f'<p class="aggregate">{_h(text)}</p></section>'
    )


def section(report: Report, name: str, charts: bool = True, max_cases: int = 50) -> str:
    """One section of the page as HTML (see `SECTIONS`)."""
    r = report
    render = {
        "decision": lambda: _decision(r), "broken": lambda: _broken(r, max_cases),
        "fixed": lambda: _fixed(r), "slices": lambda: _slices(r, charts),
        "suite": lambda: _suite(r), "budgets": lambda: _budgets(r),
        "manifest": lambda: _manifest(r), "aggregate": lambda: _aggregate(r),
    }  # fmt: skip
    return render[name]()


def fragment(
    report: Report, sections: Sequence[str] = SECTIONS, charts: bool = True, max_cases: int = 50
) -> Fragment:
    """Several sections, as a value Jupyter renders (what the gate notebook displays)."""
    return Fragment("".join(section(report, s, charts, max_cases) for s in sections))


def title(report: Report) -> str:
    return f"evalkit {report.status}: {report.base_label} → {report.cand_label}"


def page(body: str, title: str) -> str:
    """A complete page around ``body``: charset, title, the report's styles; no scripts."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_h(title)}</title><style>{CSS}</style></head>"
        f"<body><main>{body}</main></body></html>\n"
    )


def to_html(report: Report, charts: bool = True, max_cases: int = 50) -> str:
    """The whole report as one self-contained page (``compare --html``; ``gate.html``)."""
    return page(fragment(report, SECTIONS, charts, max_cases).html, title(report))
