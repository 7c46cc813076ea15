"""The tiered gate: a decision rule fixed before anyone looks at the results.

Over 600 lines: the tiers of `decide` and the findings that feed it (evidence, pin, exam,
trust, budgets) are one module; the findings are the seam to split out (issue 47).

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
   the exact sign test on the level changes at alpha (`_judge_level_drop`).
3. everything else warns (non-critical slices use Holm-adjusted p-values) or is reported.
4. budgets: candidate means over a declared limit block or warn, as configured.

An override (who, a written reason, when) accepts the blocking findings it was recorded for, by
their :attr:`Finding.key`; a blocking finding no override names still blocks.

Examples:
    >>> policy = GatePolicy.from_suite(["billing"], {"alpha": 0.05}, {})
    >>> policy.tolerance, policy.critical_tags
    (0.02, ('billing',))
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import polars as pl

from evalkit import stats
from evalkit.compare.decision import (
    STOPPING,
    Finding,
    GateDecision,
    Override,
    PairContext,
    Severity,
    SliceState,
    State,
)
from evalkit.compare.policy import GatePolicy, tag_counts
from evalkit.compare.ruled_out import critical_options, ruled_out_findings
from evalkit.compare.served import served_findings, served_from
from evalkit.compare.slices import CLUSTERED_METHOD, interval_name, slices
from evalkit.compare.usage_deltas import exceeds, usage_deltas
from evalkit.compare.verdicts import usage_means

if TYPE_CHECKING:
    from evalkit.compare.analysis import Comparison, RunData
    from evalkit.store import Store


def _pts(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:+.1f} pts"


def _must_pass(
    paired: pl.DataFrame,
    flakes: Mapping[str, float],
    causes: Mapping[str, str],
    delta: pl.DataFrame | None = None,
) -> list[Finding]:
    """Tier 1: must_pass is absolute. Every must_pass case of the candidate's corpus must pass,
    paired or not (``delta``: added and edited cases the baseline never ran); one the baseline
    had and the candidate did not run stops the gate until accepted or promoted away."""
    mp = paired.filter(pl.col("criticality") == "must_pass")
    out = []
    errored = mp.filter(pl.col("cand_error"))["case_id"].to_list()
    fresh = pl.DataFrame(schema={"case_id": pl.String, "change": pl.String, "cand": pl.Boolean,
                                 "cand_error": pl.Boolean})  # fmt: skip
    removed: list[str] = []
    if delta is not None and delta.height:
        dm = delta.filter((pl.col("criticality") == "must_pass") & ~pl.col("rebaselined"))
        removed = dm.filter(pl.col("change") == "removed")["case_id"].to_list()
        fresh = dm.filter(pl.col("change") != "removed").select(fresh.columns)
        errored += fresh.filter(pl.col("cand_error"))["case_id"].to_list()
    if errored:
        why = top_causes([causes.get(c) for c in errored])
        msg = (
            f"{len(errored)} must_pass case(s) errored in the candidate ({_named(errored)}): "
            "unverified" + (f"; causes: {_causes_text(why)}" if why else "")
        )
        out.append(Finding(1, "must_pass", tuple(errored), {"n_error": len(errored)}, msg,
                           "unverified", "errored"))  # fmt: skip
    for r in mp.filter(pl.col("cand") == False).iter_rows(named=True):  # noqa: E712
        case, rate = r["case_id"], flakes.get(r["case_id"], 0.0)
        before = {True: "passed", False: "also failed", None: "errored"}[r["base"]]
        before = f"baseline {before}"
        if r.get("origin") == "rebaselined":
            before = "its new version, rebaselined: the baseline configuration " + before[9:]
        msg = f"must_pass case {case} fails in the candidate ({before})"
        if rate > 0:
            msg += f", but it is on the measured flake list (flake rate {rate:.0%})"
        stat = {"flake_rate": rate}
        out.append(Finding(1, "must_pass", (case,), stat, msg, _sev(rate == 0), "failed"))
    for r in fresh.filter(~pl.col("cand_error") & (pl.col("cand") == False)).iter_rows(named=True):  # noqa: E712
        case = r["case_id"]
        msg = (
            f"must_pass case {case} ({r['change']} in this pull request, not run on the baseline "
            "configuration) fails in the candidate: must_pass means must pass"
        )
        out.append(Finding(1, "must_pass", (case,), {"change": r["change"]}, msg, "block",
                           "failed"))  # fmt: skip
    for case in removed:
        msg = (
            f"must_pass case {case} ran in the baseline but not in the candidate (removed from "
            "the corpus): accept it with `evalkit override`, or promote a baseline whose corpus "
            "no longer has it"
        )
        out.append(Finding(1, "must_pass", (case,), {"change": "removed"}, msg, "unverified",
                           "removed"))  # fmt: skip
    return out


def _sev(block: bool) -> Severity:
    return "block" if block else "warn"


def _sizing(
    n: int, broken: int, fixed: int, policy: GatePolicy, deff: float = 1.0
) -> tuple[float, bool, int, float]:
    """``(psi, psi_assumed, required_n, power)`` for detecting a drop of ``policy.tolerance``
    with the test the gate runs: the one-sided exact McNemar test (`stats.required_n_exact`,
    `stats.exact_power_gate`), on verdicts as observed (replays already collapsed), at the
    design effect ``deff`` of the tag's case groups (`_group_design`).

    ``psi`` is the observed flip fraction, floored at the tolerance (a drop of Δ needs at least
    Δ of the cases to flip; with no flips we assume exactly that, every flip a break), so
    ``required_n`` is a lower bound then. ``power`` is the exact power at n; ``required_n`` the
    smallest n from which the exact power stays at or above ``policy.power``.

    Examples:
        >>> _sizing(50, 0, 0, GatePolicy())[:3]
        (0.02, True, 335)
        >>> _sizing(400, 0, 0, GatePolicy(), deff=3.45)[2]
        1156
    """
    observed, tol = (broken + fixed) / n if n else 0.0, policy.tolerance
    psi = max(observed, tol)
    grid = math.ceil(psi * 200 - 1e-9) / 200  # sized at psi rounded up to 0.5 pt: reused
    need = stats.required_n_exact(min(1.0, max(grid, tol)), tol, policy.alpha, policy.power,
                                  deff=deff)  # fmt: skip
    power = stats.exact_power_gate(n, psi, tol, policy.alpha, deff=deff)
    return psi, observed < tol, need, power


def _group_design(paired: pl.DataFrame, tag: str, policy: GatePolicy) -> tuple[float, str]:
    """The design effect of a critical tag's case groups and how it was found: the
    intra-group correlation of its cases' paired changes when its groups can estimate it
    (`stats.icc_oneway`, floored at 0), else ``gate.assumed_icc``, stated as assumed.
    ``(1.0, "")`` when no case of the tag carries a group."""
    if "case_group" not in paired.columns:
        return 1.0, ""
    sub = paired.filter(
        pl.col("tags").list.contains(tag) & ~pl.col("base_error") & ~pl.col("cand_error")
    )
    if sub.is_empty() or sub["case_group"].is_null().all():
        return 1.0, ""
    cluster = pl.coalesce(pl.lit("g:") + pl.col("case_group"), pl.lit("c:") + pl.col("case_id"))
    sub = sub.with_columns(
        _c=cluster, _d=pl.col("cand").cast(pl.Int8) - pl.col("base").cast(pl.Int8)
    )
    sizes = sub.group_by("_c").len()["len"].to_numpy()
    icc = stats.icc_oneway(sub["_d"].to_numpy(), sub["_c"].to_numpy())
    if icc != icc or not (sub["_d"] != 0).any():  # nan, or no change to estimate it from
        icc, how = policy.assumed_icc, "assumed (gate.assumed_icc)"
    else:
        how = "estimated from this comparison's paired changes"
    deff = stats.design_effect(sizes, icc)
    return deff, (
        f"; {sizes.size} case groups, intra-group correlation {icc:.2f} {how}: design effect "
        f"{deff:.2f}, ≈{int(sub.height / deff)} effective cases"
    )


def _critical(
    table: pl.DataFrame, policy: GatePolicy, paired: pl.DataFrame, counts: Mapping[str, int]
) -> tuple[list[SliceState], list[Finding]]:
    states: list[SliceState] = []
    findings: list[Finding] = []
    rows = {r["slice"]: r for r in table.iter_rows(named=True)}
    empty = dict.fromkeys(table.columns) | {"n": 0, "n_error": 0, "broken": 0, "fixed": 0}
    for tag in policy.critical_tags:
        if counts.get(tag, 0) < policy.min_cases():  # only a partial selection gets here
            n_sel = counts.get(tag, 0)
            msg = (
                f"critical tag {tag!r} is not in this selection ({n_sel} of its cases ran, "
                f"≥ {policy.min_cases()} are needed to gate): not gated here; the full suite "
                "gates it"
            )
            findings.append(Finding(2, tag, (), {"n": n_sel}, msg, "info", "not-selected"))
            states.append(SliceState(tag, "not in this selection", n_sel, 0, 0, 0, None, None,
                                     None, None, 0.0, False, None, None))  # fmt: skip
            continue
        r, a, tol = rows.get(tag, empty), policy.alpha, policy.tolerance
        n, broken, fixed, p, hi = r["n"], r["broken"], r["fixed"], r["p_value"], r["diff_hi"]
        sub = paired.filter(pl.col("tags").list.contains(tag) & pl.col("base") & ~pl.col("cand"))
        ids, stat = tuple(sub["case_id"]), {k: r[k] for k in ("n", "broken", "fixed", "p_value")}
        stat |= {"diff": r["diff"], "lo": r["diff_lo"], "hi": hi}
        deff, groups_note = _group_design(paired, tag, policy)
        psi, assumed, need, power = _sizing(n, broken, fixed, policy, deff)
        by_p, by_ci = broken > fixed and p is not None and p <= a, hi is not None and hi < -tol
        head = f"critical tag {tag!r}"
        judged = _judge_level_drop(tag, paired, policy)  # a calibrated judge, on its own scale
        findings += [judged] if judged is not None else []
        if judged is not None and not (by_p or by_ci):
            state: State = "regressed"
        elif by_p or by_ci:
            state = "regressed"
            test = "exact McNemar" + (" mid-p" if policy.mid_p else "")
            if policy.critical_adjust == "holm":  # gate.critical_adjust (`critical_options`)
                test += ", Holm-adjusted across the critical tags,"
            if r.get("interval_method") == CLUSTERED_METHOD:  # cases in groups: the larger p
                test = f"exact McNemar and clustered t over {r['n_groups']} case groups"
            why = [f"one-sided {test} p = {p:.4g} ≤ {a:g}"] if by_p else []
            method = interval_name(r.get("interval_method"))
            why += [f"upper bound {_pts(hi)} < {_pts(-tol)} ({method})"] if by_ci else []
            msg = f"{head} regressed: {broken} broken, {fixed} fixed of {n} ({_pts(r['diff'])})"
            findings.append(
                Finding(2, tag, ids, stat, f"{msg}; {' and '.join(why)}", "block", "regressed")
            )
        elif paired.filter(
            pl.col("tags").list.contains(tag) & (pl.col("cand_error") | pl.col("base_error"))
        ).height:
            state = "unverified"  # its errored cases are a tier-0 finding: no evidence either way
        elif n < need:
            state = "underpowered"
            msg = (
                f"{head} is underpowered: {n} cases detect a {100 * tol:.1f}-point drop with power "
                f"{power:.0%}; it needs ≈{need} cases (paired, flip rate ψ = {psi:.3g}"
                f"{', assumed: no flips seen' if assumed else ''}; one-sided exact McNemar"
                f"{groups_note})"
            )
            stat |= {"required_n": need}
            findings.append(Finding(2, tag, ids, stat, msg, "warn", "underpowered"))
        else:
            state = "no evidence of regression"
        states.append(SliceState(tag, state, n, r["n_error"], broken, fixed, p, r["diff"],
                                 r["diff_lo"], hi, psi, assumed, need, power))  # fmt: skip
    return states, findings


def _judge_level_drop(tag: str, paired: pl.DataFrame, policy: GatePolicy) -> Finding | None:
    """A block when a calibrated judge's levels drop on a critical tag's cases, on its own scale.

    Fixed before looking: on the tag's cases a gating judge decided in both runs (at least
    `GatePolicy.min_cases`), the BCa upper bound (level `GatePolicy.interval_level`, so each
    tail is at most alpha) of mean(cand_judge_level - base_judge_level) is below
    ``-judge_tolerance_levels``, *and* the one-sided exact sign test on the cases whose level
    changed (drops vs rises, `stats.mcnemar_exact`) has p <= alpha. The sign test is exact at
    any n, so the rule never blocks where it sees no evidence (BCa alone is anti-conservative on
    a handful of cases); all-equal levels leave BCa undefined: no block.
    """
    tol = policy.judge_tolerance_levels
    if tol is None or "cand_judge_level" not in paired.columns:
        return None
    sub = paired.filter(
        pl.col("tags").list.contains(tag) & ~pl.col("base_error") & ~pl.col("cand_error")
    ).drop_nulls(["base_judge_level", "cand_judge_level"])
    if sub.height < policy.min_cases():
        return None
    base, cand = sub["base_judge_level"].to_numpy(), sub["cand_judge_level"].to_numpy()
    drops, rises = int((cand < base).sum()), int((cand > base).sum())
    p = stats.mcnemar_exact(drops, rises, "greater")
    if drops <= rises or p > policy.alpha:
        return None
    boot = stats.paired_bootstrap(
        base, cand, policy.bootstrap_iters, policy.interval_level(), policy.bootstrap_seed,
        method="bca",
    )  # fmt: skip
    if not boot.hi < -tol:  # nan (undefined) never blocks
        return None
    ids = tuple(sub.filter(pl.col("cand_judge_level") < pl.col("base_judge_level"))["case_id"])
    stat = {"n": sub.height, "drops": drops, "rises": rises, "p_value": p, "diff": boot.diff,
            "lo": boot.lo, "hi": boot.hi, "method": "bca", "tolerance_levels": tol}  # fmt: skip
    msg = (
        f"critical tag {tag!r} regressed on the judge's scale: mean level {boot.diff:+.2f} over "
        f"{sub.height} judged cases ({drops} lower, {rises} higher), {policy.interval_level():.0%}"
        f" BCa upper bound {boot.hi:+.2f} < {-tol:+.2f} levels and one-sided exact sign test "
        f"p = {p:.4g} ≤ {policy.alpha:g}"
    )
    return Finding(2, f"{tag}:judge-levels", ids, stat, msg, "block", "regressed")


def _others(table: pl.DataFrame, paired: pl.DataFrame, policy: GatePolicy) -> list[Finding]:
    table = table.filter(~pl.col("slice").is_in(list(policy.critical_tags)) & (pl.col("n") > 0))
    adj: list[float] = stats.holm(table["p_value"].to_numpy()).tolist() if table.height else []
    out = []
    for r, p_adj in zip(table.iter_rows(named=True), adj, strict=True):
        by_p = r["broken"] > r["fixed"] and p_adj <= policy.alpha
        if by_p or r["diff_hi"] < -policy.tolerance:
            name = "the aggregate" if r["slice"] == "ALL" else f"slice {r['slice']!r}"
            why = (
                f"Holm-adjusted p = {p_adj:.3g} ≤ {policy.alpha:g}"
                if by_p  # else the interval rule raised it, unadjusted across slices: say so
                else f"upper bound {_pts(r['diff_hi'])} < {_pts(-policy.tolerance)}, an interval "
                "not adjusted across slices"
            )
            msg = (
                f"{name} regressed: {r['broken']} broken, {r['fixed']} fixed of {r['n']} "
                f"({_pts(r['diff'])}, {why})"
            )
            stat = {**r, "p_holm": float(p_adj)}
            out.append(Finding(3, r["slice"], (), stat, msg, "warn", "regressed"))
    return out


_ATTEMPTS = re.compile(r"\s*\(after \d+ attempts\)$")


def top_causes(errors: Sequence[str | None], k: int = 3) -> list[tuple[str, int]]:
    """The ``k`` most common error causes with their counts (retry counts folded together).

    Examples:
        >>> top_causes(["HTTP 400: bad model (after 5 attempts)", "HTTP 400: bad model", None])
        [('HTTP 400: bad model', 2)]
    """
    shown = [_ATTEMPTS.sub("", e.strip())[:160] for e in errors if e]
    return Counter(shown).most_common(k)


def _causes_text(causes: Sequence[tuple[str, int]]) -> str:
    return "; ".join(f"{n} × {cause}" for cause, n in causes)


def _named(ids: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def _first_cause(errors: pl.DataFrame | None) -> dict[str, str]:
    """Each errored case's first stored error (``errors``: the candidate's outputs)."""
    if errors is None or errors.is_empty():
        return {}
    failed = errors.filter(pl.col("error").is_not_null())
    first = failed.group_by("case_id", maintain_order=True).first()
    return dict(first.select("case_id", "error").iter_rows())


def _evidence(
    paired: pl.DataFrame,
    policy: GatePolicy,
    errors: pl.DataFrame | None,
    by_case: Mapping[str, str],
    base_errors: pl.DataFrame | None = None,
) -> list[Finding]:
    """Tier 0: what the gate could not see, on either side. Errored cases in a critical tag or
    a must_pass case, more errored outputs than ``max_error_rate``, or no case with evidence on
    both sides make it UNVERIFIED: an outage of the baseline hides as much as one of the
    candidate."""
    if paired.height == 0:
        msg = "no case is paired between the runs (nothing ran, or every case was edited)"
        return [Finding(0, None, (), {"n": 0}, f"{msg}: nothing was verified", "unverified",
                        "nothing-paired")]  # fmt: skip
    out = []
    for side, role, frame in (("cand", "candidate", errors), ("base", "baseline", base_errors)):
        out += _side_evidence(paired, policy, frame, by_case if side == "cand" else {}, side, role)
    seen = paired.filter(~pl.col("base_error") & ~pl.col("cand_error"))
    if seen.height == 0 and not any(f.slice == "errors" for f in out):
        msg = (
            f"none of the {paired.height} paired cases has an answer on both sides (the "
            "baseline or the candidate errored on every one): nothing was verified"
        )
        out.append(Finding(0, None, (), {"n": 0}, msg, "unverified", "nothing-verified"))
    return out


def _side_evidence(
    paired: pl.DataFrame,
    policy: GatePolicy,
    errors: pl.DataFrame | None,
    by_case: Mapping[str, str],
    side: str,
    role: str,
) -> list[Finding]:
    errored = paired.filter(pl.col(f"{side}_error"))
    if errors is not None and errors.height:
        failed = errors.filter(pl.col("error").is_not_null())
        n_outputs, n_errored = errors.height, failed.height
        causes = top_causes(failed["error"].to_list())
        by_case = by_case or _first_cause(errors)
    else:
        n_outputs, n_errored, causes = paired.height, errored.height, []
    kind = "errored" if side == "cand" else "baseline-errored"
    out = []
    if side == "base":  # the candidate's errored must_pass cases are a tier-1 finding
        ids = errored.filter(pl.col("criticality") == "must_pass")["case_id"].to_list()
        if ids:
            why = top_causes([by_case.get(i) for i in ids])
            msg = (
                f"{len(ids)} must_pass case(s) errored in the baseline ({_named(ids)}): what they "
                "did before is unknown, so they are unverified"
                + (f"; causes: {_causes_text(why)}" if why else "")
            )
            out.append(Finding(0, "must_pass", tuple(ids), {"n_error": len(ids)}, msg,
                               "unverified", kind))  # fmt: skip
    for tag in policy.critical_tags:
        ids = errored.filter(pl.col("tags").list.contains(tag))["case_id"].to_list()
        if ids:
            why = top_causes([by_case.get(i) for i in ids])
            msg = (
                f"critical tag {tag!r}: {len(ids)} case(s) errored in the {role} "
                f"({_named(ids)}), so the tag is unverified"
                + (f"; causes: {_causes_text(why)}" if why else "")
            )
            out.append(Finding(0, tag, tuple(ids), {"n_error": len(ids)}, msg, "unverified", kind))
    rate = n_errored / n_outputs if n_outputs else 0.0
    if n_errored and rate > policy.max_error_rate:
        ids = errored["case_id"].to_list()
        msg = (
            f"{n_errored} of {n_outputs} {role} outputs errored ({rate:.0%}, more than "
            f"gate.max_error_rate {policy.max_error_rate:.0%})"
            + (f"; top causes: {_causes_text(causes)}" if causes else "")
            + (f"; cases with no verdict: {_named(ids)}" if ids else "")
        )
        stat: dict[str, Any] = {"n_outputs": n_outputs, "n_errored": n_errored, "error_rate": rate}
        stat["top_causes"] = [[c, n] for c, n in causes]
        out.append(Finding(0, "errors", tuple(ids), stat, msg, "unverified", kind))
    return out


def corpus_accounting(
    policy: GatePolicy, paired: pl.DataFrame, delta: pl.DataFrame | None
) -> list[dict[str, Any]]:
    """Per critical tag, what the pull request changed in its cases and how much of it the
    comparison accounts for: ``unaccounted`` = removed + edited/added cases not rebaselined,
    ``share`` = unaccounted over the tag's cases (the larger side).

    Examples:
        >>> d = pl.DataFrame({"case_id": ["a"], "change": ["edited"], "tags": [["billing"]],
        ...     "rebaselined": [False]})
        >>> p = pl.DataFrame({"case_id": ["b", "c"], "tags": [["billing"]] * 2})
        >>> corpus_accounting(GatePolicy(critical_tags=("billing",)), p, d)[0]["share"]
        0.3333333333333333
    """
    if delta is None:
        delta = pl.DataFrame(
            schema={"case_id": pl.String(), "change": pl.String(), "tags": pl.List(pl.String),
                    "rebaselined": pl.Boolean()}
        )  # fmt: skip
    out = []
    for tag in policy.critical_tags:
        sub = delta.filter(pl.col("tags").list.contains(tag))
        count = {
            c: sub.filter(pl.col("change") == c).height for c in ("edited", "added", "removed")
        }
        rebaselined = sub.filter(pl.col("rebaselined")).height
        unaccounted = sub.height - rebaselined
        changed = pl.col("case_id").is_in(sub["case_id"].implode())
        paired_n = paired.filter(pl.col("tags").list.contains(tag) & ~changed).height
        size = max(paired_n + count["edited"] + count["added"], paired_n + count["removed"], 1)
        out.append({"tag": tag, **count, "rebaselined": rebaselined, "unaccounted": unaccounted,
                    "share": unaccounted / size})  # fmt: skip
    return out


def _corpus_findings(
    policy: GatePolicy,
    paired: pl.DataFrame,
    delta: pl.DataFrame | None,
    accounting: Sequence[Mapping[str, Any]],
    context: PairContext,
) -> list[Finding]:
    """Tier 0: a critical tag whose changed cases the comparison cannot account for is
    UNVERIFIED (never "underpowered" and passed); an edited case that was failing is flagged."""
    out = []
    verify = (
        f"`evalkit gate {context.base_run_id} {context.cand_run_id} --rebaseline` (runs the "
        "baseline configuration on the added and edited cases, cached)"
    )
    if context.rebaseline_blocker:
        verify = (
            f"a baseline run of this corpus: run the baseline configuration on it and promote "
            f"it (`evalkit baseline promote RUN --who NAME --reason TEXT`); --rebaseline cannot: "
            f"{context.rebaseline_blocker}"
        )
    for row in accounting:
        tag, left = row["tag"], row["unaccounted"]
        if not left:
            continue
        evidence = paired.filter(
            pl.col("tags").list.contains(tag) & ~pl.col("base_error") & ~pl.col("cand_error")
        ).height
        too_many = row["share"] > policy.max_changed_share
        if not (too_many or evidence < policy.min_cases()):
            continue
        what = ", ".join(f"{row[c]} {c}" for c in ("edited", "added", "removed") if row[c])
        why = (
            f"{row['share']:.0%} > gate.max_changed_share {policy.max_changed_share:.0%}"
            if too_many
            else f"{evidence} paired cases with evidence, < {policy.min_cases()}"
        )
        unrebased = pl.col("tags").list.contains(tag) & ~pl.col("rebaselined")
        ids = () if delta is None else tuple(delta.filter(unrebased)["case_id"])
        msg = (
            f"critical tag {tag!r}: {left} of its cases changed in this pull request ({what}) and "
            f"were not compared with the baseline configuration ({why}): unverified; verify "
            f"with {verify}"
        )
        stat = {k: row[k] for k in ("edited", "added", "removed", "rebaselined", "share")}
        out.append(Finding(0, tag, ids, stat, msg, "unverified", "corpus-delta"))
    if delta is not None:
        was = delta.filter((pl.col("change") == "edited") & (pl.col("old") == False))  # noqa: E712
        for r in was.iter_rows(named=True):
            msg = (
                f"case {r['case_id']} was edited in this pull request while it failed in the "
                "baseline: never edit a case because it failed — review the edit"
            )
            out.append(Finding(0, "corpus", (r["case_id"],), {}, msg, "warn", "edited-failing"))
    return out


def _pin_findings(policy: GatePolicy, context: PairContext) -> list[Finding]:
    """Tier 0: a policy the pull request loosened, and the candidate's sibling runs."""
    out = []
    if context.policy_changes:
        source = f" ({context.policy_source})" if context.policy_source else ""
        msg = (
            "the pull request's gate policy is looser than the pinned one: "
            f"{'; '.join(context.policy_changes)}. Decided under the pinned policy{source}; "
            "unverified until a person promotes the new policy: `evalkit baseline promote "
            f"{context.base_run_id} --policy --who NAME --reason TEXT`"
        )
        stat: dict[str, Any] = {"changes": list(context.policy_changes)}
        out.append(Finding(0, "policy", (), stat, msg, "unverified", "loosened"))
    if context.siblings:
        counts = Counter(status for _, status in context.siblings)
        listed = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        stopped = [r for r, s in context.siblings if s in ("BLOCKED", "UNVERIFIED")]
        blocked = [r for r, s in context.siblings if s == "BLOCKED"]  # a regression, not a gap
        block = policy.siblings == "block" and bool(blocked)
        stopped = blocked if block else stopped
        msg = (
            f"{len(context.siblings)} other run(s) of this configuration (any corpus): "
            f"{listed} ({_named([f'{r} {s}' for r, s in context.siblings])})"
            + ("; gate.siblings: block" if block else "")
        )
        stat = {"siblings": [list(x) for x in context.siblings]}
        severity: Severity = "block" if block else ("warn" if stopped else "info")
        out.append(Finding(0, "siblings", tuple(stopped), stat, msg, severity, "siblings"))
    return out


