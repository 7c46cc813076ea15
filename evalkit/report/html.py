"""The report as a self-contained HTML page: what ``gate.html`` and ``compare --html`` show.

From the top: the decision and its reasons (each stopping finding on one line: tier, slice,
statistic, cases), the broken cases (blocking tiers first: input, both outputs, each scorer's
reason, long text folded), the fixed cases, the slices (table, forest plot, flips), suite health,
budgets and cost, the manifests' differences, and the aggregate last. Charts are inline SVG
(written directly, `evalkit.report.svg`), tables great_tables: the page loads nothing from the
network.

`section` renders one part; `fragment` several, as a value that renders itself in Jupyter (the
gate notebook shows the report through it: its charts as their own outputs, interactive
Vega-Lite with static images, `evalkit.report.charts.to_mimebundle`, or the static SVG alone
where nobody clicks: ``interactive=False``); `page` wraps a body in
the page's head and styles. A flipped case is `case_card`, the same markup in the notebook,
``gate.html`` and ``compare --html``; it carries its own scoped styles (`CARD_CSS`), so it looks
the same in JupyterLab, whose page has none of the report's.

Examples:
    >>> Path("report.html").write_text(to_html(report))   # doctest: +SKIP
"""

from __future__ import annotations

import html
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from evalkit.compare.decision import STOPPING
from evalkit.report.build import (
    CaseDetail,
    Report,
    ScorerNote,
    fmt_pct,
    fmt_pts,
    growth_text,
    inert,
)
from evalkit.report.formatting import describe_statistic, fmt_p

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
figure{margin:12px 0}figure svg{max-width:100%;height:auto}
.ids{color:#57606a}.aggregate{font-size:1.05em;background:#f6f8fa;padding:8px 12px;
border-radius:6px}.muted{color:#57606a}
"""

#: A case card's own styles. Every class starts with ``evalkit-card`` so nothing in JupyterLab's
#: styles matches them and they match nothing of Lab's; two classes per selector outrank Lab's
#: ``.jp-RenderedHTMLCommon pre`` and the like. Colours are set, not inherited, so a card stays
#: legible under a dark theme.
CARD_CSS = """
.evalkit-card{background:#fff;color:#1f2328;
font:14px/1.45 -apple-system,BlinkMacSystemFont,'Segoe UI',Roboto,Helvetica,Arial,sans-serif}
.evalkit-card .evalkit-card-head{font-weight:bold;margin:0 0 4px}
.evalkit-card .evalkit-card-about{font-weight:normal;color:#57606a}
.evalkit-card .evalkit-card-label{margin:.3em 0 .1em;font-size:.95em;font-weight:bold}
.evalkit-card .evalkit-card-text{white-space:pre-wrap;word-break:break-word;background:#f6f8fa;
border:1px solid #d8dee4;border-radius:4px;padding:6px 8px;margin:.2em 0;color:#1f2328;
font:12.5px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.evalkit-card .evalkit-card-notes{list-style:none;padding:0;margin:.2em 0}
.evalkit-card .evalkit-card-notes li{margin:.1em 0;padding:0}
.evalkit-card .evalkit-card-pass{color:#1a7f37}.evalkit-card .evalkit-card-fail{color:#cf222e}
.evalkit-card .evalkit-card-err{color:#bc4c00}.evalkit-card .evalkit-card-muted{color:#57606a}
.evalkit-card code{font:12.5px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;
background:none;padding:0;color:inherit}
"""
_CARD_STYLE = f"<style>{CARD_CSS}</style>"
# JupyterLab's sanitizer drops <style> from an untrusted output (a notebook papermill executed,
# until `jupyter trust`) but keeps style attributes with safe properties: the layout that makes
# a card readable (its border, two sides next to each other, the badge apart from the text) is
# inline.
_CARD = "border:1px solid #d0d7de;border-left:5px solid {};border-radius:6px;padding:8px 12px;"
_CARD += "margin:10px 0"
_SIDES = "display:table;table-layout:fixed;width:100%;border-collapse:separate"
_SIDE = "display:table-cell;width:50%;vertical-align:top;padding:0 6px"
_BADGE = (
    "margin-left:8px;padding:1px 6px;border-radius:10px;background:#cf222e;color:#fff;"
    "font-size:.75em;font-weight:bold;white-space:nowrap"
)


@dataclass(frozen=True)
class Fragment:
    """Part of the report, renders itself in Jupyter: ``parts`` are HTML strings and charts
    (`evalkit.report.charts`), in page order."""

    parts: tuple[object, ...]

    @property
    def html(self) -> str:
        """The fragment as one piece of HTML, charts as inline SVG (what a page embeds)."""
        return "".join(p if isinstance(p, str) else _figure(p) for p in self.parts)

    def _repr_html_(self) -> str:
        return self.html

    def _ipython_display_(self) -> None:
        """Each run of HTML as one output, each chart as its own: inline SVG in an HTML output
        is never interactive, and JupyterLab's sanitizer strips it from an untrusted notebook;
        a chart's own output is Vega-Lite there, and its static SVG in nbconvert's HTML."""
        from IPython.display import display

        for is_html, run in itertools.groupby(self.parts, key=lambda p: isinstance(p, str)):
            if not is_html:
                display(*run)
            elif _has_content(text := "".join(run)):  # type: ignore[arg-type]
                display({"text/html": text, "text/plain": "<evalkit report>"}, raw=True)


def _has_content(markup: str) -> bool:
    """False for what is left of a section after its chart: closing tags only."""
    return bool(re.sub(r"</[a-z0-9]+>", "", markup).strip())


def _h(text: object) -> str:
    return html.escape(inert(str(text)))


def _fold(text: str | None, limit: int = _FOLD) -> str:
    pre = '<pre class="evalkit-card-text">'
    if text is None:
        return '<pre class="evalkit-card-text evalkit-card-muted">(no output)</pre>'
    if len(text) <= limit:
        return f"{pre}{_h(text)}</pre>"
    return (
        f"{pre}{_h(text[:limit])}…</pre><details><summary>show all {len(text):,} characters"
        f"</summary>{pre}{_h(text)}</pre></details>"
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
    from evalkit.report import tables  # great_tables: not for `page` alone

    status, d = r.status, r.decision
    meta = (
        f"{_h(r.suite)}: <b>{_h(r.base_label)}</b> (<code>{_h(r.base_run_id)}</code>) → "
        f"<b>{_h(r.cand_label)}</b> (<code>{_h(r.cand_run_id)}</code>) · {_h(r.counts_line())}"
    )
    meta += f"<br>{_h(r.delta_line())}" if r.delta_line() else ""
    meta += f"<br><b>{_h(r.served_line())}</b>" if r.served_line() else ""
    meta += f"<br>{_h(r.replay_line())}" if r.replay_line() else ""
    meta += f"<br>{_h(r.rates_line())}" if r.rates_line() else ""
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
    score = f' <span class="evalkit-card-muted">(score {n.score:.3g})</span>' if graded else ""
    return (
        f'<li class="evalkit-card-{cls}">{mark} <b>{_h(n.scorer)}</b>{score}: {_h(n.reason)}</li>'
    )


def _side(label: str, text: str | None, notes: tuple[ScorerNote, ...]) -> str:
    verdict = "failed" if any(n.passed is False for n in notes) else "passed"
    cls = "fail" if verdict == "failed" else "pass"
    items = "".join(_note(n) for n in notes)
    return (
        f'<div class="evalkit-card-side" style="{_SIDE}"><h4 class="evalkit-card-label">'
        f'{_h(label)} <span class="evalkit-card-{cls}">{verdict}</span></h4>{_fold(text)}'
        f'<ul class="evalkit-card-notes">{items}</ul></div>'
    )


def case_card(detail: CaseDetail, base_label: str, cand_label: str) -> str:
    """One flipped case as HTML: its id, tags and tier (a BLOCKING badge when it blocks), the
    input, then the baseline's and the candidate's output and scorer notes side by side.

    The markup assumes `CARD_CSS` on the page (`case_cards` puts it there); its layout is inline,
    so it survives without. Model, corpus and scorer text is escaped.

    Examples:
        >>> from evalkit.report.build import CaseDetail, ScorerNote
        >>> d = CaseDetail(case_id="c1", tags=("billing",), criticality="must_pass",
        ...     blocking=True, input="hi", base_output="ok", cand_output="<b>no</b>",
        ...     base_notes=(), cand_notes=(ScorerNote("contains", False, 0.0, "missing 'refund'"),))
        >>> card = case_card(d, "base", "cand")
        >>> "evalkit-card-blocking" in card, "&lt;b&gt;no&lt;/b&gt;" in card
        (True, True)
    """
    d = detail
    about = f"{', '.join(d.tags) or 'untagged'} · {d.criticality}"
    badge = f' <span class="evalkit-card-badge" style="{_BADGE}">BLOCKING</span>'
    cls = "evalkit-card evalkit-card-blocking" if d.blocking else "evalkit-card"
    edge = _CARD.format("#cf222e" if d.blocking else "#d0d7de")
    return (
        f'<article class="{cls}" id="case-{_h(d.case_id)}" style="{edge}">'
        '<header class="evalkit-card-head">'
        f'<code>{_h(d.case_id)}</code> <span class="evalkit-card-about">{_h(about)}</span>'
        f'{badge if d.blocking else ""}</header><h4 class="evalkit-card-label">input</h4>'
        f'{_fold(d.input)}<div class="evalkit-card-sides" style="{_SIDES}">'
        f"{_side(base_label, d.base_output, d.base_notes)}"
        f"{_side(cand_label, d.cand_output, d.cand_notes)}</div></article>"
    )


def case_cards(details: Sequence[CaseDetail], base_label: str, cand_label: str) -> str:
    """`case_card` for each case, after one ``<style>`` block of `CARD_CSS`: cards that look
    the same on the report page and in a notebook."""
    return _CARD_STYLE + "".join(case_card(d, base_label, cand_label) for d in details)


def _broken(r: Report, max_cases: int) -> str:
    lead = sum(c.blocking for c in r.broken)
    out = [
        f'<section id="broken"><h2>Broken: {r.n_broken} (pass → fail), {lead} in blocking tiers '
        "first</h2>"
    ]
    out.append(case_cards(r.broken[:max_cases], r.base_label, r.cand_label))
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
    from evalkit.report.svg import StaticChart

    if isinstance(chart, StaticChart):
        return f"<figure>{chart.svg}</figure>"
    import altair as alt

    from evalkit.report import charts

    assert isinstance(chart, alt.TopLevelMixin)  # a Fragment's parts are HTML, then charts
    return f"<figure>{charts.to_svg(chart)}</figure>"


def _slices(r: Report, charts: bool, vega: bool = True) -> list[object]:
    """The slices section: its tables, then the linked forest plot and flips (a chart, shown as
    a figure on a page and as its own output in a notebook: with ``vega``, the interactive
    Altair chart, else its static SVG alone)."""
    from evalkit.report import tables  # great_tables: not for `page` alone

    out: list[object] = ['<section id="slices"><h2>Slices</h2>']
    if r.decision is not None and r.decision.critical:
        crit = r.decision.to_dict()["critical"]
        out.append(tables.critical_table(crit, level=r.level).as_raw_html())
    out.append(tables.slice_table(r.slices, r.critical_tags, level=r.level).as_raw_html())
    if charts and r.slices.filter(pl.col("n") > 0).height:
        from evalkit.report.svg import slice_chart_inputs, slice_overview_svg

        c = slice_chart_inputs(r)
        if vega:
            from evalkit.report import charts as ch  # Altair

            out.append(ch.slice_overview(c.slices, c.tolerance, c.critical, c.method, c.paired))
        else:
            out.append(slice_overview_svg(c))
    out.append(_scorers(r))
    out.append(_replays(r))
    return [*out, "</section>"]


def _replays(r: Report) -> str:
    """pass@k (some replay passes) and pass^k (every replay passes) per slice."""
    t = r.replay_slices
    if t is None or not t.height:
        return ""
    body = "".join(
        f"<tr><td>{_h(x[0])}</td><td>{x[2]}</td>"
        + "".join(f"<td>{fmt_pct(v)}</td>" for v in x[3:])
        + "</tr>"
        for x in t.iter_rows()
    )
    head = "".join(f"<th>{c}</th>" for c in (
        "slice", "cases", "baseline pass@k", "baseline pass^k", "candidate pass@k",
        "candidate pass^k"))  # fmt: skip
    return (
        f'<h3 id="replays">Replays: pass@k and pass^k (k = {t["k"][0]}; verdict per case: '
        f'{_h(r.pass_rule)})</h3><table class="reasons"><tr>{head}</tr>{body}</table>'
    )


def _scorers(r: Report) -> str:
    """Per scorer, each check's broken and fixed (reported, not gated by itself)."""
    rows = r.scorer_rows()
    if not rows:
        return ""
    body = "".join(
        f"<tr><td>{_h(x['scorer'])}</td><td>{_h(x['kind'])}</td><td>{x['n']}</td>"
        f"<td>{fmt_pct(x['base_pass'])}</td><td>{fmt_pct(x['cand_pass'])}</td>"
        f"<td>{x['broken']}</td><td>{x['fixed']}</td><td>{fmt_p(x['p_broken'])}</td></tr>"
        for x in rows
    )
    head = "".join(f"<th>{c}</th>" for c in (
        "scorer", "kind", "n", "baseline pass", "candidate pass", "broken", "fixed",
        "one-sided exact p"))  # fmt: skip
    return (
        '<h3 id="scorers">Per scorer (reported, not gated by itself)</h3>'
        f'<table class="reasons"><tr>{head}</tr>{body}</table>'
    )


def _growth(r: Report) -> str:
    """Paired growth of the totals per critical tag, the cases whose tokens and steps grew
    most."""
    out = ""
    if changed := r.changed_usage():
        body = "".join(
            f"<tr><td>{_h(x['slice'])}</td><td>{_h(x['metric'])}</td><td>{x['n']}</td><td>"
            f"{_h(growth_text(x))}</td><td>{x['grew']}</td><td>{x['shrank']}</td></tr>"
            for x in changed
        )
        head = "".join(f"<th>{c}</th>" for c in (
            "slice", "metric", "n", "change of the total [paired bootstrap interval; (t): a t "
            "interval, no budget on the row]", "grew", "shrank"))  # fmt: skip
        out += (
            "<h3>Paired growth against the baseline (totals)</h3>"
            f'<table class="reasons"><tr>{head}</tr>{body}</table>'
        )
    if r.tokens_grew_most:
        body = "".join(
            f"<tr><td>{_h(c)}</td><td>{b:g} → {a:g}</td><td>{share:.0%}</td></tr>"
            for c, b, a, share in r.tokens_grew_most
        )
        out += (
            '<h3>Tokens grew most</h3><table class="reasons"><tr><th>case</th><th>tokens</th>'
            f"<th>share of the growth</th></tr>{body}</table>"
        )
    if r.grew_most:
        body = "".join(
            f"<tr><td>{_h(c)}</td><td>{b:g} → {a:g}</td><td>{_h(bc)}</td><td>{_h(ac)}</td></tr>"
            for c, b, a, bc, ac in r.grew_most
        )
        out += (
            '<h3>Steps grew most</h3><table class="reasons"><tr><th>case</th><th>steps</th>'
            f"<th>baseline tool calls</th><th>candidate tool calls</th></tr>{body}</table>"
        )
    return out


def _suite(r: Report) -> str:
    from evalkit.report import tables  # great_tables: not for `page` alone

    changes = [f"{c} ({k})" for c, k in r.changes.select("case_id", "change").iter_rows()]
    items = [
        ("Unstable (replays disagree)", r.unstable),
        ("Failing in both runs (label-error candidates)", r.failing_both),
        ("Always passing (saturated)", r.always_passing),
        ("Not paired (edited, added, removed, not run)", changes),
    ]
    rows = "".join(
        f"<tr><th>{label} ({len(ids)})</th><td>{_ids(ids)}</td></tr>" for label, ids in items
    )
    out = f'<section id="suite"><h2>Suite health</h2><table class="reasons">{rows}</table>'
    if r.sealed.height:
        title = "Sealed slices (reported, never gated)"
        out += tables.slice_table(
            r.sealed, (), title, id="evalkit-sealed", level=r.level
        ).as_raw_html()
    return out + "</section>"


def _budgets(r: Report) -> str:
    from evalkit.report import tables  # great_tables: not for `page` alone

    found = [f for f in (r.decision.findings if r.decision else ()) if f.tier == 4]
    budgets = r.decision.policy.budgets if r.decision else ()
    declared = ", ".join(f"{b.metric} ≤ {b.limit:g} ({b.action})" for b in budgets) or "none"
    return (
        f'<section id="budgets"><h2>Budgets and cost</h2><p>Declared budgets: {_h(declared)}</p>'
        f"{_findings(found) if found else ''}{tables.usage_table(r.usage).as_raw_html()}"
        f"{_growth(r)}</section>"
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


def _parts(
    report: Report, name: str, charts: bool, max_cases: int, vega: bool = False
) -> list[object]:
    r = report
    if name == "slices":
        return _slices(r, charts, vega)
    render = {
        "decision": lambda: _decision(r), "broken": lambda: _broken(r, max_cases),
        "fixed": lambda: _fixed(r), "suite": lambda: _suite(r), "budgets": lambda: _budgets(r),
        "manifest": lambda: _manifest(r), "aggregate": lambda: _aggregate(r),
    }  # fmt: skip
    return [render[name]()]


def section(report: Report, name: str, charts: bool = True, max_cases: int = 50) -> str:
    """One section of the page as HTML (see `SECTIONS`), charts as inline SVG."""
    return Fragment(tuple(_parts(report, name, charts, max_cases))).html


def fragment(
    report: Report,
    sections: Sequence[str] = SECTIONS,
    charts: bool = True,
    max_cases: int = 50,
    interactive: bool = True,
) -> Fragment:
    """Several sections, as a value Jupyter renders (what the gate notebook displays).

    ``interactive``: the slices' chart as Altair's Vega-Lite (click a slice) beside its static
    SVG; False: the SVG alone, no Altair chart built (a notebook run where nobody clicks, as
    ``evalkit gate`` runs its notebook).
    """
    parts = (p for s in sections for p in _parts(report, s, charts, max_cases, interactive))
    return Fragment(tuple(parts))


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
    """The whole report as one self-contained page (``compare --html``; ``gate.html``): its
    charts as static SVG, drawn without Altair."""
    return page(fragment(report, SECTIONS, charts, max_cases, False).html, title(report))
