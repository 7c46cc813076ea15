r"""The comparison report: flips first, the aggregate last; the terminal and JSON renderings.

`build_report` gathers everything shown about a pair of runs into a `Report` (each flipped
case's evidence from `evalkit.report.case_details`); the renderers are plain functions of it:
`render_terminal` / `to_text` and `to_json` here, `evalkit.report.html` (the page),
`evalkit.report.markdown` (the pull-request comment), `evalkit.report.junit`.

Text that came from a model, a corpus or a scorer reaches a terminal only through `inert`:
escape sequences (``ESC[2J``, ``ESC]0;title``, a fake green "gate PASSED") are shown, never
obeyed.

Examples:
    >>> report = build_report(comparison, decision)       # doctest: +SKIP
    >>> render_terminal(report)                            # doctest: +SKIP
    >>> inert("ok\x1b[2J")
    'ok\\x1b[2J'
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import polars as pl
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from evalkit.compare.decision import GateDecision
from evalkit.compare.gate import usage_table
from evalkit.compare.paired import flips
from evalkit.compare.pass_rules import replay_table
from evalkit.compare.scorer_flips import run_scorer_flips
from evalkit.compare.slices import slices
from evalkit.compare.usage_deltas import grew_most, usage_tail
from evalkit.compare.verdicts import usage_means
from evalkit.report.case_details import (
    CaseDetail,
    ScorerNote,
    case_details,
    failure_reasons,
    trajectories,
)
from evalkit.report.case_ids import ids_where
from evalkit.report.formatting import ci_label, fmt_p, fmt_pct, fmt_pts, growth_text, inert

if TYPE_CHECKING:  # a Report read back from a file (the gate notebook's) needs no corpus models
    from evalkit.compare.analysis import Comparison, RunData

SECTIONS = ("summary", "broken", "fixed", "decision", "slices", "suite", "aggregate")
_SYMBOL = {True: "✓", False: "✗", None: "?"}
_USAGE_COLS = ("metric", "baseline", "candidate", "change")
#: Each gate status and its colour; any other status string renders in the last one.
STATUS_COLORS = {"PASSED": "green", "BLOCKED": "red", "UNVERIFIED": "dark_orange",
                 "PASSED WITH OVERRIDE": "yellow", "COMPARE": "blue"}  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Report:
    """Everything shown about one pair of runs; render it with the functions below."""

    base_run_id: str
    cand_run_id: str
    base_label: str
    cand_label: str
    decision: GateDecision | None
    broken: tuple[CaseDetail, ...]  # blocking tiers first; at most max_details
    fixed: tuple[CaseDetail, ...]
    n_broken: int
    n_fixed: int
    slices: pl.DataFrame  # unsealed cases; the ALL row last
    sealed: pl.DataFrame  # sealed cases: reported, never gated
    paired: pl.DataFrame
    unstable: Sequence[str]  # `CaseIds`: one column, read as the tuple of ids it once was
    failing_both: Sequence[str]
    always_passing: Sequence[str]
    changes: pl.DataFrame
    usage: dict[str, tuple[float | None, float | None]]
    manifest_diff: tuple[str, ...]
    suite: str = "evalkit"
    # Every case failing or errored in the candidate -> what its scorers (or the runner) said.
    cand_reasons: dict[str, str] = field(default_factory=dict)
    # Each differing manifest leaf: "model.id demo-1 → demo-2".
    manifest_changes: tuple[str, ...] = ()
    # Which command shows it: `compare` exits 0 whatever the decision, so it must not head its
    # output as if it were the gate.
    command: str = "gate"
    # Per scorer: broken/fixed over the paired cases (`evalkit.compare.scorer_flips`).
    scorer_flips: pl.DataFrame | None = None
    # Paired growth per critical tag and overall (`evalkit.compare.usage_deltas`),
    # and the cases whose steps grew most: (case, base steps, cand steps, base calls, cand calls).
    usage_deltas: pl.DataFrame | None = None
    grew_most: tuple[tuple[str, float, float, str, str], ...] = ()
    # The tail: the cases whose tokens grew most, (case, base, cand, share of the growth).
    tokens_grew_most: tuple[tuple[str, float, float, float], ...] = ()
    # Replays per case (baseline, candidate), the rule that made each case's verdict from them
    # (`evalkit.compare.pass_rules`) and, with more than one replay, pass@k and pass^k per slice.
    replays: tuple[int, int] = (1, 1)
    pass_rule: str = "majority"
    replay_slices: pl.DataFrame | None = None
    # The level of the slice and critical-tag intervals (the gate's `GatePolicy.interval_level`:
    # 98% at alpha 0.01), which their headers state.
    level: float = 0.95
    # Each run's own pass rate, per case over all its checks (`evalkit.run.summary`), as
    # `evalkit run`, `evalkit runs list`, `evalkit history` and `evalkit.Project` state it.
    run_rates: tuple[float | None, float | None] = (None, None)
    # What each of them counts (`evalkit.run.rate_basis`: the run's replay pass rule), or "".
    rate_bases: tuple[str, str] = ("", "")

    def rates_line(self) -> str | None:
        """Each run's own pass rate, and why the slice table's may differ; None if unknown.

        Examples:
            >>> report.rates_line()                                        # doctest: +SKIP
            'pass rate of each run (per case, majority of 3 replays; all its checks, as
            `evalkit run` states it): baseline 77.8% → candidate 84.6%; the slice table counts
            only the checks that gate, on the cases both runs hold (judges without a
            calibration record are reported, not gated)'
        """
        if self.run_rates == (None, None):
            return None
        from evalkit.run.rate_basis import rate_basis  # the words alone: no store

        base, cand = (fmt_pct(r) if r is not None else "–" for r in self.run_rates)
        bases = (
            set(self.rate_bases) if all(self.rate_bases) else {rate_basis(n) for n in self.replays}
        )
        mixed = "majority" if all("majority" in b or b == "per case" for b in bases) else "its rule"
        basis = bases.pop() if len(bases) == 1 else f"per case, {mixed} of its replays"
        line = (
            f"pass rate of each run ({basis}; all its checks, as `evalkit run` states it): "
            f"{self.base_label} {base} → {self.cand_label} {cand}"
        )
        everything = self.slices.filter(pl.col("slice") == "ALL")
        shown = everything.select("base_pass", "cand_pass").row(0) if everything.height else None
        if shown is not None and any(
            r is not None and s is not None and abs(r - s) > 5e-4
            for r, s in zip(self.run_rates, shown, strict=True)
        ):
            line += (
                "; the slice table counts only the checks that gate, on the cases both runs "
                "hold (judges without a calibration record are reported, not gated)"
            )
        return line

    def replay_line(self) -> str | None:
        """How replays became verdicts, for the first screen; None with one replay and the
        default rule (every rule agrees on one replay).

        Examples:
            >>> report.replay_line()                                       # doctest: +SKIP
            'replays: 5 per case; verdict per case: k_of_n 4/5 (tag billing: all)'
        """
        if max(self.replays) <= 1 and self.pass_rule == "majority":
            return None
        b, c = self.replays
        count = f"{b} per case" if b == c else f"{b} per case (baseline), {c} (candidate)"
        return f"replays: {count}; verdict per case: {self.pass_rule}"

    def changed_usage(self) -> list[dict[str, Any]]:
        """The paired-growth rows where some case grew or shrank (an unchanged metric is not
        shown: a table of ×1.00 rows says nothing)."""
        if self.usage_deltas is None:
            return []
        return [r for r in self.usage_deltas.to_dicts() if r["grew"] or r["shrank"]]

    def scorer_rows(self) -> list[dict[str, Any]]:
        """The per-scorer table's rows, the same in every format: scorer, tier name, n, both
        pass rates, broken, fixed and the one-sided exact p."""
        if self.scorer_flips is None:
            return []
        tiers = {0: "deterministic", 1: "executable", 2: "similarity", 3: "judge"}  # registry
        return [
            {**row, "kind": tiers.get(row["tier"], str(row["tier"]))}
            for row in self.scorer_flips.to_dicts()
        ]

    def heading(self) -> str:
        """The report's title: the gate's status, or what the gate would say for ``compare``.

        Examples:
            >>> report.heading()                                           # doctest: +SKIP
            'evalkit compare: the gate would say BLOCKED'
        """
        if self.command == "compare":
            if self.decision is None:
                return "evalkit compare"
            return f"evalkit compare: the gate would say {self.status}"
        return f"evalkit gate: {self.status}"

    @property
    def aggregate(self) -> dict[str, Any]:
        rows = self.slices.filter(pl.col("slice") == "ALL").to_dicts()
        return rows[0] if rows else {}

    @property
    def status(self) -> str:
        """The gate's status, or ``COMPARE`` for a comparison without a decision."""
        return str(getattr(self.decision, "status", None) or "COMPARE")

    @property
    def critical_tags(self) -> tuple[str, ...]:
        return tuple(self.decision.policy.critical_tags) if self.decision else ()

    def counts_line(self) -> str:
        """The first screen's counts, the same in every format: cases with evidence on both
        sides (an errored side pairs nothing), flips and the corpus delta.

        Examples:
            >>> report.counts_line()                                       # doctest: +SKIP
            '118 paired cases · 9 broken · 14 fixed · 3 edited/added/removed'
        """
        ok = ~pl.col("base_error") & ~pl.col("cand_error") & ~pl.col("sealed").fill_null(False)
        n, gaps = self.paired.filter(ok).height, self.paired.filter(~ok).height
        missing = f" (+{gaps} with an errored side)" if gaps else ""
        not_run = self.changes.filter(pl.col("change") == "not run").height  # compare.not_run
        return (
            f"{n} paired cases{missing} · {self.n_broken} broken · {self.n_fixed} fixed · "
            f"{self.changes.height - not_run} edited/added/removed"
        ) + (f" · {not_run} not run" if not_run else "")

    def served_line(self) -> str | None:
        """The served-model drift a first screen names even when it only warns, or None.

        Examples:
            >>> report.served_line()                                       # doctest: +SKIP
            'served model: the provider served another model: baseline m-0513 (91 outputs) → ...'
        """
        found = [f.message for f in self.decision.findings if f.kind.startswith("served-")] if (
            self.decision
        ) else []  # fmt: skip
        return "served model: " + "; ".join(found) if found else None

    def delta_line(self) -> str | None:
        """Per critical tag, what the pull request changed in its cases, or None if nothing.

        Examples:
            >>> report.delta_line()                                        # doctest: +SKIP
            "corpus delta in critical tags: 'billing' 6 edited (6 rebaselined)"
        """
        parts = []
        exam = self.decision.exam_line if self.decision else None
        for row in self.decision.corpus_delta if self.decision else ():
            what = [f"{row[k]} {k}" for k in ("edited", "added", "removed") if row[k]]
            if what:
                done = f" ({row['rebaselined']} rebaselined)" if row["rebaselined"] else ""
                parts.append(f"{row['tag']!r} {', '.join(what)}{done}")
        delta = f"corpus delta in critical tags: {'; '.join(parts)}" if parts else None
        return "; ".join(p for p in (exam, delta) if p) or None

    def stopping(self) -> tuple[Any, ...]:
        """The findings that stop the gate (blocking or unverified), in the gate's order."""
        return self.decision.blocking() if self.decision else ()