def _any_broken(paired: pl.DataFrame, policy: GatePolicy) -> list[Finding]:
    """Per tag of ``gate.block_on_any_broken``: its broken cases (pass → fail, both sides with
    evidence) block, one finding per tag, stated as the policy choice it is."""
    found = []
    broken = paired.filter(
        (pl.col("base") == True) & (pl.col("cand") == False)  # noqa: E712
        & ~pl.col("base_error") & ~pl.col("cand_error")
    )  # fmt: skip
    for tag in policy.block_on_any_broken:
        ids = tuple(sorted(broken.filter(pl.col("tags").list.contains(tag))["case_id"]))
        if ids:
            message = (
                f"{len(ids)} broken case(s) in {tag!r} ({_named(ids)}): gate.block_on_any_broken "
                "lists the tag, so any pass → fail blocks (a policy choice, stricter than the "
                "statistics)"
            )
            found.append(Finding(2, tag, ids, {"broken": len(ids)}, message, "block", "any-broken"))
    return found


def _relative_findings(paired: pl.DataFrame, policy: GatePolicy) -> list[Finding]:
    """Per critical tag and ``gate.relative_budgets`` metric: a block when the tag's total grew
    against its own baseline beyond the allowed increase, beyond the noise (the paired
    bootstrap interval of the ratio of totals, or of seconds per case, lies wholly above the
    limit; `evalkit.compare.usage_deltas.exceeds`)."""
    if not policy.relative_budgets or not policy.critical_tags:
        return []
    limits = dict(policy.relative_budgets)
    table = usage_deltas(
        paired, policy.critical_tags, list(limits), policy.interval_level(),
        min(policy.bootstrap_iters, 4_000), policy.bootstrap_seed,
    )  # fmt: skip
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
        found.append(Finding(4, row["slice"], (), stat, message, "block", kind))
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
                    "warn",
                    f"budget:{b.metric}",
                )
            )
        elif value > b.limit:
            stat = {"observed": value, "limit": b.limit}
            msg = f"{b.metric} {value:.4g} is over the budget of {b.limit:g}"
            out.append(Finding(4, None, (), stat, msg, b.action, f"budget:{b.metric}"))
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
            notes.append(Finding(finding.tier, finding.slice, finding.case_ids, stat, msg, "info"))
        else:
            uncovered.append(finding.key)
    if accepted and uncovered:
        msg = f"no override accepts {len(uncovered)} stopping finding(s): {', '.join(uncovered)}"
        notes.append(Finding(0, "overrides", (), {"uncovered": uncovered}, msg, "info"))
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
    if "sealed" in paired.columns:
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
    states, critical = _critical(critical_options(table, policy), policy, paired, counts)
    causes = _first_cause(errors)
    context = context or PairContext()
    delta = context.delta
    if delta is not None and "sealed" in delta.columns:
        delta = delta.filter(~pl.col("sealed").fill_null(False))
    accounting = corpus_accounting(policy, paired, delta)
    findings = [
        *_pin_findings(policy, context),
        *_evidence(paired, policy, errors, causes, context.base_errors),
        *_corpus_findings(policy, paired, delta, accounting, context),
        *_must_pass(paired, flakes or {}, causes, delta),
        *critical,
        *ruled_out_findings(states, policy),
        *_others(table, paired, policy),
        *_budget_findings(policy, budgets_observed),
        *_any_broken(paired, policy),
        *_relative_findings(paired, policy),
        *served_findings(policy, context.served),
        *_exam_findings(policy, paired, context, counts, critical),
        *_unread_tree_findings(context),
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
        blocked, tuple(findings), overridden, accepted, tuple(states), paired.height, policy,
        unverified, tuple(uncovered), tuple(accounting), verified, exam_line,
    )  # fmt: skip


