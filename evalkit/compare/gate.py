"""The tiered gate: a decision rule fixed before anyone looks at the results.

0. **evidence**: a candidate output that errored is not evidence of anything. Errored must_pass
   cases, errored cases in a critical tag, more errored outputs than ``gate.max_error_rate``, or
   nothing paired at all make the gate **UNVERIFIED**: it never passes what it did not see.
1. **must_pass**: a must_pass case failing in the candidate blocks, unless it is on the measured
   flake list (then it warns).
2. **critical tags** (at most 4, each with at least 8 cases): a tag *regressed*, and blocks, when
   broken > fixed with one-sided exact McNemar p <= alpha, or when the upper bound of the
   pass-rate difference's interval (Tango's score interval, made consistent with the exact test,
   so it never fires where exact p > alpha) is below -tolerance. Otherwise it is
   *underpowered* (fewer cases than Connor's paired sample size for a drop of ``tolerance``: a
   warning naming the n needed) or shows *no evidence of regression*; a critical tag a partial
   selection (a tier) leaves out is *not in this selection*.
   Where a calibrated judge may gate, a critical tag also regresses on the judge's own scale:
   the BCa upper bound of the mean level change below ``-gate.judge_tolerance_levels`` *and*
   the exact sign test on the level changes at alpha (`evalkit.compare.tiers`).
3. everything else warns (non-critical slices use Holm-adjusted p-values) or is reported.
4. budgets: candidate means over a declared limit block or warn, as configured.

`decide` applies the tiers: tier 0 from `evalkit.compare.evidence` (what the gate could not
see) and `evalkit.compare.pin_checks` (what the candidate changed against the pin), tiers 1 to 3
from `evalkit.compare.tiers`; budgets and overrides are here.

An override (who, a written reason, when) accepts the blocking findings it was recorded for, by
their :attr:`Finding.key`; a blocking finding no override names still blocks.

Examples:
    >>> policy = GatePolicy.from_suite(["billing"], {"alpha": 0.05}, {})
    >>> policy.tolerance, policy.critical_tags
    (0.02, ('billing',))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import polars as pl

from evalkit.compare.decision import (
    STOPPING,
    Finding,
    GateDecision,
    Override,
    PairContext,
)
from evalkit.compare.evidence import evidence_findings, first_causes, named_ids, side_errors
from evalkit.compare.pin_checks import (
    corpus_accounting,
    corpus_findings,
    exam_findings,
    pin_findings,
)
from evalkit.compare.policy import GatePolicy, tag_counts
from evalkit.compare.ruled_out import critical_options, ruled_out_findings
from evalkit.compare.served import served_findings, served_from
from evalkit.compare.slices import slices
from evalkit.compare.tiers import (
    any_broken_findings,
    critical_findings,
    must_pass_findings,
    other_findings,
)
from evalkit.compare.usage_deltas import METRICS, exceeds, usage_deltas
from evalkit.compare.verdicts import usage_means

if TYPE_CHECKING:
    from evalkit.compare.analysis import Comparison
    from evalkit.compare.not_run import NotRun
    from evalkit.store import Store


def usage_table(
    paired: pl.DataFrame, policy: GatePolicy | None, metrics: Sequence[str] = tuple(METRICS)
) -> pl.DataFrame:
    """The paired usage deltas as the gate reads them (`evalkit.compare.usage_deltas`): per
    critical tag and ALL, the paired bootstrap (the gate's seed, at most 4,000 resamples) on
    the ``gate.relative_budgets`` metrics of the critical tags, the t interval on the rest.
    The report shows this table, so its budgeted rows are the gate's."""
    if policy is None:  # no gate: no budget, every row (ALL alone) a t interval
        return usage_deltas(paired, (), metrics, bootstrap=())
    return usage_deltas(
        paired, policy.critical_tags, metrics, policy.interval_level(),
        min(policy.bootstrap_iters, 4_000), policy.bootstrap_seed,
        bootstrap=[metric for metric, _ in policy.relative_budgets],
    )  # fmt: skip


def _relative_findings(paired: pl.DataFrame, policy: GatePolicy) -> list[Finding]:
    """Per critical tag and ``gate.relative_budgets`` metric: a block when the tag's total grew
    against its own baseline beyond the allowed increase, beyond the noise (the paired
    bootstrap interval of the ratio of totals, or of seconds per case, lies wholly above the
    limit; `evalkit.compare.usage_deltas.exceeds`)."""
    if not policy.relative_budgets or not policy.critical_tags:
        return []
    limits = dict(policy.relative_budgets)
    table = usage_table(paired, policy, list(limits))
    found = []
    level = f"{policy.interval_level():.0%}"
    for row in table.filter(pl.col("slice") != "ALL").iter_rows(named=True):
        limit = limits[row["metric"]]
        if not exceeds(row, limit):
            continue
        d_lo, d_hi = row["diff_lo"], row["diff_hi"]
        diff = f"mean {row['mean_diff']:+.3g} per case [{d_lo:+.3g}, {d_hi:+.3g}]"
        if row["kind"] == "ratio" and row["base_total"] == 0:
            change = f"total {row['base_total']:g} → {row['cand_total']:.4g}, {diff}"
        elif row["kind"] == "ratio":
            change = (
                f"total ×{row['estimate']:.2f} [{row['lo']:.2f}, {row['hi']:.2f}] "
                f"({row['base_total']:.4g} → {row['cand_total']:.4g}), {diff}"
            )
        else:
            what = "median" if row["kind"] == "median seconds" else "mean"
            bounds = f"[{row['lo']:+.2f}, {row['hi']:+.2f}]"
            change = f"{what} {row['estimate']:+.2f} s per case {bounds}"
        allowed = f"×{limit:g}" if row["kind"] == "ratio" else f"+{limit:g} s"
        zero = f", {row['zero_base']} from a baseline of 0" if row["zero_base"] else ""
        message = (
            f"{row['metric']} of {row['slice']!r} grew against the baseline, paired over "
            f"{row['n']} cases: {change} ({level} paired bootstrap over cases); "
            f"{row['grew']} cases grew{zero}, {row['shrank']} shrank; gate.relative_budgets "
            f"allows {allowed}"
        )
        keys = ("n", "estimate", "lo", "hi", "mean_diff", "diff_lo", "diff_hi", "base_total",
                "cand_total", "zero_base", "grew", "shrank", "p_grew")  # fmt: skip
        kind = f"relative:{row['metric']}"
        stat = {k: row[k] for k in keys}
        found.append(Finding(4, row["slice"], (), stat, message, severity="block", kind=kind))
    return found


def _budget_findings(policy: GatePolicy, observed: Mapping[str, float | None]) -> list[Finding]:
    out = []
    for b in policy.budgets:
        value = observed.get(b.metric)
        if value is None:
            out.append(
                Finding(
                    4,
                    None,
                    (),
                    {"limit": b.limit},
                    f"{b.metric}: not measured",
                    severity="warn",
                    kind=f"budget:{b.metric}",
                )
            )
        elif value > b.limit:
            stat = {"observed": value, "limit": b.limit}
            msg = f"{b.metric} {value:.4g} is over the budget of {b.limit:g}"
            out.append(
                Finding(4, None, (), stat, msg, severity=b.action, kind=f"budget:{b.metric}")
            )
    return out


def _as_overrides(overrides: pl.DataFrame | Sequence[Override] | None) -> tuple[Override, ...]:
    if overrides is None:
        return ()
    if isinstance(overrides, pl.DataFrame):
        rows = overrides.iter_rows(named=True)
        overrides = [
            Override(r["who"], r["reason"], r.get("created_at"), tuple(r.get("findings") or ()))
            for r in rows
        ]
    return tuple(o for o in overrides if o.reason and o.reason.strip())


def _override_notes(
    stopping: Sequence[Finding], accepted: Sequence[Override]
) -> tuple[list[Finding], list[str]]:
    """Which override accepts which stopping finding, and the keys none accepts."""
    notes, uncovered = [], []
    for finding in stopping:
        by = [o for o in accepted if finding.key in o.findings]
        if by:
            who = ", ".join(f"{o.who} ({o.reason})" for o in by)
            msg = f"accepted by the override of {who}: {finding.message}"
            stat = {"key": finding.key}
            notes.append(
                Finding(finding.tier, finding.slice, finding.case_ids, stat, msg, severity="info")
            )
        else:
            uncovered.append(finding.key)
    if accepted and uncovered:
        msg = f"no override accepts {len(uncovered)} stopping finding(s): {', '.join(uncovered)}"
        notes.append(Finding(0, "overrides", (), {"uncovered": uncovered}, msg, severity="info"))
    return notes, uncovered


def decide(
    paired: pl.DataFrame,
    policy: GatePolicy,
    flakes: pl.DataFrame | Mapping[str, float] | None = None,
    budgets_observed: Mapping[str, float | None] | None = None,
    overrides: pl.DataFrame | Sequence[Override] | None = None,
    corpus: pl.DataFrame | Mapping[str, int] | None = None,
    errors: pl.DataFrame | None = None,
    selection: Mapping[str, Any] | None = None,
    context: PairContext | None = None,
) -> GateDecision:
    """Apply the tiers to the paired frame (sealed cases are left out: they only report).

    ``flakes`` maps case id -> measured flake rate (or a frame with ``case_id, flake_rate``);
    ``budgets_observed`` maps budget metric -> candidate mean (default: from the paired frame);
    ``corpus`` (the candidate's cases frame, or tag counts) is what critical tags are sized
    against, default the paired frame: edited cases then make a slice underpowered, not invalid.
    ``errors`` (the candidate's outputs: ``case_id, error``) counts errored outputs and names
    their causes; without it errors are counted per paired case. ``selection`` is the
    candidate manifest's: in a partial one (a tier) a critical tag with too few selected cases
    is reported as not in this selection instead of refused. ``context`` (`PairContext`)
    carries the corpus delta, the baseline's errors, the policy pin and the sibling runs.

    Raises:
        ConfigError: a critical tag has fewer than `GatePolicy.min_cases` cases.

    Examples:
        >>> p = pl.DataFrame({"case_id": ["a"], "tags": [["x"]], "criticality": ["must_pass"],
        ...     "base": [True], "cand": [False], "base_error": [False], "cand_error": [False]})
        >>> decide(p, GatePolicy()).summary()
        'gate BLOCKED: must_pass case a fails in the candidate (baseline passed)'
    """
    paired = paired.with_columns(
        pl.col("tags").cast(pl.List(pl.String)), pl.col("base", "cand").cast(pl.Boolean)
    )
    if "sealed" in paired.columns and paired["sealed"].any():  # none: no copy of the frame
        paired = paired.filter(~pl.col("sealed").fill_null(False))
    counts_from = paired if corpus is None else corpus
    counts = counts_from if isinstance(counts_from, Mapping) else tag_counts(counts_from)
    policy.validate_against(counts, selection)
    if isinstance(flakes, pl.DataFrame):
        flakes = dict(flakes.select("case_id", "flake_rate").iter_rows())
    if budgets_observed is None:
        cols = {c.removeprefix("cand_"): pl.col(c) for c in paired.columns if c.startswith("cand_")}
        budgets_observed = usage_means(paired.select(**cols)) if cols else {}
    table = slices(paired, policy.bootstrap_iters, policy.bootstrap_seed, policy.interval_level())
    states, critical = critical_findings(critical_options(table, policy), policy, paired, counts)
    causes = first_causes(errors)
    context = context or PairContext()
    delta = context.delta
    if delta is not None and "sealed" in delta.columns:
        delta = delta.filter(~pl.col("sealed").fill_null(False))
    accounting = corpus_accounting(policy, paired, delta)
    findings = [
        *pin_findings(policy, context),
        *evidence_findings(paired, policy, errors, causes, context.base_errors),
        *corpus_findings(policy, paired, delta, accounting, context),
        *must_pass_findings(paired, flakes or {}, causes, delta),
        *critical,
        *ruled_out_findings(states, policy),
        *other_findings(table, paired, policy),
        *_budget_findings(policy, budgets_observed),
        *any_broken_findings(paired, policy),
        *_relative_findings(paired, policy),
        *served_findings(policy, context.served),
        *exam_findings(policy, paired, context, counts, critical),
        *_unread_tree_findings(context),
        *_not_run_findings(policy, context),
    ]
    accepted = _as_overrides(overrides)
    stopping = [f for f in findings if f.severity in STOPPING]
    notes, uncovered = _override_notes(stopping, accepted)
    findings += notes
    order = {"block": 0, "unverified": 1, "warn": 2, "info": 3}
    findings.sort(key=lambda f: (order[f.severity], f.tier))
    open_findings = [f for f in stopping if f.key in uncovered]
    blocked = bool(open_findings)
    unverified = blocked and all(f.severity == "unverified" for f in open_findings)
    overridden = bool(stopping) and not blocked
    verified = paired.filter(~pl.col("base_error") & ~pl.col("cand_error")).height
    exam_line = context.exam.line() if context.exam is not None else None
    return GateDecision(
        blocked=blocked,
        findings=tuple(findings),
        overridden=overridden,
        overrides=accepted,
        critical=tuple(states),
        n_paired=paired.height,
        policy=policy,
        unverified=unverified,
        uncovered=tuple(uncovered),
        corpus_delta=tuple(accounting),
        n_verified=verified,
        exam_line=exam_line,
    )


def _unread_tree_findings(context: PairContext) -> list[Finding]:
    """Missing evidence when the candidate is a Python system whose repository could not be
    read and was served cached answers (`evalkit.compare.trust.unread_tree`)."""
    if context.unread_tree is None:
        return []
    from evalkit.compare.trust import unreadable_tree_finding

    return [unreadable_tree_finding(context.unread_tree)]


def _not_run_findings(policy: GatePolicy, context: PairContext) -> list[Finding]:
    """Missing evidence when the candidate did not run cases still in the checked-out corpus,
    and when the pull request removed more than ``gate.max_changed_share`` of the baseline's
    cases without evidence (`evalkit.compare.not_run`)."""
    if context.not_run is None:
        return []
    from evalkit.compare.not_run import not_run_finding, removed_share_finding

    exam = context.exam is not None
    found = context.not_run
    return [
        *not_run_finding(found, context.base_run_id, context.cand_run_id, exam),
        *removed_share_finding(found, policy, exam),
    ]


def gate_comparison(
    store: Store,
    comparison: Comparison,
    policy: GatePolicy,
    policy_changes: Sequence[str] = (),
    policy_source: str | None = None,
    siblings: Sequence[tuple[str, str]] = (),
    *,
    reasks: bool = False,
    not_run: NotRun | None = None,
) -> GateDecision:
    """`decide` with what the store knows beyond the pair: the flake list measured on the
    baseline's configuration (`evalkit.compare.flakes.excusing_flakes`), recorded overrides, both
    sides' errors and the corpus delta; ``policy_changes`` (how the pull request loosened the
    pinned policy), ``policy_source`` and ``siblings`` come from `evalkit.compare.pin.gate_pair`.
    Flake lists and overrides count only when a writer the policy trusts recorded them
    (`evalkit.compare.trust`); with ``reasks`` (the gate flow) a flake list excuses a case only
    once the gate job re-asked it (`evalkit.compare.reask`). ``not_run``
    (`evalkit.compare.not_run.find_not_run`): the baseline's cases the candidate did not run.
    """
    from evalkit.compare.flakes import excusing_flakes, shown_flakes
    from evalkit.compare.reask import reask_findings
    from evalkit.compare.replay_checks import replay_findings
    from evalkit.compare.transfer import transfer, transfer_finding
    from evalkit.compare.trust import (
        Trust,
        trust_findings,
        trusted_overrides,
        unread_tree,
    )

    # -- trust (evalkit.compare.trust): only records a trusted writer made decide ------------
    trust = Trust.here(policy.trusted_writers)
    rates = excusing_flakes(store, comparison.base, comparison.cand, trust.why_not)
    reasked: list[Finding] = []
    if reasks:
        rates, reasked = reask_findings(store, comparison, rates)
    overrides, ignored = trusted_overrides(
        store.overrides(comparison.base.run_id, comparison.cand.run_id), trust
    )
    # -- end trust ---------------------------------------------------------------------------
    observed = usage_means(comparison.cand_verdicts)
    errors = side_errors(comparison.cand, comparison.paired)
    base_errors = side_errors(comparison.base, comparison.paired.filter(_ORIGINAL))
    if comparison.rebaseline is not None:
        rebaselined = comparison.paired.filter(~_ORIGINAL)
        base_errors = pl.concat([base_errors, side_errors(comparison.rebaseline, rebaselined)])
    served = served_from(
        comparison.base.outputs, comparison.cand.outputs, comparison.base.manifest,
        comparison.cand.manifest,
    )  # fmt: skip
    context = PairContext(
        base_run_id=comparison.base.run_id,
        cand_run_id=comparison.cand.run_id,
        delta=comparison.delta,
        base_errors=base_errors,
        rebaseline_blocker=comparison.rebaseline_blocker,
        policy_changes=tuple(policy_changes),
        policy_source=policy_source,
        siblings=tuple(siblings),
        served=served,
        exam=comparison.exam,
        additions=comparison.additions,
        unread_tree=unread_tree(comparison),
        not_run=not_run,
    )
    selection = comparison.cand.manifest.selection
    decision = decide(
        comparison.paired, policy, rates, observed, overrides, comparison.cand.cases, errors,
        selection, context,
    )  # fmt: skip
    # Uncalibrated judges were left out of the verdicts; say so where the decision is read,
    # with the flips they would have caused.
    notes = [Finding(3, "judge", (), {}, note, severity="info") for note in comparison.judge_notes]
    notes += ungated_judge_flips(comparison.judge_paired, policy)
    notes += _cache_share(comparison)
    replays = min(run.manifest.replays for run in (comparison.base, comparison.cand))
    notes += replay_findings(comparison.paired, policy, replays)
    # Sealed cases run in both: do the live gains hold on cases nobody tuned against? (warn)
    held = transfer(comparison.paired, policy.bootstrap_iters, policy.level, policy.bootstrap_seed)
    notes += [found] if (found := transfer_finding(held)) else []
    notes += trust_findings(store, comparison, trust, ignored) + reasked
    shown = shown_flakes(store, comparison.base, comparison.cand, trust.why_not)
    for r in shown.iter_rows(named=True):
        msg = f"flake rate {r['flake_rate']:.0%} of {r['case_id']} excuses nothing: {r['why_not']}"
        notes.append(
            Finding(0, "flakes", (r["case_id"],), {}, msg, severity="info", kind="not-excusing")
        )
    # Warnings from the runs and the comparison reach the person with the decision.
    notes += [Finding(0, "warnings", (), {}, w, severity="warn") for w in comparison.warnings]
    return replace(decision, findings=decision.findings + tuple(notes))


_ORIGINAL = pl.col("origin").fill_null("paired") == "paired"


def _cache_share(comparison: Comparison) -> list[Finding]:
    """How much of the candidate was served from the response cache (its latency and cost are
    those measured when each answer was first produced)."""
    outputs = comparison.cand.outputs
    if "cached" not in outputs.columns or outputs.is_empty():
        return []
    cached = int(outputs["cached"].fill_null(False).sum())
    if not cached:
        return []
    share = cached / outputs.height
    msg = (
        f"{cached} of {outputs.height} candidate outputs ({share:.0%}) came from the response "
        "cache (latency and cost as first measured)"
    )
    return [
        Finding(0, "cache", (), {"cached": cached, "outputs": outputs.height}, msg, severity="info")
    ]


#: How ungated judge results are labelled wherever they are shown.
NOT_GATED = "judge not calibrated — reported, not gated"


def ungated_judge_flips(judge_paired: pl.DataFrame | None, policy: GatePolicy) -> list[Finding]:
    """Per tag (critical tags first) and per case, the flips of judge checks that may not gate.

    Examples:
        >>> p = pl.DataFrame({"case_id": ["a"], "tags": [["tone"]], "base": [True],
        ...     "cand": [False], "base_error": [False], "cand_error": [False]})
        >>> ungated_judge_flips(p, GatePolicy())[0].message[:57]
        "tag 'tone': 1 case(s) broken, 0 fixed by the judge (judge"
    """
    if judge_paired is None or judge_paired.is_empty():
        return []
    decided = judge_paired.filter(~pl.col("base_error") & ~pl.col("cand_error"))
    broken = decided.filter(pl.col("base") & ~pl.col("cand"))
    fixed = decided.filter(~pl.col("base") & pl.col("cand"))
    tags = {t for frame in (broken, fixed) for t in frame["tags"].explode().drop_nulls()}
    out = []
    for tag in sorted(tags, key=lambda tag: (tag not in policy.critical_tags, tag)):
        ids = broken.filter(pl.col("tags").list.contains(tag))["case_id"].to_list()
        n_fixed = fixed.filter(pl.col("tags").list.contains(tag)).height
        critical = " (critical)" if tag in policy.critical_tags else ""
        msg = (
            f"tag {tag!r}{critical}: {len(ids)} case(s) broken, {n_fixed} fixed by the judge "
            f"({NOT_GATED})" + (f": {named_ids(ids)}" if ids else "")
        )
        stat = {"broken": len(ids), "fixed": n_fixed, "gated": False}
        out.append(Finding(3, tag, tuple(ids), stat, msg, severity="warn" if ids else "info"))
    for case in broken["case_id"]:
        msg = (
            f"case {case} fails the judge in the candidate, passed it in the baseline ({NOT_GATED})"
        )
        out.append(Finding(3, "judge-flip", (case,), {"gated": False}, msg, severity="info"))
    return out