def _leaves(a: Any, b: Any, path: str) -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [
            x for k in sorted(set(a) | set(b)) for x in _leaves(a.get(k), b.get(k), f"{path}.{k}")
        ]
    if a == b:
        return []
    short = [v if isinstance(v, str) else json.dumps(v, default=str) for v in (a, b)]
    short = [v if len(v) <= 48 else v[:47] + "…" for v in short]
    return [f"{path}: {short[0]} → {short[1]}"]


def _manifest_changes(cmp: Comparison) -> tuple[str, ...]:
    base, cand = cmp.base.manifest.recorded, cmp.cand.manifest.recorded
    return tuple(x for f in cmp.manifest_diff for x in _leaves(base(f), cand(f), f))


def build_report(
    cmp: Comparison, decision: GateDecision | None = None, iters: int = 10_000, seed: int = 0,
    max_details: int = 200,
) -> Report:  # fmt: skip
    """Assemble the report of a comparison (and of the gate's decision, when there is one).

    Broken cases in blocking tiers come first, then must_pass ones. Inputs, outputs and reasons
    are gathered for at most ``max_details`` broken and fixed cases each; counts are complete.
    Sealed cases are summarized in their own slice table and never listed case by case.
    """
    level = 0.95
    if decision is not None:
        iters, seed = decision.policy.bootstrap_iters, decision.policy.bootstrap_seed
        level = decision.policy.interval_level()
    p = cmp.paired
    held = p["sealed"].fill_null(False)
    live = p.filter(~held)
    blocking = {c for f in (decision.blocking() if decision else ()) for c in f.case_ids}
    # the columns the shown cases and the counts read: a million-case pair's flips, not copies
    # of every column of them
    broken, fixed = flips(live.select("case_id", "tags", "criticality", "base", "cand"))
    first = (~pl.col("case_id").is_in(list(blocking)), pl.col("criticality") != "must_pass")
    broken = broken.sort(*first, "case_id")
    ok = ~pl.col("base_error") & ~pl.col("cand_error")
    base_use, cand_use = usage_means(cmp.base_verdicts), usage_means(cmp.cand_verdicts)
    failing = p.filter(~pl.col("cand").fill_null(False))["case_id"].to_list()
    return Report(
        base_run_id=cmp.base.run_id,
        cand_run_id=cmp.cand.run_id,
        base_label=cmp.base.label,
        cand_label=cmp.cand.label,
        decision=decision,
        broken=case_details(cmp, broken.head(max_details), blocking),
        fixed=case_details(cmp, fixed.head(max_details), blocking),
        n_broken=broken.height,
        n_fixed=fixed.height,
        slices=slices(live, iters, seed, level),
        sealed=slices(p.filter(held), iters, seed, level),
        paired=p.select(
            "case_id", "tags", "criticality", "sealed", "base", "cand", "base_error", "cand_error"
        ),
        unstable=ids_where(live, pl.col("base_unstable") | pl.col("cand_unstable")),
        failing_both=ids_where(live, ok & ~pl.col("base") & ~pl.col("cand")),
        always_passing=ids_where(live, ok & pl.col("base") & pl.col("cand")),
        changes=cmp.changes,
        usage={k: (base_use[k], cand_use[k]) for k in base_use},
        manifest_diff=cmp.manifest_diff,
        suite=str(cmp.cand.manifest.suite or "evalkit"),
        cand_reasons=failure_reasons(cmp.cand, failing),
        manifest_changes=_manifest_changes(cmp),
        scorer_flips=run_scorer_flips(cmp.base, cmp.cand, _original(live)["case_id"]),
        usage_deltas=usage_table(live, decision.policy if decision else None),
        tokens_grew_most=tuple(usage_tail(live, "total_tokens")),
        grew_most=trajectories(cmp, grew_most(_original(live), "steps")),
        **_replay_fields(cmp, decision),
        level=level,
        run_rates=(_run_rate(cmp.base), _run_rate(cmp.cand)),
        rate_bases=(_rate_basis(cmp.base), _rate_basis(cmp.cand)),
    )