def _unread_tree_findings(context: PairContext) -> list[Finding]:
    """Missing evidence when the candidate is a Python system whose repository could not be
    read and was served cached answers (`evalkit.compare.trust.unread_tree`)."""
    if context.unread_tree is None:
        return []
    from evalkit.compare.trust import unreadable_tree_finding

    return [unreadable_tree_finding(context.unread_tree)]


# --- the pinned exam's second, additive exam (issue 42, rule 1) ------------------------------


def _exam_findings(
    policy: GatePolicy,
    paired: pl.DataFrame,
    context: PairContext,
    counts: Mapping[str, int],
    pinned: Sequence[Finding] = (),
) -> list[Finding]:
    """The pull request's additive exam: its added and edited cases (``context.additions``)
    can add blocks, never remove one — a must_pass case of its version failing, a critical tag
    regressing with its versions in place of the pinned ones, a broken case in a
    ``block_on_any_broken`` tag — and an edit that loosens a case is shown as such."""
    extra = context.additions
    if context.exam is None or extra is None or extra.is_empty():
        return []
    out = []
    for r in extra.filter(pl.col("criticality") == "must_pass").iter_rows(named=True):
        if r["cand_error"]:
            msg = (
                f"must_pass case {r['case_id']} ({r['change']} in this pull request) errored in "
                "the candidate: its version is unverified"
            )
            out.append(Finding(1, "must_pass", (r["case_id"],), {"change": r["change"]}, msg,
                               "unverified", "pr-exam-errored"))  # fmt: skip
        elif r["cand"] is False:
            msg = (
                f"must_pass case {r['case_id']} fails in the candidate in this pull request's "
                f"version ({r['change']}): must_pass means must pass"
            )
            out.append(Finding(1, "must_pass", (r["case_id"],), {"change": r["change"]}, msg,
                               "block", "pr-exam-failed"))  # fmt: skip
    rebased = extra.filter(pl.col("rebaselined"))
    if rebased.height:
        mine = rebased.select(
            "case_id", "tags", "criticality", "base", "cand", "base_error", "cand_error"
        )
        kept = paired.filter(~pl.col("case_id").is_in(rebased["case_id"].implode()))
        swapped = pl.concat([kept, mine], how="diagonal_relaxed")
        table = slices(swapped, policy.bootstrap_iters, policy.bootstrap_seed,
                       policy.interval_level())  # fmt: skip
        _, found = _critical(table, policy, swapped, counts)
        seen = {(f.slice, f.case_ids) for f in pinned if f.severity == "block"}
        for f in found + _any_broken(mine, policy):
            if (f.slice, f.case_ids) in seen:  # the pinned exam blocks on exactly this already
                continue
            if f.severity == "block" and f.kind in ("regressed", "any-broken"):
                msg = (
                    f"with this pull request's versions of its edited and added cases: {f.message}"
                )
                out.append(replace(f, message=msg, kind=f"pr-exam-{f.kind}"))
    loosened = tuple(context.exam.loosened)
    if loosened:
        msg = (
            f"this pull request edits the expectations of {len(loosened)} case(s) the candidate "
            f"passes in their new version: under the pinned expectations the candidate breaks "
            f"these {len(loosened)} cases ({_named(list(loosened))})"
        )
        out.append(
            Finding(
                0, "corpus", loosened, {"n": len(loosened)}, msg, "warn", "loosened-expectations"
            )
        )
    return out


