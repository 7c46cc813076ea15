"""The report as a Markdown pull-request comment (seed 003's per-rubric report).

The decision and its reasons first; then one table row per tag (n, baseline and candidate pass
counts, broken b, fixed c, one-sided exact McNemar p, the paired interval, the verdict); then
the broken cases, blocking tiers first, each with what its failing scorer said; the aggregate
last. It always fits in one GitHub comment (`GITHUB_COMMENT_LIMIT` characters): lists that do
not fit are cut with a count of what was left out and a pointer to the full HTML report.

Everything that came from a model, a scorer or the corpus is escaped: it cannot open a link,
ping a team, close a ``<details>`` or break the table.

Examples:
    >>> text = to_markdown(report, link="gate.html")        # doctest: +SKIP
    >>> len(text) <= GITHUB_COMMENT_LIMIT                    # doctest: +SKIP
    True
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

import polars as pl

from evalkit.report.build import Report
from evalkit.report.formatting import ci_label, describe_statistic, fmt_p, fmt_pct, fmt_pts, inert

#: GitHub's limit on the body of an issue or pull-request comment, in characters.
GITHUB_COMMENT_LIMIT = 65_536
STATUS_ICON = {"PASSED": "🟢", "BLOCKED": "🔴", "UNVERIFIED": "🟠",
               "PASSED WITH OVERRIDE": "🟡", "COMPARE": "🔵"}  # fmt: skip
# What could format, link, ping or break a table mid-line (":" stops bare-URL autolinks).
_SPECIAL = re.compile(r"([\\`*_\[\]|~<>@:])")
_MAX_REASONS = 25


def md(text: object, width: int | None = None) -> str:
    r"""One line of inert, escaped Markdown text (clipped to ``width`` characters first).

    Examples:
        >>> md("see [here](http://x) @team | <b>")
        'see \\[here\\](http\\://x) \\@team \\| &lt;b&gt;'
    """
    raw = " ".join(inert(str(text)).split())
    if width is not None and len(raw) > width:
        raw = raw[: width - 1] + "…"
    return (
        html.escape(_SPECIAL.sub(r"\\\1", raw), quote=False)
        .replace("\\&lt;", "&lt;")
        .replace("\\&gt;", "&gt;")
    )


def code(text: object, width: int = 80) -> str:
    """An inline code span: literal in Markdown (no links, mentions or HTML), so not escaped;
    backticks and line breaks are dropped.

    Examples:
        >>> code("a_b <i>")
        '`a_b <i>`'
    """
    raw = " ".join(inert(str(text)).replace("`", "'").split())
    return f"`{raw if len(raw) <= width else raw[: width - 1] + '…'}`"


def _ids(ids: Sequence[str], limit: int = 6) -> str:
    shown = ", ".join(code(i, 60) for i in ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def _finding_line(f: object) -> str:
    stat = describe_statistic(getattr(f, "statistic", None) or {})
    ids = tuple(getattr(f, "case_ids", ()) or ())
    bits = [f"**{md(str(f.severity).upper())}** tier {f.tier}"]  # type: ignore[attr-defined]
    bits.append(code(f.slice, 60) if f.slice else "—")  # type: ignore[attr-defined]
    bits += [stat] if stat else []
    bits += [f"cases {_ids(ids)}"] if ids else []
    return f"- {' · '.join(bits)}: {md(f.message, 400)}"  # type: ignore[attr-defined]


def _verdicts(report: Report) -> dict[str, str]:
    d = report.decision
    out = {s.tag: f"**{s.state}** (critical)" for s in (d.critical if d else ())}
    for f in d.findings if d else ():
        if f.slice and f.slice not in out and f.severity != "info" and f.tier == 3:
            out[f.slice] = "regressed (reported, not gated)"
    return out


def tag_rows(report: Report) -> list[dict]:
    """The per-tag table's rows: critical tags first, then the others; the aggregate is not here.

    Each row: ``tag, n, base_k, cand_k, broken, fixed, p_value, diff, lo, hi, verdict``.
    """
    verdicts, critical = _verdicts(report), report.critical_tags
    rows = []
    for r in report.slices.filter(pl.col("slice") != "ALL").iter_rows(named=True):
        n = r["n"]
        rows.append({
            "tag": r["slice"], "n": n, "critical": r["slice"] in critical,
            "base_k": round((r["base_pass"] or 0) * n), "cand_k": round((r["cand_pass"] or 0) * n),
            "broken": r["broken"], "fixed": r["fixed"], "p_value": r["p_value"],
            "diff": r["diff"], "lo": r["diff_lo"], "hi": r["diff_hi"],
            "verdict": verdicts.get(r["slice"], "no evidence of regression" if n else "no cases"),
        })  # fmt: skip
    rows.sort(key=lambda x: (not x["critical"], critical.index(x["tag"]) if x["critical"] else 0))
    return rows


def _scorer_table(report: Report) -> list[str]:
    """Per scorer, each check diffed on its own (reported, not gated by itself)."""
    rows = report.scorer_rows()
    if not rows:
        return []
    head = [
        "", "### Per scorer (reported, not gated by itself)", "",
        "| scorer | kind | n | baseline pass | candidate pass | broken b | fixed c | "
        "one-sided exact p |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]  # fmt: skip
    return head + [
        f"| {md(r['scorer'], 60)} | {r['kind']} | {r['n']} | {fmt_pct(r['base_pass'])} "
        f"| {fmt_pct(r['cand_pass'])} | {r['broken']} | {r['fixed']} | {fmt_p(r['p_broken'])} |"
        for r in rows
    ]


def _replay_table(report: Report) -> list[str]:
    """pass@k and pass^k per slice, when the runs replayed each case more than once."""
    t = report.replay_slices
    if t is None or not t.height:
        return []
    head = [
        "", f"### Replays: pass@k and pass^k (k = {t['k'][0]})", "",
        "| slice | cases | baseline pass@k | baseline pass^k | candidate pass@k | "
        "candidate pass^k |",
        "|---|---:|---:|---:|---:|---:|",
    ]  # fmt: skip
    return head + [
        f"| {md(x[0], 60)} | {x[2]} | " + " | ".join(fmt_pct(v) for v in x[3:]) + " |"
        for x in t.iter_rows()
    ]


def _table(rows: list[dict], level: float = 0.95) -> list[str]:
    head = [
        "| tag | n | baseline pass | candidate pass | broken b | fixed c | one-sided exact p | "
        f"difference [{ci_label(level)}] | verdict |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    body = [
        f"| {'**' + md(r['tag'], 60) + '**' if r['critical'] else md(r['tag'], 60)} | {r['n']} "
        f"| {r['base_k']} | {r['cand_k']} | {r['broken']} | {r['fixed']} | {fmt_p(r['p_value'])} "
        f"| {fmt_pts(r['diff'], r['lo'], r['hi'])} | {r['verdict']} |"
        for r in rows
    ]
    return head + body


def _broken_line(report: Report, case: object) -> str:
    c = case
    why = "; ".join(f"{n.scorer}: {n.reason}" for n in c.cand_notes if n.passed is not True)  # type: ignore[attr-defined]
    why = why or report.cand_reasons.get(c.case_id, "")  # type: ignore[attr-defined]
    about = ", ".join(c.tags) or "untagged"  # type: ignore[attr-defined]
    lead = " **blocking**" if c.blocking else ""  # type: ignore[attr-defined]
    return (
        f"- {code(c.case_id)} ({md(about, 80)}; {md(c.criticality)}){lead}: "  # type: ignore[attr-defined]
        f"{md(why, 300) or 'no reason recorded'}"
    )


def _fit(lines: list[str], budget: int, more: str) -> list[str]:
    """The leading ``lines`` that fit in ``budget`` characters, then a line counting the rest."""
    out: list[str] = []
    used = 0
    for i, line in enumerate(lines):
        tail = len(more.format(n=len(lines) - i)) + 2
        if used + len(line) + 1 + tail > budget:
            return [*out, more.format(n=len(lines) - i)]
        out.append(line)
        used += len(line) + 1
    return out


def to_markdown(report: Report, link: str | None = None, limit: int = GITHUB_COMMENT_LIMIT) -> str:
    """The Markdown report, at most ``limit`` characters; ``link`` points at the full report."""
    r, where = report, f"[the full report]({link})" if link else "the full HTML report"
    icon = STATUS_ICON.get(r.status, "⚪")
    head = [
        f"## {icon} {r.heading()}",  # fixed words and a status name: nothing to escape
        "",
        f"**{md(r.suite)}**: {md(r.base_label)} ({code(r.base_run_id)}) → {md(r.cand_label)} "
        f"({code(r.cand_run_id)}) · {md(r.counts_line())}",
    ]
    if r.delta_line():
        head.append(md(r.delta_line() or ""))
    if r.served_line():
        head.append(f"⚠️ {md(r.served_line() or '', 600)}")
    if r.replay_line():
        head.append(md(r.replay_line() or "", 600))
    if r.rates_line():
        head.append(md(r.rates_line() or "", 600))
    if r.manifest_changes:
        head.append(f"Manifests differ in: {md('; '.join(r.manifest_changes), 600)}")
    stopping = [_finding_line(f) for f in r.stopping()]
    reasons = ["", "### Why", ""] if stopping else []
    listed = [x for x in _fit(stopping[:_MAX_REASONS], 12_000, "") if x]
    reasons += listed
    if len(stopping) > len(listed):
        reasons.append(f"- … and {len(stopping) - len(listed)} more: see {where}")
    for o in r.decision.overrides if r.decision else ():
        reasons.append(f"- override by **{md(o.who)}** at {o.created_at}: {md(o.reason, 400)}")
    warns = [f for f in (r.decision.findings if r.decision else ()) if f.severity == "warn"]
    if warns:
        items = _fit([_finding_line(f) for f in warns], 8_000, "- … and {n} more")
        reasons += ["", f"<details><summary>{len(warns)} warning(s)</summary>", "", *items,
                    "", "</details>"]  # fmt: skip
    a = r.aggregate
    tail = ["", "### Aggregate (last, on purpose)", ""]
    tail.append(
        f"{fmt_pct(a.get('base_pass'))} → {fmt_pct(a.get('cand_pass'))} "
        f"({fmt_pts(a.get('diff'), a.get('diff_lo'), a.get('diff_hi'))}) over {a.get('n')} "
        f"cases; {a.get('broken')} broken, {a.get('fixed')} fixed"
        if a
        else "no paired cases"
    )
    tail += ["", f"<sub>evalkit · details, outputs and charts: {where}</sub>"]
    table = ["", "### Per tag (critical in bold)", "", *_table(tag_rows(r), r.level)]
    table += _scorer_table(r)
    table += _replay_table(r)
    fixed = []
    if r.n_fixed:
        ids = [c.case_id for c in r.fixed]
        fixed = ["", f"### Fixed: {r.n_fixed} (fail → pass)", "", _ids(ids, 20)]
    used = sum(len(x) + 1 for x in head + reasons + tail + fixed) + 200
    if used + sum(len(x) + 1 for x in table) > limit // 2:
        table = _fit(
            table, limit // 2, "| … and {n} more tags: see " + where + " | | | | | | | | |"
        )
    used += sum(len(x) + 1 for x in table)
    broken = ["", f"### Broken: {r.n_broken} (pass → fail), blocking tiers first", ""]
    items = _fit([_broken_line(r, c) for c in r.broken], limit - used - 300, "")
    shown = len([x for x in items if x])
    broken += [x for x in items if x]
    if r.n_broken > shown:
        broken.append(f"- … and {r.n_broken - shown} more broken cases: see {where}")
    text = "\n".join(head + reasons + table + (broken if r.n_broken else []) + fixed + tail) + "\n"
    if len(text) > limit:  # a last resort: never post a comment GitHub refuses
        cut = f"\n\n… truncated at {limit} characters: see {where}\n"
        text = text[: limit - len(cut)] + cut
    return text