def _run_rate(run: RunData) -> float | None:
    """The run's own pass rate, per case (`evalkit.run.summary`), None when not counted."""
    return run.case_counts.rate if run.case_counts is not None else None


def _rate_basis(run: RunData) -> str:
    """What the run's own pass rate counts: per case, its replays under the run's rule."""
    from evalkit.run.rate_basis import rate_basis

    rules = run.case_counts.pass_rules if run.case_counts is not None else None
    return rate_basis(run.manifest.replays, rules)


def _replay_fields(cmp: Comparison, decision: GateDecision | None) -> dict[str, Any]:
    """`Report`'s replay fields: counts from the manifests, the rule from the decision's policy
    (the comparison was built under it), pass@k and pass^k at k = the smaller replay count."""
    replays = tuple(run.manifest.replays for run in (cmp.base, cmp.cand))
    rule = decision.policy.pass_rules.describe() if decision is not None else "majority"
    k = min(replays)
    table = replay_table(cmp.base_verdicts, cmp.cand_verdicts, k) if k > 1 else None
    return {"replays": replays, "pass_rule": rule, "replay_slices": table}


def _original(live: pl.DataFrame) -> pl.DataFrame:
    """Paired cases whose baseline side is the baseline run itself (not rebaselined): ``live``
    itself, not a copy, when every one is (a million-case pair's frame)."""
    paired = pl.col("origin").fill_null("paired") == "paired"
    if "origin" not in live.columns or live.select(paired.all()).item():
        return live
    return live.filter(paired)