def gate_comparison(
    store: Store,
    comparison: Comparison,
    policy: GatePolicy,
    policy_changes: Sequence[str] = (),
    policy_source: str | None = None,
    siblings: Sequence[tuple[str, str]] = (),
    *,
    reasks: bool = False,
) -> GateDecision:
    """`decide` with what the store knows beyond the pair: the flake list measured on the
    baseline's configuration (`evalkit.compare.flakes.excusing_flakes`), recorded overrides, both
    sides' errors and the corpus delta; ``policy_changes`` (how the pull request loosened the
    pinned policy), ``policy_source`` and ``siblings`` come from `evalkit.compare.pin.gate_pair`.
    Flake lists and overrides count only when a writer the policy trusts recorded them
    (`evalkit.compare.trust`); with ``reasks`` (the gate flow) a flake list excuses a case only
    once the gate job re-asked it (`evalkit.compare.reask`).
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
    errors = _side_errors(comparison.cand, comparison.paired)
    base_errors = _side_errors(comparison.base, comparison.paired.filter(_ORIGINAL))
    if comparison.rebaseline is not None:
        rebaselined = comparison.paired.filter(~_ORIGINAL)
        base_errors = pl.concat([base_errors, _side_errors(comparison.rebaseline, rebaselined)])
    served = served_from(
        comparison.base.outputs, comparison.cand.outputs, comparison.base.manifest,
        comparison.cand.manifest,
    )  # fmt: skip
    context = PairContext(
        comparison.base.run_id, comparison.cand.run_id, comparison.delta, base_errors,
        comparison.rebaseline_blocker, tuple(policy_changes), policy_source, tuple(siblings),
        served, comparison.exam, comparison.additions, unread_tree(comparison),
    )  # fmt: skip
    selection = comparison.cand.manifest.get("selection")
    decision = decide(
        comparison.paired, policy, rates, observed, overrides, comparison.cand.cases, errors,
        selection, context,
    )  # fmt: skip
    # Uncalibrated judges were left out of the verdicts; say so where the decision is read,
    # with the flips they would have caused.
    notes = [Finding(3, "judge", (), {}, note, "info") for note in comparison.judge_notes]
    notes += ungated_judge_flips(comparison.judge_paired, policy)
    notes += _cache_share(comparison)
    replays = min(
        int(run.manifest.get("replays") or 1) for run in (comparison.base, comparison.cand)
    )
    notes += replay_findings(comparison.paired, policy, replays)
    # Sealed cases run in both: do the live gains hold on cases nobody tuned against? (warn)
    held = transfer(comparison.paired, policy.bootstrap_iters, policy.level, policy.bootstrap_seed)
    notes += [found] if (found := transfer_finding(held)) else []
    notes += trust_findings(store, comparison, trust, ignored) + reasked
    shown = shown_flakes(store, comparison.base, comparison.cand, trust.why_not)
    for r in shown.iter_rows(named=True):
        msg = f"flake rate {r['flake_rate']:.0%} of {r['case_id']} excuses nothing: {r['why_not']}"
        notes.append(Finding(0, "flakes", (r["case_id"],), {}, msg, "info", "not-excusing"))
    # Warnings from the runs and the comparison reach the person with the decision.
    notes += [Finding(0, "warnings", (), {}, w, "warn") for w in comparison.warnings]
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
    return [Finding(0, "cache", (), {"cached": cached, "outputs": outputs.height}, msg, "info")]


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
            f"({NOT_GATED})" + (f": {_named(ids)}" if ids else "")
        )
        stat = {"broken": len(ids), "fixed": n_fixed, "gated": False}
        out.append(Finding(3, tag, tuple(ids), stat, msg, "warn" if ids else "info"))
    for case in broken["case_id"]:
        msg = (
            f"case {case} fails the judge in the candidate, passed it in the baseline ({NOT_GATED})"
        )
        out.append(Finding(3, "judge-flip", (case,), {"gated": False}, msg, "info"))
    return out


def _side_errors(run: RunData, paired: pl.DataFrame) -> pl.DataFrame:
    """One run's outputs of the paired, unsealed cases (``case_id, error``); a missing output
    (an incomplete run compared with ``--allow-incomplete``) counts as an errored one."""
    paired_ids = paired.filter(~pl.col("sealed").fill_null(False))["case_id"]
    outputs = run.outputs
    cols = [pl.col("case_id"), (pl.col("error") if "error" in outputs.columns
                                else pl.lit(None, pl.String)).alias("error")]  # fmt: skip
    present = outputs.select(cols).filter(pl.col("case_id").is_in(paired_ids.implode()))
    replays = int(run.manifest.get("replays") or 1)
    seen = present.group_by("case_id").len()
    missing = (
        pl.DataFrame({"case_id": paired_ids}).join(seen, on="case_id", how="left")
        .with_columns(pl.col("len").fill_null(0))
        .filter(pl.col("len") < replays)
    )  # fmt: skip
    filler = [
        {"case_id": r["case_id"], "error": "no output stored (the run is incomplete)"}
        for r in missing.iter_rows(named=True)
        for _ in range(replays - r["len"])
    ]
    if filler:
        present = pl.concat([present, pl.DataFrame(filler, schema=present.schema)])
    return present