# --- terminal (rich) ---------------------------------------------------------------------------


_pct, _pts = fmt_pct, fmt_pts


def _m(text: Any) -> str:
    """Data inside rich markup: inert and markup-escaped."""
    return escape(inert(str(text)))


def _clip(text: str | None, width: int = 400) -> str:
    text = "(no output)" if text is None else text
    return text if len(text) <= width else text[: width - 1] + "…"


def _mark(passed: bool | None) -> str:
    return f"[{ {True: 'green', False: 'red', None: 'yellow'}[passed] }]{_SYMBOL[passed]}[/]"


def _case_panel(d: CaseDetail, base_label: str, cand_label: str) -> Panel:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    grid.add_row("input", Text(inert(_clip(d.input))))
    for label, text, notes in ((base_label, d.base_output, d.base_notes),
                               (cand_label, d.cand_output, d.cand_notes)):  # fmt: skip
        grid.add_row(Text(inert(label)), Text(inert(_clip(text))))
        for n in notes:
            grid.add_row("", f"{_mark(n.passed)} {_m(n.scorer)}: {_m(n.reason[:200])}")
    about = [", ".join(d.tags) or "untagged", d.criticality] + (["BLOCKING"] if d.blocking else [])
    title = f"[bold]{_m(d.case_id)}[/] [dim]{_m(' · '.join(about))}[/]"
    return Panel(grid, title=title, title_align="left")


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> Table:
    t = Table(title=title, title_justify="left")
    for col in columns:
        t.add_column(col)
    for row in rows:
        t.add_row(*[str(x) for x in row])
    return t


def _slice_table(
    frame: pl.DataFrame, title: str, critical: Sequence[str] = (), level: float = 0.95
) -> Table:
    diff = f"difference [{ci_label(level)}]"
    cols = ("slice", "n", "baseline", "candidate", "broken", "fixed", diff, "p")
    rows = [
        (_m(r["slice"]) + (" *" if r["slice"] in critical else ""), r["n"],
         _pct(r["base_pass"]), _pct(r["cand_pass"]), r["broken"], r["fixed"],
         _pts(r["diff"], r["diff_lo"], r["diff_hi"]), fmt_p(r["p_value"]))
        for r in frame.filter(pl.col("slice") != "ALL").iter_rows(named=True)
    ]  # fmt: skip
    return _table(title, cols, rows)


def _failed(notes: tuple[ScorerNote, ...]) -> str:
    return "; ".join(f"{n.scorer}: {n.reason}" for n in notes if n.passed is False)


def _ids(label: str, ids: Sequence[str], limit: int = 12) -> Text:
    more = f" … and {len(ids) - limit} more" if len(ids) > limit else ""
    listed = ", ".join(ids[:limit]) + more if ids else "none"
    return Text.assemble((f"{label} ({len(ids)}): ", "bold"), inert(listed))


def _section(r: Report, name: str, max_cases: int) -> list[Any]:
    d = r.decision
    if name == "summary":
        color = STATUS_COLORS.get(r.status, "magenta")
        body = (f"{_m(r.base_label)} ({_m(r.base_run_id)}) → {_m(r.cand_label)} "
                f"({_m(r.cand_run_id)})\n{r.counts_line()}")  # fmt: skip
        body += f"\n{_m(r.delta_line())}" if r.delta_line() else ""
        body += f"\n[bold yellow]{_m(r.served_line())}[/]" if r.served_line() else ""
        body += f"\n{_m(r.replay_line())}" if r.replay_line() else ""
        body += f"\n{_m(r.rates_line())}" if r.rates_line() else ""
        body += (
            f"\nmanifests differ in: {_m(', '.join(r.manifest_diff))}" if r.manifest_diff else ""
        )
        for f in r.stopping():
            body += f"\n[bold {color}]{_m(f.severity.upper())}[/] tier {f.tier}: {_m(f.message)}"
        for o in d.overrides if d else ():
            body += f"\n[bold]override[/] by {_m(o.who)} at {o.created_at}: {_m(o.reason)}"
        title = f"[bold {color}]{_m(r.heading())}[/]"
        return [Panel(body, title=title, title_align="left")]
    if name == "broken":
        lead = sum(c.blocking for c in r.broken)
        head = f"[bold red]Broken: {r.n_broken}[/] (pass → fail); {lead} in blocking tiers first"
        rest = [c.case_id for c in r.broken[max_cases:]]
        tail = [_ids("not shown", rest)] if rest else []
        shown = [_case_panel(c, r.base_label, r.cand_label) for c in r.broken[:max_cases]]
        return [head, *shown, *tail]
    if name == "fixed":
        rows = [
            (_m(c.case_id), _m(", ".join(c.tags)), _m(_failed(c.base_notes)[:160]))
            for c in r.fixed[:max_cases]
        ]
        return [
            _table(f"Fixed: {r.n_fixed} (fail → pass)", ("case", "tags", "baseline failed"), rows)
        ]
    if name == "decision" and d:
        sev = {"block": "[red]BLOCK[/]", "unverified": "[dark_orange]UNVERIFIED[/]",
               "warn": "[yellow]warn[/]", "info": "info"}  # fmt: skip
        found = [(sev.get(f.severity, _m(f.severity)), f.tier, _m(f.message)) for f in d.findings]
        out: list[Any] = [_table("Gate findings", ("", "tier", "finding"), found)]
        hue = {"regressed": "red", "underpowered": "yellow", "no evidence of regression": "green"}
        crit = [(_m(s.tag), f"[{hue.get(s.state, 'white')}]{s.state}[/]", s.n, s.broken, s.fixed,
                 fmt_p(s.p_value), _pts(s.diff, s.lo, s.hi),
                 s.required_n if s.state == "underpowered" else "–")
                for s in d.critical]  # fmt: skip
        diff = f"difference [{ci_label(d.policy.interval_level())}]"
        tag_cols = ("tag", "state", "n", "broken", "fixed", "p", diff, "needs n")
        return out + ([_table("Critical tags", tag_cols, crit)] if crit else [])
    if name == "slices":
        out = [_slice_table(r.slices, "Slices (* critical)", r.critical_tags, r.level)]
        if r.sealed.height:
            sealed_title = "Sealed slices (reported, never gated)"
            out.append(_slice_table(r.sealed, sealed_title, (), r.level))
        if scorers := r.scorer_rows():
            scorer_cols = ("scorer", "kind", "n", "baseline", "candidate", "broken", "fixed", "p")
            out.append(_table("Per scorer (reported, not gated by itself)", scorer_cols, [
                (_m(x["scorer"]), x["kind"], x["n"], _pct(x["base_pass"]), _pct(x["cand_pass"]),
                 x["broken"], x["fixed"], fmt_p(x["p_broken"])) for x in scorers
            ]))  # fmt: skip
        if (t := r.replay_slices) is not None and t.height:
            replay_cols = ("slice", "k", "cases", "baseline pass@k", "baseline pass^k",
                           "candidate pass@k", "candidate pass^k")  # fmt: skip
            replay_rows = [(_m(x[0]), *x[1:3], *map(_pct, x[3:])) for x in t.iter_rows()]
            title = f"Replays: pass@k and pass^k (k = {t['k'][0]})"
            out.append(_table(title, replay_cols, replay_rows))
        return out
    if name == "suite":
        changes = [f"{c} ({k})" for c, k in r.changes.select("case_id", "change").iter_rows()]
        usage = [(k, "–" if b is None else f"{b:.4g}", "–" if c is None else f"{c:.4g}",
                  f"{100 * (c - b) / b:+.1f}%" if b and c is not None else "–")
                 for k, (b, c) in r.usage.items()]  # fmt: skip
        return [_ids("Unstable (replays disagree)", r.unstable),
                _ids("Failing in both runs (label-error candidates)", r.failing_both),
                _ids("Always passing (saturated)", r.always_passing, 5),
                _ids("Not paired (edited, added, removed, not run)", changes),
                _table("Cost and latency, mean per case", _USAGE_COLS, usage),
                *_growth_tables(r)]  # fmt: skip
    if name == "aggregate" and (a := r.aggregate):
        return [f"[bold]Aggregate (last, on purpose):[/] {_pct(a['base_pass'])} → "
                f"{_pct(a['cand_pass'])} ({_pts(a['diff'], a['diff_lo'], a['diff_hi'])}) over "
                f"{a['n']} cases; {a['broken']} broken, {a['fixed']} fixed"]  # fmt: skip
    return []


def _growth_tables(r: Report) -> list[Any]:
    out: list[Any] = []
    changed = r.changed_usage()
    if changed:
        rows = [(_m(x["slice"]), x["metric"], x["n"], growth_text(x), x["grew"], x["shrank"])
                for x in changed]  # fmt: skip
        cols = ("slice", "metric", "n", "change [bootstrap; (t): t, no budget]", "grew", "shrank")
        out.append(_table("Paired growth against the baseline (totals)", cols, rows))
    if r.tokens_grew_most:
        grew = [(_m(c), f"{b:g} → {a:g}", f"{s:.0%}") for c, b, a, s in r.tokens_grew_most]
        out.append(_table("Tokens grew most", ("case", "tokens", "share of the growth"), grew))
    if r.grew_most:
        step_rows = [(_m(c), f"{b:g} → {a:g}", _m(bc), _m(ac)) for c, b, a, bc, ac in r.grew_most]
        step_cols = ("case", "steps", "baseline tool calls", "candidate tool calls")
        out.append(_table("Steps grew most", step_cols, step_rows))
    return out


def render_terminal(
    report: Report, console: Console | None = None, max_cases: int = 20,
    sections: Sequence[str] = SECTIONS,
) -> None:  # fmt: skip
    """Print the report with rich: flips first, then findings and slices, the aggregate last.

    Every string from a model, the corpus or a scorer goes through `inert` first."""
    console = console or Console()
    for name in sections:
        for item in _section(report, name, max_cases):
            console.print(item)
        console.print()


def _recorded(report: Report, width: int, max_cases: int) -> Console:
    console = Console(width=width, record=True, file=io.StringIO(), color_system="truecolor")
    render_terminal(report, console, max_cases)
    return console


def to_text(report: Report, width: int = 110, max_cases: int = 20) -> str:
    """The terminal report as plain text (for logs and tests)."""
    return _recorded(report, width, max_cases).export_text()


# --- JSON -------------------------------------------------------------------------------------


def to_dict(report: Report, case_ids: Callable[[Sequence[str]], Any] = list) -> dict[str, Any]:
    """A JSON-ready dict of the whole report (``--json``); ``case_ids`` makes each list of
    case ids (`evalkit.report.json_file` puts a marker there and writes the column later)."""
    r = report
    return {
        "baseline": {"run_id": r.base_run_id, "label": r.base_label},
        "candidate": {"run_id": r.cand_run_id, "label": r.cand_label},
        "decision": r.decision.to_dict() if r.decision else None,
        "n_paired": r.paired.filter(~pl.col("base_error") & ~pl.col("cand_error")).height,
        "n_paired_rows": r.paired.height, "n_broken": r.n_broken, "n_fixed": r.n_fixed,
        "broken": [asdict(c) for c in r.broken], "fixed": [asdict(c) for c in r.fixed],
        "slices": r.slices.to_dicts(), "sealed_slices": r.sealed.to_dicts(),
        "unstable": case_ids(r.unstable), "failing_both": case_ids(r.failing_both),
        "always_passing": case_ids(r.always_passing), "changes": r.changes.to_dicts(),
        "usage": {k: {"baseline": b, "candidate": c} for k, (b, c) in r.usage.items()},
        "manifest_diff": list(r.manifest_diff), "aggregate": r.aggregate,
        "scorers": r.scorer_rows(),
        "usage_deltas": r.usage_deltas.to_dicts() if r.usage_deltas is not None else [],
        "replays": {"baseline": r.replays[0], "candidate": r.replays[1],
                    "pass_rule": r.pass_rule},
        "replay_slices": r.replay_slices.to_dicts() if r.replay_slices is not None else [],
        "tokens_grew_most": [dict(zip(("case_id", "base", "cand", "share"), g, strict=True))
                             for g in r.tokens_grew_most],
        "grew_most": [dict(zip(("case_id", "base_steps", "cand_steps", "base_calls",
                                "cand_calls"), g, strict=True)) for g in r.grew_most],
    }  # fmt: skip


def to_json(report: Report) -> str:
    """`to_dict` serialized (datetimes as ISO strings)."""
    return json.dumps(to_dict(report), indent=2, default=str)
